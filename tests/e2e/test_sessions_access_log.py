"""Session windows per client IP on a real Apache access log vs DuckDB gaps-and-islands."""

from __future__ import annotations

import gzip
import json
import re
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

import wire

pytestmark = pytest.mark.spark

LOG = Path(__file__).parent.parent / "data" / "apache_access_sample.log.gz"
LINE = re.compile(r'^(\S+) \S+ \S+ \[([^\]]+)\]')
GAP = 30 * 60_000


def write_events(path: Path) -> int:
    n = 0
    with gzip.open(LOG, "rt") as f, path.open("w") as out:
        for line in f:
            ip, stamp = LINE.match(line).groups()
            ts = int(datetime.strptime(stamp, "%d/%b/%Y:%H:%M:%S %z").timestamp() * 1000)
            out.write(json.dumps({"ip": ip, "ts": ts, "line": n + 1}) + "\n")
            n += 1
    return n


def oracle(path: Path) -> list[tuple]:
    return duckdb.sql(
        f"""WITH x AS (
              SELECT ip, ts, CASE WHEN ts - lag(ts) OVER (PARTITION BY ip ORDER BY ts) < {GAP}
                                  THEN 0 ELSE 1 END AS brk
              FROM read_json('{path}')),
            y AS (SELECT *, sum(brk) OVER (PARTITION BY ip ORDER BY ts
                                           RANGE UNBOUNDED PRECEDING) AS sid FROM x)
            SELECT ip, min(ts), max(ts) + {GAP}, count(*) FROM y GROUP BY ip, sid ORDER BY ALL"""
    ).fetchall()


def test_sessions_per_ip_equal_gaps_and_islands(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    n = write_events(src / "access.jsonl")
    flow = wire.Flow("sessions")
    hits = flow.source(wire.sources.files(str(src), format="jsonl"), event_time="ts", key="ip",
                       watermark=wire.BoundedOutOfOrderness("60s"), max_events_per_epoch=1_000)
    sessions = hits.window(wire.Session("30m")).aggregate(
        hits=wire.count(), first_line=wire.first("line"), last_line=wire.last("line"))
    sessions.sink(wire.sinks.parquet(tmp_path / "out"))
    sessions.late().sink(wire.sinks.parquet(tmp_path / "late"))
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
    assert summary.input_events == n == 4000
    assert summary.total("late") == 0  # the log's disorder is at most 59 s
    got = duckdb.sql(
        f"""SELECT ip, epoch_ms(window_start), epoch_ms(window_end), hits
            FROM read_parquet('{tmp_path}/out/*/*.parquet') WHERE emit = 'final' ORDER BY ALL"""
    ).fetchall()
    expected = oracle(src / "access.jsonl")
    assert len(expected) > 100
    assert got == expected
    # first/last follow event time (ties: arrival order), checked against DuckDB too
    firsts = duckdb.sql(
        f"""SELECT count(*) FROM read_parquet('{tmp_path}/out/*/*.parquet') o
            JOIN read_json('{src}/access.jsonl') e ON e.line = o.first_line
            WHERE e.ts <> epoch_ms(o.window_start)"""
    ).fetchall()[0][0]
    assert firsts == 0
