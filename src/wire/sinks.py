"""Sink connectors (public namespace), each with its declared guarantee (SPEC §6).

=================  ==============  ==================================================
constructor        guarantee       how a replayed epoch is handled
=================  ==============  ==================================================
``parquet(path)``  exactly_once    one file per epoch, atomic rename; skipped if present
``jsonl(path)``    exactly_once    same, JSON Lines
``delta(path)``    exactly_once    Delta app transaction (flow/sink, epoch); skipped
``postgres(...)``  exactly_once    rows + epoch marker in one transaction ("append")
                   idempotent      upsert by key ("upsert")
``sqlite(...)``    idempotent      upsert by key
``webhook(url)``   at_least_once   re-POSTed with the same Idempotency-Key
``redis_stream_sink(url, stream)``
                   idempotent      XADD ids ``<epoch+1>-<row>``; rows already there skipped
``console()``      at_least_once   printed again
``guarded(sink)``  (the sink's)    retried until accepted, behind a circuit breaker
``round_robin()``  at_least_once   slices may be re-sent to another member
=================  ==============  ==================================================
"""

from wire.connectors.delta import DeltaSink, delta
from wire.connectors.postgres import PostgresAppendSink, PostgresUpsertSink, postgres
from wire.connectors.redis_streams import RedisStreamSink, redis_stream_sink
from wire.connectors.sink_groups import GuardedSink, RoundRobinSink, guarded, round_robin
from wire.connectors.sinks import Sink, console, jsonl, parquet
from wire.connectors.sqlite import SqliteSink, sqlite
from wire.connectors.webhook import WebhookSink, webhook

__all__ = [
    "DeltaSink",
    "GuardedSink",
    "PostgresAppendSink",
    "PostgresUpsertSink",
    "RedisStreamSink",
    "RoundRobinSink",
    "Sink",
    "SqliteSink",
    "WebhookSink",
    "console",
    "delta",
    "guarded",
    "jsonl",
    "parquet",
    "postgres",
    "redis_stream_sink",
    "round_robin",
    "sqlite",
    "webhook",
]
