"""Benchmark: Wire's tumbling-window pipeline vs the same count in plain PySpark.

Workloads (same input files for both engines, one file = one epoch):
  flights      the main job's pipeline on the 336,776 NYC 2013 flights
  <window>-1k    synthetic stream, 1,000 keys, window = tumbling 10 s | sliding 10 s / 2 s |
  <window>-100k  session gap 10 s; and the same with 100,000 keys
Prints events/s, per-epoch latency p50/p99 (time between epoch completions) and peak
RSS of the JVM and of this Python driver, then the Wire / native throughput ratio.

Usage: .venv/bin/python bench/windows_bench.py [--events N] [--epoch-size N] [--only NAME]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
from bench_data import synth_files
from pyspark.sql import functions as F

import wire
from wire.examples.flights import prepare_flights
from wire.examples.flights_job import flights_flow

OUT = Path("out/bench")


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) * 1000 if xs else float("nan")


def jvm_peak_mb(spark) -> float:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return float("nan")


WINDOWS = {
    "tumbling": (lambda: wire.Tumbling("10s"), lambda c: F.window(c, "10 seconds")),
    "sliding": (lambda: wire.Sliding("10s", "2s"), lambda c: F.window(c, "10 seconds", "2 seconds")),
    "session": (lambda: wire.Session("10s"), lambda c: F.session_window(c, "10 seconds")),
}


def run_wire_synth(spark, glob: str, out: Path, epoch: int, kind: str = "tumbling"
                   ) -> tuple[int, list[float], float]:
    flow = wire.Flow("bench")
    s = flow.source(wire.sources.files(glob, format="parquet"), event_time="ts", key="key",
                    watermark=wire.BoundedOutOfOrderness("2s"), max_events_per_epoch=epoch)
    counts = s.window(WINDOWS[kind][0]()).aggregate(n=wire.count(), name="counts")
    counts.sink(wire.sinks.parquet(out / "windows"))
    counts.late().sink(wire.sinks.parquet(out / "late"))
    t0 = time.perf_counter()
    summary = flow.run(checkpoint=str(out / "ck"), spark=spark)
    return summary.input_events, summary.epoch_wall_seconds, time.perf_counter() - t0


def run_wire_flights(spark, glob: str, out: Path, epoch: int) -> tuple[int, list[float], float]:
    flow = flights_flow(glob, out, max_events_per_epoch=epoch)
    t0 = time.perf_counter()
    summary = flow.run(checkpoint=str(out / "_checkpoint"), spark=spark)
    return summary.input_events, summary.epoch_wall_seconds, time.perf_counter() - t0


def run_native(spark, glob: str, out: Path, ts: str, key: str, size: str, delay: str,
               flights: bool, kind: str = "tumbling") -> tuple[int, list[float], float]:
    """The same windowed count hand-written with Spark's window() and withWatermark()."""
    schema = spark.read.parquet(glob).schema
    df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
          .parquet(str(Path(glob).parent)))
    if flights:
        df = df.filter("dep_delay IS NOT NULL")
    df = df.withColumn("t", F.timestamp_millis(F.col(ts))).withWatermark("t", delay)
    aggs = [F.count(F.lit(1)).alias("n")]
    if flights:
        aggs += [F.mean("dep_delay"), F.max("dep_delay")]
    win = F.window("t", size) if flights else WINDOWS[kind][1](F.col("t"))
    agg = df.groupBy(win, F.col(key)).agg(*aggs)
    marks: list[float] = []

    def sink(batch, epoch_id):
        batch.write.mode("append").parquet(str(out / "native"))
        marks.append(time.perf_counter())

    t0 = time.perf_counter()
    q = (agg.writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", str(out / "native_ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    n = sum(p["numInputRows"] for p in q.recentProgress)
    lat = [b - a for a, b in zip([t0, *marks[:-1]], marks, strict=True)]
    return n, lat, elapsed


def report(name: str, engine: str, n: int, lat: list[float], elapsed: float, spark) -> float:
    rate = n / elapsed
    print(f"{name:<14} {engine:<7} {n:>9,} ev {elapsed:7.1f} s {rate:>10,.0f} ev/s  "
          f"epoch p50 {pct(lat, 50):7.0f} ms p99 {pct(lat, 99):7.0f} ms  epochs {len(lat):>4}  "
          f"JVM peak {jvm_peak_mb(spark):6.0f} MB  py peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:5.0f} MB")
    return rate


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--epoch-size", type=int, default=100_000)
    p.add_argument("--only", default=None)
    p.add_argument("--windows", default="tumbling,sliding,session")
    args = p.parse_args()
    spark = wire.spark("local[2]")
    OUT.mkdir(parents=True, exist_ok=True)
    work = {"flights": (None, "tumbling")}
    for kind in args.windows.split(","):
        work[f"{kind}-1k"] = (1_000, kind)
        work[f"{kind}-100k"] = (100_000, kind)
    print(f"{'workload':<11} {'engine':<7} events, time, throughput, epoch latency, memory")
    inputs: dict[int, str] = {}
    for name, (keys, kind) in work.items():
        if args.only and name != args.only:
            continue
        out = OUT / name
        shutil.rmtree(out, ignore_errors=True)
        if keys is None:
            data = prepare_flights(OUT / "flights_input", rows_per_file=20_000)
            glob = str(OUT / "flights_input" / "*.parquet")
            n, lat, el = run_wire_flights(spark, glob, out, 20_000)
            w = report(name, "wire", n, lat, el, spark)
            n2, lat2, el2 = run_native(spark, glob, out, "sched_dep_ms", "origin", "1 hour",
                                       "60 minutes", True)
            assert data.events == n
        else:
            if keys not in inputs:
                inputs[keys] = synth_files(OUT / f"synth-{keys}_input", args.events, keys,
                                           args.epoch_size)
            glob = inputs[keys]
            n, lat, el = run_wire_synth(spark, glob, out, args.epoch_size, kind)
            w = report(name, "wire", n, lat, el, spark)
            n2, lat2, el2 = run_native(spark, glob, out, "ts", "key", "10 seconds", "2 seconds",
                                       False, kind)
        nat = report(name, "native", n2, lat2, el2, spark)
        print(f"{name:<14} ratio   wire/native throughput = {w / nat:.2f}"
              f"  (median epoch {statistics.median(lat) * 1000:.0f} vs "
              f"{statistics.median(lat2) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
