"""Wire reading Kafka: keyed tumbling count (run with Wire's venv).

``wire.sources.kafka`` (JSON values; event time = the ``ts`` field; per-partition watermarks
with BoundedOutOfOrderness(delay)), the end markers (``ts >= end_ts``) filtered out after the
source, ``window(Tumbling).aggregate(n=count())``, Parquet sinks. The Kafka source is
unbounded: the script stops the flow once the window step's input watermark has passed
``end_ts - delay`` (every partition read its end markers, so every window has closed).
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.kafka_args()
# noida-db 0.2.3 ignores fetch.max.bytes and max.partition.fetch.bytes and answers a fetch with
# everything after the fetch offset (124 MB for a partition of 500,000 events), above librdkafka's
# default response limit (100 MB): without this the consumer fails every fetch and reads nothing.
RECEIVE_LIMIT = {"receive.message.max.bytes": 2_147_483_647}
import pyarrow as pa  # noqa: E402

import wire  # noqa: E402

spark = wire.spark("local[2]")
t_ready = time.time()
schema = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("value", pa.float64())])
flow = wire.Flow("peers-kafka")
group = f"wire-{a.topic}-{a.out.name}"  # a rerun on the same broker reads the topic again
source = wire.sources.kafka(a.bootstrap, a.topic, group=group, schema=schema, config=RECEIVE_LIMIT)
epoch_events = a.epoch_events or source.default_max_events_per_epoch  # Wire's default unless --epoch-events
events = flow.source(source,
                     event_time="ts", key="key", watermark=wire.BoundedOutOfOrderness(a.delay_ms),
                     max_events_per_epoch=a.epoch_events, target_epoch_duration=a.target_epoch_ms,
                     name="events")
counts = (events.filter(f"ts < {a.end_ts}").window(wire.Tumbling(a.window_ms))
          .aggregate(n=wire.count(), name="win"))
out = a.out / "output"
counts.sink(wire.sinks.parquet(str(out)))
counts.late().sink(wire.sinks.parquet(str(a.out / "late")))
flow.dead_letters().sink(wire.sinks.parquet(str(a.out / "dead")))
running = flow.start(str(a.out / "checkpoint"), spark=spark)
while running.watermarks().get("win", {}).get("input_watermark", -1) < a.end_ts - a.delay_ms:
    if not running.is_active():
        raise SystemExit(f"the flow stopped: {running.last_error}")
    time.sleep(0.1)
summary = running.stop()
t_last = time.time()


def steady(log: Path) -> dict:
    """From the flow's epoch log: the data epochs' durations and the rate after the first one."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    seen = [dict(((m[0], m[1]), m[2]) for m in r["metrics"]).get(("events", "events"), 0) for r in rows]
    data = [(r, n) for r, n, before in zip(rows, seen, [0, *seen], strict=False) if n > before]
    if len(data) < 2:
        return {}
    (first, n0), (last, n1) = data[0], data[-1]
    ms = sorted(r["epoch_ms"] for r, _ in data)
    return {"epoch_events": epoch_events, "target_epoch_ms": a.target_epoch_ms, "data_epochs": len(data),
            "steady_ev_s": (n1 - n0) / ((last["t_ms"] - first["t_ms"]) / 1000),
            "epoch_ms_min": ms[0], "epoch_ms_max": ms[-1], "epoch_ms_median": ms[len(ms) // 2],
            "first_data_s": first["t_ms"] / 1000 - t_ready}


S.finish(a.out, t_ready, {"path": f"{out}/epoch-*/*.parquet", "format": "parquet",
                          "rename": {"window_start": "start", "window_end": "end"}},
         wire=wire.__file__, epochs=summary.epochs, input_events=summary.input_events,
         **steady(a.out / "checkpoint" / "epochs.jsonl"))
spark.stop()
