"""Epoch sizing from a target epoch duration: the rule, a file source driven by a fake clock.

Expected sizes are derived by hand from the rule in ``wire.sources.base.epoch_sizing``:
a full epoch that took ``d`` ms changes the size by ``clamp(target / d, 0.25, 2)``,
bounded to [min(1000, max), max]; the first full epoch of a process is not measured.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxRows

import wire
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError
from wire.sources.base.epoch_sizing import MAX_FACTOR, MIN_EVENTS, MIN_FACTOR, EpochSizer
from wire.sources.file_source.source import SourceBinding, WireFileStreamReader, files


def run(sizer: EpochSizer, epochs: list[tuple[int, int]]) -> list[int]:
    """Drive ``sizer``: each epoch is (available events, duration ms); return the budgets."""
    now, budgets = 0, []
    for available, took in epochs:
        budget = sizer.budget(now)
        budgets.append(budget)
        sizer.admitted(now, min(available, budget), budget)
        now += took
    return budgets


def test_off_admits_the_maximum_whatever_the_durations():
    assert run(EpochSizer(5_000, None), [(10**6, 60_000)] * 4) == [5_000] * 4


def test_slow_full_epochs_shrink_by_at_most_a_quarter_down_to_the_floor():
    # target 2 s; every epoch takes 16 s: factor 2/16 = 0.125, bounded to 0.25.
    # 1st budget 100k; its epoch is the start-up epoch (not measured): 100k again;
    # then 25k, 6,250, 1,562 (round half to even), then the floor 1,000.
    budgets = run(EpochSizer(100_000, 2_000), [(10**7, 16_000)] * 7)
    assert budgets == [100_000, 100_000, 25_000, 6_250, 1_562, 1_000, 1_000]


def test_a_size_tracks_the_target_and_grows_back_at_most_twice_per_epoch():
    # 40k events: 4 s (factor 0.5 -> 20k), then fast epochs of 0.5 s (factor 4 -> 2).
    sizer = EpochSizer(100_000, 2_000)
    budgets = run(sizer, [(10**7, 9_000), (10**7, 4_000), (10**7, 500), (10**7, 500),
                          (10**7, 500), (10**7, 500)])
    assert budgets == [100_000, 100_000, 50_000, 100_000, 100_000, 100_000]
    sizer = EpochSizer(100_000, 2_000)
    budgets = run(sizer, [(10**7, 9_000), (10**7, 16_000), (10**7, 16_000), (10**7, 1_000),
                          (10**7, 1_000)])
    # 100k (start-up), 100k -> 16 s: 25k -> 16 s: 6,250 -> 1 s: x2 = 12,500
    assert budgets == [100_000, 100_000, 25_000, 6_250, 12_500]


def test_epochs_that_take_everything_available_do_not_change_the_size():
    # 10 events available per epoch, each epoch 60 s: not full, so nothing is measured.
    assert run(EpochSizer(5_000, 1_000), [(10, 60_000)] * 5) == [5_000] * 5


def test_a_maximum_below_the_floor_is_a_fixed_size():
    assert run(EpochSizer(20, 1), [(10**6, 5_000)] * 5) == [20] * 5


@settings(max_examples=200, deadline=None)
@given(
    max_events=st.integers(1, 2_000_000),
    target=st.integers(1, 60_000),
    epochs=st.lists(st.tuples(st.integers(0, 3_000_000), st.integers(0, 120_000)), max_size=30),
)
def test_budgets_stay_in_bounds_and_change_by_bounded_factors(max_events, target, epochs):
    budgets = run(EpochSizer(max_events, target), epochs)
    floor = min(MIN_EVENTS, max_events)
    assert all(floor <= b <= max_events for b in budgets)
    if budgets:
        assert budgets[0] == max_events
    for (avail, _), prev, nxt in zip(epochs, budgets, budgets[1:], strict=False):
        if avail < prev:  # not full: no change
            assert nxt == prev
        else:
            assert prev * MIN_FACTOR - 1 <= nxt <= prev * MAX_FACTOR + 1


# ------------------------------------------------------------------ the file source

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_file_source_sizes_its_epochs_from_the_time_between_plans(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("id,ts\n" + "".join(f"{i},{i}\n" for i in range(20_000)))
    b = SourceBinding("src", files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA),
                      SCHEMA, "ts", WatermarkPolicy(0), 8_000, 1, target_epoch_ms=1_000)
    clock = Clock()
    r = WireFileStreamReader(b, clock=clock)
    limit = r.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 8_000
    offset, admitted = r.initialOffset(), []
    for took in (30_000, 8_000, 500, 500, 500):  # start-up epoch, a slow one, fast ones
        end = r.latestOffset(offset, limit)
        admitted.append(end["admitted"] - offset["admitted"])
        offset = end
        clock.now += took
    # 8,000 (start-up, not measured), 8,000 (took 8 s: x0.25 -> 2,000), 2,000 (0.5 s:
    # x2 -> 4,000) of which only 2,000 are left, then nothing: all 20,000 admitted
    assert admitted == [8_000, 8_000, 2_000, 2_000, 0]


def test_a_replanned_epoch_after_a_restart_admits_what_its_offset_says(tmp_path):
    """The budget only shapes new epochs: ``partitions`` plans from the logged offsets."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("id,ts\n" + "".join(f"{i},{i}\n" for i in range(5_000)))
    src = files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA)
    b = SourceBinding("src", src, SCHEMA, "ts", WatermarkPolicy(0), 4_000, 1, target_epoch_ms=1)
    first = WireFileStreamReader(b, clock=Clock())
    start = first.initialOffset()
    end = first.latestOffset(start, first.getDefaultReadLimit())
    again = WireFileStreamReader(b, clock=Clock())  # a new planner process
    parts = again.partitions(start, end)
    records = sum(hi - lo for p in parts for (_, lo, hi) in p.next["segments"])
    assert records == 4_000 == end["admitted"]


def test_target_epoch_duration_is_checked_when_the_flow_is_built(tmp_path):
    flow = wire.Flow("f")
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    with pytest.raises(ConfigError, match="target_epoch_duration"):
        flow.source(src, event_time="ts", target_epoch_duration=0)
    with pytest.raises(ConfigError, match="target_epoch_duration"):
        flow.source(src, event_time="ts", target_epoch_duration="fast")
    flow.source(src, event_time="ts", target_epoch_duration="2s", name="ok")
    assert flow.plan().node("ok").target_epoch_ms == 2_000
