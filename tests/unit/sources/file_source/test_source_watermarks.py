"""Partitioned file sources: per-partition watermarks, idleness, budget split, replay.

The reader is driven directly with a fake processing-time clock; every expected value
below is derived by hand from the rules in ``wire.core.watermarks``.
"""

from __future__ import annotations

import doctest
import json

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

import wire.core.watermarks as watermarks
import wire.sources.file_source.formats as file_readers
import wire.sources.file_source.reader as file_stream
from wire.core import envelope
from wire.core.watermarks import (
    PartitionState,
    WatermarkPolicy,
    fair_split,
    is_idle,
    source_watermark,
)
from wire.errors import ConfigError, WireError
from wire.sources.file_source.source import (
    NO_WATERMARK,
    FileSource,
    SourceBinding,
    WireFileStreamReader,
    files,
)

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
MAX = envelope.MAX_WATERMARK


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def put(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id,ts\n" + "".join(f"{i},{ts}\n" for i, ts in rows))


def reader_for(source, clock, *, delay=0, per_epoch=4, key_groups=1):
    b = SourceBinding("src", source, SCHEMA, "ts", WatermarkPolicy(delay), per_epoch, key_groups)
    return WireFileStreamReader(b, clock=clock)


def decode(batches):
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    data = [r for r in rows if r["__kind"] == envelope.KIND_DATA]
    marks = [r["__wm"] for r in rows if r["__kind"] == envelope.KIND_WATERMARK]
    sides = {}
    for r in rows:
        if r["__kind"] == envelope.KIND_SIDE:
            sides.setdefault(r["__port"], []).extend(envelope.decode_table(r["__blob"]).to_pylist())
    metrics: dict[str, int] = {}
    for m in sides.get(envelope.METRICS_PORT, []):  # counters add up over an epoch's tasks; gauges once
        gauge = m["name"].startswith("gauge:")
        metrics[m["name"]] = m["value"] if gauge else metrics.get(m["name"], 0) + m["value"]
    return {"data": data, "marks": marks, "metrics": metrics, "batches": batches}


def step(reader, start, limit=None):
    """One latestOffset call; returns (end, decoded epoch) or (start, None) if no epoch."""
    end = reader.latestOffset(start, limit or ReadMaxRows(reader._binding.max_events_per_epoch))
    if end == start:
        return start, None
    json.dumps(end)
    return end, decode([b for p in reader.partitions(start, end) for b in reader.read(p)])


def drain(reader, limit=None):
    start, epochs = reader.initialOffset(), []
    while True:
        end, out = step(reader, start, limit)
        if out is None:
            return epochs
        epochs.append((start, end, out))
        start = end


def part_wms(offset):
    return {n: p["watermark"] for n, p in offset["partitions"].items()}


# ------------------------------------------------------------------------- pure rules


def test_fair_split_shares_the_budget_and_rotates_the_remainder():
    assert fair_split([10, 1, 10], 9) == [4, 1, 4]  # the 1 left unused goes to the others
    assert fair_split([2, 0, 4], 3, first=1) == [1, 0, 2]  # remainder: c before a
    assert fair_split([2, 0, 4], 3, first=0) == [2, 0, 1]
    assert fair_split([5, 5, 5], 2, first=1) == [0, 1, 1]
    assert fair_split([5, 5, 5], 2, first=2) == [1, 0, 1]
    assert fair_split([0, 3, 0], 5) == [0, 3, 0]
    assert fair_split([7, 8], None) == [7, 8]
    assert fair_split([3, 3], 0) == [0, 0]
    assert fair_split([], 4) == []


def test_watermarks_docstring_examples_run():
    result = doctest.testmod(watermarks)
    assert result.attempted >= 2 and result.failed == 0


def test_is_idle_rules():
    kw = {"started": 100, "idle_timeout_ms": 50}
    assert not is_idle(pending=False, last_arrival=None, now=150, **kw)  # 150 - started = 50: not > 50
    assert is_idle(pending=False, last_arrival=None, now=151, **kw)
    assert not is_idle(pending=True, last_arrival=0, now=10_000, **kw)  # records waiting: never idle
    assert not is_idle(pending=False, last_arrival=140, now=190, **kw)
    assert is_idle(pending=False, last_arrival=140, now=191, **kw)
    assert not is_idle(pending=False, last_arrival=0, now=10**9, started=0, idle_timeout_ms=None)


def test_source_watermark_min_over_active_and_idle_extrapolation():
    policy = WatermarkPolicy(max_delay_ms=0, idle_timeout_ms=1000)
    a = PartitionState(watermark=5000, last_arrival=0)
    b = PartitionState(watermark=3000, last_arrival=200)
    assert source_watermark(NO_WATERMARK, {"a": a, "b": b}, 500, policy) == 3000
    assert source_watermark(4000, {"a": a, "b": b}, 500, policy) == 4000  # monotonic
    idle_b = PartitionState(watermark=3000, last_arrival=200, idle=True)
    assert source_watermark(NO_WATERMARK, {"a": a, "b": idle_b}, 500, policy) == 5000
    done_b = PartitionState(watermark=3000, done=True)
    assert source_watermark(NO_WATERMARK, {"a": a, "b": done_b}, 500, policy) == 5000
    never = PartitionState()
    assert source_watermark(NO_WATERMARK, {"a": a, "n": never}, 500, policy) == NO_WATERMARK
    # all idle at now=2000: max(5000 + (2000 - 0 - 1000), 3000 + (2000 - 200 - 1000)) = 6000
    idle_a = PartitionState(watermark=5000, last_arrival=0, idle=True)
    assert source_watermark(4000, {"a": idle_a, "b": idle_b}, 2000, policy) == 6000
    assert source_watermark(7000, {"a": idle_a, "b": idle_b}, 2000, policy) == 7000
    idle_never = PartitionState(idle=True)
    assert source_watermark(10, {"n": idle_never}, 2000, policy) == 10


# ------------------------------------------------------------------------- config


def test_partition_config_is_validated_and_round_trips(tmp_path):
    with pytest.raises(ConfigError, match="invalid partition_by='dir'; accepted: None, 'directory'"):
        files("x", format="csv", partition_by="dir")
    with pytest.raises(ConfigError, match="its first wildcard level names files"):
        files("in/*.csv", format="csv", partition_by="directory")
    with pytest.raises(ConfigError, match="invalid idle_timeout=0"):
        files("x", format="csv", idle_timeout=0)
    src = files(
        "in/*/*.csv", format="csv", partition_by="directory", idle_timeout="2s", watermark_interval="1s"
    )
    assert (src.idle_timeout, src.watermark_interval) == (2000, 1000)
    b = SourceBinding("src", src, SCHEMA, "ts", WatermarkPolicy(0), 4, 1)
    assert SourceBinding.from_json(b.to_json(), FileSource) == b
    (tmp_path / "f.csv").write_text("id,ts\n")
    reader = reader_for(files(str(tmp_path / "f.csv"), format="csv", partition_by="directory"), Clock())
    with pytest.raises(WireError, match=r"cannot partition .* by directory: it is not a directory"):
        reader.latestOffset(reader.initialOffset(), ReadMaxRows(4))


# ------------------------------------------------------------------------- partitions


def lagging_input(tmp_path):
    put(tmp_path / "in" / "p0" / "a.csv", [(i, i * 10_000) for i in range(1, 7)])  # fast: 10 s apart
    put(tmp_path / "in" / "p1" / "b.csv", [(i, i * 1000) for i in range(11, 17)])  # slow: 1 s apart
    return tmp_path / "in"


def test_lagging_partition_holds_the_watermark_back(tmp_path):
    base = lagging_input(tmp_path)
    reader = reader_for(files(str(base), format="csv", partition_by="directory"), Clock())
    epochs = drain(reader)
    # budget 4 = 2 + 2 per epoch; W_p0: 20000, 40000, 60000; W_p1: 12000, 14000, 16000
    assert [[r["id"] for r in out["data"]] for *_, out in epochs] == [
        [1, 2, 11, 12],
        [3, 4, 13, 14],
        [5, 6, 15, 16],
    ]
    assert [part_wms(e) for _, e, _ in epochs[:3]] == [
        {"p0": 20000, "p1": 12000},
        {"p0": 40000, "p1": 14000},
        {"p0": 60000, "p1": 16000},
    ]
    # the third epoch admits the last records: it carries the end of input (MAX), not 16000
    assert [e["watermark"] for _, e, _ in epochs] == [12000, 14000, MAX]
    assert [out["marks"] for *_, out in epochs] == [[12000], [14000], [MAX]]
    for start, _, out in epochs:  # no event of either partition is late
        assert all(r["__wm"] == start["watermark"] <= r["__et"] for r in out["data"])
    # __seq: partitions of an epoch numbered in name order
    assert [r["__seq"] for r in epochs[1][2]["data"]] == [4, 5, 6, 7]
    assert epochs[0][2]["metrics"] == {
        "records": 4,
        "events": 4,
        "malformed": 0,
        "gauge:watermark": 12000,
        "gauge:watermark:p0": 20000,
        "gauge:watermark:p1": 12000,
        "gauge:max_event_time": 20000,  # delay 0: the fast partition's newest event
    }
    # read as one partition, the fast directory drives the watermark: p1's events are late
    single = drain(reader_for(files(str(base / "*" / "*.csv"), format="csv"), Clock()))
    late = [r["id"] for start, _, out in single for r in out["data"] if r["__et"] < start["watermark"]]
    assert late == [11, 12, 13, 14, 15, 16]


def test_one_task_per_partition_and_control_rows_once(tmp_path):
    base = lagging_input(tmp_path)
    reader = reader_for(files(str(base), format="csv", partition_by="directory"), Clock(), key_groups=3)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(4))
    tasks = reader.partitions(start, end)
    described = [(t.name, t.first_seq, t.control is not None) for t in tasks]
    assert described == [("p0", 0, True), ("p1", 2, False)]
    outs = [decode(list(reader.read(t))) for t in tasks]
    assert [len(o["marks"]) for o in outs] == [3, 0]
    # each task counts its own records; the gauges come once, with the control task
    assert [o["metrics"]["records"] for o in outs] == [2, 2]
    assert [any(k.startswith("gauge:") for k in o["metrics"]) for o in outs] == [True, False]


