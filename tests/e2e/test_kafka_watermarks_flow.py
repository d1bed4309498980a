"""Per-partition watermarks of the Kafka source on a real broker (noida-db), seed 003.

Two partitions, key ``a`` on partition 0 and key ``b`` on partition 1, tumbling windows of
1,000 ms, watermark delay 0, allowed lateness 0. A window [s, s+1000) is emitted once the
source watermark (the minimum over the partitions that are not idle) reaches s+1000; an
event is late when its window already closed under the watermark its epoch started with.
Every expectation below is derived by hand from the produced records (the transcripts in
the docstrings), never from a run. Each phase is produced only after the previous phase's
effect is visible, so epoch boundaries do not change the outcome.
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.sources.kafka_source.source import kafka

pytestmark = pytest.mark.spark
pytest.importorskip("confluent_kafka")

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])


def _read(out) -> pa.Table | None:
    files = sorted(out.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


def windows(out) -> set[tuple[str, int, int]]:
    """(key, window start, count) of windows of keys a and b starting before 9,000."""
    t = _read(out)
    if t is None:
        return set()
    starts = t.column("window_start").cast(pa.timestamp("ms", "UTC")).cast(pa.int64()).to_pylist()
    rows = zip(t.column("k").to_pylist(), starts, t.column("n").to_pylist(), strict=True)
    return {r for r in rows if r[0] in ("a", "b") and r[1] < 9_000}


def late(out) -> list[tuple[str, int, int]]:
    """(key, event time, partition) of the late port's rows."""
    t = _read(out)
    if t is None:
        return []
    return sorted(zip(t.column("k").to_pylist(), t.column("t").to_pylist(),
                      t.column("kafka_partition").to_pylist(), strict=True))


