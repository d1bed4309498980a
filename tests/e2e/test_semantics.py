"""Event-time semantics on the real engine: transcripts derived by hand from the rules.

Each TestStream step is one epoch; times are ms. Rules: SPEC §2-§4 and the docstrings
of ``Stream.window`` / ``WindowedStream.aggregate``.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import wire

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


def ev(*times, k="a"):
    return [{"t": t, "k": k, "v": 1} for t in times]


def ms(ts) -> int:
    return round(ts.timestamp() * 1000)


def main_rows(out, *aggs):
    return [(r["k"], ms(r["window_start"]), ms(r["window_end"]), *(r[a] for a in aggs), r["emit"],
             r["epoch"]) for r in out["main"]]


def test_sliding_windows(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(1, 7))                     # epoch 0
    ts.advance_watermark(10)                    # epoch 1
    ts.advance_watermark_to_infinity()          # epoch 2
    out = ts.run(lambda s: s.window(wire.Sliding(10, 5)).aggregate(n=wire.count()), spark=spark)
    assert main_rows(out, "n") == [
        ("a", -5, 5, 1, "final", 1),    # t=1 is in [-5,5) and [0,10)
        ("a", 0, 10, 2, "final", 1),
        ("a", 5, 15, 1, "final", 2),    # t=7 is in [0,10) and [5,15)
    ]


def test_session_merge_by_late_event(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(0, 18))                    # epoch 0: sessions [0,10) and [18,28)
    ts.advance_watermark(50)                    # epoch 1: both final
    ts.add_events(ev(9))                        # epoch 2: late, [9,19) bridges both -> [0,28)
    ts.add_events(ev(200, k="b"))               # epoch 3: another key, no effect on a
    ts.advance_watermark_to_infinity()          # epoch 4
    out = ts.run(lambda s: s.window(wire.Session(10), allowed_lateness=100)
                 .aggregate(n=wire.count(), vals=wire.collect("t")), spark=spark)
    assert main_rows(out, "n", "vals") == [
        ("a", 0, 10, 1, [0], "final", 1),
        ("a", 18, 28, 1, [18], "final", 1),
        ("a", 0, 28, 3, [0, 9, 18], "update", 2),
        ("b", 200, 210, 1, [200], "final", 4),
    ]
    assert out["late"] == []


def test_session_event_beyond_lateness_goes_to_late(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(0))                        # epoch 0: [0,10)
    ts.advance_watermark(30)                    # epoch 1: final, purged at 10 + 5 <= 30
    ts.add_events(ev(2, 25))                    # epoch 2: 2 -> [2,12): 12+5 <= 30 and no open
    ts.advance_watermark_to_infinity()          #   session to merge into: late; 25 -> [25,35)
    out = ts.run(lambda s: s.window(wire.Session(10), allowed_lateness=5)
                 .aggregate(n=wire.count()), spark=spark)
    assert main_rows(out, "n") == [("a", 0, 10, 1, "final", 1), ("a", 25, 35, 1, "final", 3)]
    assert [(r["t"], r["watermark"], r["epoch"]) for r in out["late"]] == [(2, 30, 2)]


def test_emit_update_mode_emits_early_results(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(1))                        # epoch 0: early n=1
    ts.add_events(ev(2))                        # epoch 1: early n=2
    ts.advance_watermark(5)                     # epoch 2: nothing changed, still open
    ts.advance_watermark(10)                    # epoch 3: final n=2
    ts.add_events(ev(3))                        # epoch 4: late within lateness: update n=3
    ts.advance_watermark_to_infinity()          # epoch 5
    out = ts.run(lambda s: s.window(wire.Tumbling(10), allowed_lateness=20, emit="update")
                 .aggregate(n=wire.count()), spark=spark)
    assert main_rows(out, "n") == [
        ("a", 0, 10, 1, "early", 0),
        ("a", 0, 10, 2, "early", 1),
        ("a", 0, 10, 2, "final", 3),
        ("a", 0, 10, 3, "update", 4),
    ]


def test_after_update_callback_emits_early(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(3, 1, 2) + ev(4, k="b"))   # epoch 0: a's running counts 1,2,3 (by event time)
    ts.advance_watermark_to_infinity()          # epoch 1

    def two(aggregate: pa.Table, event: pa.Table) -> pa.Array:
        return pc.equal(aggregate.column("n"), 2)

    out = ts.run(lambda s: s.window(wire.Tumbling(10), after_update=two)
                 .aggregate(n=wire.count(), last=wire.last("t")), spark=spark)
    assert main_rows(out, "n", "last") == [
        ("a", 0, 10, 2, 2, "early", 0),         # after t=1 and t=2 (event-time order)
        ("a", 0, 10, 3, 3, "final", 1),
        ("b", 0, 10, 1, 4, "final", 1),
    ]


def test_before_update_callback(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(1, 2, 3))
    ts.advance_watermark_to_infinity()

    def big_jump(aggregate: pa.Table, event: pa.Table) -> pa.Array:
        # emit the window as it was before the event with t = 3 arrives
        return pc.equal(event.column("t"), 3)

    out = ts.run(lambda s: s.window(wire.Tumbling(10), before_update=big_jump)
                 .aggregate(n=wire.count()), spark=spark)
    assert main_rows(out, "n") == [("a", 0, 10, 2, "early", 0), ("a", 0, 10, 3, "final", 1)]


def test_window_of_windows_uses_the_watermark_hold(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(1, 11, 21, 31))            # epoch 0
    ts.advance_watermark(35)                    # epoch 1: [0,10) [10,20) [20,30) final;
    ts.advance_watermark(50)                    #   [30,40) open: output watermark held at 30
    ts.advance_watermark_to_infinity()          # epoch 2: [30,40) final, event time 30

    def build(s):
        tens = s.window(wire.Tumbling(10)).aggregate(n=wire.count(), name="tens")
        return tens.window(wire.Tumbling(5)).aggregate(total=wire.sum("n"), name="fives")

    out = ts.run(build, spark=spark)
    assert main_rows(out, "total") == [
        ("a", 0, 5, 1, "final", 1),
        ("a", 10, 15, 1, "final", 1),
        ("a", 20, 25, 1, "final", 1),
        # without the hold the second operator's watermark would be 35 here and the
        # [30,40) result (event time 30, window [30,35)) would be late and dropped
        ("a", 30, 35, 1, "final", 2),
    ]
    assert out["late"] == []
    marks = out.summary.watermarks()
    assert marks["tens"]["input_watermark"] == marks["tens"]["output_watermark"] == 2**63 - 1


def test_hold_without_open_windows_keeps_a_later_sliding_result_on_time(spark):
    """Filtered events move the watermark while no window is open (issue 11's hold bug).

    Epoch 0 has only events the filter drops; the watermark then goes to 100 with no
    window open. An on-time event at 105 opens [80,110), [90,120), [100,130). The
    first window's output watermark must have stayed at 80, the earliest start an
    event at >= 100 can create, so the second window takes the [80,110) result on time.
    """
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events([{"t": 50, "k": "a", "v": 0}, {"t": 100, "k": "a", "v": 0}])  # epoch 0
    ts.advance_watermark(100)                                                    # epoch 1
    ts.add_events(ev(105))                                                       # epoch 2
    ts.advance_watermark_to_infinity()                                           # epoch 3

    def build(s):
        counts = s.filter("v > 0").window(wire.Sliding(30, 10)).aggregate(n=wire.count(), name="c")
        return counts.window(wire.Tumbling(20)).aggregate(best=wire.max("n"), windows=wire.count(),
                                                          name="top")

    out = ts.run(build, spark=spark)
    assert out["late"] == []
    assert main_rows(out, "best", "windows") == [
        ("a", 80, 100, 1, 2, "final", 3),
        ("a", 100, 120, 1, 1, "final", 3),
    ]


def test_union_takes_the_minimum_watermark(spark, tmp_path):
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    fast.mkdir()
    slow.mkdir()
    (fast / "a.jsonl").write_text("".join(json.dumps({"t": t, "k": "a"}) + "\n"
                                          for t in range(0, 100, 10)))
    (slow / "b.jsonl").write_text(json.dumps({"t": 5, "k": "b"}) + "\n")
    flow = wire.Flow("union")
    a = flow.source(wire.sources.files(str(fast), format="jsonl"), event_time="t", key="k",
                    max_events_per_epoch=2, name="fast")
    b = flow.source(wire.sources.files(str(slow), format="jsonl", bounded=False),
                    event_time="t", key="k", max_events_per_epoch=2, name="slow")
    counts = a.union(b).window(wire.Tumbling(10)).aggregate(n=wire.count(), name="counts")
    sink = wire.testing.MemorySink()
    counts.sink(sink)
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    deadline = time.monotonic() + 60
    while running.summary.input_events < 11 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    summary = running.stop()
    assert summary.input_events == 11
    # fast's watermark reaches 90 (then MAX when it ends), slow's stays at 5: the window
    # operator's input watermark is the minimum, so no window with end > 5 closes
    assert summary.watermarks()["counts"]["input_watermark"] == 5
    assert sink.rows() == []


def test_interval_join_of_two_sources(spark, tmp_path):
    clicks, views = tmp_path / "clicks", tmp_path / "views"
    clicks.mkdir()
    views.mkdir()
    (clicks / "c.jsonl").write_text("".join(json.dumps({"t": t, "k": k}) + "\n"
                                            for t, k in [(10, "a"), (20, "a"), (11, "b")]))
    (views / "v.jsonl").write_text("".join(json.dumps({"t": t, "k": k, "page": p}) + "\n"
                                           for t, k, p in [(12, "a", "x"), (25, "a", "y"),
                                                           (40, "a", "z"), (30, "b", "w")]))
    flow = wire.Flow("join")
    c = flow.source(wire.sources.files(str(clicks), format="jsonl"), event_time="t", key="k")
    v = flow.source(wire.sources.files(str(views), format="jsonl"), event_time="t", key="k")
    joined = c.interval_join(v, lower=0, upper=5, name="j")
    sink = wire.testing.MemorySink()
    joined.sink(sink)
    summary = flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2)
    got = sorted((r["k"], r["t"], r["right_t"], r["right_page"], r["event_time"])
                 for r in sink.rows())
    # a: 10 joins 12 (12 in [10,15]); 20 joins 25 (25 in [20,25]); 40 and b's 30 join nothing
    assert got == [("a", 10, 12, "x", 12), ("a", 20, 25, "y", 25)]
    assert summary.metrics[("j", "joined")] == 2


@pytest.mark.parametrize(("within", "expected"), [
    # regular join: every click meets every view of its key, however far apart in time
    (None, [("a", 10, 12, 12), ("a", 10, 25, 25), ("a", 10, 40, 40), ("a", 20, 12, 20),
            ("a", 20, 25, 25), ("a", 20, 40, 40), ("b", 11, 30, 30)]),
    # |view.t - click.t| <= 5: (10, 12) and (20, 25) only
    (5, [("a", 10, 12, 12), ("a", 20, 25, 25)]),
])
def test_equi_join_of_two_sources(spark, tmp_path, within, expected):
    clicks, views = tmp_path / "clicks", tmp_path / "views"
    clicks.mkdir()
    views.mkdir()
    # in event-time order per source (two per epoch), so that nothing is late
    (clicks / "c.jsonl").write_text("".join(json.dumps({"t": t, "k": k}) + "\n"
                                            for t, k in [(10, "a"), (11, "b"), (20, "a")]))
    (views / "v.jsonl").write_text("".join(json.dumps({"t": t, "k": k}) + "\n"
                                           for t, k in [(12, "a"), (25, "a"), (30, "b"), (40, "a")]))
    flow = wire.Flow("equi_join")
    c = flow.source(wire.sources.files(str(clicks), format="jsonl"), event_time="t", key="k",
                    max_events_per_epoch=2)
    v = flow.source(wire.sources.files(str(views), format="jsonl"), event_time="t", key="k",
                    max_events_per_epoch=2)
    sink = wire.testing.MemorySink()
    c.join(v, within=within, name="j").sink(sink)
    summary = flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2)
    got = sorted((r["k"], r["t"], r["right_t"], r["event_time"]) for r in sink.rows())
    assert got == expected
    assert summary.total("late") == 0


def test_idle_partitions_let_windows_close(spark, tmp_path):
    """p1 lags then goes quiet: first it holds the watermark back, after idle_timeout it
    does not; once both partitions are quiet the watermark follows processing time and
    the last window closes without new data."""
    for part, k, times in [("p0", "a", [*range(0, 106_000, 5_000), 109_500]),
                           ("p1", "b", [0, 5_000])]:
        (tmp_path / "in" / part).mkdir(parents=True)
        (tmp_path / "in" / part / "f.jsonl").write_text(
            "".join(json.dumps({"t": t, "k": k}) + "\n" for t in times))
    flow = wire.Flow("idle")
    s = flow.source(wire.sources.files(str(tmp_path / "in"), format="jsonl", bounded=False,
                                       partition_by="directory", idle_timeout="1s"),
                    event_time="t", key="k", max_events_per_epoch=100, name="src")
    counts = s.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="counts")
    sink = wire.testing.MemorySink()
    counts.sink(sink)
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if any(ms(r["window_start"]) == 100_000 for r in sink.rows()):
            break
        time.sleep(0.25)
    summary = running.stop()
    rows = sink.rows()
    finals = sorted((r["k"], ms(r["window_start"]), r["n"]) for r in rows if r["emit"] == "final")
    expected = [("a", w, 2) for w in range(0, 100_000, 10_000)] + [("a", 100_000, 3), ("b", 0, 2)]
    assert finals == expected
    assert summary.total("late") == 0
    # the first epoch admitted both partitions: its watermark is the minimum (p1's 5 s)
    first = json.loads((tmp_path / "ck" / "spark" / "offsets" / "0").read_text().splitlines()[2])
    assert first["watermark"] == 5_000 == min(p["watermark"] for p in first["partitions"].values())


def test_replay_after_stop_gives_identical_outputs(spark, tmp_path):
    def flow_for(out):
        ts = tmp_path / "in"
        if not ts.exists():
            ts.mkdir()
            rows = [{"t": t, "k": "abc"[t % 3], "v": t % 7} for t in
                    [5, 1, 9, 14, 3, 22, 40, 31, 35, 60, 58, 90, 71, 120, 115, 99, 150, 20]]
            (ts / "e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        flow = wire.Flow("replay")
        s = flow.source(wire.sources.files(str(ts), format="jsonl"), event_time="t", key="k",
                        watermark=wire.BoundedOutOfOrderness(5), max_events_per_epoch=3)
        w = s.window(wire.Session(12), allowed_lateness=10).aggregate(
            n=wire.count(), vals=wire.collect("v"), name="sessions")
        w.sink(wire.sinks.parquet(out / "main"))
        w.late().sink(wire.sinks.parquet(out / "late"))
        return flow

    whole, split = tmp_path / "whole", tmp_path / "split"
    flow_for(whole).run(str(whole / "ck"), spark=spark, key_groups=2)
    first = flow_for(split).run(str(split / "ck"), spark=spark, key_groups=2, max_epochs=3)
    assert first.stopped_early
    flow_for(split).run(str(split / "ck"), spark=spark, key_groups=2)
    def read(root, port):
        files = sorted((root / port).glob("*/*.parquet"))
        return pa.concat_tables([pq.read_table(f) for f in files]) if files else None

    assert read(whole, "main").num_rows > 0
    assert read(whole, "late") is not None, "the data is chosen so that some events are late"
    for port in ("main", "late"):
        assert read(whole, port).equals(read(split, port)), port
    # identical watermarks per epoch in both offset logs
    def marks(root):
        d = root / "ck" / "spark" / "offsets"
        return {f.name: json.loads(f.read_text().splitlines()[2])["watermark"]
                for f in d.iterdir() if f.name.isdigit()}
    assert marks(whole) == marks(split)


def test_throttle_overflow_diverts_the_excess(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events(ev(1, 2, 3, 4, 5))            # epoch 0: 2 pass, 3 overflow
    ts.add_events(ev(6))                        # epoch 1: passes

    def build(s):
        limited = s.throttle(2, mode="overflow", name="limit")
        limited.overflow().sink(overflow, name="overflow_sink")
        return limited

    overflow = wire.testing.MemorySink()
    out = ts.run(build, spark=spark)
    assert [(r["t"], r["epoch"]) for r in out["main"]] == [(1, 0), (2, 0), (6, 1)]
    assert [(r["t"], r["epoch"]) for r in overflow.rows()] == [(3, 0), (4, 0), (5, 0)]
    assert out.summary.metrics[("limit", "overflow")] == 3


def test_throttle_pause_holds_input_at_the_source(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text("".join(json.dumps({"t": t, "k": "a"}) + "\n"
                                                     for t in range(95)))
    flow = wire.Flow("paced")
    s = flow.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t",
                    key="k", max_events_per_epoch=1_000)
    sink = wire.testing.MemorySink()
    s.throttle(10).sink(sink)
    summary = flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2)
    sizes = [t.num_rows for _, t in sink.tables]
    assert sum(sizes) == 95 and max(sizes) == 10 and len(sizes) == 10  # nothing dropped
    assert summary.input_events == 95
