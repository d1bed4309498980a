"""The one base of Wire's live sources: a stream reader over partitions (SPEC §2, §5, §7).

A live connector (Kafka, Redis Streams, HTTP ingest) subclasses :class:`PartitionedReader`
and implements only what is its own:

* :meth:`~PartitionedReader.list_partitions`: the partitions that exist now (Kafka's
  topic-partitions; one stream; one write-ahead log);
* :meth:`~PartitionedReader.initial_positions` / :meth:`~PartitionedReader.start_position`:
  where a fresh query, or a partition found later, starts;
* :meth:`~PartitionedReader.backlog`: how many records wait after a position (None: unknown);
* :meth:`~PartitionedReader.read_from`: read a partition from a position within a budget
  (planner; :meth:`~PartitionedReader.read_many` reads several at once);
* :meth:`~PartitionedReader.read_range`: read exactly a planned range again (executor);
* :meth:`~PartitionedReader.acknowledge`: acknowledge everything up to positions to the
  external system, once the epoch committed (contraflow, SPEC §7).

A position is a JSON value (an int offset, a string id) that only the connector
interprets. The base owns everything else, the same for every connector:

* **admission**: Spark's read limit, the source's ``max_events_per_epoch`` and the epoch
  sizer (:class:`~wire.sources.base.SizedAdmission`), pause and stop from the control file;
  the epoch's budget is split max-min fairly over the partitions by their backlogs
  (:func:`~wire.core.watermarks.fair_split`, the remainder rotating per epoch);
* **the watermark policy** (:mod:`wire.core.watermarks`): per partition, bounded
  out-of-orderness and idleness (a partition whose records wait is never idle); the
  source watermark is the minimum over live partitions that are not idle; events more
  than ``max_future_ms`` ahead of the epoch's processing time are dead letters and do not
  move it; watermark-only epochs at most once per ``watermark_interval``;
* **offsets** (below), which record every partition's range and watermark inputs, so a
  replayed epoch reads the same records and sees the same watermark;
* **the epoch's tasks and rows** (:mod:`wire.core.envelope`): one task per partition
  that admitted records; data rows, dead letters (malformed, future-dated, and one for
  admitted records that are gone when read again), counters and gauges, and one
  watermark row per key group;
* **acknowledgement**: :meth:`commit` acknowledges the epoch's end; the first planning
  in a process acknowledges the last committed offset again (a crash may have come
  between an epoch's commit and its acknowledgement); an acknowledgement refused by a
  transient error is retried before the next epoch is planned;
* **outages**: while planning raises an error the connector calls transient
  (:meth:`~PartitionedReader.transient`), no epoch is planned and the watermark holds,
  for up to the source's ``unavailable_timeout`` (ms; None: forever), then a
  :class:`~wire.errors.WireError` names that parameter.

An offset (Spark's offset log keeps one per epoch) is a JSON dict::

    {"admitted": 1200,            # records admitted so far, over all partitions
     "watermark": 1700000000000,  # the source watermark after the epoch (ms)
     "started": ..., "at": ...,   # wall-clock ms: source start, offset made (None at first)
     "turn": 7,                   # round-robin counter of the admission split
     "partitions": {"orders:0": {"from": 100, "next": 160, "taken": 60, "lag": 240,
                                  ...PartitionState fields...}}}

Per partition, the epoch read ``taken`` records from position ``from`` up to position
``next`` (where the next epoch starts); ``lag`` is the backlog left when the epoch was
planned (None: unknown). The :class:`~wire.core.watermarks.PartitionState` fields hold the
partition's watermark inputs.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, TypeAlias

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from wire.core import envelope
from wire.core.time import NO_WATERMARK
from wire.core.watermarks import PartitionState, advance_partition, fair_split, should_tick, source_watermark
from wire.errors import WireError
from wire.sources.base import Admission, Binding, ClientT, Decoded, LiveReader, Offset, SizedAdmission

Position: TypeAlias = int | str
"""Where a partition is read from: a JSON value only its connector interprets."""

_STATE_FIELDS = {f.name for f in fields(PartitionState)}

UNKNOWN_BACKLOG = 1 << 62
"""The demand of a partition whose backlog is unknown: whatever the budget allows."""


# ------------------------------------------------------------------------- offsets


@dataclass(frozen=True)
class PartitionOffset:
    """One partition in an offset: the epoch's range and the watermark inputs."""

    first: Position
    """Where the epoch's read started (``from``)."""
    next: Position
    """Where the next epoch's read starts: after the last record the epoch admitted."""
    taken: int
    """Records the epoch admitted from the partition."""
    lag: int | None
    """Records still waiting when the epoch was planned (None: unknown)."""
    state: PartitionState

    def to_json(self) -> dict[str, Any]:
        """The offset form (JSON primitives)."""
        return {"from": self.first, "next": self.next, "taken": self.taken, "lag": self.lag,
                **self.state.to_json()}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PartitionOffset:
        """Inverse of :meth:`to_json`; also reads the Kafka source's earlier form (``high``, not ``lag``)."""
        state = PartitionState.from_json({k: v for k, v in d.items() if k in _STATE_FIELDS})
        lag = d.get("lag")
        if "high" in d:  # written by the Kafka source before this base: the end offset seen
            high = int(d["high"])
            lag = None if high < 0 else max(0, high - int(d["next"]))
        return PartitionOffset(d["from"], d["next"], int(d["taken"]), lag, state)

    @staticmethod
    def start_at(position: Position) -> PartitionOffset:
        """A partition before its first epoch, to be read from ``position``."""
        return PartitionOffset(position, position, 0, None, PartitionState())


