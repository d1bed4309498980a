"""Where the time to the first committed epoch goes: Wire vs plain PySpark, one run each.

Each run is a fresh process (``--engine wire|plain``; no argument: both, one after the
other, each in its own process): the SparkSession is created first (JVM start, not part
of the figures below unless said), then the query is started and timed until Spark has
written ``commits/0`` to its checkpoint (the first committed epoch), then run to the end.

Reported per run (ms unless said):

* driver phases before ``writeStream.start()`` (Wire: checkpoint metadata, each
  compilation pass, the pruning analysis, source opening; plain: schema read);
* ``start()`` itself, the time from ``flow.start()`` to ``commits/0``
  (``start_to_first_commit_ms``) and Wire's first ``foreachBatch`` (entry, duration);
* CPU seconds of the whole process tree (this driver, the JVM, every Python process)
  from ``start()`` to ``commits/0`` and to the end, and to ``commits/0`` per kind of
  process (JVM, the worker daemon, its forked workers, the data source planner
  processes); less sensitive to a shared machine's load than wall time;
* Spark's ``durationMs`` of the first epoch and the median of the steady epochs
  (``latestOffset``, ``getBatch``, ``queryPlanning``, ``walCommit``, ``addBatch``,
  ``commitOffsets``, ``triggerExecution``);
* with ``--tasks``: Spark's event log of the jobs (per stage: tasks, launch and finish
  times, summed executor deserialize / run time), and the Python runners' boot / init /
  finish times from Spark's log.

Workloads: ``flights`` (the main job's flow over the 336,776 flights, 20,000-event
epochs, vs the same count hand-written) and ``tumbling`` (bench/windows_bench.py's
synthetic 1,000-key tumbling count, ``--events`` events in ``--epoch-size`` files).

Usage: .venv/bin/python bench/startup_profile.py [--workload flights|tumbling]
       [--engine wire|plain] [--tasks] [--events N] [--epoch-size N] [--wire-epoch N]
       [--conf key=value ...] [--json results.jsonl]
(``--conf tag=...`` only labels a run.) A per-epoch fixed cost: ``--workload tumbling
--events 40000 --epoch-size 2000`` (20 stateful epochs of 2,000 events).
"""

from __future__ import annotations

import argparse
import glob as globmod
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

OUT = Path("out/bench_startup")
t0_wall = 0.0
cpu0 = 0.0
KIND0: dict[str, float] = {}
TIMES = re.compile(r"INFO (\S+): Times: total = (\d+), boot = (-?\d+), init = (\d+), "
                   r"finish = (\d+).*?(task \S+ in stage \d+)")
KEYS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
        "triggerExecution")


class Clock:
    """Named durations on the driver, by wrapping functions in place."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, float, float]] = []

    def wrap(self, owner: object, attr: str, label: str) -> None:
        fn = getattr(owner, attr)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spans.append((label, t, time.perf_counter()))

        setattr(owner, attr, timed)

    def total(self, label: str) -> float:
        return sum(b - a for lab, a, b in self.spans if lab == label) * 1000

    def count(self, label: str) -> int:
        return sum(1 for lab, _, _ in self.spans if lab == label)


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds (user + system) used so far by ``root`` (default: this process) and every
    descendant, including the reaped ones (a process's cutime/cstime)."""
    root = root or os.getpid()
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
        cpu[int(d)] = sum(int(x) for x in fields[11:15])
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total / tick


def tree_cpu_by_kind(root: int | None = None) -> dict[str, float]:
    """CPU seconds so far per kind of process in the tree (own time; reaped children's time
    is added to their parent's kind as ``<kind> (reaped children)``)."""
    root = root or os.getpid()
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, int, str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
        info[int(d)] = (int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]), cmd)
    out: dict[str, float] = {}
    stack = [(root, "")]
    while stack:
        pid, parent_kind = stack.pop()
        if pid not in info:
            continue
        own, reaped, cmd = info[pid]
        if pid == root:
            kind = "driver (python)"
        elif "java" in cmd.split(" ")[0]:
            kind = "jvm"
        elif " -m " in cmd:
            kind = cmd.split(" -m ")[1].split(" ")[0]
            if parent_kind == kind:
                kind += " (forked worker)"
        else:
            kind = cmd[:40]
        out[kind] = out.get(kind, 0) + own / tick
        if reaped:
            out[kind + " (reaped children)"] = out.get(kind + " (reaped children)", 0) + reaped / tick
        stack.extend((c, kind) for c in children.get(pid, []))
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def watch(path: Path, found: dict[str, float]) -> threading.Thread:
    """Poll for ``path`` every 5 ms; record when it appears (and the CPU used by then)."""

    def run() -> None:
        while "t" not in found:
            if path.exists():
                found["t"] = time.perf_counter()
                found["cpu"] = tree_cpu_s()
                found["by_kind"] = tree_cpu_by_kind()
                return
            time.sleep(0.005)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def durations(progress: list[dict]) -> tuple[dict, dict, int]:
    """First epoch's durationMs, median of the steady ones (not first, not tiny), count."""
    first = progress[0]["durationMs"] if progress else {}
    big = max((p["numInputRows"] for p in progress), default=0)
    steady = [p["durationMs"] for p in progress[1:] if p["numInputRows"] >= 0.5 * big]
    med = {k: statistics.median(d.get(k, 0) for d in steady) for k in KEYS} if steady else {}
    return first, med, len(progress)


