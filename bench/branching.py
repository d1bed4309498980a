"""Benchmark: a branching flow (one CSV source, four branches), read once vs once per branch.

The flow is the one of ``tests/e2e/test_branching_flow.py`` (``build``), with a larger
``max_events_per_epoch``: a CSV file source -> a raw Parquet sink; a filter
``amount >= 50`` -> a Parquet sink; a 10 s tumbling count of the filtered rows and a 10 s
tumbling count + sum of all rows -> Parquet sinks; dead letters -> JSON Lines. Engines,
all in one run, one SparkSession (``local[2]``), on the same generated CSV files:

* **wire read-once**: ``flow.run`` as shipped (commit 23447ce): the source sits behind
  one shuffle that every branch shares (``wire.compiler.branches.read_once``), Spark runs
  it once per epoch (``RunSummary.source_scans`` = 1).
* **wire per-branch**: the same flow with ``wire.compiler.plan_compiler.read_once``
  monkeypatched to the identity (``lambda df, step: df``) for that run only, i.e. the
  compiler as it was before 23447ce: Spark scans (and Wire parses) the CSV once per branch.
* **plain PySpark**: ``spark.readStream.csv`` with ``maxFilesPerTrigger=1`` (one file per
  epoch, as Wire's epochs), ``availableNow``, ``foreachBatch``: persist the batch, write
  the raw rows, the filtered rows and the two grouped counts per 10 s window
  (``F.window`` over the event time) to Parquet, unpersist. No watermark/lateness: each
  file holds whole windows, so per-batch grouping gives the final counts.

Each engine runs ``--repeats`` times, interleaved (one round = one run of each), after
one untimed warm-up of each on a small file. Every run's output is checked against
DuckDB over the same CSV files (row counts of raw and filtered rows, number of window
rows, window counts and sums summed) and the script asserts they are equal. Wall time
is from calling ``flow.run`` / ``writeStream.start`` to its return / the query's end.
Per-epoch ``durationMs`` come from a ``StreamingQueryListener`` (Spark's own numbers).
With ``--py-spy "wire read-once,wire per-branch"`` one more, untimed run of each named
engine is sampled by py-spy (Python only: the driver and Spark's Python workers; the JVM,
which runs the shuffle and Spark's own readers, is invisible to it).

Usage: .venv/bin/python bench/branching.py [--rows N] [--files N] [--repeats N] [--py-spy ENGINES]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyspark
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

import wire
from wire.compiler import plan_compiler
from wire.runtime.session import spark_session

SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.int64())])
STEP_MS = 5  # event time advances 5 ms per row: 2,000 rows per 10 s window
WINDOW_MS = 10_000


def write_input(d: Path, rows: int, files: int, users: int, seed: int = 11) -> None:
    """``rows`` rows ``ts,user,amount`` in ``files`` CSV files, in event-time order.

    ``ts`` = row index * 5 ms, so each file (rows / files, a multiple of 2,000) holds whole
    10 s windows; ``user`` uniform over ``users``; ``amount`` uniform in [0, 100).
    """
    per_file = rows // files
    assert per_file * files == rows and per_file % (WINDOW_MS // STEP_MS) == 0, (rows, files)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    ts = np.arange(rows, dtype=np.int64) * STEP_MS
    user = np.char.add("u", rng.integers(0, users, rows).astype(str))
    amount = rng.integers(0, 100, rows, dtype=np.int64)
    for i in range(files):
        sl = slice(i * per_file, (i + 1) * per_file)
        table = pa.table({"ts": ts[sl], "user": user[sl], "amount": amount[sl]}, schema=SCHEMA)
        pacsv.write_csv(table, d / f"part-{i:05d}.csv", pacsv.WriteOptions(quoting_style="none"))


def oracle(d: Path) -> dict[str, int]:
    """What every engine must write, computed by DuckDB over the CSV files."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW ev AS SELECT * FROM read_csv('{d}/*.csv', header=true, "
                "columns={'ts': 'BIGINT', 'user': 'VARCHAR', 'amount': 'BIGINT'})")
    q = ("SELECT count(*), sum(n), sum(total) FROM (SELECT user, ts // 10000 AS w, count(*) AS n, "
         "sum(amount) AS total FROM ev {where} GROUP BY ALL)")
    raw = con.execute("SELECT count(*) FROM ev").fetchone()[0]
    big = con.execute("SELECT count(*) FROM ev WHERE amount >= 50").fetchone()[0]
    w_rows, w_n, w_total = con.execute(q.format(where="")).fetchone()
    b_rows, b_n, _ = con.execute(q.format(where="WHERE amount >= 50")).fetchone()
    return {"raw": raw, "big": big, "windows_rows": w_rows, "windows_n": int(w_n),
            "windows_total": int(w_total), "big_windows_rows": b_rows, "big_windows_n": int(b_n)}


