"""What bench/soak.py samples while its flow runs, and where it keeps it (:class:`Run`).

Every second (``Sampler(kind="tree")``): the resident memory of the process tree from
/proc, per role (driver, JVM, the executors' Python workers, the Python processes the JVM
starts) and per process. Every ``JVM_EVERY_S`` s (``kind="jvm"``, its own thread: a py4j
call can wait on a busy JVM): the JVM heap over py4j and Spark's progress of each epoch.
Used by ``bench/soak.py``, not run on its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

MB = 2**20
JVM_EVERY_S = 5.0


# ------------------------------------------------------------------------ process tree


def _read_proc(pid: str) -> tuple[int, str, int, int] | None:
    """(parent pid, command line, RSS bytes, anonymous RSS bytes) of ``pid``, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, IndexError, ValueError):
        return None
    rss = anon = 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("RssAnon:"):
            anon = int(line.split()[1]) * 1024
    return ppid, cmd, rss, anon


def role_of(cmd: str) -> str:
    """A short name for a Python process the JVM started (by its module)."""
    for name in ("python_streaming_source_runner", "transform_with_state", "plan_data_source_read",
                 "create_data_source", "lookup_data_sources", "commit_data_source_write",
                 "analyze_udtf", "daemon", "worker"):
        if name in cmd:
            return name
    if " -m " in cmd:
        return cmd.split(" -m ")[-1].split()[0]
    return os.path.basename(cmd.split()[0]) if cmd else "?"


@dataclass
class Proc:
    """One process of the tree, followed over the run."""

    pid: int
    role: str
    detail: str
    first_t: float
    last_t: float
    first_mb: float
    last_mb: float
    max_mb: float


def tree(root: int) -> dict[int, tuple[str, str, int, int]]:
    """The tree under ``root`` (itself included): pid -> (role, detail, RSS bytes, anon bytes).

    Roles: ``driver`` (``root``), ``jvm`` (a ``java`` child), ``workers`` (the executors'
    Python daemon and the workers it forks), ``jvm-python`` (other Python processes under
    the JVM: the source planner, the stateful processors' driver worker, ...), ``other``.
    """
    info: dict[int, tuple[int, str, int, int]] = {}
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (r := _read_proc(d)) is not None:
            info[int(d)] = r
            children.setdefault(r[0], []).append(int(d))
    out: dict[int, tuple[str, str, int, int]] = {}
    if root not in info:
        return out
    stack = [(root, "driver", "driver")]
    while stack:
        pid, role, detail = stack.pop()
        rss, anon = info[pid][2:]
        out[pid] = (role, detail, rss, anon)
        for c in children.get(pid, []):
            ccmd = info[c][1]
            if role == "driver" and "java" in ccmd.split(" ")[0]:
                stack.append((c, "jvm", "jvm"))
            elif role == "jvm":
                r = role_of(ccmd)
                stack.append((c, "workers" if r == "daemon" else "jvm-python", r))
            elif role == "workers":
                stack.append((c, "workers", "worker"))
            else:
                stack.append((c, role if role != "driver" else "other", role_of(ccmd)))
    return out


ROLES = ("driver", "jvm", "workers", "jvm-python", "other")


@dataclass
class Sample:
    t: float
    total_mb: float
    by_role: dict[str, float]
    anon_jvm_mb: float
    workers: int
    load1: float


# ------------------------------------------------------------------------------ sampler


