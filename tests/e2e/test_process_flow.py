"""``Stream.process`` on Spark: deduplication and burst alerts, late events, a restart.

The dedupe and alert functions are the documented examples
(:mod:`wire.examples.process_examples`). Expectations are derived by hand (the scripted
test) or by pandas over the whole input (the file test): with the input sorted by
event time across epochs, the per-key processing order is the event-time order.
"""

from __future__ import annotations

import json
import random
from typing import ClassVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import wire
from wire.examples.process_examples import BurstAlert, Dedupe

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("x", pa.int64())])


def test_dedupe_with_a_late_event_on_a_scripted_stream(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events([{"t": 1, "k": "a", "x": 1}, {"t": 5, "k": "a", "x": 2}, {"t": 3, "k": "b", "x": 3}])
    ts.advance_watermark(20)  # a's and b's expiry timers (11, 13... 15) fire: their state is gone
    ts.add_events([{"t": 12, "k": "a", "x": 4}, {"t": 25, "k": "a", "x": 5}, {"t": 30, "k": "b", "x": 6},
                   {"t": 34, "k": "b", "x": 7}])
    ts.advance_watermark_to_infinity()
    fn = Dedupe(within_ms=10)
    out = ts.run(lambda s: s.process(fn.on_events, on_timer=fn.on_timer, state=fn.state,
                                     schema=fn.schema(SCHEMA), name="dedupe"),
                 spark=spark, key_groups=2)
    # a@5 is within 10 ms of a@1; a@12 is late (12 < 20); b@34 within 10 ms of b@30
    assert sorted((r["epoch"], r["k"], r["x"]) for r in out["main"]) == [
        (0, "a", 1), (0, "b", 3), (2, "a", 5), (2, "b", 6)]
    assert all(r["event_time"] == r["t"] for r in out["main"])
    assert [(r["k"], r["x"], r["event_time"], r["watermark"], r["epoch"]) for r in out["late"]] == [
        ("a", 4, 12, 20, 2)]
    assert out.summary.total("late") == 1
    assert out.summary.metrics[("dedupe", "timers_fired")] == 4  # a, b after epoch 1; a, b at the end


def make_events(seed: int = 4, n: int = 70, per_epoch: int = 10) -> list[dict]:
    """Sorted by event time across epochs, shuffled within each epoch; one late event last."""
    rnd = random.Random(seed)
    times = sorted(rnd.sample(range(0, 900_000, 1_000), n))
    rows = [{"t": t + rnd.choice([0, 0, 400]), "k": rnd.choice("pqr"), "x": i} for i, t in enumerate(times)]
    chunks = [rows[i:i + per_epoch] for i in range(0, n, per_epoch)]
    for c in chunks:
        rnd.shuffle(c)
    late = {"t": 1_000, "k": "p", "x": 999}  # far behind the watermark of the last epoch
    return [*(r for c in chunks for r in c), late]


def read(path) -> pd.DataFrame:
    files = sorted(path.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas() if files else pd.DataFrame()


def expected_unique(on_time: pd.DataFrame) -> list[tuple]:
    """Kept events: no earlier event of the key less than 30 s before (pandas, whole input)."""
    prev = on_time.groupby("k")["t"].shift(1)
    kept = on_time[prev.isna() | (on_time["t"] - prev >= 30_000)]
    return sorted(zip(kept["k"], kept["t"], kept["x"], strict=True))


def expected_alerts(on_time: pd.DataFrame) -> list[tuple]:
    """An alert per event whose key's second previous event is less than a minute before."""
    back2 = on_time.groupby("k")["t"].shift(2)
    hit = on_time[back2.notna() & (on_time["t"] - back2 < 60_000)]
    return sorted(zip(hit["k"], hit["t"], back2[hit.index].astype(int), strict=True))


@pytest.mark.parametrize("example", ["dedupe", "bursts"])
def test_examples_survive_a_restart_and_equal_pandas(spark, tmp_path, example):
    """Stop after 3 epochs, resume from the checkpoint: the outputs equal pandas' over the input."""
    events = make_events()
    d = tmp_path / "in"
    d.mkdir()
    (d / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    fn = Dedupe(within_ms=30_000) if example == "dedupe" else BurstAlert(count=3, within_ms=60_000)
    schema = fn.schema(SCHEMA) if example == "dedupe" else fn.schema("k", pa.string())

    def run(max_epochs):
        flow = wire.Flow("process-restart")
        s = flow.source(wire.sources.files(str(d), format="jsonl"), event_time="t", key="k",
                        max_events_per_epoch=10)
        p = s.process(fn.on_events, on_timer=fn.on_timer, state=fn.state, schema=schema, name=example)
        p.sink(wire.sinks.parquet(tmp_path / "out"), name="out_sink")
        p.late().sink(wire.sinks.parquet(tmp_path / "late"), name="late_sink")
        return flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2, max_epochs=max_epochs)

    first = run(3)
    assert first.input_events == 30
    second = run(None)
    assert second.input_events == len(events) - 30

    on_time = pd.DataFrame(events[:-1]).sort_values(["k", "t", "x"])
    oracle = expected_unique if example == "dedupe" else expected_alerts
    halves = [pd.DataFrame(part).sort_values(["k", "t", "x"]) for part in (events[:30], events[30:-1])]
    assert sorted(oracle(halves[0]) + oracle(halves[1])) != oracle(on_time)  # state must cross the restart
    out = read(tmp_path / "out")
    if example == "dedupe":
        expected = expected_unique(on_time)
        assert sorted(zip(out["k"], out["t"], out["x"], strict=True)) == expected
        assert (out["event_time"] == out["t"]).all()
        assert 10 < len(expected) < len(on_time)  # the input has duplicates and distinct events
    else:
        expected = expected_alerts(on_time)
        assert sorted(zip(out["k"], out["event_time"], out["first_event_time"], strict=True)) == expected
        assert len(expected) >= 3
    late = read(tmp_path / "late")
    assert list(late["x"]) == [999] and list(late["reason"]) == ["process: event_time < watermark"]


def test_timer_output_behind_the_watermark_reaches_a_downstream_window_on_time(spark):
    """Hand-derived: a's burst (10, 30, 70) flushes at 120 with event time 10, b's (15) at 65
    with event time 15. The hold keeps the process step's output watermark at 10 until a's
    timer fires, so the window [0, 100) downstream counts both and nothing is late."""
    # defined here: Spark's workers cannot import this test module, a local class travels by value
    class BurstSummary:
        """Per key, count events until 50 ms of event time pass without one, then emit the count
        at the burst's *first* event time: a timer whose ``output_time`` is earlier than its time,
        so only the output watermark hold keeps the emitted row on time downstream."""

        state: ClassVar = {"first": wire.value_state(pa.int64()), "count": wire.value_state(pa.int64())}
        schema = pa.schema([("k", pa.string()), ("event_time", pa.int64()), ("n", pa.int64())])

        def on_events(self, ctx, events):
            per = events.group_by("k").aggregate([("event_time", "min"), ("event_time", "max"),
                                                  ("event_time", "count")])
            keys = per.column("k")
            first, count = ctx.value_state("first"), ctx.value_state("count")
            start = pc.coalesce(first.get(keys), per.column("event_time_min"))
            first.update(keys, start)
            count.update(keys, pc.add(pc.fill_null(count.get(keys), 0), per.column("event_time_count")))
            ctx.timers.set_event_time(keys, pc.add(per.column("event_time_max"), 50), tag="flush",
                                      output_times=start)

        def on_timer(self, ctx, fired):
            keys = fired.column("k")
            n = ctx.value_state("count").get(keys)
            ctx.value_state("first").clear(keys)
            ctx.value_state("count").clear(keys)
            return pa.table({"k": keys, "event_time": fired.column("output_time"), "n": n})

    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events([{"t": 10, "k": "a", "x": 0}, {"t": 30, "k": "a", "x": 0}, {"t": 15, "k": "b", "x": 0}])
    ts.advance_watermark(40)
    ts.add_events([{"t": 70, "k": "a", "x": 0}])
    ts.advance_watermark(100)   # b's timer (65) fires: row (b, 15, 1); a's (120) still holds at 10
    ts.advance_watermark_to_infinity()
    fn = BurstSummary()
    out = ts.run(lambda s: s.process(fn.on_events, on_timer=fn.on_timer, state=fn.state, schema=fn.schema,
                                     name="bursts")
                 .window(wire.Tumbling(100)).aggregate(events=wire.sum("n"), bursts=wire.count(), name="w"),
                 spark=spark, key_groups=2)
    assert out["late"] == []
    got = sorted((r["k"], r["window_start"].timestamp() * 1000, r["events"], r["bursts"], r["emit"])
                 for r in out["main"])
    assert got == [("a", 0, 3, 1, "final"), ("b", 0, 1, 1, "final")]
