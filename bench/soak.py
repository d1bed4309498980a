"""Soak: one Wire flow fed at a steady rate for a long time; memory and epoch time by tenth.

The flow is a Nexmark query (``--query``, default q5: bids per auction in sliding 10 s
windows every 2 s, then the hottest auctions per window) over Wire's Nexmark generator
source **paced in processing time**: ``nexmark(pace=rate)`` makes event ``i`` available
``i / rate`` s after the first epoch is planned, and its event time advances at the same
rate (``first_event_rate=rate``), so windows close at the pace of the wall clock, as in a
live feed. The source holds ``rate x minutes x 60`` events; each epoch admits what has
become available (at most ``--epoch-max``). Results go to ``wire.sinks.parquet``; late
ports nobody reads are kept under the checkpoint as usual.

Sampled while it runs:

* every second, from /proc: resident memory (RSS) of the whole process tree (this Python
  driver, the JVM, the Python workers forked by the executors' daemon, and the Python
  processes the JVM starts for the driver side: the source planner, the stateful
  processors' driver worker), per role and per process;
* every 5 s, over py4j: the JVM heap used and committed (``MemoryMXBean``) and the old
  generation's usage after its last collection;
* every 5 s: Spark's progress of each epoch (``StreamingQuery.recentProgress``, deduplicated
  by batch id): ``triggerExecution`` (the epoch time), the source's input rows, and the state
  operators' rows, RocksDB memory (``memoryUsedBytes``) and SST size;
* every second: the 1-minute load average (``os.getloadavg``).

The run is cut into ten equal tenths of the planned duration (the last tenth also takes
whatever ran past it). Per tenth: mean and last RSS of the tree, of the driver, the JVM and
the Python processes; JVM heap; p50 / p99 epoch time of the epochs that read input and
ended in the tenth; events/s admitted; state at the tenth's end; mean load average. The
targets: RSS (mean of the tenth) within +5 % from the second tenth to the last, and no drift
in the p99 epoch time. The table and the command, date and machine go to ``--out``
(default ``bench/results/soak.md``), rewritten after every tenth, so an interrupted run
(Ctrl-C / SIGTERM) leaves the tenths it completed. Text after a line
``<!-- notes -->`` in an existing ``--out`` is kept (hand-written findings).

Diagnostics (for finding what grows; they cost time and are off by default):
``--histo``: ``jmap -histo:live`` of the JVM at the end of each tenth (a full GC: it shows
the live heap; it pauses the JVM); ``--nmt``: the JVM's native memory tracking
(``-XX:NativeMemoryTracking=summary``, ``jcmd VM.native_memory``) at each tenth;
``--tracemalloc``: the driver's Python allocations, top growth from the second tenth to the
last. Their output goes to ``out/bench_soak/<query>/diag/``.

Usage: .venv/bin/python bench/soak.py [--query q5] [--rate 10000] [--minutes 60]
       [--epoch-max 100000] [--conf spark.key=value ...] [--histo] [--nmt] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyspark
from machine import facts
from soak_sampling import MB, ROLES, Run, Sampler, collect_progress

import wire
from wire.examples.nexmark_queries import QUERIES, TWO_INPUTS, WINDOWED
from wire.examples.nexmark_source import nexmark

OUT = Path("out/bench_soak")
NOTES_MARKER = "<!-- notes -->"
PAGE = os.sysconf("SC_PAGE_SIZE")
PROGRESS_EVERY_S = 5.0


# ------------------------------------------------------------------------------ tenths


def _end_time(p: dict[str, Any]) -> float:
    ts = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
    return ts + p["durationMs"].get("triggerExecution", 0) / 1000


def _rows(p: dict[str, Any]) -> int:
    """The events the epoch admitted (the run summary's, :func:`soak_sampling.collect_progress`)."""
    return int(p["events"])


def _state(p: dict[str, Any]) -> tuple[int, float, float]:
    """(state rows, RocksDB memory MB, SST files MB) summed over the state operators."""
    ops = p.get("stateOperators") or []
    rows = sum(int(o.get("numRowsTotal", 0)) for o in ops)
    mem = sum(int(o.get("memoryUsedBytes", 0)) for o in ops) / MB
    sst = sum(int((o.get("customMetrics") or {}).get("rocksdbSstFileSize", 0)) for o in ops) / MB
    return rows, mem, sst


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


@dataclass
class Tenth:
    k: int
    rss_mean: float
    rss_last: float
    role_mean: dict[str, float]
    workers: float
    heap_used: float
    heap_committed: float
    old_after_gc: float
    p50: float
    p99: float
    epochs: int
    events_s: float
    state_rows: int
    rocksdb_mb: float
    sst_mb: float
    load1: float


def tenths(run: Run, upto: int) -> list[Tenth]:
    """The first ``upto`` tenths of ``run``."""
    with run.lock:
        samples, heap = list(run.samples), list(run.heap)
        progress = sorted(run.progress.values(), key=lambda p: int(p["batchId"]))
    out = []
    for k in range(upto):
        lo = run.t0 + k * run.duration_s / 10
        hi = run.t0 + (k + 1) * run.duration_s / 10 if k < 9 else float("inf")
        ss = [s for s in samples if lo <= s.t < hi]
        hs = [h for h in heap if lo <= h[0] < hi]
        ps = [p for p in progress
              if "triggerExecution" in p.get("durationMs", {}) and lo <= _end_time(p) < hi]
        data = [p for p in ps if _rows(p) > 0]
        ms = [float(p["durationMs"]["triggerExecution"]) for p in data]
        span = (min(hi, max((s.t for s in ss), default=lo) + 1.0) - lo) or 1.0  # a sample per second
        rows, mem, sst = _state(ps[-1]) if ps else (0, float("nan"), float("nan"))
        nan = float("nan")
        out.append(Tenth(
            k + 1,
            statistics.fmean(s.total_mb for s in ss) if ss else nan,
            ss[-1].total_mb if ss else nan,
            {r: statistics.fmean(s.by_role[r] for s in ss) if ss else nan for r in ROLES},
            statistics.fmean(s.workers for s in ss) if ss else nan,
            statistics.fmean(h[1] for h in hs) if hs else nan,
            statistics.fmean(h[2] for h in hs) if hs else nan,
            hs[-1][3] if hs else nan,
            pct(ms, 50), pct(ms, 99), len(data),
            sum(_rows(p) for p in data) / span,
            rows, mem, sst,
            statistics.fmean(s.load1 for s in ss) if ss else nan,
        ))
    return out


def fmt(x: float, spec: str = ",.0f") -> str:
    return "n/a" if x != x else format(x, spec)


HEADER = ["tenth", "minutes", "RSS tree MB mean / last", "driver MB", "JVM MB", "Python workers MB (n)",
          "JVM-side Python MB", "JVM heap used / committed MB", "old gen after GC MB", "epoch ms p50 / p99",
          "epochs", "events/s", "state rows / RocksDB mem MB / SST MB", "load 1-min"]


def table_rows(ts: list[Tenth], duration_s: float) -> list[str]:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for t in ts:
        lo, hi = (t.k - 1) * duration_s / 600, t.k * duration_s / 600
        lines.append("| " + " | ".join([
            str(t.k), f"{lo:.1f}-{hi:.1f}", f"{fmt(t.rss_mean)} / {fmt(t.rss_last)}",
            fmt(t.role_mean["driver"]), fmt(t.role_mean["jvm"]),
            f"{fmt(t.role_mean['workers'])} ({fmt(t.workers, '.1f')})", fmt(t.role_mean["jvm-python"]),
            f"{fmt(t.heap_used)} / {fmt(t.heap_committed)}", fmt(t.old_after_gc),
            f"{fmt(t.p50)} / {fmt(t.p99)}", str(t.epochs), fmt(t.events_s),
            f"{t.state_rows:,} / {fmt(t.rocksdb_mb)} / {fmt(t.sst_mb, ',.1f')}", fmt(t.load1, ".2f"),
        ]) + " |")
    return lines


def slope_pct(values: list[float]) -> float:
    """Least-squares slope of ``values`` per tenth, in % of their mean (nan if < 3 values)."""
    v = [x for x in values if x == x]
    if len(v) < 3:
        return float("nan")
    k = np.arange(len(v), dtype=float)
    return float(np.polyfit(k, np.asarray(v), 1)[0] / np.mean(v) * 100)


def verdict(ts: list[Tenth]) -> list[str]:
    if len(ts) < 3:
        return ["Fewer than three tenths completed: no verdict."]
    second, last = ts[1], ts[-1]
    growth = (last.rss_mean / second.rss_mean - 1) * 100
    p99s = [t.p99 for t in ts[1:]]
    p99_ratio = last.p99 / second.p99 if second.p99 else float("nan")
    roles = ", ".join(f"{r} {last.role_mean[r] - second.role_mean[r]:+,.0f} MB" for r in ROLES
                      if second.role_mean[r] == second.role_mean[r])
    return [
        f"RSS of the process tree, mean of tenth 2 -> tenth {last.k}: {second.rss_mean:,.0f} -> "
        f"{last.rss_mean:,.0f} MB ({growth:+.1f} %); target within +5 %: "
        f"**{'met' if growth <= 5 else 'not met'}**. By process: {roles}.",
        f"RSS slope over tenths 2-{last.k}: {slope_pct([t.rss_mean for t in ts[1:]]):+.2f} % of the "
        "mean per tenth.",
        f"p99 epoch time, tenth 2 -> tenth {last.k}: {fmt(second.p99)} -> {fmt(last.p99)} ms "
        f"({p99_ratio:.2f}x); least-squares slope over tenths 2-{last.k}: {slope_pct(p99s):+.1f} % of the "
        f"mean per tenth (load average over the same tenths: "
        f"{' '.join(fmt(t.load1, '.1f') for t in ts[1:])}).",
    ]


# ------------------------------------------------------------------------------ report


def machine(load_start: float) -> list[str]:
    """CPU, RAM, the source tree's git revision, Java and Spark versions (read once: bench/machine.py)."""
    m = facts()
    cpu, ram, java, rev = m["cpu"], m["ram"], m["java"], m["rev"]
    return [f"CPU: {cpu}, {os.cpu_count()} cores; RAM {ram}",
            f"Wire source tree: git {rev}; Java: {java}; PySpark {pyspark.__version__}, "
            f"Python {platform.python_version()}",
            f"load average (1 min) at the start: {load_start:.2f}"]


def write_md(path: Path, args: argparse.Namespace, run: Run, ts: list[Tenth], state: str,
             started: datetime.datetime, load_start: float, extra: list[str]) -> None:
    notes = ""
    if path.exists():
        text = path.read_text()
        if NOTES_MARKER in text:
            notes = text[text.index(NOTES_MARKER):]
    cmd = shlex.join([".venv/bin/python", *sys.argv])
    md = [f"# Soak: Nexmark {args.query} at {args.rate:,} events/s for {args.minutes} minutes", "",
          f"Command: `{cmd}`", "",
          f"- Started {started.strftime('%Y-%m-%d %H:%M:%S UTC')}; {state}",
          *[f"- {m}" for m in machine(load_start)],
          f"- Spark master {args.master}; epochs of at most {args.epoch_max:,} events; source: Nexmark "
          f"generator paced at {args.rate:,} events/s of processing time, event time at the same rate, "
          f"up to 1 s out of order, watermark delay 5 s, {args.partitions} partition(s)",
          *([f"- Spark settings: {', '.join(args.conf)}"] if args.conf else []), "",
          *table_rows(ts, run.duration_s), "", *[f"- {v}" for v in verdict(ts)], *extra, "",
          "Columns: RSS = resident memory, sampled every second from /proc; 'tree' = this Python driver + "
          "the JVM + the Python workers the executors' daemon forks (the daemon included) + the Python "
          "processes the JVM starts for the driver side ('JVM-side Python': the source planner, the "
          "stateful processors' driver worker); mean over the tenth and the tenth's last sample. JVM heap "
          "from `MemoryMXBean` every 5 s (mean), old gen = the old generation after its last collection "
          "(the tenth's last reading). Epoch time = Spark's `triggerExecution` of the epochs that read "
          "input and ended in the tenth. events/s = the events those epochs admitted (the run summary's; "
          "Spark's input rows of a window fused into its source are partial aggregates) / the tenth's "
          "seconds. "
          "State = the state operators of the tenth's last epoch: rows (`numRowsTotal`), RocksDB memory "
          "(`memoryUsedBytes`), SST files (`rocksdbSstFileSize`). load 1-min = mean of `os.getloadavg()[0]` "
          "over the tenth: other work on this shared 2-core machine makes epoch times noisy.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(md) + ("\n" + notes if notes else ""))


# -------------------------------------------------------------------------- diagnostics


class Diagnostics:
    """Optional per-tenth snapshots: JVM live-heap histogram, native memory, driver allocations."""

    def __init__(self, args: argparse.Namespace, d: Path) -> None:
        self.args, self.d = args, d
        self.snapshots: dict[int, tracemalloc.Snapshot] = {}
        d.mkdir(parents=True, exist_ok=True)

    def at_tenth(self, k: int, jvm_pid: int | None) -> None:
        if self.args.histo and jvm_pid:
            out = subprocess.run(["jmap", "-histo:live", str(jvm_pid)], capture_output=True, text=True,
                                 check=False).stdout
            (self.d / f"histo-{k:02d}.txt").write_text(out)
        if self.args.nmt and jvm_pid:
            out = subprocess.run(["jcmd", str(jvm_pid), "VM.native_memory", "summary"], capture_output=True,
                                 text=True, check=False).stdout
            (self.d / f"nmt-{k:02d}.txt").write_text(out)
        if self.args.tracemalloc:
            self.snapshots[k] = tracemalloc.take_snapshot()
            first = self.snapshots.get(2) or self.snapshots.get(1)
            if first is not None and k > 2:
                stats = self.snapshots[k].compare_to(first, "traceback")[:15]
                lines = []
                for s in stats:
                    lines.append(f"{s.size_diff / MB:+.2f} MB ({s.count_diff:+d} blocks), "
                                 f"now {s.size / MB:.2f} MB")
                    lines.extend("    " + line for line in s.traceback.format()[-6:])
                (self.d / f"tracemalloc-{k:02d}-vs-02.txt").write_text("\n".join(lines))


def histo_growth(d: Path, first: int, last: int, top: int = 12) -> list[str]:
    """The classes whose live bytes grew most between two ``jmap -histo:live`` files."""

    def parse(p: Path) -> dict[str, int]:
        out = {}
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[0].rstrip(":").isdigit():
                out[parts[3]] = int(parts[2])
        return out

    a, b = d / f"histo-{first:02d}.txt", d / f"histo-{last:02d}.txt"
    if not (a.exists() and b.exists()):
        return []
    x, y = parse(a), parse(b)
    growth = sorted(((y.get(c, 0) - x.get(c, 0), c) for c in set(x) | set(y)), reverse=True)[:top]
    return [f"{g / MB:+8.2f} MB  {c}  (now {y.get(c, 0) / MB:.2f} MB)" for g, c in growth]


def nmt_growth(d: Path, first: int, last: int) -> list[str]:
    """Committed native memory per JVM category (``jcmd VM.native_memory summary``), two tenths."""
    import re

    def parse(p: Path) -> dict[str, int]:
        out = {}
        line = r"^-?\s*(\S[^(\n]*?)\s+\(reserved=(\d+)KB, committed=(\d+)KB\)"
        for m in re.finditer(line, p.read_text(), re.M):
            out[m.group(1).strip().lstrip("- ").strip()] = int(m.group(3)) * 1024
        m = re.search(r"Total: reserved=(\d+)KB, committed=(\d+)KB", p.read_text())
        if m:
            out["Total"] = int(m.group(2)) * 1024
        return out

    a, b = d / f"nmt-{first:02d}.txt", d / f"nmt-{last:02d}.txt"
    if not (a.exists() and b.exists()):
        return []
    x, y = parse(a), parse(b)
    return [f"{c:<28} {x.get(c, 0) / MB:8.1f} -> {y.get(c, 0) / MB:8.1f} MB "
            f"({(y.get(c, 0) - x.get(c, 0)) / MB:+.1f})"
            for c in sorted(set(x) | set(y), key=lambda c: x.get(c, 0) - y.get(c, 0))]


# ---------------------------------------------------------------------------------- main


def build_flow(query: str, rate: int, events: int, epoch_max: int, partitions: int, out: Path) -> wire.Flow:
    """``query`` over a Nexmark source paced at ``rate`` events/s, results to Parquet in ``out``."""
    flow = wire.Flow(f"soak-{query}")
    src = nexmark(events=events, first_event_rate=rate, out_of_order_ms=1000, partitions=partitions,
                  pace=rate)
    stream = flow.source(src, event_time="date_time", watermark=wire.BoundedOutOfOrderness("5s"),
                         max_events_per_epoch=epoch_max, name="events")
    inputs = [stream] * (2 if query in TWO_INPUTS else 1)
    result = QUERIES[query](*inputs, []) if query in WINDOWED else QUERIES[query](*inputs)
    result.sink(wire.sinks.parquet(out), name="results")
    return flow


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--query", default="q5", choices=sorted(QUERIES))
    p.add_argument("--rate", type=int, default=10_000, help="events/s of processing time")
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--epoch-max", type=int, default=100_000, help="max_events_per_epoch")
    p.add_argument("--partitions", type=int, default=1, help="the source's partitions (Spark tasks)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for the session (repeatable)")
    p.add_argument("--out", type=Path, default=Path("bench/results/soak.md"))
    p.add_argument("--work", type=Path, default=None,
                   help="checkpoint, output and diagnostics (default out/bench_soak/<query>)")
    p.add_argument("--histo", action="store_true", help="jmap -histo:live at each tenth (full GC)")
    p.add_argument("--nmt", action="store_true", help="JVM native memory tracking at each tenth")
    p.add_argument("--gc-log", action="store_true", help="the JVM's GC log (heap after each collection)")
    p.add_argument("--tracemalloc", action="store_true", help="the driver's allocations at each tenth")
    args = p.parse_args()
    if args.tracemalloc:
        tracemalloc.start(8)
    load_start = os.getloadavg()[0]
    started = datetime.datetime.now(datetime.UTC)
    work = args.work or OUT / args.query
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    conf = dict(c.split("=", 1) for c in args.conf)
    java_opts = [conf.get("spark.driver.extraJavaOptions", "")]  # Wire puts its own defaults first
    if args.nmt:
        java_opts.append("-XX:NativeMemoryTracking=summary")
    if args.gc_log:  # every collection, and why the collector resized the heap
        (work / "diag").mkdir(parents=True, exist_ok=True)
        java_opts.append(f"-Xlog:gc,gc+ergo+heap=debug:file={(work / 'diag' / 'gc.log').resolve()}:uptime")
    if " ".join(java_opts).strip():
        conf["spark.driver.extraJavaOptions"] = " ".join(java_opts).strip()
    spark = wire.spark(args.master, conf, log_file=work / "spark.log")
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    duration = args.minutes * 60
    events = int(args.rate * duration)
    flow = build_flow(args.query, args.rate, events, args.epoch_max, args.partitions, work / "out")
    run = Run(duration_s=duration)
    samplers = [Sampler(run, spark, "tree"), Sampler(run, spark, "jvm")]
    diag = Diagnostics(args, work / "diag")
    stop = threading.Event()
    interrupted = threading.Event()  # Ctrl-C / SIGTERM: stop the flow, keep the completed tenths
    signal.signal(signal.SIGTERM, lambda *_: interrupted.set())
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    machine(load_start)
    print(f"soak: {args.query}, {args.rate:,} events/s for {args.minutes} min ({events:,} events), "
          f"{args.master}; JVM pid {jvm_pid}; load {load_start:.2f}", flush=True)
    run.t0 = time.time()
    for sampler in samplers:
        sampler.start()
    running = flow.start(str(work / "ck"), spark=spark)
    samplers[1].query, samplers[1].events = running.query, running.summary.epoch_events
    done_tenths = [0]

    def report(state: str, upto: int) -> list[Tenth]:
        ts = tenths(run, upto)
        extra: list[str] = []
        if args.nmt and upto >= 3:
            extra += ["", f"JVM native memory (NMT, committed), tenth 2 -> {upto}:", "", "```",
                      *nmt_growth(work / "diag", 2, upto), "```"]
        if args.histo and upto >= 3:
            extra += ["", f"Live JVM heap growth, tenth 2 -> {upto} (`jmap -histo:live`):", "", "```",
                     *histo_growth(work / "diag", 2, upto), "```"]
        write_md(args.out, args, run, ts, state, started, load_start, extra)
        return ts

    def tenth_loop() -> None:
        while not stop.is_set():
            k = done_tenths[0] + 1
            if k > 9:  # the last tenth ends with the run
                return
            if stop.wait(max(0.0, run.t0 + k * duration / 10 - time.time())):
                return
            collect_progress(run, running.query, running.summary.epoch_events)
            diag.at_tenth(k, jvm_pid)
            done_tenths[0] = k
            t = report(f"running: {k} of 10 tenths done", k)[-1]
            print(f"tenth {k}: RSS {t.rss_mean:,.0f} MB (driver {t.role_mean['driver']:,.0f}, JVM "
                  f"{t.role_mean['jvm']:,.0f}, workers {t.role_mean['workers']:,.0f} in {t.workers:.1f}, "
                  f"JVM-side Python {t.role_mean['jvm-python']:,.0f}); heap {t.heap_used:,.0f} / "
                  f"{t.heap_committed:,.0f} MB; epochs {t.epochs} p50 {t.p50:,.0f} p99 {t.p99:,.0f} ms; "
                  f"{t.events_s:,.0f} ev/s; state {t.state_rows:,} rows, RocksDB {t.rocksdb_mb:,.0f} MB; "
                  f"load {t.load1:.2f}", flush=True)

    ticker = threading.Thread(target=tenth_loop, daemon=True, name="soak-tenths")
    ticker.start()
    while running.is_active() and not interrupted.wait(1.0):
        pass
    if interrupted.is_set():
        with contextlib.suppress(Exception):
            running.stop(graceful=True, timeout_s=60)
        state = "interrupted"
    else:
        summary = running.await_termination()
        state = f"finished: {summary.epochs:,} epochs, {summary.input_events:,} input events"
    stop.set()
    ticker.join()
    with contextlib.suppress(Exception):
        collect_progress(run, running.query, running.summary.epoch_events)
    for sampler in samplers:
        sampler.done.set()
        sampler.join()
    completed = 10 if state.startswith("finished") else done_tenths[0]
    if state == "interrupted":
        state = f"interrupted after {completed} of 10 tenths (the table has the completed tenths)"
    diag.at_tenth(10, jvm_pid if completed == 10 else None)
    ts = report(state, completed)
    print("\n".join(table_rows(ts, duration)))
    print("\n".join(verdict(ts)))
    long_lived = sorted((p for p in run.procs.values() if p.last_t - p.first_t > duration / 2),
                        key=lambda p: p.last_mb - p.first_mb, reverse=True)
    print("processes alive for over half the run (first -> last RSS MB):")
    for pr in long_lived:
        print(f"  {pr.pid:>7} {pr.role:<10} {pr.detail:<32} {pr.first_mb:8,.0f} -> {pr.last_mb:8,.0f} "
              f"(max {pr.max_mb:,.0f}) over {(pr.last_t - pr.first_t) / 60:.1f} min")
    short = [p for p in run.procs.values() if p.role == "workers" and p.detail == "worker"]
    print(f"Python workers seen: {len(short)}")
    (work / "samples.json").write_text(json.dumps({
        "t0": run.t0, "duration_s": duration,
        "samples": [[s.t, s.total_mb, s.by_role, s.anon_jvm_mb, s.workers, s.load1] for s in run.samples],
        "heap": run.heap,
        "procs": [vars(pr) for pr in run.procs.values()],
        "progress": [run.progress[b] for b in sorted(run.progress)],
    }, default=str))
    print(f"wrote {args.out}; raw samples in {work / 'samples.json'}")


if __name__ == "__main__":
    main()
