"""End-to-end latency at a fixed event rate: Wire vs plain PySpark, same run, same rate.

Both engines read a source **paced in processing time** (``--rate`` events/s, default
100,000) for ``--seconds`` seconds and write every event to Parquet, the stateless
Nexmark q0 shape (bids passed through):

* Wire: ``wire.sources``' Nexmark generator with ``pace=rate`` (event ``i`` becomes
  available ``i / rate`` s after the first epoch is planned), q0, ``wire.sinks.parquet``
  (executors write, the driver commits).
* plain PySpark: Spark's built-in ``rate`` source (``rowsPerSecond=rate``; each row's
  ``timestamp`` is when it became available), ``foreachBatch`` + ``batch.write.parquet``.

Latency of an event = the time its epoch was marked complete in the checkpoint
(``commits/<epoch>`` file mtime, i.e. after every sink committed) minus the time the
event became available. Wire: availability from the offsets log (each epoch's event
range and the recorded ``started_at_ms``); plain: each output row's ``timestamp``.
Reported: p50 / p99 / max over all events, and the epochs' count.

Usage: .venv/bin/python bench/latency.py [--rate 100000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

import wire
from wire.examples import nexmark_queries
from wire.examples.nexmark_source import nexmark

OUT = Path("out/bench_latency")
RETAIN = "spark.sql.streaming.minBatchesToRetain"
"""Spark's conf of how many epochs its offset and commit logs keep (the latency needs them all)."""


def commit_times(checkpoint: Path) -> dict[int, float]:
    """Epoch id -> time (s since the Unix epoch) its commit file was written."""
    d = checkpoint / "commits"
    return {int(f.name): f.stat().st_mtime for f in d.iterdir() if f.name.isdigit()}


def wire_offsets(checkpoint: Path) -> dict[int, dict]:
    """Epoch id -> the Nexmark source's end offset recorded for it."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            lines = f.read_text().splitlines()
            out[int(f.name)] = json.loads(lines[2])  # v1 header, metadata, then the source
    return out


def summarize(lat_s: np.ndarray, epochs: int) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(lat_s, 50) * 1000),
            "p99_ms": float(np.percentile(lat_s, 99) * 1000), "max_ms": float(lat_s.max() * 1000),
            "events": int(lat_s.size), "epochs": epochs}


def run_wire(spark, rate: int, seconds: int) -> dict[str, float]:
    out = OUT / "wire"
    shutil.rmtree(out, ignore_errors=True)
    n = rate * seconds
    flow = wire.Flow("latency-q0")
    events = flow.source(nexmark(events=n, pace=rate), event_time="date_time",
                         watermark=wire.BoundedOutOfOrderness("5s"), max_events_per_epoch=n)
    nexmark_queries.q0(events).sink(wire.sinks.parquet(out / "out"))
    summary = flow.run(checkpoint=str(out / "ck"), spark=spark)
    ck = out / "ck" / "spark"
    commits, offsets = commit_times(ck), wire_offsets(ck)
    if sorted(offsets) != list(range(len(offsets))):  # an epoch's events start where the last one's ended
        raise SystemExit(f"Wire's offset log kept epochs {min(offsets)}-{max(offsets)} only: raise "
                         f"{RETAIN} (a bounded log would count earlier epochs' events in its first)")
    lat: list[np.ndarray] = []
    prev = 0
    for epoch in sorted(offsets):
        end = offsets[epoch]
        hi = int(end["next"])
        if hi > prev and epoch in commits:
            available = end["started_at_ms"] / 1000 + np.arange(prev, hi) / rate
            lat.append(commits[epoch] - available)
        prev = hi
    all_lat = np.concatenate(lat)
    bids = ds.dataset(str(out / "out"), format="parquet").count_rows()
    return {**summarize(all_lat, summary.epochs), "rows_out": bids,
            "driver_rows": sum(summary.driver_rows)}


def run_plain(spark, rate: int, seconds: int) -> dict[str, float]:
    out = OUT / "plain"
    shutil.rmtree(out, ignore_errors=True)
    n = rate * seconds

    def sink(batch, epoch_id: int) -> None:
        (batch.selectExpr("value", "timestamp", f"{epoch_id} AS epoch")
         .write.mode("append").parquet(str(out / "out")))

    q = (spark.readStream.format("rate").option("rowsPerSecond", rate).load()
         .where(f"value < {n}").writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(out / "ck")).trigger(processingTime="0 seconds").start())
    try:
        deadline = time.time() + seconds + 120
        while time.time() < deadline:
            time.sleep(1)
            done = out / "out"
            if done.exists() and ds.dataset(str(done), format="parquet").count_rows() >= n:
                break
    finally:
        q.stop()
    table = ds.dataset(str(out / "out"), format="parquet").to_table()
    commits = commit_times(out / "ck")
    epochs = np.asarray(table.column("epoch").to_numpy())
    ts = table.column("timestamp").cast(pa.timestamp("us")).cast(pa.int64()).to_numpy() / 1e6  # us -> s
    done = np.asarray([commits.get(int(e), np.nan) for e in epochs])
    keep = ~np.isnan(done)
    return {**summarize(done[keep] - ts[keep], len(commits)), "rows_out": table.num_rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    load = os.getloadavg()
    spark = wire.spark("local[2]")
    # Spark keeps 100 epochs of offsets by default; a 20 s run at 100,000 events/s makes about 150
    spark.conf.set(RETAIN, "1000000")
    # warm-up: the first Python worker start and compilation are not what this measures
    run_wire(spark, args.rate, 2)
    w = run_wire(spark, args.rate, args.seconds)
    p = run_plain(spark, args.rate, args.seconds)
    print(f"load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}; "
          f"{args.rate:,} events/s for {args.seconds} s", file=sys.stderr)
    print("| engine | p50 ms | p99 ms | max ms | events | epochs |")
    print("|---|---|---|---|---|---|")
    for name, r in (("Wire", w), ("plain PySpark", p)):
        print(f"| {name} | {r['p50_ms']:,.0f} | {r['p99_ms']:,.0f} | {r['max_ms']:,.0f} | {r['events']:,} "
              f"| {r['epochs']} |")
    print(f"\nWire p99 / plain p99: {w['p99_ms'] / p['p99_ms']:.2f}x; Wire rows reaching the driver: "
          f"{w['driver_rows']}")


if __name__ == "__main__":
    main()
