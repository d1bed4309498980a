"""A Kafka broker restart while a flow reads it: the flow waits or retries, then resumes without loss
or duplicates.

noida-db 0.2.3 keeps topics, records and group offsets across a SIGTERM restart with the same
data dir (measured: see :mod:`wire.testing.kafka`), so the restart here is a real one: the
same topic, the broker stopped (SIGTERM to its process group) with records still to read,
started again on the same port. Down for 3 s or 15 s (more than the source's 10 s request
timeout) the running query waits: its planner returns no epoch while requests fail. (Failing
after ``unavailable_timeout`` is tested against a fake consumer in
``tests/unit/sources/test_kafka_outage.py``: here whether the planner sees the outage for long
enough depends on where Spark is in its epoch loop when the broker goes down.) The oracle is
pandas over the produced records, never a run.
"""

from __future__ import annotations

import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.sources.kafka_source.source import kafka

pytestmark = pytest.mark.spark
pytest.importorskip("confluent_kafka")

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
N1, N2 = 600, 200


def rows(out) -> pd.DataFrame:
    files = sorted(out.glob("*/*.parquet"))
    if not files:
        return pd.DataFrame(columns=["k", "v", "kafka_partition", "kafka_offset"])
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()


def wait_for(predicate, timeout_s=240.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def events(lo: int, hi: int) -> list[dict]:
    return [{"t": i * 10, "k": "abcd"[i % 4], "v": i} for i in range(lo, hi)]


@pytest.mark.parametrize(("down_s", "unavailable_timeout"), [(3.0, "5m"), (15.0, "5m")],
                         ids=["down-3s", "down-15s"])
def test_broker_restart_mid_run(spark, kafka_broker, tmp_path, down_s, unavailable_timeout):
    """600 events on 4 partitions, 40 per epoch; the broker goes down after the first output
    for ``down_s`` (15 s is longer than the source's 10 s request timeout), comes back, then
    200 more events are produced. The query waits (the outage is within
    ``unavailable_timeout``), without failing. Every event is written exactly once:
    the rows equal pandas' frame of the produced events, and no (partition, offset) repeats."""
    b = kafka_broker
    topic = f"restart{int(down_s)}"
    b.create_topic(topic, partitions=4)
    first, second = events(0, N1), events(N1, N1 + N2)
    b.produce(topic, [(e["v"] % 4, e["k"].encode(), e, None) for e in first])
    out = tmp_path / "out"
    flow = wire.Flow(f"restart_{int(down_s)}")
    s = flow.source(kafka(b.bootstrap, topic, group=f"g-{topic}", schema=SCHEMA,
                          unavailable_timeout=unavailable_timeout),
                    event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(0),
                    max_events_per_epoch=40, name="events")
    s.sink(wire.sinks.parquet(out))
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        wait_for(lambda: len(rows(out)) > 0 or not running.is_active(), what="first output")
        assert running.is_active(), f"the flow stopped before its first output: {running.last_error}"
        b.kill()
        at_kill = len(rows(out))
        time.sleep(down_s)
        b.start()
        b.produce(topic, [(e["v"] % 4, e["k"].encode(), e, None) for e in second])
        wait_for(lambda: len(rows(out)) >= N1 + N2 or not running.is_active(), what="all events")
        # the query waited: the outage was within unavailable_timeout
        assert running.is_active(), running.last_error
        assert at_kill < N1, "the broker went down after the first batch was read: not mid-run"
        # The group commit of an epoch is made when Spark plans the next one; once the topic is
        # drained no further epoch comes (no window here whose watermark ticks), so the group's
        # offsets may stay one epoch (<= 40 records) behind: never ahead (measured, 2026-11-23).
        # Commits are made at most once per commit_interval (5 s): the last one within it.
        committed = b.committed(f"g-{topic}", topic, 4)
        assert all(0 <= o <= (N1 + N2) // 4 for o in committed.values()), committed
        wait_for(lambda: sum(b.committed(f"g-{topic}", topic, 4).values()) >= N1 + N2 - 40, timeout_s=30,
                 what="the group's offsets within an epoch of the end")
        committed = b.committed(f"g-{topic}", topic, 4)
        assert all(0 <= o <= (N1 + N2) // 4 for o in committed.values()), committed
    finally:
        running.stop()
    got = rows(out)
    assert not got.duplicated(["kafka_partition", "kafka_offset"]).any()
    oracle = pd.DataFrame(first + second)
    key = ["v", "k", "t"]
    pd.testing.assert_frame_equal(got[key].sort_values("v").reset_index(drop=True),
                                  oracle[key].sort_values("v").reset_index(drop=True), check_dtype=False)
