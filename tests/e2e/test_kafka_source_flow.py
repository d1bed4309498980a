"""Kafka source end to end on a real broker (noida-db): watermarks, dead letters, group offsets.

Expectations are derived by hand or with pandas from the produced records, never from a run.
"""

from __future__ import annotations

import time

import pandas as pd
import pyarrow as pa
import pytest

import wire
from wire.sources.kafka_source.source import kafka

pytestmark = pytest.mark.spark
pytest.importorskip("confluent_kafka")

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
WINDOW = 1_000


def read(out):
    import pyarrow.parquet as pq

    files = sorted(out.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


def windows(out) -> list[tuple[str, int, int]]:
    t = read(out)
    if t is None:
        return []
    starts = t.column("window_start").cast(pa.timestamp("ms", "UTC")).cast(pa.int64()).to_pylist()
    return sorted(zip(t.column("k").to_pylist(), starts, t.column("n").to_pylist(), strict=True))


def wait_for(predicate, timeout_s=400.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def oracle(events: pd.DataFrame) -> list[tuple[str, int, int]]:
    counts = events.assign(start=events.t // WINDOW * WINDOW).groupby(["k", "start"]).size()
    return sorted((k, int(s), int(n)) for (k, s), n in counts.items())


def test_counts_dead_letters_and_group_offsets(spark, kafka_broker, tmp_path):
    """4 partitions, JSON values, 3 poison records: windows equal pandas, poison in the dead letters,
    the group's offsets end at each partition's end (all epochs committed)."""
    b = kafka_broker
    b.create_topic("counts", partitions=4)
    events = [{"t": i * 37 % 4_000, "k": "abcd"[i % 4], "v": i} for i in range(400)]
    records = [(i % 4, e["k"].encode(), e, None) for i, e in enumerate(events)]
    poison = [(1, b"x", b"{broken", None), (2, b"y", b"[1, 2]", None),
              (3, b"z", b'{"t": "soon", "k": "a"}', None)]
    b.produce("counts", records[:200] + poison + records[200:])
    out, dead = tmp_path / "out", tmp_path / "dead"
    flow = wire.Flow("kafka_counts")
    s = flow.source(kafka(b.bootstrap, "counts", group="g-counts", schema=SCHEMA, idle_timeout="1s"),
                    event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(0),
                    max_events_per_epoch=1_000, name="events")
    s.window(wire.Tumbling(WINDOW)).aggregate(n=wire.count(), name="w").sink(wire.sinks.parquet(out))
    flow.dead_letters().sink(wire.sinks.parquet(dead))
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        wait_for(lambda: sum(n for *_, n in windows(out)) >= 400, what="all events counted")
        wait_for(lambda: b.committed("g-counts", "counts", 4) == {0: 100, 1: 101, 2: 101, 3: 101},
                 timeout_s=30, what="group offsets at the ends")
    finally:
        summary = running.stop()
    assert windows(out) == oracle(pd.DataFrame(events))
    letters = read(dead).to_pandas().sort_values("location")
    assert letters.location.tolist() == ["counts:1:50", "counts:2:50", "counts:3:50"]
    assert "invalid JSON" in letters.reason.iloc[0] and "JSON object" in letters.reason.iloc[1]
    assert "field t: cannot convert" in letters.reason.iloc[2] and letters.record.iloc[0] == "{broken"
    assert summary.metrics[("events", "malformed")] == 3


def test_windows_and_dead_letters_are_the_same_whatever_the_epoch_size(spark, kafka_broker, tmp_path):
    """One topic read twice, in epochs of 150 records (8, so the executors' kept consumers
    read on, skip ranges other workers read, or are assigned again, and the planner reads ahead
    across epochs) and in one epoch: both equal pandas' windows (a delay above the disorder: no
    event is late whatever the split) and both find the same poison records."""
    b = kafka_broker
    b.create_topic("split", partitions=4)
    events = [{"t": i * 7 - (i * 13) % 90, "k": "abcdefg"[i % 7], "v": i} for i in range(1_200)]
    records = [(i % 4, e["k"].encode(), e, None) for i, e in enumerate(events)]
    poison = [(0, b"x", b'{"t": 5, "k": "a", "v": "five"}', None), (3, b"y", None, None)]
    b.produce("split", records[:540] + poison + records[540:])
    got = {}
    for per_epoch in (150, 5_000):
        out, dead = tmp_path / f"out{per_epoch}", tmp_path / f"dead{per_epoch}"
        flow = wire.Flow(f"kafka_split_{per_epoch}")
        src = kafka(b.bootstrap, "split", group=f"g-split-{per_epoch}", schema=SCHEMA, idle_timeout="1s")
        s = flow.source(src, event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(100),
                        max_events_per_epoch=per_epoch, name="events")
        w = s.window(wire.Tumbling(WINDOW)).aggregate(n=wire.count(), name="w")
        w.sink(wire.sinks.parquet(out))
        w.late().sink(wire.sinks.parquet(tmp_path / f"late{per_epoch}"))
        flow.dead_letters().sink(wire.sinks.parquet(dead))
        running = flow.start(str(tmp_path / f"ck{per_epoch}"), spark=spark, key_groups=2)
        try:
            wait_for(lambda out=out: sum(n for *_, n in windows(out)) >= len(events), what="all counted")
        finally:
            summary = running.stop()
        letters = read(dead).to_pandas().sort_values("location")
        got[per_epoch] = (windows(out), letters[["location", "reason"]].values.tolist(),
                          summary.total("late"))
    expected = oracle(pd.DataFrame(events))
    assert got[150][0] == expected and got[5_000][0] == expected
    assert got[150][1] == got[5_000][1] and [loc for loc, _ in got[150][1]] == ["split:0:135", "split:3:135"]
    assert got[150][2] == got[5_000][2] == 0


def rows(out) -> list[tuple[int, str, int]]:
    t = read(out)
    return [] if t is None else sorted(zip(t.column("t").to_pylist(), t.column("k").to_pylist(),
                                            t.column("v").to_pylist(), strict=True))


@pytest.mark.slow
def test_the_group_reaches_the_end_offsets_on_a_quiet_topic_and_at_a_stop(spark, kafka_broker, tmp_path):
    """Issue 26 item 5: 2 partitions of 61 records, epochs of 50 (25 + 25), no idle timeout, so no
    epoch follows the last one (Spark tells a source that an epoch is done only when it plans the
    next). While the topic is quiet the group's offsets reach the ends {61, 61} (lag 0; they stayed
    at {50, 50} before) and are there after the stop; a new checkpoint on the same group (a
    bounded flow) then reads nothing again."""
    b = kafka_broker
    b.create_topic("quiet", partitions=2)
    events = [{"t": i * 10, "k": "ab"[i % 2], "v": i} for i in range(122)]
    b.produce("quiet", [(i % 2, e["k"].encode(), e, None) for i, e in enumerate(events)])
    out = tmp_path / "out"
    flow = wire.Flow("kafka_quiet")
    flow.source(kafka(b.bootstrap, "quiet", group="g-quiet", schema=SCHEMA), event_time="t",
                watermark=wire.BoundedOutOfOrderness(0), max_events_per_epoch=50,
                name="events").sink(wire.sinks.parquet(out))
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        wait_for(lambda: len(rows(out)) >= len(events), what="all events written")
        wait_for(lambda: b.committed("g-quiet", "quiet", 2) == {0: 61, 1: 61}, timeout_s=60,
                 what=f"the group's offsets at the ends (last seen {b.committed('g-quiet', 'quiet', 2)})")
    finally:
        running.stop()
    assert rows(out) == sorted((e["t"], e["k"], e["v"]) for e in events)
    assert b.committed("g-quiet", "quiet", 2) == {0: 61, 1: 61}
    again = tmp_path / "again"
    flow = wire.Flow("kafka_quiet_again")
    flow.source(kafka(b.bootstrap, "quiet", group="g-quiet", schema=SCHEMA, bounded=True), event_time="t",
                watermark=wire.BoundedOutOfOrderness(0), name="events").sink(wire.sinks.parquet(again))
    summary = flow.run(str(tmp_path / "ck-again"), spark=spark, key_groups=2, progress=False)
    assert rows(again) == [] and summary.input_events == 0


@pytest.mark.slow
def test_a_bounded_flow_ends_by_itself_at_the_end_offsets_taken_at_the_start(spark, kafka_broker, tmp_path):
    """Issue 26 item 10: 3 partitions, 600 records (disorder below the watermark delay: none is
    late whatever the epochs), bounded=True, epochs of 50. Once the first epoch is planned (the end
    offsets are taken), 90 more records come (key z, far-future event times: read, they would be
    windows of their own): the flow ends by itself, its windows (all final: the last epoch moves the
    watermark to its maximum) equal pandas' over the first 600 records only, and the group's offsets
    are the end offsets taken at the start."""
    b = kafka_broker
    b.create_topic("bounded", partitions=3)
    events = [{"t": i * 7 - (i * 13) % 90, "k": "abcde"[i % 5], "v": i} for i in range(600)]
    b.produce("bounded", [(i % 3, e["k"].encode(), e, None) for i, e in enumerate(events)])
    out, ck = tmp_path / "out", tmp_path / "ck"
    flow = wire.Flow("kafka_bounded")
    s = flow.source(kafka(b.bootstrap, "bounded", group="g-bounded", schema=SCHEMA, bounded=True),
                    event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(100),
                    max_events_per_epoch=50, name="events")
    s.window(wire.Tumbling(WINDOW)).aggregate(n=wire.count(), name="w").sink(wire.sinks.parquet(out))
    running = flow.start(str(ck), spark=spark, key_groups=2)
    try:
        wait_for(lambda: (ck / "spark" / "offsets" / "0").exists(), what="the first epoch planned")
        later = [{"t": 10_000_000 + i, "k": "z", "v": 10_000 + i} for i in range(90)]
        b.produce("bounded", [(i % 3, b"z", e, None) for i, e in enumerate(later)])
        assert running.is_active(), "the flow ended before the later records came: nothing was checked"
        summary = running.await_termination()
    finally:
        if running.is_active():
            running.stop()
    assert windows(out) == oracle(pd.DataFrame(events))
    assert summary.input_events == 600 and summary.total("late") == 0 and not summary.stopped_early
    assert b.committed("g-bounded", "bounded", 3) == {0: 200, 1: 200, 2: 200}
