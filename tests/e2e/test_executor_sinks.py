"""Delta, PostgreSQL (append and upsert) and SQLite written by real Spark executors.

One keyed window flow over a small CSV, with several key groups so that each epoch's
rows are spread over several Spark tasks; the sinks' tables must equal the Parquet
sink's output, with the epoch markers and Delta transactions in place, and no
staging left behind.
"""

from __future__ import annotations

import sqlite3

import duckdb
import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import wire
from wire.sinks.delta_sink.sink import STAGING_DIR
from wire.sinks.postgres_sink.sink import MARKER_TABLE, STAGING_PREFIX

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pg(pg_server):
    return pg_server


def test_executor_sinks_from_spark(spark, tmp_path, pg):
    src = tmp_path / "in"
    src.mkdir()
    users = [f"u{i}" for i in range(12)]
    lines = ["ts,user,amount"] + [f"{t * 1000},{users[(t * 7) % 12]},{t % 5}.5" for t in range(240)]
    (src / "events.csv").write_text("\n".join(lines) + "\n")
    schema = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])
    flow = wire.Flow("executor-sinks")
    events = flow.source(
        wire.sources.files(str(src / "*.csv"), format="csv", schema=schema),
        event_time="ts", key="user", watermark=wire.BoundedOutOfOrderness("2s"), max_events_per_epoch=60,
    )
    totals = events.window(wire.Tumbling("20s")).aggregate(n=wire.count(), total=wire.sum("amount"),
                                                            name="totals")
    totals.sink(wire.sinks.parquet(tmp_path / "parquet"), name="parquet")
    totals.sink(wire.sinks.delta(tmp_path / "delta", partition_by="emit"), name="delta")
    totals.sink(wire.sinks.postgres(pg.dsn, table="totals_append"), name="pg_append")
    totals.sink(wire.sinks.postgres(pg.dsn, table="totals_upsert", mode="upsert",
                                    key=("user", "window_start")), name="pg_upsert")
    totals.sink(wire.sinks.sqlite(tmp_path / "out.db", table="totals", key=("user", "window_start")),
                name="sqlite")
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark, key_groups=4)

    cols = "user, epoch(window_start)::bigint * 1000 AS ws, n, total, epoch"
    parquet = f"read_parquet('{tmp_path}/parquet/*/*.parquet')"
    want = duckdb.sql(f"SELECT {cols} FROM {parquet} ORDER BY ALL").fetchall()
    assert len(want) == 12 * 12 and summary.epochs >= 4
    assert summary.rows_written["delta"] == summary.rows_written["pg_append"] == len(want)

    delta = DeltaTable(str(tmp_path / "delta"))
    db = duckdb.connect()
    db.register("delta_rows", delta.to_pyarrow_table())
    got = db.sql(f"SELECT {cols} FROM delta_rows ORDER BY ALL").fetchall()
    assert got == want
    assert delta.transaction_version("executor-sinks/delta") is not None
    assert not any((tmp_path / "delta" / STAGING_DIR).rglob("*.json"))

    with psycopg.connect(pg.dsn) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        for name in ("totals_append", "totals_upsert"):
            rows = conn.execute(
                f"SELECT \"user\", (extract(epoch FROM window_start) * 1000)::bigint, n, total, epoch "
                f"FROM {name} ORDER BY 1, 2, 3, 4, 5"
            ).fetchall()
            assert rows == want, name
        markers = conn.execute(f"SELECT count(*) FROM {MARKER_TABLE} WHERE flow = %s",
                               ("executor-sinks",)).fetchone()
        assert markers[0] >= 1
        staging = conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE %s",
                               (STAGING_PREFIX.replace("_", "\\_") + "%",)).fetchone()
        assert staging == (0,)

    with sqlite3.connect(tmp_path / "out.db") as conn:
        rows = conn.execute('SELECT "user", window_start, n, total, epoch FROM totals ORDER BY 1, 2')
        rows = rows.fetchall()
    assert len(rows) == len(want)
    assert [(u, n, t, e) for u, _, n, t, e in rows] == [(u, n, t, e) for u, _, n, t, e in want]
