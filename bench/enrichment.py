"""Enrichment benchmark: Wire's lookup join vs plain PySpark's stream-static join, same run.

Input: ``--events`` orders (event time ``t`` in ms, one per ms; ``customer`` uniform over
``--keys`` ids; ``amount``), written once as Parquet, one file per epoch of
``--epoch-size`` orders. The table: ``--keys`` customers (``id``, ``tier``, ``discount``),
one Parquet file. While a query runs, an updater thread replaces the file (write elsewhere,
then an atomic rename) every ``--change-every`` seconds with the next version, in which
10 % of the customers changed tier and discount. Both engines enrich every order (a left
join) and write Parquet.

* **Wire**: ``orders.lookup_join(wire.tables.parquet(table, key="id"), on="customer",
  how="left")`` over ``wire.sources.files`` (one file per epoch); a snapshot table, so each
  Python worker keeps the table and loads it again when the file changed (checked once per
  epoch). ``wire.sinks.parquet``.
* **Plain PySpark**: ``readStream.parquet`` with ``maxFilesPerTrigger=1`` and
  ``trigger(availableNow=True)``; ``foreachBatch`` joins each micro-batch with the newest
  table version, ``spark.read.parquet`` read again in that micro-batch (a stream-static
  join that sees the table's changes: a static DataFrame made once keeps the file listing
  it was made with; each version is its own file, see :func:`publish`) and appends
  Parquet. Spark broadcasts the 10k-row table.

Both answers depend on processing time: which version an order meets depends on when its
epoch runs, so the two engines' rows (and two runs of one engine) differ in the joined
columns; their row counts must be equal. The event-time alternative, where the answer is
fixed by the data, is the temporal join (``--join temporal``: plugs in
:func:`wire_temporal_flow` once ``Stream.as_table`` / ``Stream.temporal_join`` exist).

Measured per run, from ``StreamingQuery.recentProgress`` (as bench/nexmark.py): steady
events/s (all epochs but the first), wall time from start (compiling the flow / starting
the query included) to the end, and peak RSS of the process tree. Runs alternate the
engines' order (``--repeats``: Wire, plain, then plain, Wire, ...) in one SparkSession.

Usage: .venv/bin/python bench/enrichment.py [--events N] [--keys N] [--epoch-size N]
       [--change-every S] [--repeats R] [--join lookup|temporal] [--out bench/results/enrichment.md]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from nexmark import LOAD_AT_START, MASTER, fmt_rate, machine
from nexmark_measure import PeakRss, Result, count_rows, fill_from_progress, settle
from pyspark.sql import DataFrame, SparkSession

import wire

OUT = Path("out/bench_enrichment")
CUSTOMERS = OUT / "customers.parquet"
"""The customers file the updater replaces while a query runs (Wire's lookup join reads it)."""
VERSIONS = OUT / "customer_versions"
"""Every published version as its own file (plain Spark reads the newest in each micro-batch)."""
CHANGED = 0.1
"""Fraction of the customers whose row a new table version changes."""
TIERS = np.array(["bronze", "silver", "gold", "platinum"])


# ----------------------------------------------------------------------------- input


def write_orders(n: int, keys: int, epoch: int, seed: int = 7) -> Path:
    """The orders as Parquet, one file per epoch (``part-<k>.parquet``)."""
    d = OUT / f"orders_{n}_{keys}_{epoch}"
    if d.exists() and len(list(d.glob("part-*.parquet"))) == -(-n // epoch):
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for k, lo in enumerate(range(0, n, epoch)):
        m = min(n, lo + epoch) - lo
        pq.write_table(pa.table({
            "t": pa.array(np.arange(lo, lo + m, dtype=np.int64)),
            "customer": pa.array(rng.integers(0, keys, m, dtype=np.int64)),
            "amount": pa.array(rng.random(m) * 100),
        }), d / f"part-{k:06d}.parquet")
    return d


def table_version(keys: int, version: int, seed: int = 11) -> pa.Table:
    """Version ``version`` of the customers: version 0, then 10 % of the rows changed per version."""
    rng = np.random.default_rng(seed)
    tier = rng.integers(0, len(TIERS), keys)
    discount = np.zeros(keys)
    for v in range(1, version + 1):
        changed = np.random.default_rng(seed + v).choice(keys, int(keys * CHANGED), replace=False)
        tier[changed] = (tier[changed] + 1) % len(TIERS)
        discount[changed] = v / 100
    return pa.table({"id": pa.array(np.arange(keys, dtype=np.int64)), "tier": pa.array(TIERS[tier]),
                     "discount": pa.array(discount)})


def publish(path: Path, table: pa.Table, version: int) -> None:
    """Publish ``table`` as the current version, in the two forms the engines read.

    Wire's Parquet table reads ``path``, replaced atomically (pyarrow opens the file once, so
    a reader sees the old or the new file, never half). Plain Spark reads the newest of
    :data:`VERSIONS` (files never rewritten): Spark lists a file's size when it plans a scan,
    and a file replaced between planning and reading fails the scan.
    """
    VERSIONS.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, VERSIONS / f".v{version:06d}.tmp")
    os.replace(VERSIONS / f".v{version:06d}.tmp", VERSIONS / f"v{version:06d}.parquet")
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def newest_version() -> Path:
    """The newest published version file (plain Spark's table for a micro-batch)."""
    return max(VERSIONS.glob("v*.parquet"))


class Updater:
    """Publishes the next table version every ``every_s`` seconds while a query runs."""

    def __init__(self, path: Path, keys: int, every_s: float) -> None:
        self.path, self.keys, self.every_s = path, keys, every_s
        self.versions = [table_version(keys, v) for v in range(8)]
        self.published = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            self.published += 1
            publish(self.path, self.versions[self.published % len(self.versions)], self.published)

    def __enter__(self) -> Updater:
        shutil.rmtree(VERSIONS, ignore_errors=True)
        publish(self.path, self.versions[0], 0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


# ----------------------------------------------------------------------------- engines


def wire_lookup_flow(orders: Path, table: Path, out: Path, epoch: int) -> wire.Flow:
    """Wire's lookup join: each epoch meets the table file as it is when the epoch runs."""
    flow = wire.Flow("bench-enrichment-lookup")
    src = flow.source(wire.sources.files(str(orders / "part-*.parquet"), format="parquet"), event_time="t",
                      max_events_per_epoch=epoch, name="orders")
    src.lookup_join(wire.tables.parquet(table, key="id"), on="customer", how="left",
                    name="enrich").sink(wire.sinks.parquet(out), name="out")
    return flow


TEMPORAL_MISSING = ("--join temporal needs Stream.as_table and Stream.temporal_join (issue 28 items 1-2, "
                    "branch temporal-join): not in this build")


def require_temporal_join() -> None:
    """Exit with :data:`TEMPORAL_MISSING` unless this Wire has the temporal join."""
    if not hasattr(wire.Stream, "temporal_join") or not hasattr(wire.Stream, "as_table"):
        raise SystemExit(TEMPORAL_MISSING)


def wire_temporal_flow(orders: Path, table: Path, out: Path, epoch: int) -> wire.Flow:
    """Wire's temporal join (``--join temporal``): the table as a stream of versioned rows.

    The plug-in point for issue 28 items 1-2 (``Stream.as_table`` / ``Stream.temporal_join``,
    branch ``temporal-join``): a second source reads the table versions as upserts stamped
    with event times inside the orders' range, ``as_table(key="id")`` makes them a versioned
    table, and each order meets the version valid at its event time, so the answer does not
    depend on processing time. :func:`write_versions` writes that input.
    """
    require_temporal_join()
    flow = wire.Flow("bench-enrichment-temporal")
    src = flow.source(wire.sources.files(str(orders / "part-*.parquet"), format="parquet"), event_time="t",
                      max_events_per_epoch=epoch, name="orders")
    updates = flow.source(wire.sources.files(str(table / "*.parquet"), format="parquet"),
                          event_time="valid_from", name="customers")
    customers = updates.as_table(key="id")  # type: ignore[attr-defined]
    src.temporal_join(customers, on="customer", how="left", name="enrich").sink(  # type: ignore[attr-defined]
        wire.sinks.parquet(out), name="out")
    return flow


def write_versions(n: int, keys: int, versions: int = 8) -> Path:
    """The table versions as upserts for the temporal join: version v valid from ``v * n / versions`` ms."""
    d = OUT / f"versions_{n}_{keys}"
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for v in range(versions):
        t = table_version(keys, v)
        t = t.append_column("valid_from", pa.array(np.full(keys, v * n // versions, np.int64)))
        pq.write_table(t, d / f"v{v:03d}.parquet")
    return d


def run_wire(spark: SparkSession, build: Callable[..., wire.Flow], orders: Path, table: Path, epoch: int,
             keys: int, change_every: float, tag: str) -> Result:
    """Wire's run of the flow ``build`` makes; ``table``: what the flow reads as its table."""
    out = OUT / f"wire_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    r = Result()
    settle(spark)
    t0 = time.perf_counter()
    with PeakRss() as mem, Updater(CUSTOMERS, keys, change_every):
        try:
            running = build(orders, table, out / "out", epoch).start(checkpoint=str(out / "ck"), spark=spark)
            running.await_termination()
            fill_from_progress(r, running.query.recentProgress, epoch, running.source_scans or 1)
        except Exception as e:  # report and go on
            r.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    r.wall_s = time.perf_counter() - t0
    r.peak_mb = mem.peak_mb
    r.output_rows = None if r.error else count_rows(out / "out")
    return r


def run_plain(spark: SparkSession, orders: Path, epoch: int, keys: int, change_every: float,
              tag: str) -> Result:
    """Plain PySpark: a stream-static join whose static side is read again in each micro-batch."""
    out = OUT / f"plain_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    r = Result()
    schema = spark.read.parquet(str(orders)).schema

    def sink(batch: DataFrame, epoch_id: int) -> None:
        customers = spark.read.parquet(str(newest_version()))
        (batch.join(customers, batch.customer == customers.id, "left").drop("id")
         .write.mode("append").parquet(str(out / "out")))

    settle(spark)
    t0 = time.perf_counter()
    with PeakRss() as mem, Updater(CUSTOMERS, keys, change_every):
        try:
            q = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(orders))
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(out / "ck"))
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            fill_from_progress(r, q.recentProgress, epoch)
        except Exception as e:
            r.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    r.wall_s = time.perf_counter() - t0
    r.peak_mb = mem.peak_mb
    r.output_rows = None if r.error else count_rows(out / "out")
    return r


# ----------------------------------------------------------------------------- report


def ratio(w: Result, p: Result) -> str:
    x = w.rate / p.rate if p.rate == p.rate and p.rate > 0 else float("nan")
    return "n/a" if x != x else f"{x:.2f}x"


def report_rows(runs: list[tuple[int, str, Result, Result]]) -> list[list[str]]:
    lines = []
    for i, order, w, p in runs:
        rows = "ok" if w.output_rows == p.output_rows else f"MISMATCH {w.output_rows} vs {p.output_rows}"
        lines.append([str(i + 1), ratio(w, p), f"{w.wall_s:.1f}", f"{p.wall_s:.1f}", fmt_rate(w.rate),
                      fmt_rate(p.rate), order, f"{w.peak_mb:,.0f} / {p.peak_mb:,.0f}",
                      f"{w.epochs} / {p.epochs}", w.error or p.error or rows])
    return lines


HEADER = ["run", "Wire / plain (steady events/s)", "Wire wall s", "plain wall s", "Wire events/s",
          "plain events/s", "order", "peak RSS MB (Wire / plain)", "epochs", "rows"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--epoch-size", type=int, default=100_000)
    ap.add_argument("--change-every", type=float, default=2.0, help="seconds between table versions")
    ap.add_argument("--repeats", type=int, default=2, help="runs per engine, alternating the order")
    ap.add_argument("--join", choices=("lookup", "temporal"), default="lookup")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    args = ap.parse_args()
    if args.join == "temporal":
        require_temporal_join()
    LOAD_AT_START[0] = os.getloadavg()[0]
    spark = wire.spark(MASTER)
    spark.sparkContext.setLogLevel("ERROR")
    orders = write_orders(args.events, args.keys, args.epoch_size)
    if args.join == "temporal":
        build, table = wire_temporal_flow, write_versions(args.events, args.keys)
    else:
        build, table = wire_lookup_flow, CUSTOMERS
    print(f"enrichment ({args.join} join), {args.events:,} orders, {args.keys:,} keys, epochs of "
          f"{args.epoch_size:,}, a new table version every {args.change_every:g} s; {MASTER}")
    runs = []
    for i in range(args.repeats):
        tag = str(i)
        if i % 2 == 0:
            w = run_wire(spark, build, orders, table, args.epoch_size, args.keys, args.change_every, tag)
            p = run_plain(spark, orders, args.epoch_size, args.keys, args.change_every, tag)
            order = "Wire, then plain"
        else:
            p = run_plain(spark, orders, args.epoch_size, args.keys, args.change_every, tag)
            w = run_wire(spark, build, orders, table, args.epoch_size, args.keys, args.change_every, tag)
            order = "plain, then Wire"
        runs.append((i, order, w, p))
        print(" | ".join(report_rows(runs)[-1]))
    lines = report_rows(runs)
    if args.out is not None:
        command = "python bench/enrichment.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        md = [f"# Enrichment: Wire's {args.join} join vs plain PySpark's stream-static join", "",
              f"Command: `{command}`", "", *[f"- {m}" for m in machine()], "",
              f"{args.events:,} orders over {args.keys:,} customers, epochs of {args.epoch_size:,} orders; "
              f"the customers file replaced by its next version every {args.change_every:g} s while a query "
              "runs (10 % of the rows changed per version).", "",
              "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER),
              *["| " + " | ".join(line) + " |" for line in lines], "",
              "Steady events/s: input rows of all epochs but the first / their summed trigger time "
              "(`StreamingQuery.recentProgress`). Wall time: from building / starting the query to its "
              "end, start-up included. Both answers depend on processing time (which table version an "
              "epoch meets), so only the row counts are compared; the temporal join (`--join temporal`) "
              "is the event-time alternative, whose answer the data fixes."]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(md) + "\n")
        print(f"wrote {args.out}")
    spark.stop()


if __name__ == "__main__":
    main()
