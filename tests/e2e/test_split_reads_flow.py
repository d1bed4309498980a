"""End to end: an epoch of one big CSV file read by several tasks (``SPLIT_RECORDS``) gives
DuckDB's windows, and every malformed record is one dead letter."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import wire
from wire.sources.base import partitioned

pytestmark = pytest.mark.spark

RECORDS = 2 * partitioned.SPLIT_RECORDS + 7_000  # two tasks on a machine with 2+ cores
BAD = {5, 50_001, 99_999, RECORDS - 1}


def test_split_file_epoch_matches_duckdb(spark, tmp_path):
    rng = np.random.default_rng(7)
    src = tmp_path / "in"
    src.mkdir()
    ts = np.sort(rng.integers(0, 3_600_000, RECORDS))
    keys = rng.choice(["a", "b", "c", "d"], RECORDS)
    amounts = rng.integers(0, 1000, RECORDS)
    lines = ["ts,user,amount"]
    for i in range(RECORDS):
        lines.append(f"{ts[i]},{keys[i]},oops" if i in BAD else f"{ts[i]},{keys[i]},{amounts[i]}")
    (src / "big.csv").write_text("\n".join(lines) + "\n")
    schema = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])
    flow = wire.Flow("split-reads")
    events = flow.source(
        wire.sources.files(str(src / "*.csv"), format="csv", schema=schema),
        event_time="ts", key="user", watermark=wire.BoundedOutOfOrderness("1s"),
        max_events_per_epoch=RECORDS,
    )
    totals = events.window(wire.Tumbling("10m")).aggregate(
        n=wire.count(), total=wire.sum("amount"), name="totals")
    totals.sink(wire.sinks.parquet(str(tmp_path / "out")))
    flow.dead_letters().sink(wire.sinks.jsonl(tmp_path / "dlq"))
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
    assert summary.input_events == RECORDS - len(BAD)

    got = duckdb.sql(
        f"SELECT user, epoch_ms(window_start) AS ws, n, total FROM '{tmp_path}/out/*/*.parquet' "
        "ORDER BY user, ws").fetchall()
    con = duckdb.connect()
    con.register("events", pa.table({"ts": ts, "user": keys, "amount": amounts.astype(float),
                                     "bad": [i in BAD for i in range(RECORDS)]}))
    expected = con.sql(
        "SELECT user, ts // 600000 * 600000 AS ws, count(*) AS n, sum(amount) AS total FROM events "
        "WHERE NOT bad GROUP BY ALL ORDER BY user, ws").fetchall()
    assert got == expected
    dead = [json.loads(line) for f in sorted((tmp_path / "dlq").glob("*/*.jsonl"))
            for line in f.read_text().splitlines()]
    assert sorted(int(d["location"].rsplit(":", 1)[1]) for d in dead) == sorted(i + 2 for i in BAD)
