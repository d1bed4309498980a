"""End to end: late events and dead letters that no sink reads are kept, not lost (SPEC §3)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from test_csv_flow import CSV

import wire

pytestmark = pytest.mark.spark

# CSV: the input and transcript of test_csv_flow.py: with one record per epoch, Tumbling
# 10 s, max delay 2 s and allowed lateness 5 s, "4000,a" arrives at watermark 23000
# (beyond 10000 + 5000: late port) and lines 4 ("oops") and 10 (4 fields) are dead letters.
SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])


def build(tmp_path, per_epoch: int):
    src = tmp_path / "in"
    src.mkdir(exist_ok=True)
    (src / "events.csv").write_text(CSV)
    flow = wire.Flow("kept-test")
    events = flow.source(
        wire.sources.files(str(src / "*.csv"), format="csv", schema=SCHEMA),
        event_time="ts", key="user", watermark=wire.BoundedOutOfOrderness("2s"),
        max_events_per_epoch=per_epoch, name="events",
    )
    totals = events.window(wire.Tumbling("10s"), allowed_lateness="5s").aggregate(
        n=wire.count(), name="totals")
    totals.sink(wire.sinks.parquet(tmp_path / "out"))
    return flow, totals


def test_unsunk_late_and_dead_letter_ports_are_kept_under_the_checkpoint(spark, tmp_path):
    flow, _ = build(tmp_path, per_epoch=1)
    ck = tmp_path / "ck"
    summary = flow.run(checkpoint=str(ck), spark=spark)
    late_dir, dlq_dir = ck / "kept" / "totals.late", ck / "kept" / "events.dead_letter"
    assert summary.kept == {"totals.late": str(late_dir), "events.dead_letter": str(dlq_dir)}
    late = duckdb.sql(f"SELECT * FROM read_parquet('{late_dir}/*/*.parquet')")
    # a kept late port carries the columns the window reads (here the key), not all of them
    assert sorted(late.columns) == ["epoch", "event_time", "reason", "user", "watermark"]
    assert late.select('event_time, "user", watermark').fetchall() == [(4000, "a", 23000)]
    dlq = duckdb.sql(f"SELECT location, reason FROM read_parquet('{dlq_dir}/*/*.parquet')"
                     " ORDER BY location").fetchall()
    assert [loc.rsplit("/", 1)[-1] for loc, _ in dlq] == ["events.csv:10", "events.csv:4"]
    assert all(reason for _, reason in dlq)
    assert summary.rows_written["kept-totals-late"] == 1
    assert summary.rows_written["kept-events-dead_letter"] == 2
    text = summary.render()
    assert f"kept totals.late (no sink): 1 rows in {late_dir}" in text
    assert f"kept events.dead_letter (no sink): 2 rows in {dlq_dir}" in text


def test_dropped_ports_are_not_kept(spark, tmp_path):
    flow, totals = build(tmp_path, per_epoch=100)
    totals.late().drop()
    flow.dead_letters().drop()
    ck = tmp_path / "ck"
    summary = flow.run(checkpoint=str(ck), spark=spark)
    assert summary.kept == {}
    assert not (ck / "kept").exists()
    assert summary.total("malformed") == 2  # still counted
