"""The one source base (wire.sources.base.partitioned and .offsets), against an in-memory connector.

The connector below implements only what a connector implements (list partitions, read a
partition from a position within a budget, read a planned range again, acknowledge); the
expectations are derived by hand or from the input itself (every record once, the
watermark as the minimum over partitions of their max event time minus the delay).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxRows

from wire.core import envelope
from wire.core.time import NO_WATERMARK
from wire.core.watermarks import PartitionState, WatermarkPolicy
from wire.errors import WireError
from wire.sources.base.offsets import (
    PartitionOffset,
    Position,
    initial_offset,
    make_offset,
    partitions_of,
    plan_reads,
    positions_of,
)
from wire.sources.base.partitioned import Admitted, PartitionedReader, Read
from wire.sources.base.source import Binding, Decoded

SCHEMA = pa.schema([("t", pa.int64())])


@dataclass(frozen=True)
class MemorySource:
    """Partitions of records; a record is an event time (ms) or None (malformed)."""

    idle_timeout: int | None = None
    watermark_interval: int = 0
    unavailable_timeout: int | None = None
    bounded: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemorySource:
        return cls(**d)


@dataclass(frozen=True)
class MemoryBinding(Binding):
    source_class: ClassVar[type] = MemorySource
    source: MemorySource


class Down(Exception):
    """The memory system is unreachable."""


class MemoryReader(PartitionedReader[Any]):
    kind = "memory source"

    def __init__(self, data: dict[str, list[int | None]], *, budget: int = 1000, delay: int = 0,
                 clock: Any = None, unavailable_timeout: int | None = None, bounded: bool = False) -> None:
        src = MemorySource(unavailable_timeout=unavailable_timeout, bounded=bounded)
        self._init_live(MemoryBinding("mem", src, SCHEMA, "t", WatermarkPolicy(delay), budget, 2),
                        clock or (lambda: 1_000))
        self.data = data
        self.acked: dict[str, Position] = {}
        self.down = False

    def list_partitions(self) -> list[str]:
        self._check()
        return sorted(self.data)

    def initial_positions(self) -> dict[str, Position]:
        return dict.fromkeys(self.data, 0)

    def start_position(self, name: str) -> Position:
        return 0

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        return len(self.data.get(name, [])) - int(position)

    def read_from(self, name: str, position: Position, budget: int) -> Admitted:
        pos = int(position)
        return self.read_range(name, pos, pos + budget, budget).admitted()

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        lo = int(first)
        recs = self.data.get(name, [])[lo:int(next)]
        ok = [i for i, t in enumerate(recs) if t is not None]
        dead = [(f"{name}:{lo + i}", "malformed", "?") for i, t in enumerate(recs) if t is None]
        table = pa.table({"t": pa.array([recs[i] for i in ok], pa.int64())})
        decoded = Decoded(table, np.array([recs[i] for i in ok], np.int64), np.array(ok, np.int64), dead)
        return Read(decoded, len(recs), lo + len(recs),
                    lambda ps: [(f"{name}:{lo + i}", str(recs[i])) for i in ps])

    def acknowledge(self, positions: Mapping[str, Position]) -> None:
        self._check()
        self.acked = dict(positions)

    def transient(self, error: Exception) -> bool:
        return isinstance(error, Down)

    def _check(self) -> None:
        if self.down:
            raise Down("memory down")


def epoch_rows(reader: MemoryReader, start, end):
    """An epoch read like the executors do: data rows, dead letters, metrics, watermark rows."""
    data, dead, metrics, marks = [], [], {}, []
    for task in reader.partitions(start, end):
        for batch in reader.read(task):
            for row in pa.Table.from_batches([batch]).to_pylist():
                if row["__kind"] == envelope.KIND_DATA:
                    data.append((row["t"], row["__seq"], row["__wm"]))
                elif row["__kind"] == envelope.KIND_SIDE:
                    side = envelope.decode_table(row["__blob"]).to_pylist()
                    if row["__port"] == envelope.METRICS_PORT:
                        for m in side:
                            metrics[m["name"]] = metrics.get(m["name"], 0) + m["value"]
                    else:
                        dead += [(d["location"], d["reason"]) for d in side]
                else:
                    marks.append((row["__kg"], row["__wm"]))
    return data, dead, metrics, marks


def test_offsets_record_ranges_and_plan_reads_in_name_order():
    start = initial_offset({"t:0": 5, "t:1": 0})
    s = PartitionState(admitted=4, max_event_time=100, watermark=90)
    end = make_offset({"t:0": PartitionOffset(5, 9, 4, 11, s),
                       "t:1": PartitionOffset(0, 0, 0, 0, PartitionState()),
                       "t:2": PartitionOffset("0-0", "3-0", 2, None, PartitionState())},
                      admitted=6, watermark=90, started=1, at=2, turn=1)
    assert json.loads(json.dumps(end)) == end
    reads = plan_reads(start, end)
    assert [(r.name, r.first, r.next, r.taken, r.first_seq) for r in reads] == [
        ("t:0", 5, 9, 4, 0), ("t:2", "0-0", "3-0", 2, 4)]
    assert positions_of(end) == {"t:0": 9, "t:1": 0, "t:2": "3-0"}
    assert partitions_of(end)["t:0"].lag == 11 and partitions_of(end)["t:2"].lag is None
    with pytest.raises(ValueError, match="admitted"):
        plan_reads(start, dict(end, admitted=7))


def test_a_hand_derived_transcript():
    """Two partitions, budget 3, delay 10: the split, the watermark, the rows of each epoch."""
    r = MemoryReader({"a": [100, None, 130, 140], "b": [50]}, budget=3, delay=10)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    # demands 4 and 1, budget 3: max-min fair gives b its 1 and a the other 2
    assert {n: (p.first, p.next, p.taken) for n, p in partitions_of(o1).items()} == {
        "a": (0, 2, 2), "b": (0, 1, 1)}
    assert o1["watermark"] == min(100 - 10, 50 - 10) == 40
    data, dead, metrics, marks = epoch_rows(r, o0, o1)
    # __seq numbers the admitted records partition by partition: a's two, then b's one
    assert data == [(100, 0, NO_WATERMARK), (50, 2, NO_WATERMARK)]
    assert dead == [("a:1", "malformed")]
    assert (metrics["records"], metrics["events"], metrics["malformed"]) == (3, 2, 1)
    assert metrics["gauge:watermark"] == 40 and metrics["gauge:offset_lag:a"] == 2
    assert marks == [(0, 40), (1, 40)]
    r.commit(o1)
    assert r.acked == {"a": 2, "b": 1}
    o2 = r.latestOffset(o1, r.getDefaultReadLimit())
    assert partitions_of(o2)["a"].taken == 2 and partitions_of(o2)["b"].taken == 0
    assert o2["watermark"] == 40  # b (max 50) holds the source watermark: it is not idle
    data, *_ = epoch_rows(r, o1, o2)
    assert data == [(130, 3, 40), (140, 4, 40)]
    assert r.latestOffset(o2, r.getDefaultReadLimit()) == o2  # nothing new: no epoch


def test_a_partition_found_later_starts_at_its_start_position_and_a_gone_one_is_done():
    r = MemoryReader({"a": [10]})
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    r.data = {"b": [5, 7]}  # a is gone, b is new
    o2 = r.latestOffset(o1, r.getDefaultReadLimit())
    parts = partitions_of(o2)
    assert parts["a"].state.done and (parts["b"].first, parts["b"].next) == (0, 2)
    assert o2["watermark"] == 10  # b's max 7 is behind a's 10; the watermark never goes back


def test_records_gone_when_read_again_are_one_dead_letter():
    r = MemoryReader({"a": [1, 2, 3]})
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    r.data["a"] = [1]  # deleted before the epoch's replay
    data, dead, metrics, _ = epoch_rows(r, o0, o1)
    assert data == [(1, 0, NO_WATERMARK)]
    assert dead == [("a:(0, 3]", "2 admitted records are gone")]
    assert (metrics["records"], metrics["events"], metrics["malformed"]) == (3, 1, 2)


def test_max_future_events_are_dead_letters_judged_at_the_offsets_time():
    clock = [1_000]
    r = MemoryReader({"a": [900, 5_000, 950]}, clock=lambda: clock[0])
    r._binding = MemoryBinding("mem", r._binding.source, SCHEMA, "t", WatermarkPolicy(0,
                               max_future_ms=100), 10, 2)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    assert o1["watermark"] == 950  # the 5_000 event does not move it
    clock[0] = 10_000  # a replay much later judges by the offset's `at`, not by now
    data, dead, metrics, _ = epoch_rows(r, o0, o1)
    assert [t for t, _, _ in data] == [900, 950]
    assert [loc for loc, _ in dead] == ["a:1"] and metrics["future"] == 1


def test_outage_holds_the_watermark_then_fails_naming_unavailable_timeout():
    r = MemoryReader({"a": [10]}, unavailable_timeout=0)
    o0 = r.initialOffset()
    r.down = True
    with pytest.warns(RuntimeWarning) as said:
        assert r.latestOffset(o0, r.getDefaultReadLimit()) == o0
    assert any("memory source 'mem': unreachable, waiting" in str(w.message) for w in said)
    import time

    time.sleep(0.01)
    with pytest.warns(RuntimeWarning), pytest.raises(WireError, match="unavailable_timeout=0 ms"):
        r.latestOffset(o0, r.getDefaultReadLimit())  # (the acknowledgement is retried, and warns)


def test_a_refused_acknowledgement_is_retried_before_the_next_epoch():
    r = MemoryReader({"a": [10, 20]}, budget=1)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    r.down = True
    with pytest.warns(RuntimeWarning, match="acknowledgement failed"):
        r.commit(o1)
    r.down = False
    r.latestOffset(o1, r.getDefaultReadLimit())
    assert r.acked == {"a": 1}


partitions = st.dictionaries(
    st.sampled_from(["p0", "p1", "p2"]),
    st.lists(st.one_of(st.none(), st.integers(0, 10_000)), max_size=12),
    min_size=1,
)


@settings(max_examples=120, deadline=None)
@given(partitions, st.lists(st.integers(1, 7), min_size=1, max_size=30), st.integers(0, 50))
def test_every_record_once_and_the_watermark_for_every_epoch_split(data, limits, delay):
    """For any partitions and any sequence of read limits (epoch splits):

    * every valid record comes out once as data, every malformed one once as a dead letter;
    * ``__seq`` numbers all admitted records 0..n-1, each once;
    * an epoch admits ``min(limit, records left)`` (the split is work-conserving);
    * the watermark never goes back, and ends at min over partitions of (max valid event
      time - delay), NO_WATERMARK for a partition without one (none is idle);
    * replaying an epoch gives the same rows.
    """
    r = MemoryReader(data, delay=delay)
    offset = r.initialOffset()
    rows, dead, seqs, marks = [], [], [], []
    left = sum(len(v) for v in data.values())
    for i in range(200):
        limit = limits[i % len(limits)]
        end = r.latestOffset(offset, ReadMaxRows(limit))
        if end == offset:
            break
        assert end["admitted"] - offset["admitted"] == min(limit, left)
        left -= end["admitted"] - offset["admitted"]
        once = epoch_rows(r, offset, end)
        assert epoch_rows(r, offset, end) == once  # a replay reads the same rows
        rows += [t for t, _, _ in once[0]]
        seqs += [s for _, s, _ in once[0]]
        dead += [loc for loc, _ in once[1]]
        marks.append(end["watermark"])
        r.commit(end)
        offset = end
    assert left == 0
    assert sorted(rows) == sorted(t for v in data.values() for t in v if t is not None)
    assert sorted(dead) == sorted(f"{n}:{i}" for n, v in data.items() for i, t in enumerate(v) if t is None)
    assert len(set(seqs)) == len(seqs) and set(seqs) <= set(range(offset["admitted"]))
    assert marks == sorted(marks)
    per_partition = [max((t for t in v if t is not None), default=None) for v in data.values()]
    expected = min(NO_WATERMARK if m is None else m - delay for m in per_partition)
    assert offset["watermark"] == max(expected, NO_WATERMARK)
    assert r.acked == {n: len(v) for n, v in data.items()} or not offset["admitted"]


@settings(max_examples=120, deadline=None)
@given(partitions, st.lists(st.integers(1, 7), min_size=1, max_size=30), st.integers(0, 50))
def test_a_bounded_source_ends_with_its_last_records_for_every_epoch_split(data, limits, delay):
    """For any partitions and epoch splits of a bounded source whose backlog is known:

    * every valid record comes out once, every malformed one once as a dead letter;
    * exactly the last epoch says ``ended``, with the maximal watermark; it is the epoch that
      admitted the last records (an empty epoch only for an input of no records);
    * its data rows carry the watermark the epoch started with, its watermark rows the maximal one;
    * replaying it gives the same rows, and nothing is planned after it.
    """
    r = MemoryReader(data, delay=delay, bounded=True)
    offset = r.initialOffset()
    rows, dead, epochs = [], [], []
    for i in range(200):
        end = r.latestOffset(offset, ReadMaxRows(limits[i % len(limits)]))
        if end == offset:
            break
        once = epoch_rows(r, offset, end)
        assert epoch_rows(r, offset, end) == once
        rows += [t for t, _, _ in once[0]]
        dead += [loc for loc, _ in once[1]]
        assert all(wm == offset["watermark"] for _, _, wm in once[0])
        epochs.append((offset, end, once))
        r.commit(end)
        offset = end
    total = sum(len(v) for v in data.values())
    assert sorted(rows) == sorted(t for v in data.values() for t in v if t is not None)
    assert len(dead) == sum(t is None for v in data.values() for t in v)
    assert [e["ended"] for _, e, _ in epochs] == [False] * (len(epochs) - 1) + [True]
    first, last, (_, _, _, marks) = epochs[-1]
    assert last["watermark"] == envelope.MAX_WATERMARK and last["admitted"] == total
    assert (last["admitted"] > first["admitted"]) == (total > 0)  # no empty epoch after the last records
    assert marks == [(kg, envelope.MAX_WATERMARK) for kg in range(2)]
    assert all(e["watermark"] < envelope.MAX_WATERMARK for _, e, _ in epochs[:-1])
    assert r.latestOffset(last, ReadMaxRows(7)) == last


def test_a_kafka_partition_entry_an_earlier_wire_wrote_is_read():
    """The Kafka source recorded the end offset seen (``high``), not the lag."""
    d = {"from": 5, "next": 9, "taken": 4, "high": 20, **PartitionState(max_event_time=7).to_json()}
    p = PartitionOffset.from_json(d)
    assert (p.first, p.next, p.taken, p.lag, p.state.max_event_time) == (5, 9, 4, 11, 7)
    assert PartitionOffset.from_json(dict(d, high=-1)).lag is None


def test_a_bounded_source_ends_with_the_epoch_that_admits_its_last_records():
    r = MemoryReader({"a": [10, 20], "b": [5]}, budget=2, delay=1, bounded=True)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())  # a: 10, b: 5; W = min(10 - 1, 5 - 1)
    assert (o1["admitted"], o1["watermark"], o1["ended"]) == (2, 4, False)
    end = r.latestOffset(o1, r.getDefaultReadLimit())  # a: 20, the last record: its epoch ends the source
    assert end["ended"] and end["watermark"] == envelope.MAX_WATERMARK and end["admitted"] == 3
    assert {n: p.taken for n, p in partitions_of(end).items()} == {"a": 1, "b": 0}
    data, dead, metrics, marks = epoch_rows(r, o1, end)
    assert data == [(20, 2, 4)] and dead == []  # judged against the watermark the epoch starts with
    assert (metrics["records"], metrics["gauge:watermark"]) == (1, envelope.MAX_WATERMARK)
    assert marks == [(0, envelope.MAX_WATERMARK), (1, envelope.MAX_WATERMARK)]  # after the data
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end  # ended: no epoch after it


class UncountedReader(MemoryReader):
    """A connector that cannot count its backlog (e.g. a stream that only says whether more waits)."""

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        return None


def test_a_bounded_source_of_unknown_backlog_ends_with_an_empty_epoch_of_the_maximal_watermark():
    r = UncountedReader({"a": [10, 20], "b": [5]}, budget=2, delay=1, bounded=True)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    o2 = r.latestOffset(o1, r.getDefaultReadLimit())
    assert (o1["admitted"], o2["admitted"]) == (2, 3) and not o2["ended"]
    end = r.latestOffset(o2, r.getDefaultReadLimit())
    assert end["ended"] and end["watermark"] == envelope.MAX_WATERMARK and end["admitted"] == 3
    assert all(p.taken == 0 for p in partitions_of(end).values())
    data, dead, metrics, marks = epoch_rows(r, o2, end)
    assert (data, dead, metrics) == ([], [], {})  # the last epoch: only the maximal watermark rows
    assert marks == [(0, envelope.MAX_WATERMARK), (1, envelope.MAX_WATERMARK)]
    assert r.latestOffset(end, r.getDefaultReadLimit()) == end  # ended: no epoch after it


class RefreshingReader(MemoryReader):
    """A connector that finds one problem with partition ``a`` at its first planning."""

    refresh_counter = "problems"

    def refresh(self, name, position):
        if name == "a" and not getattr(self, "reported", False):
            self.reported = True
            return position, [("a", "a problem found while planning", "{}")]
        return position, []


def test_dead_letters_found_while_planning_are_recorded_and_replayed():
    r = RefreshingReader({"a": []})
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    assert o1 != o0 and o1["admitted"] == 0  # an epoch for the dead letter alone
    assert partitions_of(o1)["a"].dead == (("a", "a problem found while planning", "{}"),)
    for _ in range(2):  # a replay reports it again, from the offset
        data, dead, metrics, _ = epoch_rows(r, o0, o1)
        assert data == [] and dead == [("a", "a problem found while planning")]
        assert (metrics["problems"], metrics["records"]) == (1, 0)
    assert r.latestOffset(o1, r.getDefaultReadLimit()) == o1  # found once


class ColdReader(MemoryReader):
    """A reader whose first reads after a (re)start come back empty, like a Kafka consumer
    whose first fetch has not arrived yet, while the records are there (backlog)."""

    def __init__(self, data, *, clock, idle_timeout: int) -> None:
        super().__init__(data, budget=2, delay=10, clock=clock)
        self._binding = MemoryBinding("mem", MemorySource(idle_timeout=idle_timeout), SCHEMA, "t",
                                      WatermarkPolicy(10), 2, 2)
        self._init_live(self._binding, clock)
        self.cold = False

    def read_from(self, name: str, position: Position, budget: int) -> Admitted:
        return super().read_from(name, position, 0 if self.cold else budget)


def test_a_restart_does_not_count_the_downtime_as_idleness():
    """Hand-derived: idle_timeout 2 s, delay 10. The flow is down for 60 s after epoch 1; the
    restarted planner's first reads come back empty. Silence before the restart is not
    idleness (SPEC §2: a partition *silent* for idle_timeout), so the watermark stays at 90
    and the backlog that waited is on time; only 2 s after the restart, still without a
    record, do the partitions go idle, and the watermark extrapolates from the restart."""
    data = {"a": [100, 200, 5_000], "b": [150, 250, 5_100]}
    now = [1_000]
    r1 = ColdReader(data, clock=lambda: now[0], idle_timeout=2_000)
    o1 = r1.latestOffset(r1.initialOffset(), r1.getDefaultReadLimit())
    assert o1["watermark"] == min(100, 150) - 10 == 90
    now[0] = 61_000  # killed at 1 s, the new process plans at 61 s
    r2 = ColdReader(data, clock=lambda: now[0], idle_timeout=2_000)
    r2.cold = True
    assert r2.latestOffset(o1, r2.getDefaultReadLimit()) == o1  # no jump, so no epoch
    now[0] = 62_500
    assert r2.latestOffset(o1, r2.getDefaultReadLimit()) == o1  # 1.5 s since the restart
    r2.cold = False
    o2 = r2.latestOffset(o1, r2.getDefaultReadLimit())
    assert o2["watermark"] == min(200, 250) - 10 == 190  # the waiting records are on time
    r3 = ColdReader(data, clock=lambda: now[0], idle_timeout=2_000)
    r3.cold = True
    now[0] = 70_000  # restarted again at 70 s, silent until 73 s
    assert r3.latestOffset(o2, r3.getDefaultReadLimit()) == o2
    now[0] = 73_000
    o3 = r3.latestOffset(o2, r3.getDefaultReadLimit())
    # every partition idle since 70 s + 2 s; the largest partition watermark (b: 240) moves on
    assert o3["watermark"] == 240 + (73_000 - 70_000 - 2_000) == 1_240


@given(down=st.integers(0, 10**7), wait=st.integers(0, 10_000), timeout=st.integers(1, 5_000))
@settings(max_examples=200, deadline=None)
def test_after_any_downtime_the_watermark_moves_only_by_silence_after_the_restart(down, wait, timeout):
    """For every downtime, idle timeout and silence after the restart: the watermark after
    the restart is the old one, plus (silence - timeout) once the silence passes the timeout."""
    data = {"a": [100, 200], "b": [150, 250]}
    now = [1_000]
    r1 = ColdReader(data, clock=lambda: now[0], idle_timeout=timeout)
    o1 = r1.latestOffset(r1.initialOffset(), r1.getDefaultReadLimit())
    now[0] = 1_000 + down
    r2 = ColdReader(data, clock=lambda: now[0], idle_timeout=timeout)
    r2.cold = True
    r2.latestOffset(o1, r2.getDefaultReadLimit())  # the restarted planner's first planning
    now[0] += wait
    o2 = r2.latestOffset(o1, r2.getDefaultReadLimit())
    want = 140 + (wait - timeout) if wait > timeout else 90  # idle only after `timeout` ms of silence
    assert o2["watermark"] == want
