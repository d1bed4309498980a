"""Nexmark benchmark: Wire vs the same queries hand-written in plain PySpark Structured Streaming.

Both engines run in one SparkSession (``local[2]``) in one process, one query after the
other, over the same events: ``--events`` Nexmark events (10,000 events/s of event time, up
to 1 s out of order), epochs of ``--epoch-size`` events and a 5 s watermark delay.

Order: first an unmeasured warm-up (q0 by each engine: the session's first query pays the
JVM's JIT compilation of the shared paths, Parquet reading and writing, Arrow), then each
query ``--rounds`` times per engine (default 2), alternating which engine runs first (round
0: Wire, round 1: plain PySpark), each engine's runs pooled (events and epoch times added
up, wall time averaged). Until 2026-11-28 21:00 every query ran once, Wire first, without
a warm-up: Wire's q0 then paid the session's whole warm-up (its warm q0 took 4.05 s against
7.37 s cold on the same session, plain PySpark's 4.32 s; ``/tmp`` probe in that stop's note).

* Wire reads the same Parquet files as plain PySpark (``wire.sources.files``, one file per
  epoch; its bounded source ends with a maximal watermark, so it reads no end marker);
  with ``--wire-source generator`` it reads its ``nexmark`` generator source instead, and
  its figures include generating the events inside the Spark source tasks. The flow is
  ``wire.examples.nexmark_queries.build(...)``, started with ``flow.start(...)``; it
  writes to ``wire.sinks.parquet``.
* Plain PySpark reads the same events, generated once beforehand and written to Parquet,
  one file per epoch, with ``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``,
  using the native operators (``withWatermark``, ``window()``, ``session_window()``,
  stream-stream joins); it writes with ``foreachBatch`` + ``batch.write.parquet``. A last
  input file holds one end-of-input marker row (``kind = 'end'``, ids -1, event time one hour
  after the last event, dropped by every query's filter) that advances the watermark so
  the last windows close, as Wire's final watermark-only epoch does (Spark has no
  end-of-input watermark).

Measured per query and engine, from ``StreamingQuery.recentProgress``:

* steady events/s: the input rows of the steady epochs / the sum of their
  ``durationMs.triggerExecution``. Steady epochs = all but the first one (it includes the
  Python worker start-up and the first compilation) and the tiny ones at the end (Wire's
  watermark-only epoch, the native end marker and its no-data epoch). Input rows are those
  of the query's first source (native q3 and q4 read the input twice, once per join side);
* per-epoch latency p50 / p99: ``triggerExecution`` of the steady epochs;
* peak memory: the largest resident memory (RSS) of the whole process tree (this Python
  driver, the JVM and its Python workers), sampled every 100 ms during the run;
* wall time from start to the end of the query;
* output rows of each engine (a sanity check: "MISMATCH" is printed when they differ).

With ``--sql`` each query also runs written in SQL (``wire.streaming_sql.nexmark``, compiled by
``wire.sql`` onto the same operators), measured as Wire's run above, and a second table
compares it with the Python API's run (events/s ratio, epochs, memory, wall time, rows).

With ``--sql-only`` no plain PySpark runs: each query runs in the Python API then in SQL,
back to back, and only that comparison is written (default ``bench/results/nexmark_sql.md``),
with the load average before each pair and whether the two plans' stateful steps have
equal fingerprints (:func:`sql_plan_differences`).

Usage: .venv/bin/python bench/nexmark.py [--events N] [--epoch-size N] [--queries q0,q5] [--sql | --sql-only]
       [--out bench/results/nexmark.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyspark
from machine import facts
from nexmark_measure import PeakRss, Result, count_rows, fill_from_progress, pooled, settle
from nexmark_native import native_query
from pyspark.sql import DataFrame, SparkSession

import wire
from wire.examples import nexmark_queries
from wire.examples.nexmark_source import SCHEMA, generate
from wire.runtime.query_conf import FUSION
from wire.streaming_sql import nexmark as sql_nexmark

OUT = Path("out/bench_nexmark")
RATE = 10_000
DISORDER_MS = 1_000
MASTER = "local[2]"
CORES = 2
ORDER = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11")
FLINK_PER_CORE = {"q0": 380_000, "q1": 395_000, "q2": 414_000, "q3": 219_000, "q4": 28_000,
                  "q5": 75_000, "q7": 23_000, "q8": 162_000, "q11": 46_000}
"""Flink events/s per core (Nexmark repository, guide V2, 4 machines x 16 cores)."""
END_MARKER_AFTER_MS = 3_600_000
LOAD_AT_START = [0.0]


# ----------------------------------------------------------------------------- input


def write_input(n: int, epoch: int) -> Path:
    """The events as Parquet, one file per epoch, then one file with the end marker."""
    d = OUT / f"input_{n}_{epoch}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    last = 0
    k = 0
    for k, lo in enumerate(range(0, n, epoch)):
        t = generate(lo, min(n, lo + epoch), first_event_rate=RATE, out_of_order_ms=DISORDER_MS)
        last = max(last, int(pc.max(t.column("date_time")).as_py()))
        pq.write_table(t, d / f"part-{k:06d}.parquet")
    # ids are -1, not null: Spark pushes the null checks it infers from a join's keys
    # below the watermark and into the Parquet scan, which would skip a null-id marker
    marker = {f.name: pa.array([-1 if pa.types.is_integer(f.type) else None], f.type) for f in SCHEMA}
    marker["kind"] = pa.array(["end"], pa.string())
    marker["date_time"] = pa.array([last + END_MARKER_AFTER_MS], pa.int64())
    pq.write_table(pa.Table.from_pydict(marker, schema=SCHEMA), d / "zz-end-marker.parquet")
    return d


def run_wire(spark: SparkSession, query: str, n: int, epoch: int, src: Path | None = None,
             *, sql: bool = False) -> Result:
    """Wire's run of ``query``: over the Parquet files in ``src`` (the plain engine's input, without
    its end marker: Wire's bounded file source ends with a maximal watermark), or, when ``src`` is
    None, over its generator source (the events made inside the source tasks). ``sql``: the query
    written in SQL (``wire.streaming_sql.nexmark``) instead of the Python API
    (``wire.examples.nexmark_queries``)."""
    out = OUT / f"wire_{'sql_' if sql else ''}{query}"
    shutil.rmtree(out, ignore_errors=True)
    r = Result()
    settle(spark)
    t0 = time.perf_counter()
    with PeakRss() as mem:
        try:
            files = None if src is None else wire.sources.files(str(src / "part-*.parquet"), format="parquet")
            builder = sql_nexmark.build if sql else nexmark_queries.build
            flow = builder(
                query, wire.sinks.parquet(out / "out"), events=n, first_event_rate=RATE,
                out_of_order_ms=DISORDER_MS, max_delay="5s", max_events_per_epoch=epoch, connector=files)
            running = flow.start(checkpoint=str(out / "ck"), spark=spark)
            summary = running.await_termination()
            expected = n  # one source, also for the join queries (a branching flow)
            if summary.input_events != expected:
                print(f"note: Wire {query} read {summary.input_events:,} events, not {expected:,}")
            fill_from_progress(r, running.query.recentProgress, epoch, running.source_scans or 1,
                               list(summary.epoch_events) if summary.epoch_events.dropped == 0 else None)
        except Exception as e:  # report and go on with the next query
            r.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    r.wall_s = time.perf_counter() - t0
    r.peak_mb = mem.peak_mb
    r.output_rows = None if r.error else count_rows(out / "out")
    return r


def run_native(spark: SparkSession, query: str, src: Path, epoch: int) -> Result:
    out = OUT / f"native_{query}"
    shutil.rmtree(out, ignore_errors=True)
    r = Result()
    schema = spark.read.parquet(str(src)).schema

    def read() -> DataFrame:
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))

    def sink(batch: DataFrame, epoch_id: int) -> None:
        batch.write.mode("append").parquet(str(out / "out"))

    settle(spark)
    t0 = time.perf_counter()
    with PeakRss() as mem:
        try:
            q = (native_query(read, query).writeStream.outputMode("append").foreachBatch(sink)
                 .option("checkpointLocation", str(out / "ck")).trigger(availableNow=True).start())
            q.awaitTermination()
            fill_from_progress(r, q.recentProgress, epoch)
        except Exception as e:  # e.g. an operator chain Spark refuses; go on
            r.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    r.wall_s = time.perf_counter() - t0
    r.peak_mb = mem.peak_mb
    r.output_rows = None if r.error else count_rows(out / "out")
    return r


# ---------------------------------------------------------------------------- reporting


FUSION_ON = [True]
"""Whether Wire's flows ran fused (``--no-fusion``: not)."""

