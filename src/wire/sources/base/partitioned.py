"""The one base of Wire's sources: a stream reader over partitions (SPEC §2, §5, §7).

A connector (files, Kafka, Redis Streams, HTTP ingest) subclasses :class:`PartitionedReader`
and implements only what is its own:

* :meth:`~PartitionedReader.list_partitions`: the partitions that exist now (directories
  or files; Kafka's topic-partitions; one stream; one write-ahead log);
* :meth:`~PartitionedReader.initial_positions` / :meth:`~PartitionedReader.start_position`:
  where a fresh query, or a partition found later, starts;
* :meth:`~PartitionedReader.backlog`: how many records wait after a position (None: unknown);
* :meth:`~PartitionedReader.read_from`: read a partition from a position within a budget
  (planner; :meth:`~PartitionedReader.read_many` reads several at once);
* :meth:`~PartitionedReader.read_range`: read exactly a planned range again (executor);
* :meth:`~PartitionedReader.acknowledge`: acknowledge everything up to positions to the
  external system, once the epoch committed (contraflow, SPEC §7);

and, where it needs them, :meth:`~PartitionedReader.refresh` (dead letters found while
planning, e.g. changed files), :meth:`~PartitionedReader.transient` (outages),
:meth:`~PartitionedReader.upgrade` (offsets an earlier Wire wrote).

A position is a JSON value (an int offset, a string id, an object) that only the connector
interprets. The base owns everything else, the same for every connector:

* **admission**: Spark's read limit, the source's ``max_events_per_epoch`` and the epoch
  sizer (:class:`~wire.sources.base.readers.SizedAdmission`), pause and stop from the control file;
  the epoch's budget is split max-min fairly over the partitions by their backlogs
  (:func:`~wire.core.watermarks.fair_split`, the remainder rotating per epoch);
* **the watermark policy** (:mod:`wire.core.watermarks`): per partition, bounded
  out-of-orderness and idleness (a partition whose records wait is never idle); the
  source watermark is the minimum over live partitions that are not idle; events more
  than ``max_future_ms`` ahead of the epoch's processing time are dead letters and do not
  move it; watermark-only epochs at most once per ``watermark_interval`` (none for a
  bounded source, nor in an ``availableNow`` query);
* **a bounded source's end**: its last offset says ``ended`` and carries the maximal
  watermark. That is the offset of the epoch that admits the last records when every
  partition's backlog is known (:func:`exhausts`; the files), so the end of input costs no
  epoch of its own, as a bounded source in Flink emits its final watermark right after its
  last record; otherwise (a backlog unknown) the offset of one more epoch, empty;
* **offsets** (:mod:`wire.sources.base.offsets`), which record every partition's range and
  watermark inputs, so a replayed epoch reads the same records and sees the same watermark;
* **the epoch's tasks and rows** (:mod:`wire.core.envelope`): one task per partition
  that admitted records, or several when the connector can split a range
  (:meth:`~PartitionedReader.split_range`) and the range holds more than
  :data:`SPLIT_RECORDS` records per task; data rows, dead letters (malformed, future-dated, found while
  planning, and one for admitted records that are gone when read again), counters (per
  task; they add up) and gauges (once per epoch), and one watermark row per key group;
* **acknowledgement**: :meth:`commit` acknowledges the epoch's end; the first planning
  in a process acknowledges the last committed offset again (a crash may have come
  between an epoch's commit and its acknowledgement); an acknowledgement refused by a
  transient error is retried before the next epoch is planned;
* **outages**: while planning raises an error the connector calls transient
  (:meth:`~PartitionedReader.transient`), no epoch is planned and the watermark holds,
  for up to the source's ``unavailable_timeout`` (ms; None: forever), then a
  :class:`~wire.errors.WireError` names that parameter.

The Nexmark generator and the scripted ``TestStream`` have their own readers: they read
no external system, Nexmark splits one generated id range over parallel tasks, and
``TestStream`` scripts its watermarks.

Offsets: :mod:`wire.sources.base.offsets`.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from wire.core import envelope
from wire.core.time import NO_WATERMARK
from wire.core.watermarks import (
    PartitionState,
    advance_partition,
    fair_split,
    future_limit,
    should_tick,
    source_watermark,
)
from wire.errors import WireError
from wire.sources.base.offsets import (
    DeadLetter,
    PartitionOffset,
    Position,
    initial_offset,
    make_offset,
    partitions_of,
    plan_reads,
    positions_of,
)
from wire.sources.base.readers import Admission, ClientT, LiveReader, SizedAdmission
from wire.sources.base.source import Binding, Decoded, Offset

UNKNOWN_BACKLOG = 1 << 62
"""The demand of a partition whose backlog is unknown: whatever the budget allows."""


# -------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Read:
    """What a connector read from one partition.

    ``decoded``: the records as payload rows, their event times and positions (index
    among the records read), and the malformed ones as dead letters; ``count``: records
    read, valid and malformed; ``next``: the position after the last record read (the
    start position when none); ``records(indexes)``: ``(location, text)`` of the records at
    those indexes, for the dead letters of future-dated events.
    """

    decoded: Decoded
    count: int
    next: Position
    records: Callable[[list[int]], list[tuple[str, str]]]

    def admitted(self) -> Admitted:
        """What the planner needs of this read."""
        return Admitted(self.count, self.next, self.decoded.event_times)


@dataclass(frozen=True)
class Admitted:
    """What a connector admitted from one partition while planning an epoch.

    ``count``: records admitted, valid and malformed; ``next``: the position after them;
    ``event_times``: the valid records' event times (ms), which move the watermark.
    """

    count: int
    next: Position
    event_times: np.ndarray


SPLIT_RECORDS = 50_000
"""A planned range of more records than this is read by several tasks (when the connector
can split it, :meth:`PartitionedReader.split_range`): as many as the range has multiples
of this, at most :func:`read_tasks`. One file per epoch would otherwise be one task, and
the epoch's first stage would run on one core."""


