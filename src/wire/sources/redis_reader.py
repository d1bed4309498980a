"""The Redis Streams source's Spark stream reader: offsets, admission, acks, envelope rows.

Planner side (Spark's long-lived planner process on the driver): ``latestOffset``
admits the next entries of the stream through the consumer group and records their
id range, the count and the watermark in the epoch's end offset; ``commit`` XACKs
them once Spark has committed the epoch. Executor side: ``read`` fetches exactly the
entries of the recorded id range with ``XRANGE``, so a replayed epoch reads the same
entries (it never depends on the group's delivery state), and turns them into
envelope rows (:mod:`wire.core.envelope`). The full contract is in
:func:`wire.sources.redis_source.redis_stream`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from wire.core import envelope
from wire.core.control_file import is_paused
from wire.core.time import NO_WATERMARK
from wire.core.watermarks import (
    PartitionState,
    advance_partition,
    should_tick,
    source_watermark,
)
from wire.errors import WireError
from wire.sources.base import Decoded, LiveReader, Offset
from wire.sources.file_readers import _array_from_values, event_times_ms

if TYPE_CHECKING:
    import redis

    from wire.sources.redis_source import RedisBinding

Entry = tuple[str, dict[str, str]]
"""A stream entry as the reader handles it: its id and its fields, decoded as UTF-8."""

BEGIN = "0-0"
"""The position before every entry (no entry can have id ``0-0``)."""

_PAGE = 10_000
_ACK_PAGE = 1_000
_MAX_SEQ = 2**64 - 1
_PARTITION = "stream"


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


def entry_record(entries: list[Entry], stream: str) -> Callable[[int], tuple[str, str]]:
    """A rejected entry's dead-letter location and record, by its index in ``entries``."""
    def record(pos: int) -> tuple[str, str]:
        entry_id, fields = entries[pos]
        return f"{stream}:{entry_id}", json.dumps(fields, ensure_ascii=False)
    return record


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
    nullable = pa.schema([f.with_nullable(True) for f in schema])
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
    columns: dict[str, pa.Array] = {}
    for f in nullable:
        values = [r.get(f.name) for r in rows]
        arr, failed = _array_from_values(values, f.type)
        columns[f.name] = arr
        if failed is not None:
            for j in np.flatnonzero(failed):
                bad.setdefault(kept[j], f"field {f.name}: cannot convert {values[j]!r} to {f.type}")
    table = pa.table(columns, schema=nullable) if rows else nullable.empty_table()
    ets, et_errors = event_times_ms(table.column(event_time).combine_chunks())
    for j, reason in et_errors.items():
        bad.setdefault(kept[j], reason)
    keep = np.array([kept[j] not in bad for j in range(len(kept))], dtype=bool)
    dead = [
        (f"{stream}:{entries[i][0]}", reason, json.dumps(entries[i][1], ensure_ascii=False))
        for i, reason in sorted(bad.items())
    ]
    return Decoded(
        table.filter(pa.array(keep, pa.bool_())) if len(kept) else table,
        ets[keep] if len(kept) else np.zeros(0, np.int64),
        np.array(kept, np.int64)[keep] if len(kept) else np.zeros(0, np.int64),
        dead,
    )


# ------------------------------------------------------------------------ offsets


def make_offset(
    *,
    last_id: str,
    admitted: int,
    watermark: int,
    started: int | None,
    at: int | None,
    stream: PartitionState,
) -> dict[str, Any]:
    """An offset: the last admitted id, entries admitted so far and the watermark inputs."""
    return dict(
        last_id=last_id,
        admitted=admitted,
        watermark=watermark,
        started=started,
        at=at,
        stream=stream.to_json(),
    )


@dataclass
class RedisEpoch(InputPartition):
    """The one Spark task of an epoch: the entries with ids in ``(after, through]``.

    ``expected`` is how many entries were admitted in that range, ``first_seq`` the
    ``__seq`` of the first, and the watermarks are the epoch's start and end ones;
    ``at`` is the processing time (ms) recorded in the epoch's end offset, against
    which ``max_future`` is judged.
    """

    after: str
    through: str
    expected: int
    first_seq: int
    start_watermark: int
    end_watermark: int
    at: int | None = None

    def __post_init__(self) -> None:
        super().__init__(None)


