"""The file source's Spark stream reader: offsets, per-partition watermarks, epochs, rows.

The planner side (``latestOffset``/``partitions``) admits records per epoch, split over
the source's partitions (:mod:`wire.connectors.file_listing`), and computes the
watermark with :mod:`wire.connectors.watermarks`; everything the watermark depends on
is stored in the epoch's end offset, so Spark's offset log (``offsets/N``) holds every
epoch's watermark and a replay sees the same watermarks (SPEC §2, §10). The executor
side (``read``) turns one source partition's record ranges into envelope rows
(:mod:`wire.runtime.envelope`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from wire.connectors.base import spark_row_schema
from wire.connectors.file_listing import FileStamp
from wire.connectors.file_readers import ParseCache, ParsedFile
from wire.connectors.watermarks import (
    NO_WATERMARK,
    PartitionState,
    WatermarkPolicy,
    advance_partition,
    fair_split,
    should_tick,
    source_watermark,
)
from wire.errors import WireError
from wire.runtime import envelope
from wire.runtime.control import is_paused

if TYPE_CHECKING:
    from wire.connectors.files import SourceBinding

_EXECUTOR_CACHE = ParseCache(capacity=8)
"""Parsed files kept by an executor's Python worker across epochs (workers are reused)."""


# ---------------------------------------------------------------------------- Spark source


@dataclass
class FileEpoch(InputPartition):
    """One Spark task of an epoch: one source partition's records and/or the control rows.

    ``segments`` are record ranges ``(path, size, mtime_ns, lo, hi)`` of source partition
    ``partition`` in arrival order and ``first_seq`` the ``__seq`` of their first record.
    ``control`` holds the epoch's metric counters when this task also emits the epoch's
    control rows (metrics, then one watermark row per key group), else None.
    """

    partition: str
    segments: tuple[tuple[str, int, int, int, int], ...]
    first_seq: int
    start_watermark: int
    end_watermark: int
    final: bool
    control: tuple[tuple[str, int], ...] | None

    def __post_init__(self) -> None:
        super().__init__(None)


@dataclass(frozen=True)
class _Available:
    segments: list[tuple[str, int, int]]  # (path, lo, hi) up to the budget
    count: int
    more: bool  # records may remain beyond ``segments``


def wall_clock_ms() -> int:
    """Return the processing-time clock: wall-clock ms since the Unix epoch."""
    return time.time_ns() // 1_000_000


def _offset(
    parts: dict[str, PartitionState],
    *,
    admitted: int,
    watermark: int,
    started: int | None,
    at: int | None,
    turn: int,
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
    )


class WireFileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of the file source: one Spark task per source partition with records.

    Offsets are JSON dicts: ``admitted`` (records admitted so far, valid and malformed),
    ``watermark`` (the source watermark after the epoch; :data:`NO_WATERMARK` at first),
    ``max_event_time`` (over all partitions), ``ended``, ``started`` (wall-clock ms when
    the source started), ``at`` (wall-clock ms when the offset was made), ``turn``
    (round-robin counter of the admission split) and ``partitions``: per partition
    name, a :class:`~wire.connectors.watermarks.PartitionState` (position, max event
    time, watermark, last arrival, idle and done flags). Every input of the watermark
    is in the offset, so a replayed epoch sees the logged watermark.

    The planner methods run in Spark's long-lived planner process on the driver and
    cache per-file event-time indexes; :meth:`read` runs in executor workers and uses
    only the binding. ``clock`` (ms) is the processing-time clock, injectable for tests.
    """

    def __init__(self, binding: SourceBinding, clock: Callable[[], int] | None = None) -> None:
        self._binding = binding
        src = binding.source
        self._policy = WatermarkPolicy(binding.max_delay_ms, src.idle_timeout, src.watermark_interval)
        self._clock = clock or wall_clock_ms
        self._spec = binding.parse_spec()
        self._row_schema = spark_row_schema(binding.output_schema)
        self._index_cache = ParseCache(capacity=64)
        self._counts: dict[FileStamp, int] = {}
        self._snapshot: dict[str, list[str]] | None = None
        self._available_now = False
        self._started: int | None = None

    # -- planner (driver) --------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Return the position before the first file; called when a query starts fresh.

        Holds no clock reading: Spark calls it again when it replays the first epoch.
        """
        return _offset({}, admitted=0, watermark=NO_WATERMARK, started=None, at=None, turn=0)

    def getDefaultReadLimit(self) -> ReadLimit:
        """Return ``ReadMaxRows(max_events_per_epoch)``: the admission limit per epoch."""
        return ReadMaxRows(self._binding.max_events_per_epoch)

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the file list: an ``availableNow`` query reads only the files present now.

        Such a query stops when no records are left, so it makes no watermark-only epochs.
        """
        self._available_now = True
        self._snapshot = self._binding.source.matching_partitions()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Admit the next records after ``start``, at most ``limit``, split over partitions.

        Called by Spark before each new epoch (never for an epoch replayed from the
        offset log); the returned offset is written to the offset log before the epoch
        runs, with the watermark after the epoch. The budget is shared max-min fairly
        by the partitions with records (:func:`~wire.connectors.watermarks.fair_split`,
        rotating the remainder). Returns ``start`` when nothing is new (no epoch runs)
        unless idleness moves the watermark (a watermark-only epoch, at most once per
        ``watermark_interval``); a bounded source whose files are all read returns,
        once, an ``ended`` offset with the maximal watermark.
        """
        if start["ended"] or is_paused(self._binding.control_file, self._binding.step):
            return start
        budget = self._budget(limit)
        now = self._clock()
        if self._started is None:
            self._started = now
        started = self._started if start["started"] is None else start["started"]
        listing = self._listing()
        before = self._states(start)
        names = sorted(set(listing) | set(before))
        self._index_cache.ensure_capacity(len(names) + 8)
        fresh = PartitionState()
        avail = [self._available(listing.get(n, []), before.get(n, fresh), budget) for n in names]
        first = start["turn"] % len(names) if names else 0
        alloc = fair_split([a.count for a in avail], budget, first)
        bounded = self._binding.source.bounded
        parts = {}
        for name, a, take in zip(names, avail, alloc, strict=True):
            prev = before.get(name, fresh)
            file, record, max_et = self._take(a.segments, take, prev)
            parts[name] = advance_partition(
                prev,
                file=file,
                record=record,
                taken=take,
                max_event_time=max_et,
                pending=take < a.count or a.more,
                bounded=bounded,
                now=now,
                started=started,
                policy=self._policy,
            )
        taken = sum(alloc)
        if taken == 0 and bounded and budget != 0:
            return dict(start, ended=True, watermark=envelope.MAX_WATERMARK, at=now)
        watermark = source_watermark(start["watermark"], parts, now, self._policy)
        if taken == 0 and (
            self._available_now
            or not should_tick(start["watermark"], watermark, start["at"], now, self._policy)
        ):
            return start
        turn = start["turn"] + (1 if taken else 0)
        return _offset(
            parts, admitted=start["admitted"] + taken, watermark=watermark, started=started, at=now, turn=turn
        )

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Plan the epoch ``(start, end]``: one task per source partition with records.

        The first task also emits the epoch's metrics and watermark rows (a task of its
        own when no records were admitted). Called on the driver per epoch, also on a
        replay after a restart, with offsets from the offset log.
        """
        if start == end:
            return []
        w0, w1 = start["watermark"], end["watermark"]
        if end["ended"]:
            return [FileEpoch("", (), start["admitted"], w0, w1, True, ())]
        before, after = self._states(start), self._states(end)
        listing = self._listing()
        tasks, seq, events = [], start["admitted"], 0
        for name in sorted(after):
            lo, hi = before.get(name, PartitionState()), after[name]
            if hi.admitted == lo.admitted:
                continue
            segments = self._segments(name, listing.get(name, []), lo, hi)
            for path, *_, a, b in segments:
                rows = self._index(path).rows(a, b)
                events += rows[1] - rows[0]
            tasks.append(FileEpoch(name, segments, seq, w0, w1, False, None))
            seq += hi.admitted - lo.admitted
        records = end["admitted"] - start["admitted"]
        if seq - start["admitted"] != records:
            raise WireError(
                f"file source {self._binding.step!r}: partitions admitted {seq - start['admitted']} "
                f"records between offsets {start} and {end}, expected {records}"
            )
        counters = {"records": records, "events": events, "malformed": records - events}
        counters["gauge:watermark"] = w1
        counters["gauge:max_event_time"] = max(
            (p.max_event_time for p in after.values() if p.max_event_time is not None),
            default=NO_WATERMARK,
        )
        counters.update({f"gauge:watermark:{n}": p.watermark for n, p in after.items()})
        control = tuple(sorted(counters.items()))
        if not tasks:
            return [FileEpoch("", (), seq, w0, w1, False, control)]
        tasks[0] = replace(tasks[0], control=control)
        return list(tasks)

    def commit(self, end: dict) -> None:
        """Nothing to do: files are immutable; called after each epoch commits."""

    def _states(self, offset: dict) -> dict[str, PartitionState]:
        if "partitions" not in offset:
            raise WireError(
                f"file source {self._binding.step!r}: offset {offset} predates partitioned file "
                "sources; start the flow with a new checkpoint directory"
            )
        return {n: PartitionState.from_json(d) for n, d in offset["partitions"].items()}

    def _budget(self, limit: ReadLimit) -> int | None:
        if isinstance(limit, ReadAllAvailable):
            return None
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        return self._binding.max_events_per_epoch

    def _listing(self) -> dict[str, list[str]]:
        if self._snapshot is not None:
            return self._snapshot
        found = self._binding.source.matching_partitions()
        if self._binding.source.bounded:
            self._snapshot = found
        return found

    def _index(self, path: str) -> ParsedFile:
        return self._index_cache.get(FileStamp.of(path), self._spec, index_only=True)

    def _records(self, path: str) -> int:
        stamp = FileStamp.of(path)
        n = self._counts.get(stamp)
        if n is None:
            n = self._counts[stamp] = self._index(path).records
        return n

    def _available(self, files: list[str], pos: PartitionState, cap: int | None) -> _Available:
        """The records after ``pos`` in ``files``, at most ``cap`` of them."""
        segments, count = [], 0
        for path in files:
            if path < pos.file:
                continue
            if cap is not None and count >= cap:
                return _Available(segments, count, True)
            n = self._records(path)
            lo = pos.record if path == pos.file else 0
            if n > lo:
                hi = n if cap is None else min(n, lo + cap - count)
                segments.append((path, lo, hi))
                count += hi - lo
                if hi < n:
                    return _Available(segments, count, True)
        return _Available(segments, count, False)

    def _take(
        self, segments: list[tuple[str, int, int]], take: int, prev: PartitionState
    ) -> tuple[str, int, int | None]:
        """Admit the first ``take`` records of ``segments``: new position and max event time."""
        file, record, max_et = prev.file, prev.record, None
        for path, lo, hi in segments:
            if take <= 0:
                break
            hi = min(hi, lo + take)
            seen = self._index(path).max_event_time(lo, hi)
            if seen is not None:
                max_et = seen if max_et is None else max(max_et, seen)
            file, record, take = path, hi, take - (hi - lo)
        return file, record, max_et

    def _segments(
        self, name: str, files: list[str], lo: PartitionState, hi: PartitionState
    ) -> tuple[tuple[str, int, int, int, int], ...]:
        segments = []
        for path in files:
            if not lo.file <= path <= hi.file:
                continue
            a = lo.record if path == lo.file else 0
            b = hi.record if path == hi.file else self._records(path)
            if b > a:
                stamp = FileStamp.of(path)
                # executors may run in their own work dirs (a cluster): hand them absolute paths
                segments.append((os.path.abspath(path), stamp.size, stamp.mtime_ns, a, b))
        planned = sum(b - a for *_, a, b in segments)
        if planned != hi.admitted - lo.admitted:
            raise WireError(
                f"file source {self._binding.step!r}: partition {name!r} changed between positions "
                f"{lo} and {hi} ({planned} records found, {hi.admitted - lo.admitted} admitted); "
                "files must not change once visible and new files must sort after the ones read"
            )
        return tuple(segments)

    # -- executor ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield one task's rows as Arrow batches in the envelope format; runs on executors.

        Data rows (``__seq``: the record's position in the source's arrival order,
        counting malformed records), then the dead-letter side row (if any record was
        malformed); a control task then adds the metrics side row and one watermark row
        per key group (the epoch's end watermark).
        """
        if not isinstance(partition, FileEpoch):
            raise TypeError(f"expected a FileEpoch partition, got {type(partition).__name__}")
        schema, step = self._row_schema, self._binding.step
        malformed = []
        seq = partition.first_seq
        for path, size, mtime_ns, lo, hi in partition.segments:
            parsed = _EXECUTOR_CACHE.get(FileStamp(path, size, mtime_ns), self._spec)
            if parsed.records < hi:
                raise WireError(f"file {path!r} has {parsed.records} records, expected {hi}")
            a, b = parsed.rows(lo, hi)
            if b > a:
                seqs = parsed.valid[a:b] - lo + seq
                payload = parsed.table.slice(a, b - a)
                yield from self._data_rows(payload, parsed.event_times[a:b], seqs, partition)
            malformed.extend(parsed.malformed_in(lo, hi))
            seq += hi - lo
        if malformed:
            dead = pa.table(
                {
                    "step": [step] * len(malformed),
                    "location": [m.location for m in malformed],
                    "reason": [m.reason for m in malformed],
                    "record": [m.raw for m in malformed],
                },
                schema=envelope.DEAD_LETTER_SCHEMA,
            )
            yield envelope.side_batch(schema, f"{step}.dead_letter", dead)
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