def task_breakdown(log_dir: Path, spark_log: Path) -> dict:
    """Stages of the first epoch's jobs from the event log, Python worker boot times."""
    files = sorted(f for f in globmod.glob(str(log_dir / "**" / "*"), recursive=True)
                   if os.path.isfile(f))
    stages: dict[int, dict] = {}
    jobs = []
    lines = [line for f in files for line in Path(f).read_text().splitlines()]
    if lines:
        for line in lines:
            ev = json.loads(line)
            kind = ev["Event"]
            if kind == "SparkListenerJobStart":
                jobs.append({"id": ev["Job ID"], "start": ev["Submission Time"],
                             "stages": ev["Stage IDs"],
                             "desc": ev.get("Properties", {}).get("spark.job.description", "")})
            elif kind == "SparkListenerJobEnd":
                for j in jobs:
                    if j["id"] == ev["Job ID"]:
                        j["end"] = ev["Completion Time"]
            elif kind == "SparkListenerStageCompleted":
                info = ev["Stage Info"]
                stages.setdefault(info["Stage ID"], {}).update({
                    "name": info["Stage Name"].split(" at ")[0], "tasks": info["Number of Tasks"],
                    "submitted": info.get("Submission Time"), "done": info.get("Completion Time"),
                })
            elif kind == "SparkListenerTaskEnd":
                m = ev.get("Task Metrics") or {}
                s = stages.setdefault(ev["Stage ID"], {"deser": 0, "run": 0, "cpu": 0, "n": 0,
                                                       "launch": [], "finish": []})
                s["n"] = s.get("n", 0) + 1
                ti = ev["Task Info"]
                s.setdefault("launch", []).append(ti["Launch Time"])
                s.setdefault("finish", []).append(ti["Finish Time"])
                s["deser"] += m.get("Executor Deserialize Time", 0)
                s["run"] += m.get("Executor Run Time", 0)
                s["cpu"] += m.get("Executor CPU Time", 0) // 1_000_000
    boots = []
    if spark_log.exists():
        for line in spark_log.read_text(errors="replace").splitlines():
            m = TIMES.search(line)
            if m:
                boots.append({"runner": m[1].split("$")[0], "total": int(m[2]), "boot": int(m[3]),
                              "init": int(m[4]), "finish": int(m[5]), "at": m[6]})
    return {"jobs": jobs, "stages": stages, "python_times": boots}


EXTRA_CONF: dict[str, str] = {}


def spark_session(tasks: bool, log_file: Path, engine: str):
    import wire

    conf = dict(EXTRA_CONF)
    if tasks:
        ev = OUT / f"eventlog_{engine}_{os.getpid()}"
        shutil.rmtree(ev, ignore_errors=True)
        ev.mkdir(parents=True)
        conf |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(ev.resolve()),
                "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
    t = time.perf_counter()
    spark = wire.spark("local[2]", conf, log_file=log_file)
    if tasks:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.INFO
        for name in ("org.apache.spark.api.python", "org.apache.spark.sql.execution.python"):
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    return spark, (time.perf_counter() - t) * 1000


def prepare(workload: str, events: int, epoch: int) -> tuple[str, int]:
    from bench_data import synth_files

    from wire.examples.flights import prepare_flights

    if workload == "flights":
        prepare_flights(OUT / "flights_input", rows_per_file=20_000)
        return str(OUT / "flights_input" / "*.parquet"), 20_000
    d = OUT / f"synth_{events}_{epoch}"
    if not (d / "_done").exists():
        synth_files(d, events, 1_000, epoch)
        (d / "_done").touch()
    return str(d / "*.parquet"), epoch


