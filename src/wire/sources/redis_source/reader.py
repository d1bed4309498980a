"""The Redis Streams source's Spark stream reader: a :class:`~.base.partitioned.PartitionedReader`.

The base owns admission, watermarks, offsets, tasks and envelope rows. This module holds
what is Redis's: stream ids, decoding entries' fields, delivering entries through the
consumer group (planner), acknowledging them with ``XACK`` once Spark committed the
epoch (contraflow, SPEC §7), and reading exactly an epoch's id range with ``XRANGE``
(executor). The full contract is in :func:`wire.sources.redis_source.redis_stream`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

import pyarrow as pa

from wire.core.watermarks import PartitionState
from wire.errors import WireError
from wire.sources.base.offsets import Position, upgrade_single
from wire.sources.base.partitioned import Admitted, PartitionedReader, Read
from wire.sources.base.source import Decoded, Offset

if TYPE_CHECKING:
    import redis

    from wire.sources.redis_source.config import RedisBinding

Entry = tuple[str, dict[str, str]]
"""A stream entry as the reader handles it: its id and its fields, decoded as UTF-8."""

BEGIN = "0-0"
"""The position before every entry (no entry can have id ``0-0``)."""

_PAGE = 10_000
_ACK_PAGE = 1_000
_MAX_SEQ = 2**64 - 1


# ------------------------------------------------------------------------ stream ids


def parse_id(entry_id: str) -> tuple[int, int]:
    """Return ``(ms, seq)`` of a stream id ``"<ms>-<seq>"``.

    >>> parse_id("1700000000000-3")
    (1700000000000, 3)
    """
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def id_before(entry_id: str) -> str:
    """Return the largest id smaller than ``entry_id`` (used as an exclusive start).

    >>> id_before("5-2"), id_before("5-0")
    ('5-1', '4-18446744073709551615')
    """
    ms, seq = parse_id(entry_id)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    return BEGIN if ms == 0 else f"{ms - 1}-{_MAX_SEQ}"


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _entries(raw: list[Any] | None) -> list[Entry]:
    return [(_text(i), {_text(k): _text(v) for k, v in (f or {}).items()}) for i, f in raw or []]


# ------------------------------------------------------------------------ decoding


def entry_record(entries: list[Entry], stream: str) -> Callable[[list[int]], list[tuple[str, str]]]:
    """Rejected entries' dead-letter locations and records, by their indexes in ``entries``."""
    def records(positions: list[int]) -> list[tuple[str, str]]:
        return [(f"{stream}:{entries[i][0]}", json.dumps(entries[i][1], ensure_ascii=False))
                for i in positions]
    return records


def decode_entries(
    entries: list[Entry], *, schema: pa.Schema, event_time: str, field_encoding: str, stream: str
) -> Decoded:
    """Decode entries into rows of ``schema``; entries that do not fit become dead letters.

    ``field_encoding="json"``: the entry's ``data`` field holds one JSON object; its
    keys are the columns (missing keys are null, other keys are ignored).
    ``"fields"``: every column is a field of its own, its value a string converted to
    the column's type (missing fields are null). A rejected entry's location is
    ``"<stream>:<id>"`` and its record is its fields as a JSON object.
    """
    rows: list[dict[str, Any]] = []
    kept: list[int] = []
    bad: dict[int, str] = {}
    for i, (_, fields) in enumerate(entries):
        if field_encoding == "fields":
            rows.append(fields)
            kept.append(i)
            continue
        if "data" not in fields:
            bad[i] = f"no 'data' field (fields: {sorted(fields)})"
            continue
        try:
            obj = json.loads(fields["data"])
        except ValueError as e:
            bad[i] = f"data: invalid JSON: {e}"
            continue
        if not isinstance(obj, dict):
            bad[i] = f"data: expected a JSON object, got {type(obj).__name__}"
            continue
        rows.append(obj)
        kept.append(i)
    return Decoded.from_objects(rows, kept, bad, schema, event_time, entry_record(entries, stream))


