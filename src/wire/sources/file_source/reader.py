"""The file source's Spark stream reader: a :class:`~wire.sources.base.partitioned.PartitionedReader`.

The base owns admission (split over the source's partitions,
:mod:`wire.sources.file_source.listing`), the watermark policy, offsets, tasks and envelope rows.
This module holds what is the file source's: a partition's position is the set of files
whose reading began and the position in the open file (:mod:`wire.sources.file_source.file_set`);
planning finds changed files (dead letters recorded in the offset), counts the records
waiting from per-file event-time indexes (parsed once per planner process, up to the
epoch's budget) and admits them in arrival order; an executor reads exactly the record
ranges (``segments``) an epoch's offset records, with the files' stamps, so a replay
reads the same records or reports them as not read.

A position (JSON)::

    {"file": "/data/in/b.csv",   # the file read last ("" before the first)
     "record": 2,                # the index of its next record
     "files": {"read": {"a.csv": [size, mtime_ns], ...}, "open": "b.csv"},
     "segments": [["a.csv", 3, 10], ["b.csv", 0, 2]]}  # the epoch's ranges [lo, hi)

An epoch's ``from`` keeps ``file`` and ``record`` only.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from wire.core.watermarks import PartitionState
from wire.errors import WireError
from wire.sources.base.offsets import DeadLetter, PartitionOffset, Position, make_offset
from wire.sources.base.partitioned import Admitted, PartitionedReader, Read
from wire.sources.base.source import Decoded, Offset
from wire.sources.file_source.file_set import Change, FileSet, detect_changes, reading_order
from wire.sources.file_source.formats import ParseCache, ParsedFile
from wire.sources.file_source.listing import FileStamp, _wildcard_level
from wire.sources.file_source.locate import locate_records
from wire.sources.file_source.parsed_spill import SpillDir, await_warm_up, read_spill

if TYPE_CHECKING:
    from wire.sources.file_source.config import SourceBinding

_EXECUTOR_CACHE = ParseCache(capacity=8)
"""Parsed files kept by an executor's Python worker across epochs (workers are reused)."""


@dataclass(frozen=True)
class _Available:
    segments: list[tuple[str, FileStamp, int, int, int]]  # (rel, stamp, lo, hi, records) up to the budget
    count: int
    more: bool  # records may remain beyond ``segments``


def _position(file: str, record: int, files: FileSet, segments: list[list[Any]]) -> dict[str, Any]:
    return {"file": file, "record": record, "files": files.to_json(), "segments": segments}


_START = _position("", 0, FileSet(), [])


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