def run_wire(workload: str, glob: str, epoch: int, out: Path, tasks: bool, epoch_override: int | None
             ) -> dict:
    import pyspark.sql.streaming.readwriter as rw

    import wire
    import wire.compiler.plan_compiler as pc
    import wire.runtime.runner as runner
    from wire.examples.flights_job import flights_flow

    log = out / "spark.log"
    spark, jvm_ms = spark_session(tasks, log, "wire")
    clock = Clock()
    clock.wrap(runner, "open_checkpoint", "checkpoint")
    clock.wrap(runner, "compile_plan", "compile (total)")
    clock.wrap(pc, "_compile", "compile pass")
    clock.wrap(pc, "read_columns", "pruning analysis")
    clock.wrap(pc, "_open_source", "open source")
    clock.wrap(pc, "source_predicate", "filter pushdown analysis")
    clock.wrap(rw.DataStreamWriter, "start", "writeStream.start")
    clock.wrap(runner.EpochDispatcher, "__call__", "foreachBatch")
    from pyspark.sql import DataFrame
    clock.wrap(DataFrame, "toArrow", "epoch job (mapInArrow+toArrow)")
    size = epoch_override or epoch
    if workload == "flights":
        flow = flights_flow(glob, out, max_events_per_epoch=size)
    else:
        flow = wire.Flow("bench")
        s = flow.source(wire.sources.files(glob, format="parquet"), event_time="ts", key="key",
                        watermark=wire.BoundedOutOfOrderness("2s"), max_events_per_epoch=size)
        counts = s.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="counts")
        counts.sink(wire.sinks.parquet(out / "windows"))
        counts.late().sink(wire.sinks.parquet(out / "late"))
    ck = out / "ck"
    found: dict[str, float] = {}
    watch(ck / "spark" / "commits" / "0", found)
    global t0_wall, cpu0
    t0_wall = time.time() * 1000
    cpu0 = tree_cpu_s()
    KIND0.update(tree_cpu_by_kind())
    t0 = time.perf_counter()
    running = flow.start(str(ck), spark=spark)
    t_started = time.perf_counter()
    summary = running.await_termination()
    t_end = time.perf_counter()
    progress = [json.loads(p.json) for p in running.query.recentProgress]
    return finish("wire", spark, jvm_ms, clock, t0, t_started, found, t_end, progress,
                  summary.input_events, tasks, out)