JAVA_OPTIONS = [""]
"""The ``--java-options`` of this run (reported with the machine)."""


def machine() -> list[str]:
    m = facts()
    cpu, ram, java, rev = m["cpu"], m["ram"], m["java"], m["rev"]
    return [f"CPU: {cpu}, {os.cpu_count()} cores; RAM {ram}; load average (1 min) at the start "
            f"{LOAD_AT_START[0]:.2f}, at the end {os.getloadavg()[0]:.2f} (other work on the machine "
            "makes the figures noisier)",
            f"Wire source tree: git {rev} (\"dirty\": uncommitted changes in the work tree); "
            f"fusion {'on' if FUSION_ON[0] else 'off (--no-fusion)'}",
            f"Java: {java}; driver JVM options: {JAVA_OPTIONS[0] or 'the defaults of a Wire session'}",
            f"PySpark {pyspark.__version__}, Python {platform.python_version()}, "
            f"Spark master {MASTER}",
            f"Date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}"]


def fmt_rate(x: float) -> str:
    return "n/a" if x != x else f"{x:,.0f}"


def fmt_int(x: float) -> str:
    return "n/a" if x != x else f"{x:.0f}"


def row(query: str, w: Result, s: Result) -> list[str]:
    ratio = w.rate / s.rate if s.rate > 0 else float("nan")
    rows = " / ".join("error" if r.error else f"{r.output_rows:,}" for r in (w, s))
    if not (w.error or s.error) and w.output_rows != s.output_rows:
        rows += " MISMATCH"
    return [query, fmt_rate(w.rate), fmt_rate(s.rate), "n/a" if ratio != ratio else f"{ratio:.2f}x",
            fmt_rate(w.rate / CORES), f"{FLINK_PER_CORE[query]:,}",
            f"{fmt_int(w.p(50))} / {fmt_int(w.p(99))}", f"{fmt_int(s.p(50))} / {fmt_int(s.p(99))}",
            f"{w.peak_mb:,.0f} / {s.peak_mb:,.0f}", f"{w.wall_s:.1f} / {s.wall_s:.1f}", rows]


