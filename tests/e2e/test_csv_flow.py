"""End to end on a small hand-written CSV: dead letters, lateness and the late port."""

from __future__ import annotations

import json
from datetime import datetime

import duckdb
import pyarrow as pa
import pytest

import wire

pytestmark = pytest.mark.spark

CSV = """ts,user,amount
1000,a,1.5
2000,b,2.0
oops,a,3.0
9000,a,4.0
12000,a,1.0
3000,b,5.0
25000,b,1.0
4000,a,7.0
1500,a,2.5,extra
40000,a,1.0
"""
# Tumbling 10 s, max delay 2 s, allowed lateness 5 s, one record per epoch (arrival = file order)
# epoch wm_in -> wm_out (W = max event time - 2000):
#   1000 a: -inf -> -1000 | 2000 b: -1000 -> 0 | oops: dead letter | 9000 a: 0 -> 7000
#   12000 a: 7000 -> 10000: window [0,10s) fires final for a (1000, 9000) and b (2000)
#   3000 b: wm_in 10000 < 10000+5000 -> accepted late, update for b [0,10s)
#   25000 b: 10000 -> 23000 ([10s,20s) a fires final; [0,10s) purged at 15000)
#   4000 a: wm_in 23000 >= 10000 + 5000 -> late port
#   1500,a,2.5,extra (line 10): dead letter (4 columns)
#   40000 a, the last record: 23000 -> MAX (its epoch carries the end of input): [20s,30s) b
#   and [40s,50s) a final in that epoch


def run(tmp_path, spark):
    src = tmp_path / "in"
    src.mkdir()
    (src / "events.csv").write_text(CSV)
    schema = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])
    flow = wire.Flow("csv-test")
    events = flow.source(
        wire.sources.files(str(src / "*.csv"), format="csv", schema=schema),
        event_time="ts", key="user", watermark=wire.BoundedOutOfOrderness("2s"),
        max_events_per_epoch=1,
    )
    totals = events.window(wire.Tumbling("10s"), allowed_lateness="5s").aggregate(
        n=wire.count(), total=wire.sum("amount"), name="totals")
    totals.sink(wire.sinks.jsonl(tmp_path / "out"))
    totals.late().sink(wire.sinks.jsonl(tmp_path / "late"))
    flow.dead_letters().sink(wire.sinks.jsonl(tmp_path / "dlq"))
    return flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)


def read(path):
    rows = []
    for f in sorted(path.glob("*/*.jsonl")):
        rows += [json.loads(line) for line in f.read_text().splitlines()]
    return rows


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_transcript(spark, tmp_path):
    summary = run(tmp_path, spark)
    # in epoch order; within an epoch by key (their order there means nothing)
    out = [(r["user"], ms(r["window_start"]), ms(r["window_end"]), r["n"], r["total"], r["emit"])
           for r in sorted(read(tmp_path / "out"), key=lambda r: (r["epoch"], r["user"]))]
    assert out == [
        ("a", 0, 10_000, 2, 5.5, "final"),
        ("b", 0, 10_000, 1, 2.0, "final"),
        ("b", 0, 10_000, 2, 7.0, "update"),
        ("a", 10_000, 20_000, 1, 1.0, "final"),
        ("a", 40_000, 50_000, 1, 1.0, "final"),
        ("b", 20_000, 30_000, 1, 1.0, "final"),
    ]
    # one record an epoch: 10 records (2 malformed) in 10 epochs, the last one ending the input
    epochs = sorted({r["epoch"] for r in read(tmp_path / "out")})
    assert epochs == [4, 5, 6, 9] and summary.epochs == 10
    late = read(tmp_path / "late")
    assert [(r["ts"], r["user"], r["event_time"], r["watermark"]) for r in late] == [
        (4000, "a", 4000, 23000)
    ]
    assert late[0]["reason"]
    dlq = read(tmp_path / "dlq")
    assert sorted(r["location"].rsplit("/", 1)[-1] for r in dlq) == ["events.csv:10", "events.csv:4"]
    assert all(r["reason"] and r["step"] == "source_1" for r in dlq)
    assert any("oops" in r["record"] for r in dlq)
    assert summary.total("malformed") == 2
    assert summary.input_events == 8
    # every well-formed event is in exactly one place: last result per window, or late
    last = duckdb.sql(
        f"""SELECT sum(n) FROM (SELECT n FROM read_json('{tmp_path}/out/*/*.jsonl')
            QUALIFY row_number() OVER (PARTITION BY "user", window_start ORDER BY epoch DESC) = 1)"""
    ).fetchall()[0][0]
    assert last + len(late) == 8
    # executors wrote all three sinks; only receipts and metric records reached the driver
    assert summary.driver_rows == [0] * summary.epochs
    assert summary.rows_written == {"sink_1": 6, "sink_2": 1, "sink_3": 2}