def test_idle_partition_stops_holding_the_watermark(tmp_path):
    base, clock = tmp_path / "in", Clock(0)
    put(base / "p0" / "a.csv", [(1, 1000)])
    put(base / "p1" / "a.csv", [(2, 100)])
    reader = reader_for(files(str(base), format="csv", partition_by="directory", bounded=False,
                              idle_timeout=1000), clock)
    start, out = step(reader, reader.initialOffset())
    assert start["watermark"] == 100
    clock.now = 800  # p1 silent for 800 ms: still active
    put(base / "p0" / "b.csv", [(3, 2000)])
    start, out = step(reader, start)
    assert start["watermark"] == 100 and not start["partitions"]["p1"]["idle"]
    clock.now = 1500  # p1 silent for 1500 ms > 1000: idle
    put(base / "p0" / "c.csv", [(4, 3000)])
    start, out = step(reader, start)
    assert start["watermark"] == 3000 and start["partitions"]["p1"]["idle"]
    arrivals = {n: p["last_arrival"] for n, p in start["partitions"].items()}
    assert arrivals == {"p0": 1500, "p1": 0}
    clock.now = 1600  # p1 gets data: active again, but the watermark never goes back
    put(base / "p1" / "b.csv", [(5, 2500)])
    start, out = step(reader, start)
    assert [(r["id"], r["__wm"]) for r in out["data"]] == [(5, 3000)]  # late: p1 was idle
    assert not start["partitions"]["p1"]["idle"] and start["watermark"] == 3000
    clock.now = 1700
    put(base / "p0" / "d.csv", [(6, 5000)])
    start, out = step(reader, start)
    assert part_wms(start) == {"p0": 5000, "p1": 2500} and start["watermark"] == 3000