HEADER = ["query", "Wire events/s", "plain PySpark events/s", "Wire/plain", "Wire events/s per core",
          "Flink events/s per core", "Wire p50/p99 epoch ms", "plain p50/p99 epoch ms",
          "peak memory MB Wire / plain", "wall s Wire / plain", "output rows Wire / plain"]

LEGEND = """\
How each figure is measured (both engines in the same SparkSession, `{master}`, same run):

- **Wire events/s**, **plain PySpark events/s**: steady state, from `StreamingQuery.recentProgress`:
  the input rows of the steady epochs / the sum of their `durationMs.triggerExecution` (Wire's
  input rows: the events its source read in the epoch, `RunSummary.epoch_events`, since a
  filter pushed into the source keeps the rows it drops out of Spark's `numInputRows`). Steady
  epochs exclude the first epoch (Python worker start-up, first compilation) and the tiny
  epochs at the end (Wire's final watermark-only epoch; plain PySpark's end-marker file and its
  no-data epoch). Both read the same events pre-generated to Parquet, one file per epoch
  (Wire: `wire.sources.files`, `max_events_per_epoch` = the file size; plain:
  `maxFilesPerTrigger=1`, `availableNow`); with `--wire-source generator` Wire's figure
  includes generating the events in its source tasks. Both write Parquet (Wire:
  `wire.sinks.parquet`; plain: `foreachBatch` + `batch.write.parquet`).
- **Wire/plain**: ratio of the two steady rates (above 1x: Wire is faster).
- **Wire events/s per core**: Wire events/s / {cores} (the cores of `{master}`).
- **Flink events/s per core**: from the Nexmark repository (guide V2, 4 machines x 16 cores),
  for scale only: another engine, machine and cluster size.
- **p50/p99 epoch ms**: percentiles of `triggerExecution` of the steady epochs (with few
  steady epochs, p99 is close to the slowest one).
- **peak memory**: largest RSS of the whole process tree (Python driver + JVM + Python
  workers), sampled every 100 ms during the run, after a JVM and Python GC. Both engines share
  one JVM, whose heap once grown stays resident, so a run's peak includes what earlier runs
  left (the engines alternate which runs first, round by round).
- **wall s**: from starting the query to its end (plain PySpark: not counting writing the input),
  the mean of the engine's rounds. Every figure pools the engine's `--rounds` runs (the engines
  alternate which runs first), after an unmeasured warm-up of both (q0).
- **output rows**: rows each engine wrote (sanity check; they should be equal).
"""


