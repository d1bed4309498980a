"""How an epoch's cost grows with open state: Wire vs plain PySpark (issue 12's benchmark).

Workloads (``--workload``), each ``--epochs`` epochs of ``--epoch-size`` events, one
Parquet file per epoch, both engines in the same run and SparkSession (``local[2]``):

* ``tumbling``: one tumbling 1-hour window that does not close during the run; keys
  mostly unique (key ``i`` for event ``i``: ``epochs x epoch-size`` distinct keys, 3
  million by default), so every epoch adds new state and touches none of the old.
* ``session``: session windows (gap 1 hour, so none closes) over ``--keys`` keys
  (default 1,000,000), each event a random key: every epoch touches old sessions.
* ``join``: an unbounded stream-stream join (``join(within=None)``; plain: inner join
  without watermarks): left has the tumbling workload's unique keys, right every 10th
  of them; both buffers grow for the whole run.

Peak memory: resident bytes of the process tree (driver, JVM, Python workers),
sampled every 0.2 s while each engine runs.

Wire: ``wire.sources.files`` -> ``window(...).aggregate(n=count())`` -> Parquet (its
window state: tumbling bucketed by window end in a MapState of chunks, sessions one table
per key group; transformWithState on RocksDB). Plain
PySpark: ``withWatermark`` + ``groupBy(window|session_window, key).count()`` in append
mode with the RocksDB state store (the same ``spark.sql.streaming.stateStore.providerClass``).

Reported per engine: every epoch's ``triggerExecution`` (ms, from ``recentProgress``),
the ratio of the last epoch's time to the second's (growth), and the total of the data
epochs. The run's end (Wire's final watermark epoch, which closes every window and
writes millions of rows) is not counted: it is output, not state growth.

Usage: .venv/bin/python bench/state_growth.py [--workload tumbling|session] [--epochs 15]
       [--epoch-size 200000] [--keys 1000000] [--no-warmup]
       (--workload join as well)
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

import wire

OUT = Path("out/bench_state_growth")
HOUR_MS = 3_600_000


def write_input(d: Path, workload: str, epochs: int, epoch_size: int, keys: int) -> None:
    """``epochs`` Parquet files of ``epoch_size`` events ``key, ts``, ts inside the first hour."""
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    n = epochs * epoch_size
    rng = np.random.default_rng(11)
    ts = np.arange(n, dtype=np.int64) * (HOUR_MS // 2) // n  # all within the first half hour
    ids = rng.integers(0, keys, n) if workload == "session" else np.arange(n)
    key = np.char.add("u", ids.astype(str))
    for i in range(epochs):
        sl = slice(i * epoch_size, (i + 1) * epoch_size)
        if workload == "join":  # left: the epoch's keys; right: every 10th of them, 1 s later
            (d / "left").mkdir(exist_ok=True)
            (d / "right").mkdir(exist_ok=True)
            pq.write_table(pa.table({"key": key[sl], "ts": ts[sl]}), d / "left" / f"part-{i:05d}.parquet")
            pq.write_table(pa.table({"key": key[sl][::10], "ts": ts[sl][::10] + 1000}),
                           d / "right" / f"part-{i:05d}.parquet")
        else:
            pq.write_table(pa.table({"key": key[sl], "ts": ts[sl]}), d / f"part-{i:05d}.parquet")


class PeakMemory:
    """Peak resident memory (bytes) of this process and all its descendants, sampled every 0.2 s."""

    def __enter__(self) -> PeakMemory:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(os.getpid()))
            self._stop.wait(0.2)


def tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants, from /proc (Linux)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            status = (d / "status").read_text()
        except OSError:
            continue
        parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        kb = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
        rss[int(d.name)] = int(kb[0]) * 1024 if kb else 0
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(rss.get(p, 0) for p in tree)


def epoch_ms(progress: list[dict], epochs: int) -> list[int]:
    """``triggerExecution`` of the first ``epochs`` epochs that read input."""
    data = [p for p in progress if p["numInputRows"] > 0]
    return [int(p["durationMs"]["triggerExecution"]) for p in data[:epochs]]


def run_wire(spark, glob: str, workload: str, epoch_size: int, out: Path) -> list[dict]:
    flow = wire.Flow("state-growth")
    if workload == "join":  # an unbounded join (within=None): both buffers grow all run
        root = glob.rsplit("/", 1)[0]
        left, right = (flow.source(wire.sources.files(f"{root}/{side}/*.parquet", format="parquet"),
                                   event_time="ts", key="key", max_events_per_epoch=epoch_size // div,
                                   name=side) for side, div in (("left", 1), ("right", 10)))
        left.join(right, name="pairs").sink(wire.sinks.parquet(out / "wire"), name="pairs_out")
        running = flow.start(str(out / "wire_ck"), spark=spark)
        running.await_termination()
        return list(running.query.recentProgress)
    src = flow.source(wire.sources.files(glob, format="parquet"), event_time="ts", key="key",
                      max_events_per_epoch=epoch_size, name="events")
    window = wire.Tumbling("1h") if workload == "tumbling" else wire.Session("1h")
    counts = src.window(window).aggregate(n=wire.count(), name="counts")
    counts.sink(wire.sinks.parquet(out / "wire"), name="counts_out")
    running = flow.start(str(out / "wire_ck"), spark=spark)
    running.await_termination()
    return list(running.query.recentProgress)


def run_plain(spark, src: Path, workload: str, out: Path) -> list[dict]:
    if workload == "join":  # stream-stream inner join without watermarks: unbounded state
        left, right = (spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1)
                       .parquet(str(src / side)) for side in ("left", "right"))
        pairs = left.join(right.withColumnRenamed("ts", "right_ts"), "key")
        q = (pairs.writeStream.outputMode("append").format("parquet").option("path", str(out / "plain"))
             .option("checkpointLocation", str(out / "plain_ck")).trigger(availableNow=True).start())
        q.awaitTermination()
        return list(q.recentProgress)
    df = (spark.readStream.schema("key string, ts long").option("maxFilesPerTrigger", 1)
          .parquet(str(src)))
    df = df.withColumn("t", F.timestamp_millis("ts")).withWatermark("t", "0 seconds")
    win = F.window("t", "1 hour") if workload == "tumbling" else F.session_window("t", "1 hour")
    agg = df.groupBy(win, F.col("key")).count()

    def sink(batch, epoch_id):
        batch.write.mode("append").parquet(str(out / "plain"))

    q = (agg.writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", str(out / "plain_ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    return list(q.recentProgress)


def report(engine: str, times: list[int]) -> None:
    growth = times[-1] / times[1] if len(times) > 2 else float("nan")
    print(f"{engine:<6} total {sum(times) / 1000:7.1f} s  last/second epoch {growth:5.2f}x  "
          f"epochs ms: {' '.join(str(t) for t in times)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=("tumbling", "session", "join"), default="tumbling")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--epoch-size", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="run both engines once on a tiny input first (default: on)")
    args = p.parse_args()
    spark = wire.spark("local[2]")
    src = OUT / f"input_{args.workload}"
    write_input(src, args.workload, args.epochs, args.epoch_size, args.keys)
    out = OUT / f"run_{args.workload}"
    shutil.rmtree(out, ignore_errors=True)
    if args.warmup:  # both engines once on a tiny input: neither pays the cold JVM in the measured run
        tiny = OUT / f"warmup_{args.workload}"
        write_input(tiny, args.workload, 2, 1000, 1000)
        run_wire(spark, str(tiny / "*.parquet"), args.workload, 1000, out / "warmup")
        run_plain(spark, tiny, args.workload, out / "warmup")
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.workload}, {args.epochs} epochs "
          f"of {args.epoch_size:,} events")
    with PeakMemory() as wire_mem:
        wire_progress = run_wire(spark, str(src / "*.parquet"), args.workload, args.epoch_size, out)
    with PeakMemory() as plain_mem:
        plain_progress = run_plain(spark, src, args.workload, out)
    print(f"peak RSS of the process tree (Python driver + JVM + Python workers): wire "
          f"{wire_mem.peak / 2**30:.2f} GiB, plain {plain_mem.peak / 2**30:.2f} GiB")
    wire_times, plain_times = epoch_ms(wire_progress, args.epochs), epoch_ms(plain_progress, args.epochs)
    for engine, progress in (("wire", wire_progress), ("plain", plain_progress)):
        first = next(p for p in progress if p["numInputRows"] > 0)
        print(f"{engine} first data epoch, ms: {first['durationMs']}")
    report("wire", wire_times)
    report("plain", plain_times)
    print(f"Wire / plain total time: {sum(wire_times) / sum(plain_times):.2f}x")
    if args.workload == "join":  # both engines must find the same pairs
        rows = [pq.ParquetDataset(str(out / e)).read(columns=["key"]).num_rows for e in ("wire", "plain")]
        print(f"pairs: wire {rows[0]:,}, plain {rows[1]:,}" + ("" if rows[0] == rows[1] else "  MISMATCH"))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
