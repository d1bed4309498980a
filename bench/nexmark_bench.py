"""Benchmark: Nexmark queries in Wire vs the same queries hand-written in plain PySpark.

Wire reads the events from the ``nexmark`` source (generated inside the source tasks,
generation time included); plain PySpark reads the same events, generated once and
written to Parquet (one file per epoch, ``maxFilesPerTrigger=1``, ``availableNow``),
with ``withWatermark`` and native ``window()`` / ``session_window()``. Both use the
same epoch size and a 5 s watermark delay; event rate 10,000 events/s of event time.

Native q5 is two chained streaming aggregations (count per auction per sliding window,
then max per window over ``window_time``), which Spark supports in append mode.

Usage: .venv/bin/python bench/nexmark_bench.py [--events N] [--epoch-size N] [--queries q0,q7]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import functions as F

import wire
from wire.connectors.nexmark import generate
from wire.examples.nexmark_queries import QUERIES, SHIFT, build

OUT = Path("out/bench_nexmark")
RATE = 10_000
DISORDER_MS = 1_000


def write_input(n: int, epoch: int) -> Path:
    d = OUT / f"input_{n}_{epoch}"
    if d.exists():
        return d
    tmp = d.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for k, lo in enumerate(range(0, n, epoch)):
        t = generate(lo, min(n, lo + epoch), first_event_rate=RATE, out_of_order_ms=DISORDER_MS)
        pq.write_table(t, tmp / f"part-{k:06d}.parquet")
    tmp.rename(d)
    return d


def run_wire(spark, query: str, n: int, epoch: int) -> float:
    out = OUT / f"wire_{query}"
    shutil.rmtree(out, ignore_errors=True)
    flow = build(query, wire.sinks.parquet(out / "out"), events=n, first_event_rate=RATE,
                 out_of_order_ms=DISORDER_MS, max_delay="5s", max_events_per_epoch=epoch)
    t0 = time.perf_counter()
    summary = flow.run(checkpoint=str(out / "ck"), spark=spark)
    elapsed = time.perf_counter() - t0
    assert summary.input_events == n, summary.input_events
    return elapsed


def native_query(df, query: str):
    bids = df.filter("kind = 'bid'")
    cols = ["auction_id", "bidder", "price", "channel", "url", "date_time"]
    if query == "q0":
        return bids.select(*cols)
    if query == "q1":
        return bids.withColumn("price", F.expr("(price * 908) div 1000")).select(*cols)
    if query == "q2":
        return bids.filter("auction_id % 123 = 0").select("auction_id", "price")
    t = bids.withColumn("t", F.timestamp_millis("date_time")).withWatermark("t", "5 seconds")
    if query == "q5":
        counts = t.groupBy(F.window("t", "10 seconds", "2 seconds"), "auction_id").agg(
            F.count(F.lit(1)).alias("bids"))
        scored = counts.select(F.window_time("window").alias("wt"),
                               (F.col("bids") * SHIFT + F.col("auction_id")).alias("score"))
        return scored.groupBy(F.window("wt", "2 seconds")).agg(F.max("score").alias("score"))
    if query == "q7":
        return t.groupBy(F.window("t", "10 seconds")).agg(F.max("price").alias("price"))
    if query == "q11":
        return t.groupBy(F.session_window("t", "10 seconds"), "bidder").agg(
            F.count(F.lit(1)).alias("bids"))
    if query == "q8":
        both = (df.filter("kind IN ('person', 'auction')")
                .withColumn("id", F.expr("CASE WHEN kind = 'person' THEN person_id ELSE seller END"))
                .withColumn("t", F.timestamp_millis("date_time")).withWatermark("t", "5 seconds"))
        agg = both.groupBy(F.window("t", "10 seconds"), "id").agg(
            F.sum(F.expr("CASE WHEN kind = 'person' THEN 1 ELSE 0 END")).alias("persons"),
            F.sum(F.expr("CASE WHEN kind = 'auction' THEN 1 ELSE 0 END")).alias("auctions"),
            F.max("name").alias("name"))
        return agg.filter("persons > 0 AND auctions > 0")
    raise ValueError(query)


def run_native(spark, query: str, src: Path) -> tuple[float, int]:
    out = OUT / f"native_{query}"
    shutil.rmtree(out, ignore_errors=True)
    schema = spark.read.parquet(str(src)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))

    def sink(batch, epoch_id):
        batch.write.mode("append").parquet(str(out / "out"))

    t0 = time.perf_counter()
    q = (native_query(df, query).writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", str(out / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    return elapsed, sum(p["numInputRows"] for p in q.recentProgress)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--epoch-size", type=int, default=100_000)
    p.add_argument("--queries", default=",".join(QUERIES))
    args = p.parse_args()
    spark = wire.spark("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    OUT.mkdir(parents=True, exist_ok=True)
    src = write_input(args.events, args.epoch_size)
    n = args.events
    print(f"Nexmark, {n:,} events, epochs of {args.epoch_size:,}, local[2]")
    print(f"{'query':<6} {'wire ev/s':>12} {'native ev/s':>12} {'wire/native':>12}")
    for query in args.queries.split(","):
        w = run_wire(spark, query, n, args.epoch_size)
        s, rows = run_native(spark, query, src)
        assert rows == n, rows
        print(f"{query:<6} {n / w:>12,.0f} {n / s:>12,.0f} {s / w:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
