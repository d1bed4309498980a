"""End to end: the flights flow on real data against an independent DuckDB batch oracle."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from wire.examples.flights import prepare_flights
from wire.examples.flights_job import flights_flow

pytestmark = pytest.mark.spark

HOUR = 3_600_000


@pytest.fixture(scope="module")
def flights_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    d = tmp_path_factory.mktemp("flights_in")
    data = prepare_flights(d, rows_per_file=4_000, limit=24_000)
    return str(d / "*.parquet"), data.events


def oracle(glob: str) -> dict[tuple[str, int], tuple[int, float, float]]:
    rows = duckdb.sql(
        f"""SELECT origin, (sched_dep_ms // {HOUR}) * {HOUR} AS ws, count(*),
                   avg(dep_delay), max(dep_delay)
            FROM read_parquet('{glob}') WHERE dep_delay IS NOT NULL GROUP BY ALL"""
    ).fetchall()
    return {(o, ws): (n, mean, mx) for o, ws, n, mean, mx in rows}


def last_results(out: Path) -> dict[tuple[str, int], tuple[int, float, float]]:
    rows = duckdb.sql(
        f"""SELECT origin, epoch_ms(window_start), departures, mean_dep_delay, max_dep_delay
            FROM read_parquet('{out}/windows/*/*.parquet')
            QUALIFY row_number() OVER (PARTITION BY origin, window_start ORDER BY epoch DESC) = 1"""
    ).fetchall()
    return {(o, ws): (n, mean, mx) for o, ws, n, mean, mx in rows}


def epoch_watermarks(checkpoint: Path) -> dict[int, int]:
    """The end-of-epoch watermark recorded in Spark's offset log, per epoch."""
    marks = {}
    for f in (checkpoint / "spark" / "offsets").iterdir():
        if f.name.isdigit():
            offset = json.loads(f.read_text().splitlines()[2])
            marks[int(f.name)] = offset["watermark"]
    return marks


def test_large_delay_matches_batch_oracle(spark, flights_input, tmp_path):
    glob, _ = flights_input
    flow = flights_flow(glob, tmp_path, max_delay="2d", allowed_lateness=0,
                        max_events_per_epoch=5_000)
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
    expected = oracle(glob)
    got = last_results(tmp_path)
    assert set(got) == set(expected)
    for k, (n, mean, mx) in expected.items():
        assert got[k][0] == n, k
        assert got[k][1] == pytest.approx(mean, abs=1e-9), k
        assert got[k][2] == mx, k
    assert summary.total("late") == 0
    # with a delay above every lag each window is emitted exactly once, as final
    emits = duckdb.sql(
        f"SELECT emit, count(*) FROM read_parquet('{tmp_path}/windows/*/*.parquet') GROUP BY 1"
    ).fetchall()
    assert dict(emits) == {"final": len(expected)}


def test_small_delay_accounts_for_every_event(spark, flights_input, tmp_path):
    glob, _ = flights_input
    lateness = 30 * 60_000
    flow = flights_flow(glob, tmp_path, max_delay="5m", allowed_lateness=lateness,
                        max_events_per_epoch=3_000)
    flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
    expected = oracle(glob)
    got = last_results(tmp_path)
    late = duckdb.sql(
        f"""SELECT origin, (sched_dep_ms // {HOUR}) * {HOUR} AS ws, count(*) AS n,
                   min(watermark - ((sched_dep_ms // {HOUR}) * {HOUR} + {HOUR})) AS margin,
                   bool_and(event_time = sched_dep_ms) AS et_ok
            FROM read_parquet('{tmp_path}/late/*/*.parquet') GROUP BY ALL"""
    ).fetchall()
    late_n = {(o, ws): n for o, ws, n, _, _ in late}
    assert sum(late_n.values()) > 0, "a 5-minute delay must make some flights late"
    for _, _, _, margin, et_ok in late:
        assert margin >= lateness  # late only when window_end + lateness <= watermark
        assert et_ok
    for k, (n, _, _) in expected.items():
        assert got.get(k, (0,))[0] + late_n.get(k, 0) == n, k
    # no final before the watermark passed the window end; updates only within lateness
    marks = epoch_watermarks(tmp_path / "ck")
    rows = duckdb.sql(
        f"""SELECT epoch, emit, epoch_ms(window_end), count(*) OVER
                   (PARTITION BY origin, window_start, emit)
            FROM read_parquet('{tmp_path}/windows/*/*.parquet')"""
    ).fetchall()
    assert any(e == "update" for _, e, _, _ in rows)
    for epoch, emit, we, per_window in rows:
        end_wm = marks[epoch]
        start_wm = marks.get(epoch - 1, -(2**63))
        if emit == "final":
            assert per_window == 1
            assert we <= end_wm and we > start_wm
        else:
            assert we <= start_wm < we + lateness


def test_restart_equals_uninterrupted_run(spark, flights_input, tmp_path):
    glob, _ = flights_input
    kwargs = {"max_delay": "5m", "allowed_lateness": "30m", "max_events_per_epoch": 4_000}
    whole, split = tmp_path / "whole", tmp_path / "split"
    flights_flow(glob, whole, **kwargs).run(checkpoint=str(whole / "ck"), spark=spark)
    first = flights_flow(glob, split, **kwargs).run(
        checkpoint=str(split / "ck"), spark=spark, max_epochs=2)
    assert first.stopped_early and first.epochs == 2
    flights_flow(glob, split, **kwargs).run(checkpoint=str(split / "ck"), spark=spark)
    for port in ("windows", "late"):
        q = "SELECT * EXCLUDE (filename) FROM read_parquet('{}/{}/*/*.parquet', filename=true) ORDER BY ALL"
        a = duckdb.sql(q.format(whole, port)).fetchall()
        b = duckdb.sql(q.format(split, port)).fetchall()
        assert a == b and len(a) > 0, port