def read_tasks() -> int:
    """The most tasks one planned range is split into: the planner host's cores (at least 1)."""
    return max(1, os.cpu_count() or 1)


def exhausts(backlogs: Mapping[str, int | None], reads: Mapping[str, Admitted]) -> bool:
    """Whether an epoch's reads admit every record left: each partition's backlog is known and read whole.

    ``backlogs``: per partition (all of them), the records waiting before the epoch
    (:meth:`PartitionedReader.backlog`, None: unknown); ``reads``: what the epoch admitted (a
    partition it read nothing of is missing).
    A bounded source whose epoch exhausts its input makes that epoch its last one
    (``ended``, with the maximal watermark) instead of planning an empty epoch for the
    watermark after it. A connector that counts its backlog only up to the budget reports
    one record more when more wait, so a read that admits the count it reported is whole.
    """
    return all(b is not None and (reads[n].count if n in reads else 0) >= b for n, b in backlogs.items())


@dataclass
class PartitionTask(InputPartition):
    """One Spark task of an epoch: one partition's planned read, and/or the control rows.

    ``name`` is ``""`` for a control-only task (an epoch that admitted nothing).
    ``control``: the epoch's gauges (the first task carries them) or None; ``at``: the
    processing time (ms) recorded in the epoch's end offset, against which
    ``max_future_ms`` is judged on a replay too.
    """

    name: str
    first: Position
    next: Position
    taken: int
    first_seq: int
    start_watermark: int
    end_watermark: int
    at: int | None
    control: tuple[tuple[str, int], ...] | None = None
    dead: tuple[DeadLetter, ...] = ()
    """The epoch's dead letters found while planning (the control task carries them)."""
    final: bool = False
    """The task of a bounded source's last, empty epoch: only the maximal watermark rows."""
    handoff: str | None = None
    """A directory on the planner's machine where the connector's planner left what it
    already decoded of the task's records (connector-defined; None: nothing). A task must
    read correctly when it is missing or stale (an executor on another machine, a replay)."""

    def __post_init__(self) -> None:
        super().__init__(None)