def sql_row(query: str, q: Result, w: Result) -> list[str]:
    """One row of the SQL table: the SQL version's figures and their ratio to the Python API's."""
    ratio = q.rate / w.rate if w.rate > 0 else float("nan")
    rows = " / ".join("error" if r.error else f"{r.output_rows:,}" for r in (q, w))
    if not (q.error or w.error) and q.output_rows != w.output_rows:
        rows += " MISMATCH"
    return [query, fmt_rate(q.rate), fmt_rate(w.rate), "n/a" if ratio != ratio else f"{ratio:.2f}x",
            f"{fmt_int(q.p(50))} / {fmt_int(q.p(99))}", f"{q.peak_mb:,.0f} / {w.peak_mb:,.0f}",
            f"{q.wall_s:.1f} / {w.wall_s:.1f}", rows]


SQL_HEADER = ["query", "Wire SQL events/s", "Wire Python API events/s", "SQL/Python", "SQL p50/p99 epoch ms",
              "peak memory MB SQL / Python", "wall s SQL / Python", "output rows SQL / Python"]


def sql_plan_differences(query: str) -> str:
    """Where the SQL query's plan differs from its Python twin's, in one cell: 'equal' or the
    differences (:func:`wire.streaming_sql.nexmark.plan_differences`: stateful steps by their
    fingerprints without ids, stateless steps counted by kind)."""
    diffs = sql_nexmark.plan_differences(query)
    stateful = [d for d in diffs if not d.startswith("stateless ")]
    stateless = [d.removeprefix("stateless ") for d in diffs if d.startswith("stateless ")]
    if not diffs:
        return "equal"
    if not stateful:
        return "stateful steps equal; stateless steps (Python/SQL): " + ", ".join(stateless)
    return "stateful steps differ (Python / SQL): " + "; ".join(stateful)


