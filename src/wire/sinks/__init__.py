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
``kafka(servers, topic)``
                   exactly_once    one transaction per epoch + epoch marker; skipped
                   at_least_once   ``transactional=False``: idempotent producer, re-sent
``self_correcting(target, key=...)``
                   idempotent      PostgreSQL / Delta table kept equal to the results:
                                   correction appended with compare-and-set on the
                                   table's upper; replay finds the upper, writes nothing
``console()``      at_least_once   printed again
``guarded(sink)``  (the sink's)    retried until accepted, behind a circuit breaker
``round_robin()``  at_least_once   slices may be re-sent to another member
=================  ==============  ==================================================

Each name imports its connector on first use, so ``delta``, ``postgres`` and the
Redis and Kafka sinks need their pip extra (``wire[delta]``, ``wire[postgres]``,
``wire[redis]``, ``wire[kafka]``)
only when asked for; without it they raise :class:`wire.errors.MissingExtraError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire.delivery.sink import Sink
    from wire.delivery.sink_groups import GuardedSink, RoundRobinSink, guarded, round_robin
    from wire.sinks.delta_sink.sink import DeltaSink, delta
    from wire.sinks.file_sinks import console, jsonl, parquet
    from wire.sinks.kafka_sink import KafkaSink, KafkaTransactionalSink, kafka
    from wire.sinks.postgres_sink.sink import PostgresAppendSink, PostgresUpsertSink, postgres
    from wire.sinks.redis_sink import RedisStreamSink, redis_stream_sink
    from wire.sinks.self_correcting_sink.sink import SelfCorrectingSink, self_correcting
    from wire.sinks.sqlite_sink import SqliteSink, sqlite
    from wire.sinks.webhook_sink import WebhookSink, webhook

_LAZY: LazyTable = {
    **{n: ("wire.sinks.delta_sink.sink", n) for n in ("DeltaSink", "delta")},
    **{n: ("wire.sinks.kafka_sink", n) for n in ("KafkaSink", "KafkaTransactionalSink", "kafka")},
    **{n: ("wire.sinks.postgres_sink.sink", n)
       for n in ("PostgresAppendSink", "PostgresUpsertSink", "postgres")},
    **{n: ("wire.sinks.redis_sink", n) for n in ("RedisStreamSink", "redis_stream_sink")},
    **{n: ("wire.delivery.sink_groups", n)
       for n in ("GuardedSink", "RoundRobinSink", "guarded", "round_robin")},
    **{n: ("wire.sinks.file_sinks", n) for n in ("console", "jsonl", "parquet")},
    "Sink": ("wire.delivery.sink", "Sink"),
    **{n: ("wire.sinks.self_correcting_sink.sink", n) for n in ("SelfCorrectingSink", "self_correcting")},
    **{n: ("wire.sinks.sqlite_sink", n) for n in ("SqliteSink", "sqlite")},
    **{n: ("wire.sinks.webhook_sink", n) for n in ("WebhookSink", "webhook")},
}
__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "DeltaSink",
    "GuardedSink",
    "KafkaSink",
    "KafkaTransactionalSink",
    "PostgresAppendSink",
    "PostgresUpsertSink",
    "RedisStreamSink",
    "RoundRobinSink",
    "SelfCorrectingSink",
    "Sink",
    "SqliteSink",
    "WebhookSink",
    "console",
    "delta",
    "guarded",
    "jsonl",
    "kafka",
    "parquet",
    "postgres",
    "redis_stream_sink",
    "round_robin",
    "self_correcting",
    "sqlite",
    "webhook",
]