def test_partition_without_data_holds_until_idle_timeout_after_start(tmp_path):
    base, clock = tmp_path / "in", Clock(10_000)
    put(base / "p0" / "a.csv", [(1, 1000)])
    (base / "p1").mkdir()
    src = files(str(base / "*" / "*.csv"), format="csv", partition_by="directory", bounded=False,
                idle_timeout=1000)
    reader = reader_for(src, clock)
    start, out = step(reader, reader.initialOffset())
    assert start["started"] == 10_000 and part_wms(start) == {"p0": 1000, "p1": NO_WATERMARK}
    assert start["watermark"] == NO_WATERMARK
    clock.now = 11_000  # p0 and p1 silent for 1000 ms: not yet idle
    assert step(reader, start)[1] is None
    clock.now = 11_001  # both idle; W = 1000 + (11001 - 10000 - 1000) = 1001, a watermark-only epoch
    end, out = step(reader, start)
    assert end["watermark"] == 1001 and out["data"] == [] and out["marks"] == [1001]
    assert out["metrics"]["records"] == 0 and out["metrics"]["gauge:watermark:p1"] == NO_WATERMARK


def test_all_partitions_idle_advance_with_processing_time_without_spinning(tmp_path):
    base, clock = tmp_path / "in", Clock(0)
    put(base / "p0" / "a.csv", [(1, 5000)])
    put(base / "p1" / "a.csv", [(2, 3000)])
    src = files(str(base), format="csv", partition_by="directory", bounded=False, idle_timeout=1000,
                watermark_interval=200)
    reader = reader_for(src, clock)
    start, _ = step(reader, reader.initialOffset())
    marks = [start["watermark"]]
    assert marks == [3000]
    clock.now = 1000  # silent for exactly the timeout: not idle, nothing moves
    assert step(reader, start)[1] is None
    clock.now = 1100  # all idle: max(5000 + 100, 3000 + 100)
    start, out = step(reader, start)
    marks.append(start["watermark"])
    assert (start["watermark"], start["at"], out["marks"], out["data"]) == (5100, 1100, [5100], [])
    assert start["admitted"] == 2 and start["turn"] == 1
    clock.now = 1299  # the watermark would move by 199 ms, but within the 200 ms interval
    assert step(reader, start)[1] is None
    clock.now = 1300
    start, out = step(reader, start)
    marks.append(start["watermark"])
    assert out["marks"] == [5300]
    clock.now = 1400  # new data in p1: p1 active (W_p1 4000), p0 idle; W stays 5300
    put(base / "p1" / "b.csv", [(3, 4000)])
    start, out = step(reader, start)
    marks.append(start["watermark"])
    assert [(r["id"], r["__wm"]) for r in out["data"]] == [(3, 5300)]
    assert marks == [3000, 5100, 5300, 5300] == sorted(marks)
    clock.now = 5000  # all idle again: W = max(5000 + (5000 - 0 - 1000), 4000 + (5000 - 1400 - 1000))
    start, out = step(reader, start)
    assert start["watermark"] == 9000


