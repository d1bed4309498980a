"""Fault-injection driver: runs the flights windows flow into Delta, PostgreSQL and Parquet.

Usage: python driver.py INPUT_GLOB OUT_DIR PG_DSN [pass]
With ``pass``, a stateless flow instead (filter, projection) into Delta, PostgreSQL and Parquet.
Run, killed with SIGKILL at random moments and restarted by tests/e2e/test_fault_injection.py;
each start resumes from OUT_DIR/_checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

import wire


def main() -> None:
    glob, out, dsn = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    flow = wire.Flow("faults")
    flights = flow.source(
        wire.sources.files(glob, format="parquet"), event_time="sched_dep_ms", key="origin",
        watermark=wire.BoundedOutOfOrderness("15m"), max_events_per_epoch=2_500, name="flights")
    if sys.argv[4:] == ["pass"]:  # a stateless flow: its source's tasks write the sinks (sink fusion)
        departed = (flights.filter("dep_delay IS NOT NULL AND dep_delay > 0")
                    .select("origin", "dest", "sched_dep_ms", "dep_delay", "carrier"))
        departed.sink(wire.sinks.delta(str(out / "delta")), name="delta")
        departed.sink(wire.sinks.postgres(dsn, table="departed_append"), name="pg_append")
        departed.sink(wire.sinks.parquet(out / "departed"), name="parquet")
        flow.dead_letters().sink(wire.sinks.parquet(out / "dead_letters"), name="dead_letters")
        spark = wire.spark("local[2]", log_file=out / "spark.log")
        summary = flow.run(str(out / "_checkpoint"), spark=spark, key_groups=4)
        print(f"DONE epochs={summary.epochs}", flush=True)
        return
    hourly = (flights.filter("dep_delay IS NOT NULL")
              .window(wire.Tumbling("1h"), allowed_lateness="60m")
              .aggregate(departures=wire.count(), mean_dep_delay=wire.mean("dep_delay"),
                         max_dep_delay=wire.max("dep_delay"), name="hourly"))
    hourly.sink(wire.sinks.delta(str(out / "delta")), name="delta")
    hourly.sink(wire.sinks.postgres(dsn, table="hourly_append"), name="pg_append")
    hourly.sink(wire.sinks.postgres(dsn, table="hourly_upsert", mode="upsert",
                                    key=("origin", "window_start")), name="pg_upsert")
    hourly.sink(wire.sinks.parquet(out / "windows"), name="parquet")
    hourly.late().sink(wire.sinks.parquet(out / "late"), name="late")
    spark = wire.spark("local[2]", log_file=out / "spark.log")
    summary = flow.run(str(out / "_checkpoint"), spark=spark, key_groups=4)
    print(f"DONE epochs={summary.epochs}", flush=True)


if __name__ == "__main__":
    main()
