"""HTTP ingest: clients POST JSON events, a write-ahead log keeps them until their epoch commits.

HTTP has no replay of its own, so the source stores before it acknowledges (SPEC §7,
guaranteed delivery): ``POST <path>`` with a JSON object or an array of objects is
appended to the source's :class:`~wire.delivery.wal.WriteAheadLog` in one durable
transaction and only then answered ``202 {"accepted": n, "seq": [first, last]}``. The
flow reads its epochs from the log, and an epoch's events are deleted from it only
after the epoch committed (``commit(end)``), so an acknowledged event is in a result,
in the dead-letter output, or still in the log — across crashes and restarts too.

Answers (nothing is stored unless 202): ``401`` when a token is configured and the
request lacks ``Authorization: Bearer <token>``; ``503`` with ``Retry-After`` (seconds)
only for a transient condition: a sink's circuit breaker is open (until its next
probe), the flow or this source is paused or stopping (contraflow, SPEC §5, §7), or
the log cannot be written now; ``413`` for a body over ``max_body_bytes``, refused
from its ``Content-Length`` before it is read, or while a chunked body is read, before
more than the limit is held; ``400`` for a permanently bad body (not UTF-8, not JSON,
not an object / array of objects, a lone surrogate escape, a number out of range),
naming every bad item once (see :mod:`wire.sources.http_source.server`).

A non-loopback ``host`` (e.g. ``0.0.0.0``) is refused unless ``allow_remote=True`` and
a ``token`` are given: anyone who reaches the port could write events.

The server (uvicorn in a daemon thread, once per process and address) runs in Spark's
planner process on the driver host: it starts at the reader's first planner call and
stops with the reader (the query's end). The reader is a
:class:`~wire.sources.base.partitioned.PartitionedReader` with one partition, ``"wal"``, whose
position is the last admitted log seq and whose backlog is the log's records after it;
the base admits at most ``max_events_per_epoch`` records per epoch and records the
watermark (bounded out-of-orderness; with ``idle_timeout`` it follows processing time
while no event arrives, see :mod:`wire.core.watermarks`) in the epoch's end offset. Each
epoch is one Spark task that reads its seq range from the log and emits data rows, a
dead-letter side row for records that do not fit the schema (location ``wal:<seq>``)
or, with ``BoundedOutOfOrderness(max_future=...)``, whose event time is further ahead
of the epoch's processing time ``at`` (such events never move the watermark), a metrics
side row and one watermark row per key group (the epoch's end watermark).
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa

from wire.core.time import Duration
from wire.errors import require_extra
from wire.sources.base.source import BindingDataSource, BindingSource, Capability, warn_legacy_watermark
from wire.sources.http_source.config import MAX_BODY_BYTES, HttpIngestConfig, IngestBinding
from wire.sources.http_source.reader import HttpIngestReader

__all__ = ["DATA_SOURCE_NAME", "HttpIngestDataSource", "HttpIngestSource", "http_ingest"]

DATA_SOURCE_NAME = "wire_http_ingest"


class HttpIngestSource(HttpIngestConfig, BindingSource):
    """An HTTP endpoint whose accepted events are fed to the flow through a write-ahead log.

    Its settings are :class:`HttpIngestConfig`'s, read by :class:`HttpIngestDataSource`.
    Build it with :func:`http_ingest`. Immutable; part of a flow plan. Durations in ms.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"columns", "predicate", "target_epoch_ms", "pre_stage"})
    """No ``"resume"``: its log's read position is not an offset another checkpoint can take."""

    def data_source(self) -> type[BindingDataSource]:
        """The Spark data source that reads this source (:class:`HttpIngestDataSource`)."""
        return HttpIngestDataSource


