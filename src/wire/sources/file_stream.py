"""The file source's Spark stream reader: offsets, per-partition watermarks, epochs, rows.

The planner side (``latestOffset``/``partitions``) admits records per epoch, split over
the source's partitions (:mod:`wire.sources.file_listing`), and computes the
watermark with :mod:`wire.core.watermarks`; everything the watermark depends on
is stored in the epoch's end offset, so Spark's offset log (``offsets/N``) holds every
epoch's watermark and a replay sees the same watermarks (SPEC §2, §10). The executor
side (``read``) turns one source partition's record ranges into envelope rows
(:mod:`wire.core.envelope`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    SupportsTriggerAvailableNow,
)

from wire.core import envelope
from wire.core.time import NO_WATERMARK, wall_clock_ms
from wire.core.watermarks import (
    PartitionState,
    WatermarkPolicy,
    advance_partition,
    fair_split,
    future_limit,
    future_reason,
    should_tick,
    source_watermark,
)
from wire.errors import WireError
from wire.sources.base import Offset, SizedAdmission, spark_row_schema
from wire.sources.epoch_sizing import EpochSizer
from wire.sources.file_listing import FileStamp, _wildcard_level
from wire.sources.file_locate import locate_records
from wire.sources.file_readers import ParseCache, ParsedFile
from wire.sources.file_set import Change, FileSet, detect_changes, reading_order

if TYPE_CHECKING:
    from wire.sources.file_source import SourceBinding

_EXECUTOR_CACHE = ParseCache(capacity=8)
"""Parsed files kept by an executor's Python worker across epochs (workers are reused)."""


# ---------------------------------------------------------------------------- Spark source


@dataclass
class FileEpoch(InputPartition):
    """One Spark task of an epoch: one source partition's records and/or the control rows.

    ``segments`` are record ranges ``(path, size, mtime_ns, lo, hi)`` of source partition
    ``partition`` in arrival order, each with the file's stamp when its reading began,
    and ``first_seq`` the ``__seq`` of their first record. ``control`` holds the
    epoch's metric counters when this task also emits the epoch's control rows (the
    changed-file dead letters ``changes``, metrics, then one watermark row per key
    group), else None. ``at`` is the processing time (ms) recorded in the epoch's end
    offset, against which ``max_future`` is judged.
    """

    partition: str
    segments: tuple[tuple[str, int, int, int, int], ...]
    first_seq: int
    start_watermark: int
    end_watermark: int
    final: bool
    control: tuple[tuple[str, int], ...] | None
    at: int | None = None
    changes: tuple[Change, ...] = ()

    def __post_init__(self) -> None:
        super().__init__(None)


@dataclass(frozen=True)
class _Available:
    segments: list[tuple[str, FileStamp, int, int, int]]  # (rel, stamp, lo, hi, records) up to the budget
    count: int
    more: bool  # records may remain beyond ``segments``


@dataclass(frozen=True)
class _Taken:
    file: str  # the position after the admitted records: file (path) and next record
    record: int
    max_event_time: int | None
    segments: list[list[Any]]  # [rel, lo, hi] admitted, in arrival order
    files: FileSet


def _offset(
    parts: dict[str, PartitionState],
    sets: dict[str, FileSet],
    *,
    admitted: int,
    watermark: int,
    started: int | None,
    at: int | None,
    turn: int,
    segments: dict[str, list[list[Any]]] | None = None,
    changed: list[Change] | None = None,
) -> dict[str, Any]:
    max_ets = [p.max_event_time for p in parts.values() if p.max_event_time is not None]
    return dict(
        admitted=admitted,
        watermark=watermark,
        max_event_time=max(max_ets, default=None),
        ended=False,
        started=started,
        at=at,
        turn=turn,
        partitions={name: parts[name].to_json() for name in sorted(parts)},
        files={name: sets[name].to_json() for name in sorted(sets)},
        segments={name: segs for name, segs in sorted((segments or {}).items()) if segs},
        changed=[c.to_json() for c in changed or ()],
    )