def write_sql_markdown(path: Path, args: argparse.Namespace, lines: list[list[str]],
                       notes: list[str]) -> None:
    """``--sql-only``: the SQL vs Python API table alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cmd = shlex.join([".venv/bin/python", *sys.argv])
    header = ["query", "load (1 min) before", "steady events/s SQL / Python", "SQL/Python",
              "wall s SQL / Python", "output rows SQL / Python", "plans"]
    md = ["# Nexmark in SQL vs the Python API (`bench/nexmark.py --sql-only`)", "",
          f"Command: `{cmd}`", "", *[f"- {m}" for m in machine()], "",
          f"{args.events:,} events (10,000 events/s of event time, up to {DISORDER_MS} ms out of order), "
          f"epochs of {args.epoch_size:,} events, watermark delay 5 s. Per query the Python API's flow "
          "(`wire.examples.nexmark_queries`) and the SQL one (`wire.streaming_sql.nexmark`) run back "
          f"to back ({'SQL' if args.sql_first else 'Python API'} first) over the same Parquet input in "
          "one SparkSession; steady events/s are the input rows of "
          "all epochs but the first and the tiny last ones over their `triggerExecution` (as in "
          "nexmark.md). SQL/Python above 1x: SQL is faster. The machine is shared (2 cores): single runs, "
          "differences within about 20% are noise.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(cells) + " |" for cells in lines]
    md += [""]
    if notes:
        md += ["Notes:", "", *[f"- {n}" for n in notes], ""]
    path.write_text("\n".join(md))


def write_markdown(path: Path, args: argparse.Namespace, lines: list[list[str]], notes: list[str],
                   sql_lines: list[list[str]] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cmd = shlex.join([".venv/bin/python", *sys.argv])
    md = ["# Nexmark: Wire vs plain PySpark Structured Streaming", "",
          f"Command: `{cmd}`", "", *[f"- {m}" for m in machine()], "",
          f"{args.events:,} events (10,000 events/s of event time, up to {DISORDER_MS} ms out of "
          f"order), epochs of {args.epoch_size:,} events, watermark delay 5 s.", "",
          "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    md += ["| " + " | ".join(cells) + " |" for cells in lines]
    md += ["", LEGEND.format(master=MASTER, cores=CORES)]
    if sql_lines:
        md += ["## The same queries in SQL (`--sql`: `wire.streaming_sql.nexmark`, by `wire.sql`)", "",
               "Measured as Wire's figures above, same input; SQL/Python above 1x: SQL is faster.",
               "", "| " + " | ".join(SQL_HEADER) + " |", "|" + "---|" * len(SQL_HEADER)]
        md += ["| " + " | ".join(cells) + " |" for cells in sql_lines]
        md += [""]
    if notes:
        md += ["Notes:", "", *[f"- {n}" for n in notes], ""]
    path.write_text("\n".join(md))


def run_sql_only(spark: SparkSession, args: argparse.Namespace, src: Path) -> None:
    """``--sql-only``: per query, the Python API's run then the SQL one; write the SQL table."""
    n, epoch = args.events, args.epoch_size
    files = src if args.wire_source == "files" else None
    lines: list[list[str]] = []
    notes: list[str] = []
    for query in args.queries.split(","):
        if query not in sql_nexmark.QUERIES:
            notes.append(f"{query}: skipped, not in wire.streaming_sql.nexmark.QUERIES")
            continue
        load = os.getloadavg()[0]
        if args.sql_first:  # the second run of a pair may profit from the first's warm JVM
            q = run_wire(spark, query, n, epoch, files, sql=True)
            w = run_wire(spark, query, n, epoch, files)
        else:
            w = run_wire(spark, query, n, epoch, files)
            q = run_wire(spark, query, n, epoch, files, sql=True)
        ratio = q.rate / w.rate if w.rate > 0 else float("nan")
        rows = " / ".join("error" if r.error else f"{r.output_rows:,}" for r in (q, w))
        if not (q.error or w.error) and q.output_rows != w.output_rows:
            rows += " MISMATCH"
        plans = sql_plan_differences(query)
        lines.append([query, f"{load:.1f}", f"{fmt_rate(q.rate)} / {fmt_rate(w.rate)}",
                      "n/a" if ratio != ratio else f"{ratio:.2f}x", f"{q.wall_s:.1f} / {w.wall_s:.1f}", rows,
                      plans])
        print("  ".join(lines[-1]), flush=True)
        for engine, r in (("Python API", w), ("SQL", q)):
            if r.error:
                notes.append(f"{query}: {engine} failed: {r.error}")
        write_sql_markdown(args.out, args, lines, notes)  # after each query: a partial table survives a stop


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=4_000_000)
    p.add_argument("--epoch-size", type=int, default=500_000)
    p.add_argument("--queries", default=",".join(ORDER))
    p.add_argument("--out", type=Path, default=Path("bench/results/nexmark.md"))
    p.add_argument("--sql", action="store_true",
                   help="also run each query written in SQL (wire.streaming_sql.nexmark) and report its cost "
                        "against the same query in Wire's Python API")
    p.add_argument("--sql-only", action="store_true",
                   help="no plain PySpark: each query in Wire's Python API then in SQL, back to back; writes "
                        "the SQL table alone (default --out bench/results/nexmark_sql.md)")
    p.add_argument("--sql-first", action="store_true",
                   help="with --sql-only: run each pair SQL first (default: the Python API first)")
    p.add_argument("--wire-source", choices=["files", "generator"], default="files",
                   help="files: Wire reads the same Parquet files as plain PySpark (default); "
                        "generator: Wire generates the events in its source tasks")
    p.add_argument("--no-fusion", dest="fusion", action="store_false",
                   help="compile Wire's flows unfused (spark.wire.fusion.enabled=false: no window "
                        "pre-stage and no sink written in the source's tasks), for an A/B")
    p.add_argument("--rounds", type=int, default=2,
                   help="runs of each query per engine, alternating which engine runs first (round 0: "
                        "Wire; round 1: plain PySpark), pooled into one figure per engine (default 2; "
                        "1: Wire first only, as before 2026-11-28 21:00)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="skip the unmeasured warm-up (q0 run once by each engine before the first "
                        "measured query, so the session's first query does not charge its JIT "
                        "compilation to the engine that happens to run first)")
    p.add_argument("--java-options", default="",
                   help="more driver JVM options for the shared session (both engines), e.g. "
                        "-XX:TieredStopAtLevel=1 (the JIT stops at C1; see docs/architecture.md)")
    args = p.parse_args()
    if args.sql_only and args.out == Path("bench/results/nexmark.md"):
        args.out = Path("bench/results/nexmark_sql.md")
    LOAD_AT_START[0] = os.getloadavg()[0]
    n, epoch = args.events, args.epoch_size
    JAVA_OPTIONS[0] = args.java_options
    java_conf = {"spark.driver.extraJavaOptions": args.java_options} if args.java_options else None
    spark = wire.spark(MASTER, java_conf)
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(n // epoch + 100))
    spark.conf.set(FUSION, str(args.fusion).lower())
    FUSION_ON[0] = args.fusion
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    src = write_input(n, epoch)
    print(f"Nexmark, {n:,} events, epochs of {epoch:,}, {MASTER}; input Parquet written in "
          f"{time.perf_counter() - t0:.1f} s (not counted)")
    if args.wire_source == "generator":
        print("Wire's events/s include generating the events; plain PySpark reads them from Parquet")
    else:
        print("Both engines read the same Parquet files, one per epoch")
    widths = [5, 12, 12, 7, 11, 9, 13, 13, 13, 13, 21]
    print("  ".join(h[:w].rjust(w) for h, w in zip(
        ["query", "wire ev/s", "plain ev/s", "ratio", "wire/core", "flink/c", "wire p50/99",
         "plain p50/99", "peak MB w/p", "wall s w/p", "rows w/p"], widths, strict=True)), flush=True)
    lines: list[list[str]] = []
    sql_lines: list[list[str]] = []
    notes: list[str] = []
    if args.sql_only:
        run_sql_only(spark, args, src)
        print(f"total {time.perf_counter() - t0:.0f} s; wrote {args.out}")
        return
    wire_src = src if args.wire_source == "files" else None
    if args.warmup:
        t1 = time.perf_counter()
        warm = [run_wire(spark, "q0", n, epoch, wire_src), run_native(spark, "q0", src, epoch)]
        took = f"{time.perf_counter() - t1:.1f} s"
        print(f"warm-up (not counted): q0 by both engines, wall s Wire {warm[0].wall_s:.1f}, "
              f"plain {warm[1].wall_s:.1f} ({took})", flush=True)
    for query in args.queries.split(","):
        if query not in nexmark_queries.QUERIES:
            note = f"{query}: skipped, not in wire.examples.nexmark_queries.QUERIES"
            print(note, flush=True)
            notes.append(note)
            continue
        if query not in FLINK_PER_CORE:
            print(f"{query}: skipped, no native version in this benchmark", flush=True)
            notes.append(f"{query}: skipped, no native version")
            continue
        wire_runs: list[Result] = []
        plain_runs: list[Result] = []
        for r in range(args.rounds):  # round 0: Wire first; round 1: plain first; ...
            for engine in (("wire", "plain") if r % 2 == 0 else ("plain", "wire")):
                if engine == "wire":
                    wire_runs.append(run_wire(spark, query, n, epoch, wire_src))
                else:
                    plain_runs.append(run_native(spark, query, src, epoch))
        w, s = pooled(wire_runs), pooled(plain_runs)
        cells = row(query, w, s)
        lines.append(cells)
        print("  ".join(c.rjust(wd) for c, wd in zip(cells, widths, strict=True)), flush=True)
        for engine, r in (("Wire", w), ("plain PySpark", s)):
            if r.error:
                notes.append(f"{query}: {engine} failed: {r.error}")
                print(f"  {engine} failed: {r.error}", flush=True)
        for engine, r in (("Wire", w), ("plain", s)):
            print(f"  {engine:<5} {r.epochs} epochs ({len(r.epoch_ms)} steady), {r.input_rows:,} input rows "
                  f"({r.steady_rows:,} steady), output rows {r.output_rows}", flush=True)
        if not (w.error or s.error) and w.output_rows != s.output_rows:
            print(f"  MISMATCH: {query} output rows differ", flush=True)
            notes.append(f"{query}: MISMATCH, Wire wrote {w.output_rows:,} rows, "
                         f"plain PySpark {s.output_rows:,}")
        if args.sql:
            q = run_wire(spark, query, n, epoch, src if args.wire_source == "files" else None, sql=True)
            sql_lines.append(sql_row(query, q, w))
            print("  SQL   " + " | ".join(sql_lines[-1][1:]), flush=True)
            if q.error:
                notes.append(f"{query}: Wire SQL failed: {q.error}")
    write_markdown(args.out, args, lines, notes, sql_lines)
    print(f"total {time.perf_counter() - t0:.0f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
