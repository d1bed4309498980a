"""The HTTP ingest source's stream reader: one partition, ``"wal"``, read from the write-ahead log.

A :class:`~wire.sources.base.partitioned.PartitionedReader`; it starts the endpoint
(:mod:`wire.sources.http_source.server`) in Spark's planner process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa

from wire.core.time import NO_WATERMARK
from wire.core.watermarks import PartitionState
from wire.delivery.wal import WriteAheadLog
from wire.errors import WireError
from wire.sources.base.offsets import Position, upgrade_single
from wire.sources.base.partitioned import Admitted, PartitionedReader, Read
from wire.sources.base.source import Decoded, Offset
from wire.sources.http_source.config import WAL_PARTITION, IngestBinding

if TYPE_CHECKING:  # the server (FastAPI, uvicorn) is imported by the planner process only
    from wire.sources.http_source.server import _Server


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
            from wire.sources.http_source.server import _serve

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
        delay = self._binding.watermark.max_delay_ms

        def state(o: Offset) -> PartitionState:
            seen = o["max_event_time"]
            own = NO_WATERMARK if seen is None else seen - delay
            return PartitionState(max_event_time=seen, watermark=own, last_arrival=o["last_arrival"],
                                  idle=o["idle"])

        return upgrade_single(offset, before, WAL_PARTITION, lambda o: o["seq"], state)

    def stop(self) -> None:
        """Stop the HTTP server (the query ends) and close the log."""
        if self._server is not None:
            from wire.sources.http_source.server import _unserve

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
