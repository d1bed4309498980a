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
naming every bad item once (see :mod:`wire.sources.http_server`).

A non-loopback ``host`` (e.g. ``0.0.0.0``) is refused unless ``allow_remote=True`` and
a ``token`` are given: anyone who reaches the port could write events.

The server (uvicorn in a daemon thread, once per process and address) runs in Spark's
planner process on the driver host: it starts at the reader's first planner call and
stops with the reader (the query's end). The reader is a
:class:`~wire.sources.partitioned.PartitionedReader` with one partition, ``"wal"``, whose
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

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa

from wire.core.control_file import check_bind
from wire.core.time import NO_WATERMARK, Duration, to_millis
from wire.core.watermarks import PartitionState
from wire.delivery.wal import WriteAheadLog
from wire.errors import ConfigError, WireError, require_extra
from wire.sources.base import (
    Binding,
    BindingDataSource,
    BindingSource,
    Capability,
    Decoded,
    Offset,
    SchemaDataclassDict,
)
from wire.sources.offsets import Position, upgrade_single
from wire.sources.partitioned import Admitted, PartitionedReader, Read

if TYPE_CHECKING:  # the server (FastAPI, uvicorn) is imported by the planner process only
    from wire.sources.http_server import _Server

__all__ = [
    "DATA_SOURCE_NAME",
    "MAX_BODY_BYTES",
    "PAUSED_RETRY_AFTER_S",
    "WAL_FILE",
    "HttpIngestDataSource",
    "HttpIngestReader",
    "HttpIngestSource",
    "IngestBinding",
    "http_ingest",
    "parse_records",
]

DATA_SOURCE_NAME = "wire_http_ingest"
WAL_PARTITION = "wal"
"""The reader's one partition: the write-ahead log."""
WAL_FILE = "wal.sqlite"
"""The log's file name inside ``wal_dir``."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""Default largest accepted request body (bytes, 16 MiB); a larger one is answered 413."""
PAUSED_RETRY_AFTER_S = 5
"""``Retry-After`` (s) while the flow is paused or stopping, or the log cannot be written."""


# ---------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class HttpIngestSource(SchemaDataclassDict, BindingSource):
    """An HTTP endpoint whose accepted events are fed to the flow through a write-ahead log.

    Build it with :func:`http_ingest`. Immutable; part of a flow plan. Durations in ms.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset({"columns", "target_epoch_ms"})
    """No ``"resume"``: its log's read position is not an offset another checkpoint can take."""

    port: int
    wal_dir: str
    schema: pa.Schema
    host: str = "127.0.0.1"
    path: str = "/events"
    token: str | None = field(default=None, repr=False)
    idle_timeout: int | None = None
    watermark_interval: int = 200
    max_body_bytes: int = MAX_BODY_BYTES
    allow_remote: bool = False
    bounded: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        port = self.port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError("port", port, "an int between 1 and 65535")
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError("host", self.host, "a host name or IP address, e.g. '127.0.0.1'")
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise ConfigError("path", self.path, "a URL path starting with '/', e.g. '/events'")
        if not isinstance(self.wal_dir, str | Path) or not str(self.wal_dir):
            raise ConfigError("wal_dir", self.wal_dir, "a directory path for the write-ahead log")
        object.__setattr__(self, "wal_dir", str(self.wal_dir))
        if not isinstance(self.schema, pa.Schema) or not len(self.schema):
            raise ConfigError("schema", self.schema, "a non-empty pyarrow.Schema of the events' fields")
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise ConfigError("token", "<hidden>", "None or a non-empty string")
        check_bind(self.host, token=self.token, allow_remote=self.allow_remote, server="HTTP ingest")
        limit = self.max_body_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError("max_body_bytes", limit, "a positive int (bytes), e.g. 16 * 1024 * 1024")
        if self.idle_timeout is not None:
            idle = to_millis(self.idle_timeout, parameter="idle_timeout", allow_zero=False)
            object.__setattr__(self, "idle_timeout", idle)
        interval = to_millis(self.watermark_interval, parameter="watermark_interval")
        object.__setattr__(self, "watermark_interval", interval)

    @property
    def wal_path(self) -> str:
        """The write-ahead log's database file."""
        return str(Path(self.wal_dir) / WAL_FILE)

    def resolve_schema(self) -> pa.Schema:
        """Return the payload schema (the events' fields)."""
        return self.schema

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
    watermark_interval: Duration = 200,
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
    lives in the offsets. See :mod:`wire.sources.http_source` for every answer.

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
    idle_timeout:
        Processing time without new events after which the watermark advances with
        processing time (so windows close without new data). None: only events move it.
    watermark_interval:
        Minimum processing time between two epochs that only advance the watermark.
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
    return HttpIngestSource(port, wal_dir, schema, host, path, token, idle_timeout, watermark_interval,  # type: ignore[arg-type]  # Duration: __post_init__ converts it to int ms
                            max_body_bytes, allow_remote)


@dataclass(frozen=True)
class IngestBinding(Binding):
    """What the compiler hands to the Spark data source for one HTTP ingest step (:class:`Binding`).

    ``payload_schema`` is the source's schema; records are parsed with every column of it,
    whatever ``columns`` produces. ``resume`` is always None: the source cannot resume on
    a new Spark checkpoint (no ``"resume"`` capability).
    """

    source_class: ClassVar[type] = HttpIngestSource
    source: HttpIngestSource


# ---------------------------------------------------------------------------- records


def wal_records(records: list[tuple[int, str]]) -> Callable[[list[int]], list[tuple[str, str]]]:
    """Log records' dead-letter locations (``wal:<seq>``) and bodies, by their indexes in ``records``."""
    def found(indexes: list[int]) -> list[tuple[str, str]]:
        return [(f"wal:{records[i][0]}", records[i][1]) for i in indexes]
    return found


def parse_records(records: list[tuple[int, str]], schema: pa.Schema, event_time: str) -> Decoded:
    """Convert ``(seq, body)`` log records to ``schema``; the ones that do not fit are dead letters.

    Positions are indexes into ``records``; a dead letter's location is ``wal:<seq>``, in
    record order.
    """
    objects: list[dict[str, object]] = []
    positions: list[int] = []
    errors: dict[int, str] = {}
    for i, (_, body) in enumerate(records):
        try:
            obj = json.loads(body)
        except ValueError as e:  # the server stores only objects; a foreign writer may not
            errors[i] = f"invalid JSON: {e}"
            continue
        if not isinstance(obj, dict):
            errors[i] = f"expected a JSON object, got {type(obj).__name__}"
            continue
        objects.append(obj)
        positions.append(i)
    return Decoded.from_objects(objects, positions, errors, schema, event_time, wal_records(records))


# ---------------------------------------------------------------------------- reader


class HttpIngestReader(PartitionedReader[WriteAheadLog]):
    """Stream reader of the HTTP ingest source: a :class:`PartitionedReader` over its log.

    The planner methods run in Spark's long-lived planner process on the driver; the
    first of them starts the HTTP server there and :meth:`stop` stops it. :meth:`read`
    runs in executor workers and only reads the log. ``clock`` (ms) is the
    processing-time clock, injectable for tests.
    """

    kind: ClassVar[str] = "http ingest"
    _binding: IngestBinding

    def __init__(self, binding: IngestBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)
        self._server: _Server | None = None

    def _open_client(self) -> WriteAheadLog:
        """The source's write-ahead log."""
        return WriteAheadLog(self._binding.source.wal_path)

    def serve(self) -> None:
        """Start the HTTP server in this process if it is not running (idempotent)."""
        if self._server is None:
            from wire.sources.http_server import _serve

            self._server = _serve(self._binding, self.client)

    prepare = serve

    # -- planner (driver) --------------------------------------------------------------

    def initial_positions(self) -> dict[str, Position]:
        """Before the log's first record: a fresh query reads everything the log still holds."""
        return {WAL_PARTITION: 0}

    def list_partitions(self) -> list[str]:
        """The log."""
        return [WAL_PARTITION]

    def start_position(self, name: str) -> Position:
        """Before the log's first record."""
        return 0

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        """The log's records after seq ``position``."""
        return max(0, self.client.max_seq() - int(position))

    def read_from(self, name: str, position: Position, budget: int) -> Admitted:
        """The next ``budget`` log records after seq ``position``."""
        return self._read(self.client.read(int(position), limit=budget), int(position)).admitted()

    def acknowledge(self, positions: Mapping[str, Position]) -> None:
        """Delete the log records up to the position (their epoch committed: contraflow ack, SPEC §7)."""
        self.client.truncate(int(positions[WAL_PARTITION]))

    def upgrade(self, offset: Offset, before: Offset | None) -> Offset:
        """Offsets an earlier Wire wrote: the last admitted ``seq`` and the log's watermark inputs."""
        delay = self._binding.max_delay_ms

        def state(o: Offset) -> PartitionState:
            seen = o["max_event_time"]
            own = NO_WATERMARK if seen is None else seen - delay
            return PartitionState(max_event_time=seen, watermark=own, last_arrival=o["last_arrival"],
                                  idle=o["idle"])

        return upgrade_single(offset, before, WAL_PARTITION, lambda o: o["seq"], state)

    def stop(self) -> None:
        """Stop the HTTP server (the query ends) and close the log."""
        if self._server is not None:
            from wire.sources.http_server import _unserve

            _unserve(self._server)
            self._server = None
        self.close()

    # -- executor ------------------------------------------------------------------------

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        """The log records with ``first < seq <= next`` (executor).

        Raises
        ------
        WireError
            When the log no longer holds the epoch's records (deleted before the epoch
            committed: the log was truncated or replaced by something else).
        """
        b = self._binding
        records = self.client.read(int(first), int(next))
        if len(records) != taken:
            raise WireError(
                f"http ingest {b.step!r}: the write-ahead log {b.source.wal_path} holds {len(records)} "
                f"records with seq in ({first}, {next}], the epoch admitted {taken}"
            )
        return self._read(records, int(first))

    def _read(self, records: list[tuple[int, str]], position: int) -> Read:
        decoded = parse_records(records, self._binding.source.schema, self._binding.event_time)
        return Read(decoded, len(records), records[-1][0] if records else position, wal_records(records))


class HttpIngestDataSource(BindingDataSource):
    """The Spark Python data source ``wire_http_ingest``; option ``binding``: an IngestBinding JSON."""

    format_name = DATA_SOURCE_NAME
    binding_class = IngestBinding
    reader_class = HttpIngestReader