def _stamp(path: str) -> FileStamp | None:
    try:
        return FileStamp.of(path)
    except OSError:  # vanished between listing and stat
        return None


def file_base(path: str) -> str:
    """The directory the offsets name a source's files relative to, from the path's text alone.

    A glob's fixed part (``"in/*/*.csv"``: ``"in"``), else the path itself (a
    directory; a single file is named ``"."``). It never depends on what exists, so
    a restarted planner names the files as the offsets do.

    >>> file_base("in/*/*.csv"), file_base("/data/in"), file_base("*.csv")
    ('in', '/data/in', '.')
    """
    base, level, _ = _wildcard_level(path)
    return base if level is not None else path


class WireFileStreamReader(SizedAdmission, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of the file source: one Spark task per source partition with records.

    Offsets are JSON dicts: ``admitted`` (records admitted so far, valid and malformed),
    ``watermark`` (the source watermark after the epoch; :data:`NO_WATERMARK` at first),
    ``max_event_time`` (over all partitions), ``ended``, ``started`` (wall-clock ms when
    the source started), ``at`` (wall-clock ms when the offset was made: the epoch's
    processing time), ``turn`` (round-robin counter of the admission split),
    ``partitions``: per partition name, a
    :class:`~wire.core.watermarks.PartitionState` (position, max event time,
    watermark, last arrival, idle and done flags); ``files``: per partition, the
    :class:`~wire.sources.file_set.FileSet` of files whose reading began (names
    relative to :func:`file_base`, with size and mtime); ``segments``: per partition,
    the record ranges ``[name, lo, hi]`` the epoch admitted, in arrival order; and
    ``changed``: the files found changed when the epoch was planned
    (:class:`~wire.sources.file_set.Change`, one dead letter each). Every input of
    the watermark and of the epoch's rows is in the offset, so a replayed epoch sees
    the logged watermark and the same records.

    The planner methods run in Spark's long-lived planner process on the driver and
    cache per-file event-time indexes; :meth:`read` runs in executor workers and uses
    only the binding. ``clock`` (ms) is the processing-time clock, injectable for tests.
    """

    _binding: SourceBinding

    def __init__(self, binding: SourceBinding, clock: Callable[[], int] | None = None) -> None:
        self._binding = binding
        src = binding.source
        self._policy = WatermarkPolicy(binding.max_delay_ms, src.idle_timeout, src.watermark_interval)
        self._max_future = binding.max_future_ms
        self._clock = clock or wall_clock_ms
        self._spec = binding.parse_spec()
        self._row_schema = spark_row_schema(binding.output_schema)
        self._base = file_base(src.path)
        self._index_cache = ParseCache(capacity=64)
        self._snapshot: dict[str, list[str]] | None = None
        self._available_now = False
        self._started: int | None = None
        self._sizer = EpochSizer(binding.max_events_per_epoch, binding.target_epoch_ms)

    # -- planner (driver) --------------------------------------------------------------

    def initialOffset(self) -> Offset:
        """Return the position before the first file; called when a query starts fresh.

        Holds no clock reading: Spark calls it again when it replays the first epoch.
        """
        return _offset({}, {}, admitted=0, watermark=NO_WATERMARK, started=None, at=None, turn=0)

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the file list: an ``availableNow`` query reads only the files present now.

        Such a query stops when no records are left, so it makes no watermark-only epochs.
        """
        self._available_now = True
        self._snapshot = self._binding.source.matching_partitions()

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """Admit the next records after ``start``, at most ``limit``, split over partitions.

        Called by Spark before each new epoch (never for an epoch replayed from the
        offset log); the returned offset is written to the offset log before the epoch
        runs, with the watermark after the epoch. Per partition, files are read in
        arrival order and changed files are found (:mod:`wire.sources.file_set`);
        the budget is shared max-min fairly by the partitions with records
        (:func:`~wire.core.watermarks.fair_split`, rotating the remainder).
        Returns ``start`` when nothing is new (no epoch runs) unless idleness moves the
        watermark (a watermark-only epoch, at most once per ``watermark_interval``); a
        bounded source whose files are all read returns, once, an ``ended`` offset with
        the maximal watermark.
        """
        admission = self.admission(start, limit)
        if admission is None:
            return start
        now, budget, started = admission.now, admission.budget, admission.started
        listing = self._listing()
        before = self._states(start)
        names = sorted(set(listing) | set(before))
        stamps = {name: self._stamps(listing.get(name, [])) for name in names}
        self._index_cache.ensure_capacity(len(names) + 8)
        sets = self._file_sets(start, before, stamps)
        fresh = PartitionState()
        changes: list[Change] = []
        avail = []
        for name in names:
            listed = {rel: (st.size, st.mtime_ns) for rel, st in stamps[name].items()}
            position = before.get(name, fresh).record  # in the open file, if any
            fs, found = detect_changes(name, sets.get(name, FileSet()), listed, position)
            sets[name] = fs
            changes += found
            avail.append(self._available(reading_order(fs, listed), stamps[name], fs.open, position, budget))
        first = start["turn"] % len(names) if names else 0
        alloc = fair_split([a.count for a in avail], budget, first)
        bounded = self._binding.source.bounded
        limit_et = future_limit(now, self._max_future)
        parts, segments = {}, {}
        for name, a, take in zip(names, avail, alloc, strict=True):
            prev = before.get(name, fresh)
            got = self._take(a.segments, take, prev, sets[name], limit_et)
            sets[name], segments[name] = got.files, got.segments
            parts[name] = advance_partition(
                prev,
                file=got.file,
                record=got.record,
                taken=take,
                max_event_time=got.max_event_time,
                pending=take < a.count or a.more,
                bounded=bounded,
                now=now,
                started=started,
                policy=self._policy,
            )
        taken = sum(alloc)
        if budget is not None:
            self._sizer.admitted(now, taken, budget)
        if taken == 0 and not changes and bounded and budget != 0:
            return dict(start, ended=True, watermark=envelope.MAX_WATERMARK, at=now, segments={}, changed=[])
        watermark = source_watermark(start["watermark"], parts, now, self._policy)
        if taken == 0 and not changes and (
            self._available_now
            or not should_tick(start["watermark"], watermark, start["at"], now, self._policy)
        ):
            return start
        turn = start["turn"] + (1 if taken else 0)
        return _offset(
            parts, sets, admitted=start["admitted"] + taken, watermark=watermark, started=started, at=now,
            turn=turn, segments=segments, changed=changes,
        )

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        """Plan the epoch ``(start, end]``: one task per source partition with records.

        The records are the ``segments`` recorded in ``end``, with the stamps of its
        ``files``. The first task also emits the epoch's changed-file dead letters,
        metrics and watermark rows (a task of its own when no records were admitted).
        Called on the driver per epoch, also on a replay after a restart, with offsets
        from the offset log.

        Raises
        ------
        WireError
            When ``end`` was planned by a Wire version before file-set tracking (its
            records cannot be found again), or its segments do not add up to the
            records it admitted.
        """
        if start == end:
            return []
        w0, w1 = start["watermark"], end["watermark"]
        if end["ended"]:
            return [FileEpoch("", (), start["admitted"], w0, w1, True, ())]
        if "segments" not in end:
            raise WireError(
                f"file source {self._binding.step!r}: the epoch ending at offset {end} was planned by an "
                "older Wire without file-set tracking and cannot be replayed; finish it with that "
                "version or start the flow with a new checkpoint directory"
            )
        after = self._states(end)
        sets = {n: FileSet.from_json(d) for n, d in end["files"].items()}
        limit_et = future_limit(end["at"], self._max_future)
        tasks, seq, events, future = [], start["admitted"], 0, 0
        for name, segs in sorted(end["segments"].items()):
            planned = []
            for rel, lo, hi in segs:
                size, mtime_ns = sets[name].read[rel]
                path = self._path(rel)
                stamp = FileStamp(path, size, mtime_ns)
                if _stamp(path) == stamp:  # else the executor reports the records as not read
                    ok, ahead = self._count_events(self._index_cache.get(stamp, self._spec, index_only=True),
                                                   lo, hi, limit_et)
                    events, future = events + ok, future + ahead
                # executors may run in their own work dirs (a cluster): hand them absolute paths
                planned.append((os.path.abspath(path), size, mtime_ns, lo, hi))
            tasks.append(FileEpoch(name, tuple(planned), seq, w0, w1, False, None, end["at"]))
            seq += sum(hi - lo for _, lo, hi in segs)
        records = end["admitted"] - start["admitted"]
        if seq - start["admitted"] != records:
            raise WireError(
                f"file source {self._binding.step!r}: the segments of offset {end} hold "
                f"{seq - start['admitted']} records, the epoch admitted {records}"
            )
        changes = tuple(Change.from_json(c) for c in end.get("changed", ()))
        counters = {"records": records, "events": events, "malformed": records - events}
        counters.update({k: v for k, v in (("future", future), ("changed_files", len(changes))) if v})
        counters["gauge:watermark"] = w1
        counters["gauge:max_event_time"] = max(
            (p.max_event_time for p in after.values() if p.max_event_time is not None),
            default=NO_WATERMARK,
        )
        counters.update({f"gauge:watermark:{n}": p.watermark for n, p in after.items()})
        control = tuple(sorted(counters.items()))
        if not tasks:
            return [FileEpoch("", (), seq, w0, w1, False, control, end["at"], changes)]
        tasks[0] = replace(tasks[0], control=control, changes=changes)
        return list(tasks)

    def commit(self, end: Offset) -> None:
        """Nothing to do: the files are left in place; called after each epoch commits."""

    def _states(self, offset: Offset) -> dict[str, PartitionState]:
        if "partitions" not in offset:
            raise WireError(
                f"file source {self._binding.step!r}: offset {offset} predates partitioned file "
                "sources; start the flow with a new checkpoint directory"
            )
        return {n: PartitionState.from_json(d) for n, d in offset["partitions"].items()}

    def _file_sets(
        self, offset: Offset, states: dict[str, PartitionState], stamps: dict[str, dict[str, FileStamp]]
    ) -> dict[str, FileSet]:
        """The offset's file sets; for an offset of an older Wire, derived from its positions.

        Such an offset kept one position per partition in name order: the files sorting
        up to it are taken as read, with their stamps now.
        """
        if "files" in offset:
            return {n: FileSet.from_json(d) for n, d in offset["files"].items()}
        sets = {}
        for name, state in states.items():
            listed = stamps.get(name, {})
            read = {rel: (st.size, st.mtime_ns) for rel, st in listed.items()
                    if state.file and st.path <= state.file}
            current = listed.get(self._rel(state.file)) if state.file else None
            open_ = None
            if current is not None and state.record < self._index(current).records:
                open_ = self._rel(state.file)
            sets[name] = FileSet(read, open_)
        return sets

    def _listing(self) -> dict[str, list[str]]:
        if self._snapshot is not None:
            return self._snapshot
        found = self._binding.source.matching_partitions()
        if self._binding.source.bounded:
            self._snapshot = found
        return found

    def _rel(self, path: str) -> str:
        """A listed file's name in the offsets: relative to :func:`file_base`."""
        return os.path.relpath(path, self._base)

    def _path(self, rel: str) -> str:
        """Inverse of :meth:`_rel`: the path the planner opens."""
        return self._base if rel == os.curdir else os.path.join(self._base, rel)

    def _stamps(self, paths: list[str]) -> dict[str, FileStamp]:
        """Stat the listed files: relative name -> stamp (of the path the planner opens)."""
        out = {}
        for p in paths:
            rel = self._rel(p)
            st = _stamp(self._path(rel))
            if st is not None:
                out[rel] = st
        return out

    def _index(self, stamp: FileStamp) -> ParsedFile:
        return self._index_cache.get(stamp, self._spec, index_only=True)

    def _available(
        self,
        order: list[str],
        stamps: dict[str, FileStamp],
        open_: str | None,
        position: int,
        cap: int | None,
    ) -> _Available:
        """The records of the files ``order`` (arrival order), at most ``cap``.

        The open file ``open_`` continues at record ``position``, the others start at 0.
        """
        segments: list[tuple[str, FileStamp, int, int, int]] = []
        count = 0
        for rel in order:
            if cap is not None and count >= cap:
                return _Available(segments, count, True)
            stamp = stamps[rel]
            n = self._index(stamp).records
            lo = position if rel == open_ else 0
            if n > lo:
                hi = n if cap is None else min(n, lo + cap - count)
                segments.append((rel, stamp, lo, hi, n))
                count += hi - lo
                if hi < n:
                    return _Available(segments, count, True)
        return _Available(segments, count, False)

    def _take(
        self,
        segments: list[tuple[str, FileStamp, int, int, int]],
        take: int,
        prev: PartitionState,
        files: FileSet,
        limit_et: int | None,
    ) -> _Taken:
        """Admit the first ``take`` records of ``segments``: new position, max event time, file set.

        A file enters the set with its stamp when its first record is admitted. Events
        beyond ``limit_et`` (``max_future``) take no part in the max event time.
        """
        file, record, max_et = prev.file, prev.record, None
        read, open_, admitted = dict(files.read), files.open, []
        for rel, stamp, lo, hi, n in segments:
            if take <= 0:
                break
            hi = min(hi, lo + take)
            seen = self._max_event_time(self._index(stamp), lo, hi, limit_et)
            if seen is not None:
                max_et = seen if max_et is None else max(max_et, seen)
            read[rel] = (stamp.size, stamp.mtime_ns)
            open_ = rel if hi < n else None
            admitted.append([rel, lo, hi])
            file, record, take = stamp.path, hi, take - (hi - lo)
        return _Taken(file, record, max_et, admitted, FileSet(read, open_))

    @staticmethod
    def _max_event_time(index: ParsedFile, lo: int, hi: int, limit_et: int | None) -> int | None:
        a, b = index.rows(lo, hi)
        ets = index.event_times[a:b]
        if limit_et is not None:
            ets = ets[ets <= limit_et]
        return int(ets.max()) if len(ets) else None

    @staticmethod
    def _count_events(index: ParsedFile, lo: int, hi: int, limit_et: int | None) -> tuple[int, int]:
        """Valid records in ``[lo, hi)``: (on time, beyond ``max_future``)."""
        a, b = index.rows(lo, hi)
        if limit_et is None:
            return b - a, 0
        ahead = int(np.count_nonzero(index.event_times[a:b] > limit_et))
        return b - a - ahead, ahead

    # -- executor ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield one task's rows as Arrow batches in the envelope format; runs on executors.

        Data rows (``__seq``: the record's position in the source's arrival order,
        counting malformed records), then the dead-letter side row (if any): malformed
        records, events beyond ``max_future`` (judged against the epoch's recorded
        processing time ``at``), the records of a file whose stamp no longer matches
        the planned one (changed before they were read, e.g. before a replay), and on
        the control task the epoch's changed files. A control task then adds the
        metrics side row and one watermark row per key group (the epoch's end watermark).
        """
        if not isinstance(partition, FileEpoch):
            raise TypeError(f"expected a FileEpoch partition, got {type(partition).__name__}")
        schema, step = self._row_schema, self._binding.step
        dead: list[tuple[str, str, str]] = []
        limit_et = future_limit(partition.at, self._max_future)
        seq = partition.first_seq
        for path, size, mtime_ns, lo, hi in partition.segments:
            planned = FileStamp(path, size, mtime_ns)
            now = _stamp(path)
            parsed = _EXECUTOR_CACHE.get(planned, self._spec) if now == planned else None
            if parsed is None or parsed.records < hi:
                dead.append(_unread(path, planned, now, lo, hi, parsed))
                seq += hi - lo
                continue
            a, b = parsed.rows(lo, hi)
            ets, valid = parsed.event_times[a:b], parsed.valid[a:b]
            keep = np.ones(b - a, dtype=bool) if limit_et is None else ets <= limit_et
            if keep.any():
                payload = parsed.table.slice(a, b - a)
                if not keep.all():
                    payload = payload.filter(pa.array(keep))
                yield from self._data_rows(payload, ets[keep], valid[keep] - lo + seq, partition)
            rows = [(m.record, m.location, m.reason, m.raw) for m in parsed.malformed_in(lo, hi)]
            if not keep.all():
                assert partition.at is not None and self._max_future is not None
                ahead = valid[~keep]
                found = locate_records(path, self._spec.format, ahead.tolist(),
                                       delimiter=self._spec.delimiter)
                for record, et in zip(ahead.tolist(), ets[~keep].tolist(), strict=True):
                    location, raw = found[record]
                    rows.append((record, location, future_reason(et, partition.at, self._max_future), raw))
            dead += [(location, reason, raw) for _, location, reason, raw in sorted(rows)]
            seq += hi - lo
        dead += [(self._path(c.file), c.reason(), c.record()) for c in partition.changes]
        if dead:
            yield envelope.dead_letter_batch(schema, step, dead)
        if partition.control is None:
            return
        if not partition.final:
            counters = envelope.metrics_table(step, dict(partition.control))
            yield envelope.side_batch(schema, envelope.METRICS_PORT, counters)
        groups = range(self._binding.key_groups)
        yield envelope.watermark_batch(schema, partition.end_watermark, groups)

    def _data_rows(
        self, payload: pa.Table, event_times: np.ndarray, seqs: np.ndarray, epoch: FileEpoch
    ) -> Iterator[pa.RecordBatch]:
        schema, n = self._row_schema, payload.num_rows
        columns = [payload[name].cast(schema.field(name).type) for name in payload.column_names]
        columns += [
            pa.array(np.zeros(n, np.int32)),
            pa.array(event_times, pa.int64()),
            pa.array(np.full(n, epoch.start_watermark, np.int64)),
            pa.nulls(n, pa.int32()),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.binary()),
            pa.array(seqs.astype(np.int64), pa.int64()),
        ]
        yield from pa.Table.from_arrays(columns, schema=schema).combine_chunks().to_batches()


def _unread(
    path: str, planned: FileStamp, now: FileStamp | None, lo: int, hi: int, parsed: ParsedFile | None
) -> tuple[str, str, str]:
    """The dead letter of admitted records ``[lo, hi)`` that cannot be read as planned."""
    if now is None:
        what = "vanished"
    elif parsed is None:
        what = (f"changed (size {planned.size} -> {now.size} bytes, "
                f"mtime_ns {planned.mtime_ns} -> {now.mtime_ns})")
    else:
        what = f"holds {parsed.records} records"
    reason = (
        f"file {what} after records {lo}..{hi - 1} were admitted (size {planned.size} bytes, "
        f"mtime_ns {planned.mtime_ns}) and before they were read; they are not read"
    )
    record = {"size": planned.size, "mtime_ns": planned.mtime_ns, "records": [lo, hi]}
    return path, reason, json.dumps(record)