def make_offset(
    parts: Mapping[str, PartitionOffset], *, admitted: int, watermark: int, started: int | None,
    at: int | None, turn: int,
) -> Offset:
    """An offset dict (module docstring)."""
    return {
        "admitted": admitted,
        "watermark": watermark,
        "started": started,
        "at": at,
        "turn": turn,
        "partitions": {name: p.to_json() for name, p in sorted(parts.items())},
    }


def initial_offset(positions: Mapping[str, Position]) -> Offset:
    """The offset before the first epoch: each partition at its start position."""
    return make_offset({n: PartitionOffset.start_at(p) for n, p in positions.items()},
                       admitted=0, watermark=NO_WATERMARK, started=None, at=None, turn=0)


def partitions_of(offset: Mapping[str, Any]) -> dict[str, PartitionOffset]:
    """The partitions of an offset dict."""
    return {n: PartitionOffset.from_json(d) for n, d in offset["partitions"].items()}


def positions_of(offset: Mapping[str, Any]) -> dict[str, Position]:
    """Per partition, the position that acknowledges everything up to ``offset``."""
    return {name: p.next for name, p in partitions_of(offset).items()}


@dataclass(frozen=True)
class PlannedRead:
    """One partition's records of an epoch: ``taken`` from ``first`` up to ``next``.

    ``first_seq`` is the arrival sequence (``__seq``) of the first: records are numbered
    over the source, partitions in name order per epoch.
    """

    name: str
    first: Position
    next: Position
    taken: int
    first_seq: int


def plan_reads(start: Mapping[str, Any], end: Mapping[str, Any]) -> list[PlannedRead]:
    """The reads of the epoch ``(start, end]``: one per partition that admitted records.

    Raises
    ------
    ValueError
        When the partitions' ``taken`` do not add up to the records the epoch admitted.
    """
    seq = int(start["admitted"])
    reads = []
    for name, p in sorted(partitions_of(end).items()):
        if p.taken:
            reads.append(PlannedRead(name, p.first, p.next, p.taken, seq))
            seq += p.taken
    if seq != int(end["admitted"]):
        raise ValueError(f"the partitions of offset {dict(end)} admitted {seq - int(start['admitted'])} "
                         f"records, the offset says {int(end['admitted']) - int(start['admitted'])}")
    return reads


def upgrade_single(
    offset: Offset, before: Offset | None, name: str, position: Callable[[Offset], Position],
    state: Callable[[Offset], PartitionState],
) -> Offset:
    """An offset a one-partition connector wrote before this base, in this base's form.

    Such an offset holds ``admitted``, ``watermark``, ``started`` and ``at`` as this form
    does; ``position(offset)`` and ``state(offset)`` read its position and its watermark
    inputs. It did not record where its epoch began: that is ``before``'s position (None:
    unknown, the offset is then an epoch's start). An offset already in this form is
    returned as it is.
    """
    if "partitions" in offset:
        return offset
    first = position(offset)
    if before is not None:
        first = positions_of(before)[name] if "partitions" in before else position(before)
    taken = 0 if before is None else offset["admitted"] - before["admitted"]
    part = PartitionOffset(first, position(offset), taken, None, state(offset))
    return make_offset({name: part}, admitted=offset["admitted"], watermark=offset["watermark"],
                       started=offset["started"], at=offset["at"], turn=0)


# -------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Read:
    """What a connector read from one partition.

    ``decoded``: the records as payload rows, their event times and positions (index
    among the records read), and the malformed ones as dead letters; ``count``: records
    read, valid and malformed; ``next``: the position after the last record read (the
    start position when none); ``record(i)``: ``(location, text)`` of the record at index
    ``i``, for the dead letter of a future-dated event.
    """

    decoded: Decoded
    count: int
    next: Position
    record: Callable[[int], tuple[str, str]]


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

    def __post_init__(self) -> None:
        super().__init__(None)


