"""Bounded memory under backlog (SPEC §5): peak memory vs how much input is waiting.

Runs the same tumbling-window flow over inputs of 10x, 40x and 80x one epoch's
admission (max_events_per_epoch) and samples, every 100 ms, the resident memory of
this driver process, the JVM and all Python workers (the whole process tree). With
admission control the peak should stay flat as the backlog grows.

Usage: .venv/bin/python bench/backlog_memory.py [--epoch 50000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
from pathlib import Path

from bench_data import synth_files

import wire


def tree_rss_mb(root: int) -> tuple[float, float]:
    """(total RSS of ``root`` and its descendants, largest single process) in MB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    total, biggest, stack = 0, 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        biggest = max(biggest, rss.get(pid, 0))
        stack.extend(children.get(pid, []))
    return total / 2**20, biggest / 2**20


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epoch", type=int, default=50_000)
    p.add_argument("--multiples", default="10,40,80")
    args = p.parse_args()
    out = Path("out/bench/backlog")
    shutil.rmtree(out, ignore_errors=True)
    spark = wire.spark("local[2]", log_file=out / "spark.log")
    print(f"epoch admits {args.epoch:,} events; memory = RSS of driver + JVM + Python workers")
    for mult in (int(m) for m in args.multiples.split(",")):
        n = args.epoch * mult
        glob = synth_files(out / f"in{mult}", n, 10_000, args.epoch)
        peak = [0.0, 0.0]
        done = threading.Event()

        def sample(peak: list[float] = peak, done: threading.Event = done) -> None:
            while not done.is_set():
                total, biggest = tree_rss_mb(os.getpid())
                peak[0], peak[1] = max(peak[0], total), max(peak[1], biggest)
                time.sleep(0.1)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        flow = wire.Flow(f"backlog{mult}")
        s = flow.source(wire.sources.files(glob, format="parquet"), event_time="ts", key="key",
                        watermark=wire.BoundedOutOfOrderness("2s"), max_events_per_epoch=args.epoch)
        s.window(wire.Tumbling("10s")).aggregate(n=wire.count()).sink(
            wire.sinks.parquet(out / f"o{mult}"))
        t0 = time.perf_counter()
        summary = flow.run(str(out / f"ck{mult}"), spark=spark)
        done.set()
        t.join()
        print(f"backlog {mult:>3}x ({n:>10,} events, {summary.epochs:>3} epochs, "
              f"{time.perf_counter() - t0:6.1f} s): peak tree RSS {peak[0]:7.0f} MB, "
              f"largest process {peak[1]:7.0f} MB")


if __name__ == "__main__":
    main()