class WireFileStreamReader(PartitionedReader[Any], SupportsTriggerAvailableNow):
    """Stream reader of the file source: a :class:`PartitionedReader` over the source's partitions.

    The planner methods run in Spark's long-lived planner process on the driver and
    cache per-file event-time indexes; :meth:`read` runs in executor workers and uses
    only the binding. ``clock`` (ms) is the processing-time clock, injectable for tests.
    """

    kind: ClassVar[str] = "file source"
    reports_lag: ClassVar[bool] = False
    refresh_counter: ClassVar[str] = "changed_files"
    _binding: SourceBinding
    _transient: ClassVar[dict[str, Any]] = {**PartitionedReader._transient, "_listed": {}, "_order": {},
                                            "_avail": {}}
    """The planner's per-planning caches: the listing's stamps, reading orders, records waiting."""
    _listed: dict[str, dict[str, FileStamp]]
    _order: dict[str, list[str]]
    _avail: dict[str, _Available]

    def __init__(self, binding: SourceBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)
        self._spec = binding.parse_spec()
        self._base = file_base(binding.source.path)
        self._root = os.path.abspath(self._base)
        """The base directory as the driver sees it: executors may run in their own work dirs."""
        self._index_cache = ParseCache(capacity=64)
        self._index_lock = threading.Lock()
        """Held while the index cache is read or a file indexed (the read-ahead thread too)."""
        self._read_ahead: threading.Thread | None = None
        self._snapshot: dict[str, list[str]] | None = None
        self._spills = SpillDir(path=binding.spill_dir) if binding.local else None
        """Planner, local master: its parses handed to the executors (:mod:`~.parsed_spill`)."""
        self._awaits_warm_up = True
        """A spill miss waits for the driver's warm-up (:func:`await_warm_up`): once, since the
        warm-up runs before the query starts; never in the warm-up itself (:meth:`warm_up`),
        which holds the lock awaited."""

    def __getstate__(self) -> dict[str, Any]:
        """The picklable state: a new lock and no read-ahead thread in the other process."""
        state = super().__getstate__()
        state.pop("_index_lock", None)
        state["_read_ahead"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore the state with a lock of this process's own."""
        self.__dict__.update(state)
        self._index_lock = threading.Lock()

    # -- planner (driver) --------------------------------------------------------------

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the file list: an ``availableNow`` query reads only the files present now.

        Such a query stops when no records are left, so it makes no watermark-only epochs.
        (Wire's runner never uses that trigger, :mod:`wire.runtime.runner`: a bounded source
        freezes its list at its first listing, and makes no watermark-only epochs either.)
        """
        self._available_now = True
        self._snapshot = self._binding.source.matching_partitions()

    def initial_positions(self) -> dict[str, Position]:
        """No partition yet: they are found by listing."""
        return {}

    def start_position(self, name: str) -> Position:
        """Before the partition's first file."""
        return dict(_START)

    def list_partitions(self) -> list[str]:
        """The source's partitions with their files now (a bounded source lists once)."""
        listing = self._listing()
        self._listed = {name: self._stamps(paths) for name, paths in listing.items()}
        self._index_cache.ensure_capacity(len(listing) + 8)
        return sorted(listing)

    def refresh(self, name: str, position: Position) -> tuple[Position, list[DeadLetter]]:
        """Find the partition's files that changed since their reading began (one dead letter each)."""
        listed = {rel: (st.size, st.mtime_ns) for rel, st in self._listed.get(name, {}).items()}
        files, found = detect_changes(name, FileSet.from_json(position["files"]), listed, position["record"])
        self._order[name] = reading_order(files, listed)
        dead = [(self._path(c.file), c.reason(), c.record()) for c in found]
        return _position(position["file"], position["record"], files, []), dead

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        """The records of the partition's files in reading order, counted up to ``cap`` (then one more)."""
        files = FileSet.from_json(position["files"])
        self._avail[name] = a = self._available(name, self._order[name], self._listed.get(name, {}),
                                                files.open, position["record"], cap)
        return a.count + (1 if a.more else 0)

    def read_from(self, name: str, position: Position, budget: int) -> Admitted:
        """Admit the first ``budget`` records waiting (:meth:`backlog`): new position, event times.

        A file enters the set with its stamp when its first record is admitted.
        """
        file, record = position["file"], position["record"]
        files = FileSet.from_json(position["files"])
        if self._spills is not None:  # read to their end in epochs that committed: no task reads them now
            self._spills.release_files(name, set(files.read) - {files.open})
        read, open_, segments, times = dict(files.read), files.open, [], []
        left = budget
        for rel, stamp, lo, hi, n in self._avail[name].segments:
            if left <= 0:
                break
            hi = min(hi, lo + left)
            index = self._index(stamp, name, rel)
            a, b = index.rows(lo, hi)
            times.append(index.event_times[a:b])
            read[rel] = (stamp.size, stamp.mtime_ns)
            open_ = rel if hi < n else None
            segments.append([rel, lo, hi])
            file, record, left = stamp.path, hi, left - (hi - lo)
        ets = np.concatenate(times) if times else np.zeros(0, np.int64)
        if segments:
            self._index_next(name, str(segments[-1][0]))
        return Admitted(budget - left, _position(file, record, FileSet(read, open_), segments), ets)

    def _index_next(self, name: str, last: str) -> None:
        """Index the file after ``last`` in reading order in a background thread (read-ahead).

        The next epoch's planning would parse it on the critical path between two epochs; the
        thread parses it while this epoch runs. Planning that needs a file waits for the thread
        rather than parse it twice (:attr:`_index_lock`). A failure is left for the planning
        that needs the file to raise.
        """
        order = self._order.get(name, [])
        at = order.index(last) if last in order else -1
        stamp = self._listed.get(name, {}).get(order[at + 1]) if 0 <= at < len(order) - 1 else None
        busy = self._read_ahead is not None and self._read_ahead.is_alive()
        if stamp is None or busy or self._index_cache.holds(stamp, self._spec):
            return

        def index() -> None:
            try:
                self._index(stamp, name, order[at + 1])
            except Exception:  # raised again by the planning that needs the file
                return

        self._read_ahead = threading.Thread(target=index, name="wire-file-read-ahead", daemon=True)
        self._read_ahead.start()

    def for_read(self, position: Position) -> Position:
        """The epoch's ranges and the stamps of their files only (not the whole file set)."""
        read = FileSet.from_json(position["files"]).read
        files = FileSet({rel: read[rel] for rel, _, _ in position["segments"]})
        return _position(position["file"], position["record"], files, position["segments"])

    def split_range(
        self, first: Position, next: Position, taken: int, pieces: int
    ) -> list[tuple[Position, Position, int]] | None:
        """Cut the epoch's segments into ``pieces`` runs of (almost) equal record counts.

        Each part keeps the stamps of its own files. A task parses a whole file (the
        executor's parse cache holds it), and reads only its part's records.
        """
        segments = [(rel, int(lo), int(hi)) for rel, lo, hi in next["segments"]]
        if sum(hi - lo for _, lo, hi in segments) != taken:
            return None
        read = FileSet.from_json(next["files"]).read
        bounds = [taken * i // pieces for i in range(pieces + 1)]
        parts: list[tuple[Position, Position, int]] = []
        seg, pos, at = 0, segments[0][1], 0  # current segment, its next record, records before it
        for k in range(pieces):
            cut: list[list[Any]] = []
            while at < bounds[k + 1]:
                rel, _, hi = segments[seg]
                end = min(hi, pos + bounds[k + 1] - at)
                cut.append([rel, pos, end])
                at += end - pos
                pos = end
                if pos == hi and seg + 1 < len(segments):
                    seg += 1
                    pos = segments[seg][1]
            files = FileSet({rel: read[rel] for rel, _, _ in cut})
            part = _position(next["file"], next["record"], files, cut)
            parts.append((first, part, bounds[k + 1] - bounds[k]))
        return parts

    def range_start(self, position: Position) -> Position:
        """The file and record an epoch's read started at (the file set is in ``next``)."""
        return {"file": position["file"], "record": position["record"]}

    def upgrade(self, offset: Offset, before: Offset | None) -> Offset:
        """Offsets an earlier Wire wrote: partition states and top-level ``files``, ``segments``, ``changed``.

        Raises
        ------
        WireError
            When ``offset`` predates partitioned file sources, or ends an epoch planned
            before file-set tracking (its records cannot be found again).
        """
        parts = offset.get("partitions")
        if parts is None:
            raise WireError(
                f"file source {self._binding.step!r}: offset {offset} predates partitioned file "
                "sources; start the flow over with fresh=True (`wire run --fresh`)"
            )
        if all("next" in p for p in parts.values()) and "files" not in offset:
            return offset
        if before is not None and "segments" not in offset and offset["admitted"] != before["admitted"]:
            raise WireError(
                f"file source {self._binding.step!r}: the epoch ending at offset {offset} was planned by an "
                "older Wire without file-set tracking and cannot be replayed; finish it with that "
                "version or start the flow over with fresh=True (`wire run --fresh`)"
            )
        states = {n: PartitionState.from_json(d) for n, d in parts.items()}
        sets = self._file_sets(offset, states)
        changes = [Change.from_json(c) for c in offset.get("changed", ())]
        segments = offset.get("segments", {})
        new = {}
        for n, st in states.items():
            segs = segments.get(n, [])
            dead = tuple((self._path(c.file), c.reason(), c.record()) for c in changes if c.partition == n)
            new[n] = PartitionOffset({"file": st.file, "record": st.record},
                                     _position(st.file, st.record, sets.get(n, FileSet()), segs),
                                     sum(hi - lo for _, lo, hi in segs), None,
                                     replace(st, file="", record=0), dead)
        out = make_offset(new, admitted=offset["admitted"], watermark=offset["watermark"],
                          started=offset.get("started"), at=offset.get("at"), turn=offset.get("turn", 0))
        return dict(out, ended=bool(offset.get("ended")))

    def _file_sets(self, offset: Offset, states: dict[str, PartitionState]) -> dict[str, FileSet]:
        """An earlier offset's file sets; for one before file-set tracking, derived from its positions.

        Such an offset kept one position per partition in name order: the files sorting
        up to it are taken as read, with their stamps now.
        """
        if "files" in offset:
            return {n: FileSet.from_json(d) for n, d in offset["files"].items()}
        stamps = {name: self._stamps(paths) for name, paths in self._listing().items()}
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

    def _index(self, stamp: FileStamp, name: str | None = None, rel: str = "") -> ParsedFile:
        """The file's index (parsed on a miss; the parse spilled for the executors of partition ``name``)."""
        spills, spec = self._spills, self._spec
        keep = load = None
        if spills is not None and name is not None:
            def keep(parsed: ParsedFile) -> None:
                spills.write_parse(name, rel, stamp, spec, parsed)

            def load() -> ParsedFile | None:  # the driver's warm-up may have parsed it (warm_up)
                parsed = spills.read_parse(name, rel, stamp, spec)
                if parsed is None and self._awaits_warm_up:
                    self._awaits_warm_up = False
                    if await_warm_up(spills.path):  # one was under way: spilled by now, or not by it
                        parsed = spills.read_parse(name, rel, stamp, spec)
                return parsed
        with self._index_lock:
            return self._index_cache.get(stamp, spec, index_only=True, load=load, on_parse=keep)

    def warm_up(self) -> None:
        """Parse the first file of each partition, in reading order, into the spill directory (driver).

        At most until the files parsed hold the first epoch's admission (``max_events_per_epoch``
        records). Called by the runner in a thread of the driver before the query's first epoch
        (:meth:`~wire.sources.file_source.source.FileSource.warm_up`): the planner's first
        :meth:`latestOffset` then memory-maps these parses (:meth:`_index`) instead of parsing.
        A spill is named by the file's stamp and the parse spec, so a file that changed since,
        or another spec, is parsed again as before. Never raises (the planner parses then).
        """
        if self._spills is None:
            return
        self._awaits_warm_up = False
        try:
            records = 0
            for name in self.list_partitions():
                if records >= self._binding.max_events_per_epoch:  # more than the first epoch reads
                    return
                self.refresh(name, self.start_position(name))
                order = self._order.get(name, [])
                if order and order[0] in self._listed.get(name, {}):
                    records += self._index(self._listed[name][order[0]], name, order[0]).records
        except Exception:  # a cache: whatever fails, the planner parses
            return

    def handoff(self) -> str | None:
        """The directory of this planner's spilled parses (None: not a local master, or none yet)."""
        return None if self._spills is None else self._spills.path

    def stop(self) -> None:
        """The query ends: delete the spilled parses, close the client."""
        if self._spills is not None:
            self._spills.close()
        super().stop()

    def _available(
        self,
        name: str,
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
            n = self._index(stamp, name, rel).records
            lo = position if rel == open_ else 0
            if n > lo:
                hi = n if cap is None else min(n, lo + cap - count)
                segments.append((rel, stamp, lo, hi, n))
                count += hi - lo
                if hi < n:
                    return _Available(segments, count, True)
        return _Available(segments, count, False)

    # -- executor ------------------------------------------------------------------------

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        """The records of the ranges (``segments``) the epoch recorded in ``next`` (executor).

        Records of a file whose stamp no longer matches the planned one (changed before
        they were read, e.g. before a replay) are one dead letter per range, not read.
        Positions count every record of the ranges, in order (``__seq``).
        """
        read = FileSet.from_json(next["files"]).read
        tables, times, positions, dead = [], [], [], []
        spans: list[tuple[int, str, int]] = []  # (index of the range's first record, path, lo)
        at = 0
        for rel, lo, hi in next["segments"]:
            size, mtime_ns = read[rel]
            path = self._root if rel == os.curdir else os.path.join(self._root, rel)
            planned, now = FileStamp(path, size, mtime_ns), _stamp(path)
            parsed = None
            if now == planned:
                handoff, spec = self.task_handoff, self._spec
                load = functools.partial(read_spill, handoff, planned, spec)
                parsed = _EXECUTOR_CACHE.get(planned, spec, load=load)
            if parsed is None or parsed.records < hi:
                dead.append(_unread(path, planned, now, lo, hi, parsed))
            else:
                a, b = parsed.rows(lo, hi)
                tables.append(parsed.table.slice(a, b - a))
                times.append(parsed.event_times[a:b])
                positions.append(parsed.valid[a:b] - lo + at)
                dead += [(m.location, m.reason, m.raw) for m in parsed.malformed_in(lo, hi)]
                spans.append((at, path, lo))
            at += hi - lo
        table = pa.concat_tables(tables) if tables else pa.table({})
        decoded = Decoded(table, np.concatenate(times) if times else np.zeros(0, np.int64),
                          np.concatenate(positions).astype(np.int64) if positions else np.zeros(0, np.int64),
                          dead)
        return Read(decoded, taken, next, lambda found: self._locate(spans, found))

    def _locate(self, spans: list[tuple[int, str, int]], found: list[int]) -> list[tuple[str, str]]:
        """The dead-letter location and raw text of the records at range indexes ``found``."""
        starts = [s for s, _, _ in spans]
        where = []
        for i in found:
            k = int(np.searchsorted(starts, i, side="right")) - 1
            start, path, lo = spans[k]
            where.append((path, lo + i - start))
        by_path: dict[str, list[int]] = {}
        for path, record in where:
            by_path.setdefault(path, []).append(record)
        located = {path: locate_records(path, self._spec.format, records, delimiter=self._spec.delimiter)
                   for path, records in by_path.items()}
        return [located[path][record] for path, record in where]


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