class PartitionedReader(SizedAdmission, LiveReader[ClientT], DataSourceStreamReader):
    """The stream reader of a live, partitioned source (module docstring).

    A connector's reader subclasses it, calls :meth:`_init_live` with its binding, names
    itself in ``kind`` (error messages: ``"kafka source"``) and implements the methods
    that raise ``NotImplementedError`` here.
    """

    kind: ClassVar[str] = "source"
    gone_reason: ClassVar[str] = "admitted records are gone"
    """Why records admitted in an epoch can be missing when it is read again."""
    _transient: ClassVar[dict[str, Any]] = {"_unacked": None, "_caught_up": False, "_down_since": None}
    _binding: Binding
    _unacked: Offset | None
    _caught_up: bool
    _down_since: float | None

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

    def backlog(self, name: str, position: Position) -> int | None:
        """How many records of partition ``name`` wait after ``position`` (None: unknown)."""
        return None

    def read_from(self, name: str, position: Position, budget: int) -> Read:
        """At most ``budget`` (>= 1) records of partition ``name`` after ``position`` (planner)."""
        raise NotImplementedError

    def read_many(self, positions: Mapping[str, Position], budgets: Mapping[str, int]) -> dict[str, Read]:
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
        parts = {n: before.get(n) or PartitionOffset.start_at(self.start_position(n)) for n in names}
        backlogs = {n: self.backlog(n, parts[n].next) for n in names}
        demand = [UNKNOWN_BACKLOG if (k := backlogs[n]) is None else max(0, k) for n in names]
        cap = self._binding.max_events_per_epoch
        first = start["turn"] % len(names) if names else 0
        alloc = [min(a, cap) for a in fair_split(demand, admission.budget, first)]
        budgets = {n: a for n, a in zip(names, alloc, strict=True) if a}
        reads = self.read_many({n: parts[n].next for n in names}, budgets) if budgets else {}
        now, started = self._clock(), admission.started
        after: dict[str, PartitionOffset] = {}
        taken = 0
        for n, want, a in zip(names, demand, alloc, strict=True):
            p, r = parts[n], reads.get(n)
            count = r.count if r is not None else 0
            taken += count
            max_et = None
            if r is not None and count:
                max_et = r.decoded.reject_future(now, self._binding.max_future_ms, r.record).max_event_time
            state = advance_partition(p.state, file="", record=0, taken=count, max_event_time=max_et,
                                      pending=count >= a and a < want, bounded=False, now=now,
                                      started=started, policy=self._policy)
            if n not in listed and not count:
                state = replace(state, done=True)
            backlog = backlogs[n]
            lag = None if backlog is None else max(0, backlog - count)
            after[n] = PartitionOffset(p.next, r.next if r is not None else p.next, count, lag, state)
        if admission.budget is not None:
            self._sizer.admitted(now, taken, admission.budget)
        watermark = source_watermark(start["watermark"], {n: p.state for n, p in after.items()}, now,
                                     self._policy)
        if not taken and not should_tick(start["watermark"], watermark, start["at"], now, self._policy):
            return start
        return make_offset(after, admitted=start["admitted"] + taken, watermark=watermark, started=started,
                           at=now, turn=start["turn"] + (1 if taken else 0))

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

        The first task also emits the epoch's gauges and watermark rows (a task of its
        own when nothing was admitted). Called on the driver per epoch, also on a replay
        with offsets from the offset log.
        """
        if start == end:
            return []
        start, end = self.upgrade(start, None), self.upgrade(end, start)
        try:
            reads = plan_reads(start, end)
        except ValueError as e:
            raise WireError(f"{self.kind} {self._binding.step!r}: {e}") from e
        w0, w1, at = start["watermark"], end["watermark"], end["at"]
        parts = partitions_of(end)
        control: dict[str, int] = {
            "gauge:watermark": w1,
            "gauge:max_event_time": max((p.state.max_event_time for p in parts.values()
                                         if p.state.max_event_time is not None), default=NO_WATERMARK),
        }
        for n, p in parts.items():
            control[f"gauge:watermark:{n}"] = p.state.watermark
            if p.lag is not None:
                control[f"gauge:offset_lag:{n}"] = p.lag
        ctl = tuple(sorted(control.items()))
        tasks = [PartitionTask(r.name, r.first, r.next, r.taken, r.first_seq, w0, w1, at) for r in reads]
        if not tasks:
            return [PartitionTask("", 0, 0, 0, start["admitted"], w0, w1, at, ctl)]
        tasks[0].control = ctl
        return list(tasks)

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
        """
        if not isinstance(partition, PartitionTask):
            raise TypeError(f"expected a PartitionTask partition, got {type(partition).__name__}")
        b, schema, p = self._binding, self._row_schema, partition
        counters: dict[str, int] = {}
        if p.name:
            r = self.read_range(p.name, p.first, p.next, p.taken)
            valid = r.decoded.table.num_rows
            decoded = r.decoded.reject_future(p.at, b.max_future_ms, r.record)
            n = decoded.table.num_rows
            missing = p.taken - r.count
            gone = (self.range_location(p.name, p.first, p.next), f"{missing} {self.gone_reason}", missing)
            yield from decoded.batches(schema, b.step, b.output_schema.names,
                                       start_watermark=p.start_watermark, first_seq=p.first_seq, gone=gone)
            counters.update(records=p.taken, events=n, malformed=p.taken - n)
            if valid > n:
                counters["future"] = valid - n
        if p.control is not None:
            counters.update(dict(p.control))
        if counters:
            yield envelope.side_batch(schema, envelope.METRICS_PORT, envelope.metrics_table(b.step, counters))
        if p.control is not None:
            yield envelope.watermark_batch(schema, p.end_watermark, range(b.key_groups))

