"""Cost per epoch of the self-correcting sink vs the plain exactly-once sinks, same flow.

The flow: events ``(k, t, v)`` in near event-time order, ``--keys`` keys, 4 events per
second of event time -> 1-minute tumbling windows per ``k`` with ``emit="update"``
(count, sum) -> one sink. Each variant runs the whole input from a fresh checkpoint
into a fresh table of a throw-away PostgreSQL server, in the same SparkSession
(``local[2]``), after one warm-up run:

* ``plain``: ``wire.sinks.postgres(dsn, table=...)`` (append, exactly once: executors
  stage, the driver commits rows + epoch marker);
* ``self_correcting``: ``wire.sinks.self_correcting(dsn, table=..., key=("k",
  "window_start"))`` (touched keys; a full check only at the first epoch);
* ``self_correcting_full``: the same with ``full_check_every=1`` (every epoch compares
  every key: the cost of drift detection by full comparison);
* ``delta_plain``: ``wire.sinks.delta(path)`` (append, exactly once);
* ``delta_self_correcting``: ``wire.sinks.self_correcting(path, key=...)``.

Cost per epoch = the epoch's wall time (``RunSummary.epoch_wall_seconds``: Spark's
work plus every sink), median over the data epochs; the first epoch is left out.
The table ends equal for all variants (checked: each self-correcting table against
the last row per key of the plain PostgreSQL table).

Run: ``.venv/bin/python bench/self_correcting.py [--files 40] [--per-file 1000] [--keys 50]``;
writes ``bench/results/self_correcting.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

import wire
from wire.testing.postgres import PostgresServer

RESULTS = Path(__file__).parent / "results" / "self_correcting.md"


def make_input(directory: Path, files: int, per_file: int, keys: int) -> None:
    rng = np.random.default_rng(7)
    directory.mkdir(parents=True)
    for f in range(files):
        i = np.arange(f * per_file, (f + 1) * per_file)
        table = pa.table({"k": [f"k{x:03d}" for x in rng.integers(0, keys, len(i))],
                          "t": pa.array(i * 250 + rng.integers(0, 5000, len(i)), pa.int64()),
                          "v": pa.array(rng.integers(0, 100, len(i)), pa.int64())})
        pq.write_table(table, directory / f"part-{f:04d}.parquet")


def run(variant: str, glob: str, dsn: str, ck: str, table: str, per_epoch: int, spark,
        flow_id: str | None = None, delta_path: str = "") -> list[float]:
    flow = wire.Flow(flow_id or f"bench-{variant}")
    events = flow.source(wire.sources.files(glob, format="parquet"), event_time="t", key="k",
                         watermark=wire.BoundedOutOfOrderness("10s"), max_events_per_epoch=per_epoch)
    minutes = events.window(wire.Tumbling("1m"), emit="update").aggregate(
        n=wire.count(), total=wire.sum("v"), name="per_minute")
    if variant == "plain":
        sink = wire.sinks.postgres(dsn, table=table)
    elif variant == "delta_plain":
        sink = wire.sinks.delta(delta_path)
    elif variant == "delta_self_correcting":
        sink = wire.sinks.self_correcting(delta_path, key=("k", "window_start"))
    else:
        sink = wire.sinks.self_correcting(dsn, table=table, key=("k", "window_start"),
                                          full_check_every=1 if variant.endswith("full") else 0)
    minutes.sink(sink, name="out")
    summary = flow.run(ck, spark=spark, key_groups=2)
    return summary.epoch_wall_seconds[1:]


def delta_rows(path: str) -> set[tuple]:
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table(columns=["k", "window_start", "n", "total"])
    return {(r["k"], r["window_start"], r["n"], r["total"]) for r in t.to_pylist()}


def final_rows(dsn: str, table: str, plain: bool) -> set[tuple]:
    with psycopg.connect(dsn) as c:
        if plain:  # the last row per key (highest epoch; within an epoch a key has one row)
            q = (f"SELECT DISTINCT ON (k, window_start) k, window_start, n, total FROM {table} "
                 "ORDER BY k, window_start, epoch DESC")
        else:
            q = f"SELECT k, window_start, n, total FROM {table}"
        return set(c.execute(q).fetchall())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--per-file", type=int, default=1000)
    p.add_argument("--keys", type=int, default=50)
    a = p.parse_args()
    load_before = os.getloadavg()
    variants = ["plain", "self_correcting", "self_correcting_full", "delta_plain", "delta_self_correcting"]
    with tempfile.TemporaryDirectory() as tmp, PostgresServer() as pg:
        make_input(Path(tmp) / "in", a.files, a.per_file, a.keys)
        glob = str(Path(tmp) / "in" / "*.parquet")
        spark = wire.spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
        run("plain", glob, pg.dsn, f"{tmp}/ck-warm", "warm", a.per_file, spark, "bench-warm-up")
        epochs: dict[str, list[float]] = {}
        started = time.perf_counter()
        for v in variants:
            epochs[v] = run(v, glob, pg.dsn, f"{tmp}/ck-{v}", f"t_{v}", a.per_file, spark,
                            delta_path=f"{tmp}/delta-{v}")
        elapsed = time.perf_counter() - started
        plain = final_rows(pg.dsn, "t_plain", True)
        for v in ("self_correcting", "self_correcting_full"):
            assert final_rows(pg.dsn, f"t_{v}", False) == plain, v
        sc_delta = delta_rows(f"{tmp}/delta-delta_self_correcting")
        assert {(k, ws.replace(tzinfo=None), n, t) for k, ws, n, t in sc_delta} == {
            (k, ws.replace(tzinfo=None), n, t) for k, ws, n, t in plain}, "delta_self_correcting"
        rows = len(plain)
    load_after = os.getloadavg()
    med = {v: statistics.median(e) for v, e in epochs.items()}
    p90 = {v: sorted(e)[int(0.9 * (len(e) - 1))] for v, e in epochs.items()}
    lines = [
        "# Self-correcting sink: cost per epoch vs the plain exactly-once sinks",
        "",
        f"**PostgreSQL: self_correcting / plain = {med['self_correcting'] / med['plain']:.2f}x** median "
        f"epoch time; with a full comparison every epoch (`full_check_every=1`): "
        f"{med['self_correcting_full'] / med['plain']:.2f}x. "
        f"**Delta: {med['delta_self_correcting'] / med['delta_plain']:.2f}x** of the plain Delta sink.",
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; after: "
        f"{', '.join(f'{x:.2f}' for x in load_after)} (2 CPUs, shared with other work).",
        "",
        f"Input: {a.files * a.per_file:,} events, {a.keys} keys, {a.per_file} events per epoch, "
        f"1-minute windows, `emit=\"update\"`; final table {rows:,} rows (equal in all variants). "
        f"Run with `.venv/bin/python bench/self_correcting.py --files {a.files} --per-file {a.per_file} "
        f"--keys {a.keys}` ({elapsed:.0f} s).",
        "",
        "| sink | epochs | median epoch (s) | p90 epoch (s) | ratio to its plain sink (median) |",
        "|---|---|---|---|---|",
    ]
    for v in variants:
        ratio = med[v] / med["delta_plain" if v.startswith("delta") else "plain"]
        lines.append(f"| {v} | {len(epochs[v])} | {med[v]:.3f} | {p90[v]:.3f} | {ratio:.2f}x |")
    lines += [
        "",
        "Epoch time is the whole epoch (Spark's job plus the sink). The plain sinks' rows are",
        "staged by the executors and committed by the driver. The self-correcting sink's",
        "executors write the epoch's rows split by partition of the key; the driver reads the",
        "table's upper and fingerprint (PostgreSQL: a full scan, `count(*)` and",
        "`sum(hashtextextended(row::text, 0))`) and mints the batch description; a second Spark job",
        "(one task per partition) folds the rows into each partition's desired collection, saves",
        "it as Parquet under the checkpoint, reads the touched keys' rows and stages the",
        "partition's part of the correction; the driver commits the parts with the",
        "compare-and-set (PostgreSQL: one transaction, `INSERT ... SELECT` from the staging table;",
        "Delta: one MERGE of the staged Parquet parts). The plain tables hold every emitted row",
        "(each window once per epoch that changed it); the self-correcting ones hold one row per",
        "window.",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