class PartitionedReader(SizedAdmission, LiveReader[ClientT], DataSourceStreamReader):
    """The stream reader of a partitioned source (module docstring).

    A connector's reader subclasses it, calls :meth:`_init_live` with its binding, names
    itself in ``kind`` (error messages: ``"kafka source"``) and implements the methods
    that raise ``NotImplementedError`` here.
    """

    kind: ClassVar[str] = "source"
    gone_reason: ClassVar[str] = "admitted records are gone"
    """Why records admitted in an epoch can be missing when it is read again."""
    reports_lag: ClassVar[bool] = True
    """Whether :meth:`backlog` counts exactly (then the offsets and gauges carry the lag)."""
    refresh_counter: ClassVar[str] = "refreshed"
    """The counter of dead letters found while planning (:meth:`refresh`)."""
    _transient: ClassVar[dict[str, Any]] = {
        "_unacked": None, "_caught_up": False, "_down_since": None, "_available_now": False,
    }
    _available_now: bool
    _binding: Binding
    _unacked: Offset | None
    _caught_up: bool
    _down_since: float | None
    task_handoff: str | None = None
    """Executor: the :attr:`PartitionTask.handoff` of the task being read (see :meth:`handoff`)."""

    # -- what a connector implements -----------------------------------------------------

    def list_partitions(self) -> list[str]:
        """The partitions that exist now (planner).

        A partition no longer listed, with nothing admitted, is done: it no longer holds
        the watermark back.
        """
        raise NotImplementedError

    def initial_positions(self) -> dict[str, Position]:
        """Where each partition starts in a fresh query (``initialOffset``).

        Spark calls it again when it replays the first epoch: it must then give the same
        positions (nothing is acknowledged before that epoch commits).
        """
        raise NotImplementedError

    def start_position(self, name: str) -> Position:
        """Where a partition found after the query started is read from."""
        raise NotImplementedError

    def refresh(self, name: str, position: Position) -> tuple[Position, list[DeadLetter]]:
        """Bring a partition's position up to date before admission (planner).

        Returns the position to admit from and the dead letters found (e.g. files that
        changed after they were read); they are recorded in the epoch's offset, so a
        replay reports them again. Default: ``position``, none.
        """
        return position, []

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        """How many records of partition ``name`` wait after ``position`` (None: unknown).

        ``cap``: the epoch's budget (None: none); a connector may stop counting beyond it
        and return any number above it (then set ``reports_lag = False``).
        """
        return None

    def read_from(self, name: str, position: Position, budget: int) -> Admitted:
        """At most ``budget`` (>= 1) records of partition ``name`` after ``position`` (planner)."""
        raise NotImplementedError

    def read_many(self, positions: Mapping[str, Position], budgets: Mapping[str, int]) -> dict[str, Admitted]:
        """:meth:`read_from` for each partition with a budget (planner).

        ``positions`` holds every partition's position (a connector reading them all with
        one client may assign them all); ``budgets`` the partitions to read, with theirs.
        """
        return {name: self.read_from(name, positions[name], budget) for name, budget in budgets.items()}

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        """The ``taken`` records an epoch admitted from ``first`` up to ``next`` (executor).

        Records that are gone (deleted since) are simply missing (a dead letter reports
        them); a range that cannot be what was admitted raises :class:`WireError`.
        """
        raise NotImplementedError

    def acknowledge(self, positions: Mapping[str, Position]) -> None:
        """Acknowledge every record before ``positions`` to the external system."""

    def transient(self, error: Exception) -> bool:
        """Whether ``error`` while planning is an outage to wait out (may raise a fatal one)."""
        return False

    def reset(self) -> None:
        """Forget the planner's per-process read state (after an outage)."""

    def range_location(self, name: str, first: Position, next: Position) -> str:
        """Where a planned range is, in a dead letter."""
        return f"{name}:({first}, {next}]"

    def for_read(self, position: Position) -> Position:
        """What an epoch's task carries of its range's end position to :meth:`read_range`.

        Default: all of it.
        """
        return position

    def range_start(self, position: Position) -> Position:
        """What an epoch's offset keeps of the position its read started from (``from``).

        :meth:`read_range` gets it back as ``first``. Default: all of it.
        """
        return position

    def prepare(self) -> None:
        """Called before every planning call (e.g. start a server in the planner process)."""

    def upgrade(self, offset: Offset, before: Offset | None) -> Offset:
        """``offset`` in this base's form (module docstring), from a form an earlier Wire wrote.

        A checkpoint keeps the offsets its version wrote; a connector whose offsets had
        another form converts them here, so that a flow restarted on a newer Wire goes on
        from its checkpoint. ``before``: the offset the epoch ending at ``offset`` started
        from (None: not known), for a form that did not record where an epoch began.
        Default: ``offset`` as it is.
        """
        return offset

    # -- planner (driver) ----------------------------------------------------------------

    def initialOffset(self) -> Offset:
        """Each partition at its :meth:`initial_positions`; called when a query starts fresh."""
        self.prepare()
        return initial_offset(self.initial_positions())

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """Admit the next records after ``start``, at most ``limit``; return the epoch's end offset.

        ``start`` is the end of the last committed epoch. Returns ``start`` (no epoch)
        when paused or stopping (control file), when nothing is new and the watermark
        does not tick, and during an outage (module docstring).
        """
        self.prepare()
        offset = self.upgrade(start, None)
        admission = self.admission(offset, limit)
        if admission is None:
            return start
        try:
            end = self._plan(offset, admission)
        except Exception as e:
            if not self.transient(e):
                raise
            return self._unreachable(start, e)
        if self._down_since is not None:
            warnings.warn(f"{self.kind} {self._binding.step!r}: reachable again after "
                          f"{time.monotonic() - self._down_since:.1f} s", RuntimeWarning, stacklevel=2)
            self._down_since = None
        return start if end is offset else end

    def _plan(self, start: Offset, admission: Admission) -> Offset:
        if not self._caught_up or self._unacked is not None:
            self._acknowledge(self._unacked or start)
            self._caught_up = True
        before = partitions_of(start)
        listed = set(self.list_partitions())
        names = sorted(set(before) | listed)
        positions: dict[str, Position] = {}
        found: dict[str, list[DeadLetter]] = {}
        for n in names:
            p = before.get(n)
            positions[n], found[n] = self.refresh(n, p.next if p is not None else self.start_position(n))
        budget, cap = admission.budget, self._binding.max_events_per_epoch
        backlogs = {n: self.backlog(n, positions[n], budget) for n in names}
        demand = [UNKNOWN_BACKLOG if (k := backlogs[n]) is None else max(0, k) for n in names]
        first = start["turn"] % len(names) if names else 0
        # a partition of unknown backlog reads at most max_events_per_epoch, also under ReadAllAvailable
        alloc = [min(a, cap) if backlogs[n] is None else a
                 for n, a in zip(names, fair_split(demand, budget, first), strict=True)]
        budgets = {n: a for n, a in zip(names, alloc, strict=True) if a}
        reads = self.read_many(positions, budgets) if budgets else {}
        now, started = self._clock(), admission.started
        bounded = bool(self._binding.source.bounded)
        limit_et = future_limit(now, self._policy.max_future_ms)
        after: dict[str, PartitionOffset] = {}
        taken = 0
        for n, want, a in zip(names, demand, alloc, strict=True):
            prev = before[n].state if n in before else PartitionState()
            r = reads.get(n)
            count = r.count if r is not None else 0
            taken += count
            ets = r.event_times if r is not None else np.zeros(0, np.int64)
            if limit_et is not None:
                ets = ets[ets <= limit_et]  # future-dated events do not move the watermark
            state = advance_partition(prev, file="", record=0, taken=count,
                                      max_event_time=int(ets.max()) if len(ets) else None,
                                      pending=count >= a and a < want, bounded=bounded, now=now,
                                      started=started, policy=self._policy, resumed=admission.resumed)
            if n not in listed and not count:
                state = replace(state, done=True)
            backlog = backlogs[n]
            lag = None if backlog is None or not self.reports_lag else max(0, backlog - count)
            nxt = r.next if r is not None else positions[n]
            after[n] = PartitionOffset(self.range_start(positions[n]), nxt, count, lag, state,
                                       tuple(found[n]))
        if budget is not None:
            self._sizer.admitted(now, taken, budget)
        dead = any(found.values())
        if not taken and not dead and bounded and budget != 0:
            return self._ended(start, now)
        if bounded and budget != 0 and exhausts(backlogs, reads):
            # the epoch admits all that is left: it carries the final watermark itself
            last = make_offset(after, admitted=start["admitted"] + taken, watermark=envelope.MAX_WATERMARK,
                               started=started, at=now, turn=start["turn"] + (1 if taken else 0))
            return dict(last, ended=True)
        watermark = source_watermark(start["watermark"], {n: p.state for n, p in after.items()}, now,
                                     self._policy, resumed=admission.resumed)
        if not taken and not dead and (
            self._available_now or bounded  # a fixed input: no watermark-only epochs
            or not should_tick(start["watermark"], watermark, start["at"], now, self._policy)
        ):
            return start
        return make_offset(after, admitted=start["admitted"] + taken, watermark=watermark, started=started,
                           at=now, turn=start["turn"] + (1 if taken else 0))

    def _ended(self, start: Offset, now: int) -> Offset:
        """A bounded source's last offset: nothing admitted, the maximal watermark, ``ended``."""
        parts = {n: replace(p, first=self.range_start(p.next), taken=0, dead=())
                 for n, p in partitions_of(start).items()}
        return dict(make_offset(parts, admitted=start["admitted"], watermark=envelope.MAX_WATERMARK,
                                started=start["started"], at=now, turn=start["turn"]), ended=True)

    def _unreachable(self, start: Offset, error: Exception) -> Offset:
        """An outage while planning: no new epoch (``start``), until ``unavailable_timeout``.

        The watermark does not advance while the system cannot be asked (an outage is not
        idleness); the planner's read state is reset (:meth:`reset`), since what it read
        for the failed call was not admitted.
        """
        step = self._binding.step
        timeout = getattr(self._binding.source, "unavailable_timeout", None)
        self.reset()
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            warnings.warn(f"{self.kind} {step!r}: unreachable, waiting (up to unavailable_timeout="
                          f"{timeout} ms): {error}", RuntimeWarning, stacklevel=3)
        down_ms = (now - self._down_since) * 1000
        if timeout is not None and down_ms > timeout:
            raise WireError(f"{self.kind} {step!r}: unreachable for {down_ms / 1000:.1f} s, more than "
                            f"unavailable_timeout={timeout} ms; last error: {error}") from error
        return start

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        """Plan the epoch ``(start, end]``: one task per partition that admitted records.

        The first task also emits the epoch's dead letters found while planning, its
        gauges and watermark rows (a task of its own when nothing was admitted; a bounded
        source's last epoch that admitted nothing has only the maximal watermark rows). Called on the
        driver per epoch, also on a replay with offsets from the offset log.
        """
        if start == end:
            return []
        start, end = self.upgrade(start, None), self.upgrade(end, start)
        w0, w1, at = start["watermark"], end["watermark"], end["at"]
        parts = partitions_of(end)
        nothing = end["admitted"] == start["admitted"] and not any(p.dead for p in parts.values())
        if end.get("ended") and nothing:
            return [PartitionTask("", None, None, 0, start["admitted"], w0, w1, at, (), (), True)]
        try:
            reads = plan_reads(start, end)
        except ValueError as e:
            raise WireError(f"{self.kind} {self._binding.step!r}: {e}") from e
        dead = tuple(d for p in parts.values() for d in p.dead)
        control: dict[str, int] = {
            "gauge:watermark": w1,
            "gauge:max_event_time": max((p.state.max_event_time for p in parts.values()
                                         if p.state.max_event_time is not None), default=NO_WATERMARK),
        }
        if dead:
            control[self.refresh_counter] = len(dead)
        for n, p in parts.items():
            control[f"gauge:watermark:{n}"] = p.state.watermark
            if p.lag is not None:
                control[f"gauge:offset_lag:{n}"] = p.lag
        ctl = tuple(sorted(control.items()))
        tasks = []
        for r in reads:
            seq = r.first_seq
            for first, next_, taken in self._pieces(r.first, self.for_read(r.next), r.taken):
                tasks.append(PartitionTask(r.name, first, next_, taken, seq, w0, w1, at,
                                           handoff=self.handoff()))
                seq += taken
        if not tasks:  # nothing admitted: the control task also says so
            ctl = tuple(sorted({**control, "records": 0, "events": 0, "malformed": 0}.items()))
            return [PartitionTask("", None, None, 0, start["admitted"], w0, w1, at, ctl, dead)]
        tasks[0].control, tasks[0].dead = ctl, dead
        return list(tasks)

    def handoff(self) -> str | None:
        """Planner: the directory of what this process decoded for the executors (None: none).

        It becomes the epoch's tasks' :attr:`PartitionTask.handoff`; an executor reading a
        task sees it as :attr:`task_handoff` during :meth:`read_range`. The file source
        hands over its parsed files (:mod:`wire.sources.file_source.parsed_spill`), the Kafka
        source its decoded offset ranges (:mod:`wire.sources.kafka_source.handoff`); the
        directory is a :class:`~wire.sources.base.handoff.HandoffDir`.
        """
        return None

    def _pieces(self, first: Position, next: Position, taken: int) -> list[tuple[Position, Position, int]]:
        """The tasks' parts of one planned range: the range whole, or split (:data:`SPLIT_RECORDS`).

        At most :func:`read_tasks` divided by the source's scans (:attr:`Binding.scans`): a
        branching flow scans the source once per branch, and each of its tasks decodes its
        range's files whole (the executor's parse cache) and keeps its part, so more tasks than
        cores repeat that decoding without adding parallelism (Nexmark q3, two scans on 2 cores:
        steady epochs 614-754 ms with one task per scan against 701-1,006 ms with two).
        """
        pieces = min(max(1, read_tasks() // max(1, self._binding.scans)), taken // SPLIT_RECORDS)
        parts = self.split_range(first, next, taken, pieces) if pieces > 1 else None
        if parts is None:
            return [(first, next, taken)]
        if sum(t for _, _, t in parts) != taken:
            raise WireError(f"{self.kind} {self._binding.step!r}: split_range split {taken} records "
                            f"into parts of {[t for _, _, t in parts]}")
        return parts

    def split_range(
        self, first: Position, next: Position, taken: int, pieces: int
    ) -> list[tuple[Position, Position, int]] | None:
        """Split a planned range into ``pieces`` consecutive parts read by separate tasks.

        ``next`` is what :meth:`for_read` kept of the range's end. Returns ``(first, next,
        taken)`` per part, in record order, each readable by :meth:`read_range`, their
        ``taken`` adding up to ``taken`` (``__seq`` continues from part to part); None: the
        range is read whole (the default: a connector whose reads cannot be cut).
        """
        return None

    def commit(self, end: Offset) -> None:
        """Acknowledge everything up to ``end``; Spark calls it after the epoch committed.

        That is after every sink of the flow committed (contraflow, SPEC §7). An
        acknowledgement refused by a transient error is retried before the next epoch is
        planned; it never fails the flow: the offsets in Spark's checkpoint are what the
        flow resumes from.
        """
        self._acknowledge(self.upgrade(end, None))

    def _acknowledge(self, offset: Offset) -> None:
        try:
            self.acknowledge(positions_of(offset))
        except Exception as e:
            if not self.transient(e):
                raise
            self._unacked = offset
            warnings.warn(f"{self.kind} {self._binding.step!r}: acknowledgement failed, will retry: {e}",
                          RuntimeWarning, stacklevel=2)
            return
        self._unacked = None

    def stop(self) -> None:
        """Close this process's client (the query ends)."""
        self.close()

    # -- executor ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield a task's rows: data rows, dead letters, metrics, then (control task) watermark rows.

        Runs on an executor. Data rows carry ``__et`` (event time), ``__wm`` (the epoch's
        start watermark) and ``__seq`` (arrival order over the source). Events more than
        ``max_future_ms`` ahead of the epoch's recorded processing time are dead letters.
        With a pre-stage (:attr:`Binding.pre_stage`, fusion) these rows go through it, and
        its envelope-only rows are what the task yields.
        """
        if not isinstance(partition, PartitionTask):
            raise TypeError(f"expected a PartitionTask partition, got {type(partition).__name__}")
        stage = self._binding.pre_stage_function()
        rows = self._rows(partition)
        return rows if stage is None else stage(rows)

    def _rows(self, partition: PartitionTask) -> Iterator[pa.RecordBatch]:
        """:meth:`read`'s rows before a pre-stage."""
        b, schema, p = self._binding, self._row_schema, partition
        if p.final:
            yield envelope.watermark_batch(schema, p.end_watermark, range(b.key_groups))
            return
        counters: dict[str, int] = {}
        if p.name:
            self.task_handoff = p.handoff
            r = self.read_range(p.name, p.first, p.next, p.taken)
            valid = r.decoded.table.num_rows
            decoded = r.decoded.reject_future(p.at, b.watermark.max_future_ms, r.records)
            n = decoded.table.num_rows
            if b.predicate is not None:  # the flow's filters, pushed down (wire.compiler.pushdown)
                decoded = decoded.where(b.predicate, exact=b.pre_stage is not None)
            missing = p.taken - r.count
            gone = (self.range_location(p.name, p.first, p.next), f"{missing} {self.gone_reason}", missing)
            yield from decoded.batches(schema, b.step, b.output_schema.names,
                                       start_watermark=p.start_watermark, first_seq=p.first_seq, gone=gone)
            counters.update(records=p.taken, events=n, malformed=p.taken - n)
            if valid > n:
                counters["future"] = valid - n
        if p.dead:
            yield envelope.dead_letter_batch(schema, b.step, list(p.dead))
        if p.control is not None:
            counters.update(dict(p.control))
        if counters:
            yield envelope.side_batch(schema, envelope.METRICS_PORT, envelope.metrics_table(b.step, counters))
        if p.control is not None:
            yield envelope.watermark_batch(schema, p.end_watermark, range(b.key_groups))