def run_plain(workload: str, glob: str, epoch: int, out: Path, tasks: bool) -> dict:
    import pyspark.sql.streaming.readwriter as rw
    from pyspark.sql import functions as F
    from windows_bench import WINDOWS

    log = out / "spark.log"
    spark, jvm_ms = spark_session(tasks, log, "plain")
    clock = Clock()
    clock.wrap(rw.DataStreamWriter, "start", "writeStream.start")
    flights = workload == "flights"
    global t0_wall, cpu0
    t0_wall = time.time() * 1000
    cpu0 = tree_cpu_s()
    KIND0.update(tree_cpu_by_kind())
    t0 = time.perf_counter()
    t = time.perf_counter()
    schema = spark.read.parquet(glob).schema
    clock.spans.append(("schema read", t, time.perf_counter()))
    df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
          .parquet(str(Path(glob).parent)))
    ts, key, size, delay = (("sched_dep_ms", "origin", "1 hour", "60 minutes") if flights
                            else ("ts", "key", "10 seconds", "2 seconds"))
    if flights:
        df = df.filter("dep_delay IS NOT NULL")
    df = df.withColumn("t", F.timestamp_millis(F.col(ts))).withWatermark("t", delay)
    aggs = [F.count(F.lit(1)).alias("n")]
    if flights:
        aggs += [F.mean("dep_delay"), F.max("dep_delay")]
    win = F.window("t", size) if flights else WINDOWS["tumbling"][1](F.col("t"))
    agg = df.groupBy(win, F.col(key)).agg(*aggs)

    def sink(batch, epoch_id):
        batch.write.mode("append").parquet(str(out / "native"))

    ck = out / "ck"
    found: dict[str, float] = {}
    watch(ck / "commits" / "0", found)
    q = (agg.writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    t_started = time.perf_counter()
    q.awaitTermination()
    t_end = time.perf_counter()
    progress = [json.loads(p.json) for p in q.recentProgress]
    n = sum(p["numInputRows"] for p in progress)
    return finish("plain", spark, jvm_ms, clock, t0, t_started, found, t_end, progress, n, tasks, out)


def finish(engine, spark, jvm_ms, clock, t0, t_started, found, t_end, progress, n, tasks, out) -> dict:
    first, med, epochs = durations(progress)
    driver = {lab: round(clock.total(lab)) for lab in dict.fromkeys(lab for lab, _, _ in clock.spans)}
    counts = {lab: clock.count(lab) for lab in driver}
    res = {
        "engine": engine, "events": n, "epochs": epochs, "jvm_start_ms": round(jvm_ms),
        "start_to_first_commit_ms": round((found.get("t", float("nan")) - t0) * 1000),
        "start_returned_ms": round((t_started - t0) * 1000),
        "cpu_to_first_commit_s": round(found.get("cpu", float("nan")) - cpu0, 1),
        "cpu_total_s": round(tree_cpu_s() - cpu0, 1),
        "cpu_to_first_commit_by_process": {
            k: round(v - KIND0.get(k, 0), 1) for k, v in (found.get("by_kind") or {}).items()
            if v - KIND0.get(k, 0) >= 0.1},
        "total_s": round(t_end - t0, 2), "events_per_s": round(n / (t_end - t0)),
        "driver_ms": driver, "driver_calls": counts, "first_epoch": first, "steady_median": med,
        "conf": EXTRA_CONF, "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    # the first epoch's foreachBatch and job
    fb = [(a, b) for lab, a, b in clock.spans if lab == "foreachBatch"]
    if fb:
        res["first_foreachBatch_ms"] = round((fb[0][1] - fb[0][0]) * 1000)
        res["first_foreachBatch_entered_after_start_ms"] = round((fb[0][0] - t0) * 1000)
    if tasks:
        spark.stop()
        res["tasks"] = task_breakdown(OUT / f"eventlog_{engine}_{os.getpid()}", out / "spark.log")
        res["t0_epoch_ms"] = t0_wall
    return res


def table(path: str) -> None:
    """Print one line per run recorded in ``path`` (``--json``)."""
    print(f"{'tag':<24} {'load1':>5} {'1st commit':>10} {'cpu->1st':>8} {'compile':>7} "
          f"{'1st fb':>6} {'1st trig':>8} {'qplan':>5} {'steady trig':>11} {'total s':>7} {'cpu s':>6}")
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        d, f = r["driver_ms"], r["first_epoch"]
        print(f"{r['engine'] + ':' + r['conf'].get('tag', ''):<24.24} {r['loadavg'][0]:>5} "
              f"{r['start_to_first_commit_ms']:>10} {r['cpu_to_first_commit_s']:>8} "
              f"{d.get('compile (total)', d.get('schema read', 0)):>7} "
              f"{r.get('first_foreachBatch_ms', '-'):>6} {f.get('triggerExecution', 0):>8} "
              f"{f.get('queryPlanning', 0):>5} {r['steady_median'].get('triggerExecution', 0):>11} "
              f"{r['total_s']:>7} {r['cpu_total_s']:>6}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="flights", choices=["flights", "tumbling"])
    p.add_argument("--engine", default=None, choices=["wire", "plain"])
    p.add_argument("--tasks", action="store_true")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--epoch-size", type=int, default=100_000)
    p.add_argument("--wire-epoch", type=int, default=None,
                   help="Wire's max_events_per_epoch (default: the input's file size)")
    p.add_argument("--json", default=None)
    p.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v (both engines)")
    p.add_argument("--table", default=None, help="only print the runs recorded in this file")
    args = p.parse_args()
    if args.table:
        table(args.table)
        return
    if args.engine is None:
        for engine in ("wire", "plain"):
            cmd = [sys.executable, __file__, "--engine", engine, *sys.argv[1:]]
            subprocess.run(cmd, check=True)
        return
    EXTRA_CONF.update(kv.split("=", 1) for kv in args.conf)
    glob, epoch = prepare(args.workload, args.events, args.epoch_size)
    out = OUT / f"{args.workload}_{args.engine}_{os.getpid()}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if args.engine == "wire":
        res = run_wire(args.workload, glob, epoch, out, args.tasks, args.wire_epoch)
    else:
        res = run_plain(args.workload, glob, epoch, out, args.tasks)
    res["workload"] = args.workload
    shutil.rmtree(out, ignore_errors=True)
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