class RedisStreamReader(LiveReader["redis.Redis"], DataSourceStreamReader):
    """Stream reader of :func:`wire.sources.redis_source.redis_stream`.

    Offsets are JSON dicts: ``last_id`` (the id of the last admitted entry, exclusive
    start of the next epoch; ``"0-0"`` before the first), ``admitted`` (entries
    admitted so far, valid and rejected), ``watermark`` (after the epoch), ``started``
    and ``at`` (wall-clock ms: source start, offset made) and ``stream``: the
    :class:`~wire.core.watermarks.PartitionState` of the stream (max event time,
    watermark, last arrival, idle flag). ``clock`` (ms) is injectable for tests.
    """

    _binding: RedisBinding
    _transient: ClassVar[dict[str, Any]] = {"_delivered": None, "_caught_up": False}
    """The planner's per-process view of the group: its start values, also after pickling."""
    _delivered: str | None  # the group's last delivered id, as last seen
    _caught_up: bool

    def __init__(self, binding: RedisBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)

    def _open_client(self) -> redis.Redis:
        """The connection of this process."""
        import redis

        return redis.Redis.from_url(self._binding.source.url)

    # -- planner (driver) --------------------------------------------------------------

    def initialOffset(self) -> Offset:
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
            last = id_before(_text(pending["min"]))
        else:
            last = self._delivered_id()
        return make_offset(
            last_id=last, admitted=0, watermark=NO_WATERMARK, started=None, at=None, stream=PartitionState()
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(max_events_per_epoch)``: the admission limit per epoch."""
        return ReadMaxRows(self._binding.max_events_per_epoch)

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """Admit the entries after ``start``, at most ``limit``; return the epoch's end offset.

        ``start`` is the end of the last committed epoch. Entries the group already
        delivered after it (planned before a crash but never committed) are admitted
        again first, with ``XRANGE``; then new ones with ``XREADGROUP ... >``, which
        delivers them to this consumer (pending until :meth:`commit`). The first call
        in a planner process acknowledges what ``start`` covers, should a crash have
        come between an epoch's commit and its ``XACK``. Returns ``start`` when paused
        (control file) or when nothing is new and the watermark does not tick.
        """
        b = self._binding
        sized = self._sizer.budget(self._clock())  # first: the time since the last call is an epoch's
        if is_paused(b.control_file, b.step):
            return start
        if not self._caught_up:
            self.acknowledge_through(start["last_id"])
            self._caught_up = True
        budget = min(self._budget(limit), sized)
        entries = self._admit(start["last_id"], budget)
        now = self._clock()
        self._sizer.admitted(now, len(entries), budget)
        if self._started is None:
            self._started = now
        started = self._started if start["started"] is None else start["started"]
        decoded = self._decode(entries) if entries else None
        if decoded is not None:  # future-dated entries do not move the watermark
            decoded = decoded.reject_future(now, b.max_future_ms, entry_record(entries, self._stream))
        prev = PartitionState.from_json(start["stream"])
        part = advance_partition(
            prev,
            file="",
            record=0,
            taken=len(entries),
            max_event_time=None if decoded is None else decoded.max_event_time,
            pending=len(entries) >= budget,
            bounded=False,
            now=now,
            started=started,
            policy=self._policy,
        )
        watermark = source_watermark(start["watermark"], {_PARTITION: part}, now, self._policy)
        if not entries and not should_tick(start["watermark"], watermark, start["at"], now, self._policy):
            return start
        return make_offset(
            last_id=entries[-1][0] if entries else start["last_id"],
            admitted=start["admitted"] + len(entries),
            watermark=watermark,
            started=started,
            at=now,
            stream=part,
        )

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        """Plan the epoch ``(start, end]``: one task reading its id range.

        Called on the driver per epoch, also on a replay with offsets from the log.
        """
        if start == end:
            return []
        return [
            RedisEpoch(
                after=start["last_id"],
                through=end["last_id"],
                expected=end["admitted"] - start["admitted"],
                first_seq=start["admitted"],
                start_watermark=start["watermark"],
                end_watermark=end["watermark"],
                at=end["at"],
            )
        ]

    def commit(self, end: Offset) -> None:
        """Acknowledge (``XACK``) every pending entry up to ``end``; runs after the epoch committed.

        Spark calls it once the epoch is marked complete in the checkpoint, i.e. after
        every sink of the flow committed (contraflow, SPEC §7).
        """
        self.acknowledge_through(end["last_id"])

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

    def _budget(self, limit: ReadLimit) -> int:
        if isinstance(limit, ReadMaxRows):
            return max(0, min(limit.max_rows, self._binding.max_events_per_epoch))
        if isinstance(limit, ReadAllAvailable):
            return self._binding.max_events_per_epoch
        return self._binding.max_events_per_epoch

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

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the epoch's rows: data rows, dead letters, metrics, then watermark rows.

        Runs on an executor. Data rows carry ``__et`` (event time), ``__wm`` (the epoch's
        start watermark) and ``__seq`` (the entry's position among all admitted entries,
        rejected ones included). Entries of the range that are gone (trimmed or deleted
        before they were acknowledged) are reported as one dead letter; entries beyond
        ``max_future`` of the epoch's recorded processing time each as one.
        """
        if not isinstance(partition, RedisEpoch):
            raise TypeError(f"expected a RedisEpoch partition, got {type(partition).__name__}")
        b, schema, p = self._binding, self._row_schema, partition
        entries = self.fetch(p.after, p.through) if p.expected else []
        if len(entries) > p.expected:
            raise WireError(
                f"redis source {b.step!r}: {len(entries)} entries in ({p.after}, {p.through}] of stream "
                f"{self._stream!r}, but {p.expected} were admitted; was the stream recreated?"
            )
        decoded = self._decode(entries)
        valid = decoded.table.num_rows
        decoded = decoded.reject_future(p.at, b.max_future_ms, entry_record(entries, self._stream))
        n = decoded.table.num_rows
        missing = p.expected - len(entries)
        gone = (f"{self._stream}:({p.after}, {p.through}]",
                f"{missing} admitted entries are gone (trimmed or deleted before acknowledged)", missing)
        yield from decoded.batches(schema, b.step, b.output_schema.names, start_watermark=p.start_watermark,
                                   first_seq=p.first_seq, gone=gone)
        counters = {
            "records": p.expected,
            "events": n,
            "malformed": p.expected - n,
            "gauge:watermark": p.end_watermark,
        }
        if valid > n:
            counters["future"] = valid - n
        yield envelope.side_batch(schema, envelope.METRICS_PORT, envelope.metrics_table(b.step, counters))
        yield envelope.watermark_batch(schema, p.end_watermark, range(b.key_groups))