def outputs(out: Path, pattern: str) -> dict[str, int]:
    """The same figures over an engine's Parquet outputs (``pattern``: files under a sink)."""
    con = duckdb.connect()

    def scan(sink: str) -> str:
        return f"read_parquet('{out / sink / pattern}')"

    w_rows, w_n, w_total = con.execute(
        f"SELECT count(*), sum(n), sum(total) FROM {scan('windows')}").fetchone()
    b_rows, b_n = con.execute(f"SELECT count(*), sum(n) FROM {scan('big_windows')}").fetchone()
    return {"raw": con.execute(f"SELECT count(*) FROM {scan('raw')}").fetchone()[0],
            "big": con.execute(f"SELECT count(*) FROM {scan('big')}").fetchone()[0],
            "windows_rows": w_rows, "windows_n": int(w_n), "windows_total": int(w_total),
            "big_windows_rows": b_rows, "big_windows_n": int(b_n)}


def build(glob: str, out: Path, per_epoch: int) -> wire.Flow:
    """``tests/e2e/test_branching_flow.build`` with ``max_events_per_epoch=per_epoch``."""
    flow = wire.Flow("branches")
    events = flow.source(wire.sources.files(glob, format="csv", schema=SCHEMA), event_time="ts",
                         key="user", watermark=wire.BoundedOutOfOrderness(0),
                         max_events_per_epoch=per_epoch, name="events")
    events.sink(wire.sinks.parquet(out / "raw"), name="raw")
    big = events.filter("amount >= 50", name="big")
    big.sink(wire.sinks.parquet(out / "big"), name="big_sink")
    (big.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="big_windows")
     .sink(wire.sinks.parquet(out / "big_windows"), name="big_windows_sink"))
    (events.window(wire.Tumbling("10s"))
     .aggregate(n=wire.count(), total=wire.sum("amount"), name="windows")
     .sink(wire.sinks.parquet(out / "windows"), name="windows_sink"))
    flow.dead_letters().sink(wire.sinks.jsonl(out / "dlq"), name="dlq")
    return flow


class Progress(StreamingQueryListener):
    """Spark's per-epoch progress (``durationMs``, input rows) of the queries of a run."""

    def __init__(self) -> None:
        self.epochs: list[dict] = []
        self.query_id: str | None = None
        self.terminated = threading.Event()

    def reset(self) -> None:
        """Follow the next query that starts (late events of earlier queries are ignored)."""
        self.epochs = []
        self.query_id = None
        self.terminated.clear()

    def onQueryStarted(self, event) -> None:
        if self.query_id is None:
            self.query_id = str(event.id)

    def onQueryProgress(self, event) -> None:
        p = event.progress
        if str(p.id) == self.query_id:
            self.epochs.append({"batch": p.batchId, "rows": p.numInputRows, "ms": dict(p.durationMs)})

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        if str(event.id) == self.query_id:
            self.terminated.set()

    def collect(self) -> list[dict]:
        self.terminated.wait(30)
        time.sleep(0.3)  # progress events are posted before the termination event
        return list(self.epochs)


def run_wire(spark, glob: str, out: Path, per_epoch: int, *, read_once: bool):
    flow = build(glob, out, per_epoch)
    patch = (mock.patch.object(plan_compiler, "read_once", lambda df, step: df) if not read_once
             else mock.patch.object(plan_compiler, "read_once", plan_compiler.read_once))
    with patch:
        t0 = time.perf_counter()
        summary = flow.run(str(out / "ck"), spark=spark, progress=False)
        wall = time.perf_counter() - t0
    assert summary.total("late") == 0 and summary.total("malformed") == 0, summary.render()
    info = {"epochs": summary.epochs, "scans": summary.source_scans, "events": summary.input_events,
            "epoch_wall": summary.epoch_wall_seconds}
    return wall, info