def http_ingest(
    *,
    port: int,
    wal_dir: str,
    schema: pa.Schema,
    host: str = "127.0.0.1",
    path: str = "/events",
    token: str | None = None,
    idle_timeout: Duration | None = None,
    watermark_interval: Duration | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    allow_remote: bool = False,
) -> HttpIngestSource:
    """Receive events over HTTP (``POST``), stored in a write-ahead log before they are acknowledged.

    Output columns: the payload columns of ``schema`` (plus Wire's envelope columns
    inside a compiled flow). A request body is one JSON object or an array of objects;
    each object is one event, its fields matched to ``schema`` by name (missing fields
    are null, others ignored). The events are durable in the log when the client gets
    ``202``; the flow admits them from the log, at most ``max_events_per_epoch`` per
    epoch, and deletes them from the log once their epoch committed. Events whose
    fields do not convert to the schema, or without a usable event time, go to the
    step's ``dead_letter`` port (location ``wal:<seq>``). While the flow is paused or
    a sink's circuit breaker is open the endpoint answers ``503`` with ``Retry-After``;
    a permanently bad body (not UTF-8 JSON objects) is answered ``400`` naming each bad
    item, a body over ``max_body_bytes`` ``413``, and nothing of either is stored.
    State: the log (``wal_dir``) holds the events not yet committed; the read position
    lives in the offsets. See :mod:`wire.sources.http_source.source` for every answer.

    Parameters
    ----------
    port:
        TCP port of the endpoint (served by the Spark driver host).
    wal_dir:
        Directory of the write-ahead log; keep it with the checkpoint: a restarted flow
        reads what the log still holds.
    schema:
        The events' fields.
    host:
        Address to bind; the default accepts local clients only. A non-loopback
        address (anything but ``localhost``, ``127.0.0.0/8`` and ``::1``, e.g.
        ``0.0.0.0``) needs ``allow_remote=True`` and a ``token``.
    path:
        URL path of the endpoint.
    token:
        When set, requests need ``Authorization: Bearer <token>`` (else ``401``).
        Required with a non-loopback ``host``.
    idle_timeout, watermark_interval:
        Deprecated: the step's watermark policy holds them,
        ``flow.source(..., watermark=wire.BoundedOutOfOrderness(max_delay, idle_timeout=...,
        interval=...))`` (:class:`wire.core.windowing.BoundedOutOfOrderness`). Given here they
        still apply (a ``DeprecationWarning``), forwarded into that policy when the flow
        compiles; a policy that sets a different value is a ``ConfigError`` then.
    max_body_bytes:
        Largest request body accepted, in bytes (default 16 MiB). A larger one is
        answered ``413`` before it is read (``Content-Length``) or as soon as a chunked
        body passes it; the server never holds more than this of one body.
    allow_remote:
        Must be True to bind a non-loopback ``host`` (reachable from other machines);
        with a ``token`` only.

    Returns
    -------
    HttpIngestSource
        An immutable source description; the server starts when the flow runs.

    Raises
    ------
    ConfigError
        On an invalid port, host, path, directory, schema, token, duration or
        ``max_body_bytes``; on a non-loopback ``host`` without ``allow_remote=True``
        (parameter ``allow_remote``) or without a token (parameter ``token``).
    MissingExtraError
        When FastAPI or uvicorn (pip extra ``ingest``) is not installed.

    Examples
    --------
    >>> import pyarrow as pa
    >>> src = http_ingest(port=8089, wal_dir="/tmp/wal", schema=pa.schema([("t", pa.int64())]))
    >>> src.bounded, src.path, src.host
    (False, '/events', '127.0.0.1')
    """
    require_extra("ingest", "wire.sources.http_ingest")
    warn_legacy_watermark("wire.sources.http_ingest", idle_timeout, watermark_interval)
    return HttpIngestSource(port, wal_dir, schema, host, path, token, idle_timeout, watermark_interval,  # type: ignore[arg-type]  # Duration: __post_init__ converts it to int ms
                            max_body_bytes, allow_remote)


class HttpIngestDataSource(BindingDataSource):
    """The Spark Python data source ``wire_http_ingest``; option ``binding``: an IngestBinding JSON."""

    format_name = DATA_SOURCE_NAME
    binding_class = IngestBinding
    source_class = HttpIngestSource
    reader_class = HttpIngestReader