def test_available_now_makes_no_watermark_only_epochs(tmp_path):
    base, clock = tmp_path / "in", Clock(0)
    put(base / "p0" / "a.csv", [(1, 5000)])
    src = files(str(base), format="csv", partition_by="directory", bounded=False, idle_timeout=10)
    reader = reader_for(src, clock)
    reader.prepareForTriggerAvailableNow()
    start, _ = step(reader, reader.initialOffset())
    clock.now = 10_000
    assert step(reader, start)[1] is None


def test_partition_by_file_reads_three_files_with_a_shared_budget(tmp_path):
    put(tmp_path / "a.csv", [(1, 10), (2, 20), (3, 30)])
    put(tmp_path / "b.csv", [(4, 5)])
    put(tmp_path / "c.csv", [(5, 1), (6, 2), (7, 3), (8, 4), (9, 5)])
    reader = reader_for(files(str(tmp_path / "*.csv"), format="csv", partition_by="file"), Clock(),
                        per_epoch=3)
    epochs = drain(reader)
    # epoch 1: 1+1+1; epoch 2: a 2 left, c 4 left, budget 3 -> 1 each, the remainder to c (turn 1 starts at b)
    assert [[r["id"] for r in out["data"]] for *_, out in epochs] == [[1, 4, 5], [2, 6, 7], [3, 8, 9]]
    assert [part_wms(e) for _, e, _ in epochs[:3]] == [
        {"a.csv": 10, "b.csv": 5, "c.csv": 1},
        {"a.csv": 20, "b.csv": 5, "c.csv": 3},
        {"a.csv": 30, "b.csv": 5, "c.csv": 5},
    ]
    # b is done once an epoch admits nothing from it; until then it counts
    assert [[n for n, p in e["partitions"].items() if p["done"]] for _, e, _ in epochs[:3]] == [
        [],
        ["b.csv"],
        ["b.csv"],
    ]
    assert [e["watermark"] for _, e, _ in epochs] == [1, 3, MAX]  # the last epoch ends the input
    assert [len(reader.partitions(s, e)) for s, e, _ in epochs] == [3, 2, 2]
    assert [[r["__seq"] for r in out["data"]] for *_, out in epochs[:3]] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    everything = drain(reader_for(files(str(tmp_path), format="csv", partition_by="file"), Clock()),
                       ReadAllAvailable())
    assert [len(out["data"]) for *_, out in everything] == [9]


def test_replaying_logged_offsets_gives_identical_batches_without_the_clock(tmp_path, monkeypatch):
    base, clock = tmp_path / "in", Clock(0)
    put(base / "p0" / "a.csv", [(1, 5000), (2, 6000), (3, 7000)])
    base.joinpath("p1").mkdir()
    base.joinpath("p1", "a.csv").write_text("id,ts\n1,oops\n2,3000\n")
    src = files(str(base), format="csv", partition_by="directory", bounded=False, idle_timeout=500)
    reader = reader_for(src, clock, per_epoch=2)
    log, start = [], reader.initialOffset()
    for now in (0, 100, 200, 1000, 2000):
        clock.now = now
        end, out = step(reader, start)
        if out is not None:
            log.append((start, end, out))
            start = end
    # t=0: p0 5000, p1 a malformed record (seq 1) -> p1 holds W at none; t=100: p1 3000;
    # t=200: p0 7000; t=1000 all idle: max(7000 + 1000-200-500, 3000 + 1000-100-500) = 7300
    assert [e["watermark"] for _, e, _ in log] == [NO_WATERMARK, 3000, 3000, 7300, 8300]
    assert [[r["__seq"] for r in out["data"]] for *_, out in log] == [[0], [2, 3], [4], [], []]

    def no_clock():
        raise AssertionError("a replay must not read the clock")

    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(2))
    fresh = reader_for(src, no_clock, per_epoch=2)  # as after a restart
    for start, end, out in log:
        again = [b for p in fresh.partitions(start, end) for b in fresh.read(p)]
        assert again == out["batches"]
