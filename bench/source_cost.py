"""What a Wire file source costs against Spark's own file readers (issue 10, item 3).

The same files (``--events`` synthetic events ``key, ts, value`` in files of
``--per-file``) are passed through unchanged, one file per epoch, by

* **Wire**: ``wire.sources.files(format=...)`` -> ``wire.sinks.parquet`` (the Python data
  source parses the file in a Python worker and hands Arrow batches to the JVM; an
  executor sink writes each epoch's rows from a second Python stage);
* **plain PySpark**: ``spark.readStream.format(...)`` with ``maxFilesPerTrigger=1`` ->
  ``foreachBatch`` -> ``batch.write.parquet`` (Spark's JVM readers and writer).

for Parquet, CSV and JSON Lines, both engines in one run and one SparkSession
(``local[2]``). Reported: the steady throughput (events / summed epoch wall time,
without the first epoch, which carries Python worker start-up) and the ratio Wire/plain.

Usage: .venv/bin/python bench/source_cost.py [--events N] [--per-file N] [--formats parquet,csv,jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import wire

OUT = Path("out/bench_source_cost")
SCHEMA = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("value", pa.float64())])
SPARK_FORMAT = {"parquet": "parquet", "csv": "csv", "jsonl": "json"}


def write_input(d: Path, fmt: str, n_events: int, per_file: int) -> None:
    """``n_events`` rows in files of ``per_file``; seeded, the same rows for every format."""
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    rng = np.random.default_rng(7)
    ts = np.arange(n_events, dtype=np.int64) * 10
    keys = np.char.add("k", rng.integers(0, 1000, n_events).astype(str))
    values = np.round(rng.random(n_events), 6)
    for i, start in enumerate(range(0, n_events, per_file)):
        sl = slice(start, start + per_file)
        table = pa.table({"key": keys[sl], "ts": ts[sl], "value": values[sl]}, schema=SCHEMA)
        path = d / f"part-{i:05d}.{fmt}"
        if fmt == "parquet":
            pq.write_table(table, path)
        elif fmt == "csv":
            pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="none"))
        else:
            with open(path, "w") as f:
                for row in table.to_pylist():
                    f.write(json.dumps(row) + "\n")


def run_wire(spark, src: Path, fmt: str, per_file: int, out: Path) -> tuple[int, list[float]]:
    flow = wire.Flow("source-cost")
    events = flow.source(wire.sources.files(str(src), format=fmt, schema=SCHEMA), event_time="ts",
                         key="key", max_events_per_epoch=per_file)
    events.sink(wire.sinks.parquet(out / "wire"))
    summary = flow.run(checkpoint=str(out / "wire_ck"), spark=spark)
    return summary.input_events, summary.epoch_wall_seconds


def run_plain(spark, src: Path, fmt: str, out: Path) -> tuple[int, list[float]]:
    reader = spark.readStream.format(SPARK_FORMAT[fmt]).option("maxFilesPerTrigger", 1)
    reader = reader.schema("key string, ts long, value double")
    if fmt == "csv":
        reader = reader.option("header", "true")
    df = reader.load(str(src))
    marks: list[float] = []

    def sink(batch, epoch_id):
        batch.write.mode("append").parquet(str(out / "plain"))
        marks.append(time.perf_counter())

    t0 = time.perf_counter()
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(out / "plain_ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    n = sum(p["numInputRows"] for p in q.recentProgress)
    return n, [b - a for a, b in zip([t0, *marks[:-1]], marks, strict=True)]


def steady(n_total: int, per_file: int, epochs: list[float]) -> tuple[float, float]:
    """(events/s over the epochs after the first full one, median epoch ms)."""
    full = epochs[1 : max(1, n_total // per_file)]
    events = per_file * len(full)
    return (events / sum(full) if full else float("nan"),
            statistics.median(full) * 1000 if full else float("nan"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--per-file", type=int, default=100_000)
    p.add_argument("--formats", default="parquet,csv,jsonl")
    args = p.parse_args()
    spark = wire.spark("local[2]")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"{'format':<8} {'wire ev/s':>11} {'plain ev/s':>11} {'wire/plain':>10} "
          f"{'wire epoch ms':>14} {'plain epoch ms':>15}")
    for fmt in args.formats.split(","):
        src = OUT / f"input_{fmt}"
        write_input(src, fmt, args.events, args.per_file)
        out = OUT / f"run_{fmt}"
        shutil.rmtree(out, ignore_errors=True)
        wn, wl = run_wire(spark, src, fmt, args.per_file, out)
        pn, pl = run_plain(spark, src, fmt, out)
        assert wn == pn == args.events, (wn, pn)
        wr, wm = steady(wn, args.per_file, wl)
        pr, pm = steady(pn, args.per_file, pl)
        print(f"{fmt:<8} {wr:>11,.0f} {pr:>11,.0f} {wr / pr:>9.2f}x {wm:>14.0f} {pm:>15.0f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