@dataclass
class Run:
    """Everything measured during one soak."""

    t0: float = 0.0
    duration_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    procs: dict[int, Proc] = field(default_factory=dict)
    heap: list[tuple[float, float, float, float]] = field(default_factory=list)
    """(t, heap used MB, heap committed MB, old gen used after its last GC MB)."""
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tenth_of(self, t: float) -> int:
        return min(9, max(0, int((t - self.t0) * 10 // self.duration_s)))


def sample_tree(run: Run, root: int) -> None:
    now = time.time()
    procs = tree(root)
    by_role = dict.fromkeys(ROLES, 0.0)
    workers = 0
    anon_jvm = 0.0
    for pid, (role, detail, rss, anon) in procs.items():
        mb = rss / MB
        by_role[role] += mb
        if role == "jvm":
            anon_jvm += anon / MB
        if detail == "worker":
            workers += 1
        p = run.procs.get(pid)
        if p is None:
            run.procs[pid] = Proc(pid, role, detail, now, now, mb, mb, mb)
        else:
            p.last_t, p.last_mb, p.max_mb = now, mb, max(p.max_mb, mb)
    with run.lock:
        run.samples.append(Sample(now, sum(by_role.values()), by_role, anon_jvm, workers, os.getloadavg()[0]))


def jvm_heap(spark: Any) -> tuple[float, float, float]:
    """(heap used, heap committed, old generation used after its last collection), MB."""
    jvm = spark.sparkContext._jvm
    mf = jvm.java.lang.management.ManagementFactory
    heap = mf.getMemoryMXBean().getHeapMemoryUsage()
    old = float("nan")
    for pool in mf.getMemoryPoolMXBeans():
        if "Old Gen" in pool.getName():
            usage = pool.getCollectionUsage()
            if usage is not None:
                old = usage.getUsed() / MB
    return heap.getUsed() / MB, heap.getCommitted() / MB, old


def collect_progress(run: Run, query: Any, events: Any) -> None:
    """Record the epochs of ``query.recentProgress`` not seen yet, only the fields the table uses
    (a whole progress is a few kB: kept for every epoch of an hour it would grow the driver).

    ``events``: the run summary's ``epoch_events`` (``RunningFlow.summary``), the events each
    epoch's sources admitted; a fresh checkpoint's epoch ``i`` is Spark's batch ``i``. Spark's
    ``numInputRows`` counts the rows the source's DataFrame produced, which for a window fused
    with its source (``wire.compiler.fusion``) are partial aggregates, not events. An epoch
    whose events the summary does not have yet is left for the next call."""
    for p in query.recentProgress:
        batch = int(p["batchId"])
        if batch in run.progress:
            continue
        kept = events.since(batch, batch + 1)
        if not kept:
            continue
        compact = {"batchId": batch, "timestamp": p["timestamp"], "durationMs": dict(p["durationMs"]),
                   "numInputRows": p.get("numInputRows", 0), "events": int(kept[0]),
                   "sources": [{"numInputRows": s["numInputRows"]} for s in p.get("sources") or []],
                   "stateOperators": [
                       {"numRowsTotal": o.get("numRowsTotal", 0),
                        "memoryUsedBytes": o.get("memoryUsedBytes", 0),
                        "customMetrics": {"rocksdbSstFileSize":
                                          (o.get("customMetrics") or {}).get("rocksdbSstFileSize", 0)}}
                       for o in p.get("stateOperators") or []]}
        with run.lock:
            run.progress[batch] = compact


class Sampler(threading.Thread):
    """Samples the tree every second (``kind="tree"``), or the JVM heap and Spark's progress every
    5 s (``kind="jvm"``: a py4j call can wait on a busy JVM, so it has its own thread)."""

    def __init__(self, run: Run, spark: Any, kind: str) -> None:
        super().__init__(daemon=True, name=f"soak-{kind}")
        self.run_, self.spark, self.kind = run, spark, kind
        self.query: Any = None
        self.events: Any = None
        """The run summary's ``epoch_events`` (:func:`collect_progress`), set with ``query``."""
        self.done = threading.Event()

    def run(self) -> None:
        every = 1.0 if self.kind == "tree" else JVM_EVERY_S
        while not self.done.is_set():
            start = time.time()
            if self.kind == "tree":
                sample_tree(self.run_, os.getpid())
            else:
                with contextlib.suppress(Exception):  # the JVM is going away: no heap figure
                    used, committed, old = jvm_heap(self.spark)
                    with self.run_.lock:
                        self.run_.heap.append((start, used, committed, old))
                if self.query is not None:
                    with contextlib.suppress(Exception):  # the query is ending
                        collect_progress(self.run_, self.query, self.events)
            self.done.wait(max(0.0, every - (time.time() - start)))