class RedisStreamReader(PartitionedReader["redis.Redis"]):
    """Stream reader of :func:`wire.sources.redis_source.redis_stream`: a :class:`PartitionedReader`.

    One partition, named after the stream; a position is an entry id (``"0-0"``: before
    the first); the backlog is unknown. Admitting delivers entries to the group's
    consumer (``XREADGROUP``; pending until acknowledged), acknowledging ``XACK``s them,
    and an executor reads exactly an epoch's id range with ``XRANGE``, so a replayed epoch
    never depends on the group's delivery state. ``clock`` (ms) is injectable for tests.
    """

    kind: ClassVar[str] = "redis source"
    gone_reason: ClassVar[str] = "admitted entries are gone (trimmed or deleted before acknowledged)"
    _binding: RedisBinding
    _transient: ClassVar[dict[str, Any]] = {**PartitionedReader._transient, "_delivered": None}
    """The planner's per-process view of the group: its start values, also after pickling."""
    _delivered: str | None  # the group's last delivered id, as last seen

    def __init__(self, binding: RedisBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)

    def _open_client(self) -> redis.Redis:
        """The connection of this process."""
        import redis

        return redis.Redis.from_url(self._binding.source.url)

    # -- planner (driver) --------------------------------------------------------------

    def initial_positions(self) -> dict[str, Position]:
        """The position the group has acknowledged; called when a query starts fresh.

        Creates the group if missing (``XGROUP CREATE ... MKSTREAM`` at the stream's
        start, or its end with ``start="latest"``). Starts before the group's oldest
        pending entry if it has one, else after its last delivered entry. Spark calls
        it again when it replays the first epoch: nothing is acknowledged before that
        epoch commits, so it then returns the same position.
        """
        self._ensure_group()
        pending = self.client.xpending(self._stream, self._group)
        if pending and pending.get("pending"):
            return {self._stream: id_before(_text(pending["min"]))}
        return {self._stream: self._delivered_id()}

    def list_partitions(self) -> list[str]:
        """The stream."""
        return [self._stream]

    def start_position(self, name: str) -> Position:
        """Before the stream's first entry (the stream is listed from the start)."""
        return BEGIN

    def read_from(self, name: str, position: Position, budget: int) -> Admitted:
        """The next ``budget`` entries after ``position``, delivered to the group's consumer.

        Entries the group already delivered after it (planned before a crash but never
        committed) are admitted again first, with ``XRANGE``; then new ones with
        ``XREADGROUP ... >``.
        """
        entries = self._admit(str(position), budget)
        return self._read(entries, entries[-1][0] if entries else str(position)).admitted()

    def acknowledge(self, positions: Mapping[str, Position]) -> None:
        """``XACK`` every pending entry up to the stream's position."""
        self.acknowledge_through(str(positions[self._stream]))

    def upgrade(self, offset: Offset, before: Offset | None) -> Offset:
        """Offsets an earlier Wire wrote: the last admitted id (``last_id``) and ``stream`` (its state)."""
        return upgrade_single(offset, before, self._stream, lambda o: o["last_id"],
                              lambda o: PartitionState.from_json(o["stream"]))

    def acknowledge_through(self, last_id: str) -> int:
        """``XACK`` the group's pending entries with id ≤ ``last_id``; return how many."""
        if last_id == BEGIN:
            return 0
        acked = 0
        while True:
            rows = self.client.xpending_range(self._stream, self._group, "-", last_id, _ACK_PAGE)
            ids = [_text(r["message_id"]) for r in rows]
            if ids:
                acked += int(self.client.xack(self._stream, self._group, *ids))
            if len(ids) < _ACK_PAGE:
                return acked

    def _admit(self, after: str, budget: int) -> list[Entry]:
        """The next ``budget`` entries after ``after``: re-admitted ones, then new deliveries."""
        if budget <= 0:
            return []
        delivered = self._delivered_id()
        entries: list[Entry] = []
        if parse_id(after) < parse_id(delivered):
            raw = self.client.xrange(self._stream, f"({after}", delivered, count=budget)
            entries = _entries(raw)
        if len(entries) < budget:
            # redis-py types the reply of every protocol; this client speaks RESP2: [[stream, entries]]
            reply = cast("list[list[Any]] | None", self.client.xreadgroup(
                self._group, self._consumer, {self._stream: ">"}, count=budget - len(entries)
            ))
            fresh = _entries(reply[0][1]) if reply else []
            if fresh:
                self._delivered = fresh[-1][0]
            floor = parse_id(entries[-1][0] if entries else after)
            stale = [i for i, _ in fresh if parse_id(i) <= floor]
            if stale:  # the group was moved back (XGROUP SETID): these were processed already
                self.client.xack(self._stream, self._group, *stale)
            entries += [e for e in fresh if parse_id(e[0]) > floor]
        return entries

    def _delivered_id(self) -> str:
        if self._delivered is None:
            self._ensure_group()
            for g in self.client.xinfo_groups(self._stream):
                if _text(g["name"]) == self._group:
                    self._delivered = _text(g["last-delivered-id"])
                    break
            else:  # pragma: no cover - _ensure_group just created it
                raise WireError(f"redis source {self._binding.step!r}: group {self._group!r} vanished")
        return self._delivered

    def _ensure_group(self) -> None:
        import redis

        start = "0" if self._binding.source.start == "earliest" else "$"
        try:
            self.client.xgroup_create(self._stream, self._group, id=start, mkstream=True)
        except redis.exceptions.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    @property
    def _stream(self) -> str:
        return self._binding.source.stream

    @property
    def _group(self) -> str:
        return self._binding.source.group

    @property
    def _consumer(self) -> str:
        return self._binding.source.consumer

    def _decode(self, entries: list[Entry]) -> Decoded:
        b = self._binding
        return decode_entries(
            entries,
            schema=b.payload_schema,
            event_time=b.event_time,
            field_encoding=b.source.field_encoding,
            stream=self._stream,
        )

    # -- executor ------------------------------------------------------------------------

    def fetch(self, after: str, through: str) -> list[Entry]:
        """The entries with ids in ``(after, through]`` (``XRANGE``, paged)."""
        out: list[Entry] = []
        lo = f"({after}"
        while True:
            page = _entries(self.client.xrange(self._stream, lo, through, count=_PAGE))
            out += page
            if len(page) < _PAGE:
                return out
            lo = f"({page[-1][0]}"

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        """The entries with ids in ``(first, next]`` (executor).

        Raises
        ------
        WireError
            When the range holds more entries than were admitted (the stream was recreated).
        """
        entries = self.fetch(str(first), str(next)) if taken else []
        if len(entries) > taken:
            raise WireError(
                f"redis source {self._binding.step!r}: {len(entries)} entries in ({first}, {next}] of stream "
                f"{self._stream!r}, but {taken} were admitted; was the stream recreated?"
            )
        return self._read(entries, str(next))

    def _read(self, entries: list[Entry], next: str) -> Read:
        return Read(self._decode(entries), len(entries), next, entry_record(entries, self._stream))
