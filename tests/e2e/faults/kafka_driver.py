"""Fault-injection driver for Kafka: reads a topic, writes per-key 1 s windows to Kafka
(transactions) and Delta.

Usage: python kafka_driver.py BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP EXPECTED_WINDOWS OUT_DIR
Killed with SIGKILL at random moments and restarted by tests/e2e/test_kafka_fault_injection.py;
each start resumes from OUT_DIR/_checkpoint. The Kafka source is unbounded: the driver stops
the flow gracefully once the Delta table holds EXPECTED_WINDOWS rows, checks that no epoch
is in flight, and prints DONE.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

import wire
from wire.runtime.checkpoint import epochs_settled

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


def delta_rows(path: Path) -> int:
    try:
        return DeltaTable(str(path)).to_pyarrow_table().num_rows
    except Exception:
        return 0


def main() -> None:
    bootstrap, in_topic, out_topic, group = sys.argv[1:5]
    expected, out = int(sys.argv[5]), Path(sys.argv[6])
    flow = wire.Flow("kafka_faults")
    events = flow.source(
        wire.sources.kafka(bootstrap, in_topic, group=group, schema=SCHEMA, idle_timeout="2s"),
        event_time="t", key="k", watermark=wire.BoundedOutOfOrderness("500ms"),
        max_events_per_epoch=200, name="events")
    per_key = (events.window(wire.Tumbling("1s"))
               .aggregate(n=wire.count(), total=wire.sum("v"), name="per_key"))
    per_key.sink(wire.sinks.kafka(bootstrap, out_topic, key="k"), name="kafka_out")
    per_key.sink(wire.sinks.delta(str(out / "delta")), name="delta")
    spark = wire.spark("local[2]", log_file=out / "spark.log")
    ck = str(out / "_checkpoint")
    running = flow.start(ck, spark=spark, key_groups=2)
    try:
        # An idle source makes watermark-only epochs back to back (watermark_interval), so a
        # moment with no epoch in flight may never be seen from here: wait for the output,
        # then stop gracefully, which finishes the epoch in flight.
        while delta_rows(out / "delta") < expected:
            if not running.is_active():
                raise SystemExit(f"the flow stopped: {running.last_error}")
            time.sleep(0.5)
    finally:
        running.stop()
    if not epochs_settled(ck):
        raise SystemExit("an epoch was still in flight after the graceful stop")
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