def run_plain(spark, src: Path, out: Path):
    df = (spark.readStream.schema("ts long, user string, amount long").option("header", "true")
          .option("maxFilesPerTrigger", 1).csv(str(src)))

    def sink(batch, epoch_id):
        batch.persist()
        batch.write.mode("append").parquet(str(out / "raw"))
        big = batch.filter("amount >= 50")
        big.write.mode("append").parquet(str(out / "big"))
        for name, rows, aggs in (("windows", batch, [F.count(F.lit(1)).alias("n"),
                                                     F.sum("amount").alias("total")]),
                                 ("big_windows", big, [F.count(F.lit(1)).alias("n")])):
            window = F.window(F.timestamp_millis("ts"), "10 seconds").getField("start")
            (rows.groupBy(window.alias("window_start"), "user").agg(*aggs)
             .write.mode("append").parquet(str(out / name)))
        batch.unpersist()

    t0 = time.perf_counter()
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(out / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    epochs = [p for p in q.recentProgress if p["numInputRows"]]
    return wall, {"epochs": len(epochs), "scans": None, "events": sum(p["numInputRows"] for p in epochs),
                  "epoch_wall": []}


ENGINES = ("wire read-once", "wire per-branch", "plain PySpark")


def run_engine(engine: str, spark, src: Path, out: Path, per_epoch: int):
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if engine == "plain PySpark":
        return run_plain(spark, src, out), "*.parquet"
    return run_wire(spark, str(src / "*.csv"), out, per_epoch,
                    read_once=engine == "wire read-once"), "*/*.parquet"


def summarize_durations(epochs: list[dict]) -> str:
    data = [e for e in epochs if e["rows"]]
    if not data:
        return "no progress events"
    keys = sorted({k for e in data for k in e["ms"]})
    med = {k: statistics.median(e["ms"].get(k, 0) for e in data) for k in keys}
    parts = ", ".join(f"{k} {v:.0f}" for k, v in sorted(med.items(), key=lambda kv: -kv[1]))
    first = data[0]["ms"].get("triggerExecution", 0)
    return (f"{len(data)} data epochs (+{len(epochs) - len(data)} without input rows); "
            f"median ms per data epoch: {parts}; first epoch triggerExecution {first} ms; "
            f"sum triggerExecution {sum(e['ms'].get('triggerExecution', 0) for e in epochs) / 1000:.1f} s")


CATEGORIES = (  # first match in a stack wins
    ("Wire source (CSV parse, envelope)", ("wire/sources/",)),
    ("window operators (keyed state, windows)", ("wire/compiler/keyed.py", "wire/compiler/window_stage.py",
                                                 "wire/state/")),
    ("sinks (executor Parquet/JSONL writes)", ("wire/runtime/dataplane.py", "wire/sinks/")),
    ("branch packing (side rows)", ("wire/compiler/branches.py",)),
    ("imports / worker start-up", ("importlib", "zipimport")),
)


def py_spy_run(spark, engine: str, src: Path, out: Path, per_epoch: int, raw_file: Path) -> None:
    """One untimed run of ``engine`` sampled by py-spy; prints where Python time goes."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        print("py-spy: not installed, skipped")
        return
    proc = subprocess.Popen([str(spy), "record", "--pid", str(os.getpid()), "--subprocesses",
                             "--nonblocking", "-r", "50", "--format", "raw", "-o", str(raw_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    t0 = time.perf_counter()
    run_engine(engine, spark, src, out, per_epoch)
    print(f"py-spy run of {engine}: {time.perf_counter() - t0:.1f} s (untimed, sampled)")
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    if not raw_file.exists():
        print("py-spy: no output (attach failed?)")
        return
    leaf: collections.Counter[str] = collections.Counter()
    cats: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw_file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf[frames[-1]] += n
        cats[next((c for c, marks in CATEGORIES if any(m in stack for m in marks)), "other")] += n
        for f in set(frames):
            incl[f] += n
    print(f"py-spy ({engine}): {total} samples of active Python (50 Hz, driver + Python workers)")
    for c, n in cats.most_common():
        print(f"    {n:6d} {100 * n / total:5.1f}%  {c}")
    print("  top self (leaf) frames:")
    for f, n in leaf.most_common(12):
        print(f"    {n:6d} {100 * n / total:5.1f}%  {f[:150]}")
    print("  top inclusive frames (wire / pyspark / pyarrow):")
    shown = 0
    for f, n in incl.most_common(400):
        if any(s in f for s in ("wire/", "pyspark/", "pyarrow/")) and shown < 20:
            print(f"    {n:6d} {100 * n / total:5.1f}%  {f[:150]}")
            shown += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--users", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--py-spy", default="", metavar="ENGINES",
                   help="comma-separated engines to sample with py-spy in one extra untimed run each")
    args = p.parse_args()
    per_epoch = args.rows // args.files
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="wire_branching_"))
    print(f"load average at start (1, 5, 15 min): {load0[0]:.2f}, {load0[1]:.2f}, {load0[2]:.2f}")
    print(f"cores {os.cpu_count()}, PySpark {pyspark.__version__}, Python {sys.version.split()[0]}, "
          f"input {args.rows:,} rows in {args.files} CSV files, max_events_per_epoch {per_epoch:,}, "
          f"temp dir {tmp}")
    try:
        src = tmp / "input"
        t0 = time.perf_counter()
        write_input(src, args.rows, args.files, args.users)
        warm = tmp / "warm_input"
        write_input(warm, 20_000, 1, args.users)
        want = oracle(src)
        print(f"input written in {time.perf_counter() - t0:.1f} s "
              f"({sum(f.stat().st_size for f in src.iterdir()) / 1e6:.0f} MB); DuckDB: {want}")
        spark = spark_session("local[2]", log_file=tmp / "spark.log")
        listener = Progress()
        spark.streams.addListener(listener)
        for engine in ENGINES:  # warm-up: JVM JIT, Python workers; not timed
            run_engine(engine, spark, warm, tmp / "warm_out", 20_000)
        walls: dict[str, list[float]] = {e: [] for e in ENGINES}
        infos: dict[str, list[dict]] = {e: [] for e in ENGINES}
        for r in range(args.repeats):
            for engine in ENGINES:
                listener.reset()
                out = tmp / "out"
                (wall, info), pattern = run_engine(engine, spark, src, out, per_epoch)
                info["progress"] = listener.collect()
                info["spark_rows"] = sum(e["rows"] for e in info["progress"])
                got = outputs(out, pattern)
                assert got == want, (engine, got, want)
                assert info["events"] == args.rows, (engine, info["events"])
                walls[engine].append(wall)
                infos[engine].append(info)
                print(f"round {r + 1} {engine:<16} {wall:7.2f} s  epochs {info['epochs']}  "
                      f"source scans/epoch {info['scans']}  load {os.getloadavg()[0]:.2f}  outputs = DuckDB")
                shutil.rmtree(out, ignore_errors=True)
        plain = statistics.median(walls["plain PySpark"])
        print()
        print("| engine | ratio to plain PySpark (median wall) | median wall s | runs s | epochs "
              "| source scans per epoch | Spark input rows / CSV rows | median epoch wall s (RunSummary) |")
        print("|---|---:|---:|---|---:|---:|---:|---:|")
        for engine in ENGINES:
            med = statistics.median(walls[engine])
            runs = " / ".join(f"{w:.1f}" for w in walls[engine])
            info = infos[engine][-1]
            ew = [statistics.median(i["epoch_wall"]) for i in infos[engine] if i["epoch_wall"]]
            print(f"| {engine} | {med / plain:.2f}x | {med:.2f} | {runs} | {info['epochs']} | "
                  f"{info['scans'] if info['scans'] is not None else 'n/a'} | "
                  f"{info['spark_rows'] / args.rows:.2f} | "
                  f"{statistics.median(ew) if ew else float('nan'):.2f} |")
        print()
        for engine in ENGINES:
            print(f"{engine}, last run: {summarize_durations(infos[engine][-1]['progress'])}")
        for engine in filter(None, args.py_spy.split(",")):
            py_spy_run(spark, engine, src, tmp / "out", per_epoch, tmp / f"py-spy-{engine[5:9]}.raw")
        load1 = os.getloadavg()
        print(f"load average at end (1, 5, 15 min): {load1[0]:.2f}, {load1[1]:.2f}, {load1[2]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