def wait_for(predicate, timeout_s=240.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def produce(broker, topic, p0=(), p1=()):
    broker.produce(topic, [(0, b"a", {"t": t, "k": "a"}, None) for t in p0]
                   + [(1, b"b", {"t": t, "k": "b"}, None) for t in p1])


def start(tmp_path, broker, topic, idle_timeout=None):
    out, late_out = tmp_path / "out", tmp_path / "late"
    flow = wire.Flow(f"wm_{topic}")
    src = kafka(broker.bootstrap, topic, group=f"g-{topic}", schema=SCHEMA, idle_timeout=idle_timeout)
    s = flow.source(src,
                    event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(0),
                    max_events_per_epoch=1_000, name="events")
    w = s.window(wire.Tumbling(1_000)).aggregate(n=wire.count(), name="w")
    w.sink(wire.sinks.parquet(out))
    w.late().sink(wire.sinks.parquet(late_out))
    return flow, out, late_out


class Heartbeat:
    """Records (key h, event time 4600) to partition 0 every 300 ms: partition 0 never goes idle.

    When every partition is idle the source watermark advances with processing time (seed
    003); the heartbeat keeps partition 0 active, so the watermark stays at its 4600.
    """

    def __init__(self, broker, topic):
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": broker.bootstrap})
        self.topic, self.stop_event = topic, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_event.wait(0.3):
            self.producer.produce(self.topic, value=b'{"t": 4600, "k": "h"}', key=b"h", partition=0)
            self.producer.flush(5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(10)


def source_watermark(running) -> int | None:
    return running.watermarks().get("events", {}).get("watermark")


def test_lagging_partition_holds_the_watermark(spark, kafka_broker, tmp_path):
    """No idle timeout; partition 1 lags in event time.

    Phase 1, produced before the start:
      p0 (a): 100 600 1100 1600 2100 2600 3100 3600 4100 4600  -> wm(p0) = 4600
      p1 (b): 200 700 1300                                       -> wm(p1) = 1300
      source watermark = min(4600, 1300) = 1300: only [0,1000) closes: (a,0,2) (b,0,2).
      p1's 1300 is not late although p0 is at 4600 (the minimum, not the maximum, rules).
      Waiting 4 s more closes nothing else, and the watermark stays 1300.
    Phase 2: p1 (b): 1800 3900 4700 -> wm(p1) = 4700, source = min(4600, 4700) = 4600:
      [1000,2000): (a,1000,2) {1100,1600} (b,1000,2) {1300,1800}
      [2000,3000): (a,2000,2)   [3000,4000): (a,3000,2) (b,3000,1) {3900}
      [4000,5000) stays open (a: 4100 4600; b: 4700).
    Phase 3 (after the phase-2 windows are out, so its epochs start at watermark >= 4600):
      p0 (a): 900 4650; p1 (b): 2500 4800
      late: (a,900,p0) window [0,1000) closed; (b,2500,p1) window [2000,3000) closed.
      on time: 4650, 4800 into [4000,5000) (4650, 4800 >= 4600 and their window is open).
    Phase 4: p0 (a): 9100; p1 (b): 9000 -> source = 9000: [4000,5000) closes:
      (a,4000,3) {4100,4600,4650} (b,4000,2) {4700,4800}; [9000,10000) stays open.
    """
    b = kafka_broker
    b.create_topic("lag", partitions=2)
    produce(b, "lag", p0=range(100, 4601, 500), p1=(200, 700, 1300))
    flow, out, late_out = start(tmp_path, b, "lag")
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        phase1 = {("a", 0, 2), ("b", 0, 2)}
        wait_for(lambda: windows(out) == phase1, what="window [0,1000)")
        time.sleep(4)
        assert windows(out) == phase1
        assert source_watermark(running) == 1300
        assert late(late_out) == []

        produce(b, "lag", p1=(1800, 3900, 4700))
        phase2 = phase1 | {("a", 1000, 2), ("b", 1000, 2), ("a", 2000, 2), ("a", 3000, 2), ("b", 3000, 1)}
        wait_for(lambda: windows(out) == phase2, what="windows up to [3000,4000)")
        assert source_watermark(running) == 4600

        produce(b, "lag", p0=(900, 4650), p1=(2500, 4800))
        wait_for(lambda: len(late(late_out)) >= 2, what="two late events")
        produce(b, "lag", p0=(9100,), p1=(9000,))
        final = phase2 | {("a", 4000, 3), ("b", 4000, 2)}
        wait_for(lambda: windows(out) == final, what="window [4000,5000)")
        assert late(late_out) == [("a", 900, 0), ("b", 2500, 1)]
        assert source_watermark(running) == 9000
    finally:
        running.stop()
    assert windows(out) == final


def test_idle_partition_lets_windows_close(spark, kafka_broker, tmp_path):
    """idle_timeout 2 s; partition 1 falls silent, partition 0 keeps a heartbeat (class Heartbeat,
    key h at 4600, not counted below).

    Produced before the start:
      p0 (a): 100 600 1100 1600 2100 2600 3100 3600 4100 4600  -> wm(p0) = 4600
      p1 (b): 200                                               -> wm(p1) = 200
      First: source = min(4600, 200) = 200, nothing closes. p1 receives nothing more; 2 s
      after its last record it is idle, the source watermark is p0's alone: 4600 (it never
      goes back). Closed: (a,0,2) (b,0,1) (a,1000,2) (a,2000,2) (a,3000,2); [4000,5000) open.
      Without the idle timeout nothing would close but [0,...) never: the other test.
    Then p1 wakes up (b): 2500 4700. It is active again with wm(p1) = 4700, but the source
      watermark is monotonic and stays 4600 (min(4600, 4700)):
      late: (b,2500,p1) ([2000,3000) closed under 4600); 4700 on time into [4000,5000).
    Then the heartbeat stops; p0 (a): 9100, p1 (b): 9200 -> source >= 9100: (a,4000,2)
      {4100,4600} (b,4000,1) {4700}. (Windows from 9,000 on are not compared: once both
      partitions are idle the watermark moves with processing time.)
    """
    b = kafka_broker
    b.create_topic("idle", partitions=2)
    produce(b, "idle", p0=range(100, 4601, 500), p1=(200,))
    flow, out, late_out = start(tmp_path, b, "idle", idle_timeout="2s")
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    heartbeat = Heartbeat(b, "idle").__enter__()
    try:
        closed = {("a", 0, 2), ("b", 0, 1), ("a", 1000, 2), ("a", 2000, 2), ("a", 3000, 2)}
        wait_for(lambda: windows(out) == closed, what="windows closed by the idle partition")
        assert source_watermark(running) == 4600

        produce(b, "idle", p1=(2500, 4700))
        wait_for(lambda: len(late(late_out)) >= 1, what="the late event")
        heartbeat.__exit__()
        produce(b, "idle", p0=(9100,), p1=(9200,))
        final = closed | {("a", 4000, 2), ("b", 4000, 1)}
        wait_for(lambda: windows(out) == final, what="window [4000,5000)")
        assert late(late_out) == [("b", 2500, 1)]
    finally:
        heartbeat.__exit__()
        running.stop()
    assert windows(out) == final
