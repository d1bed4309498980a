import itertools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wire.errors import ConfigError
from wire.examples.flights import (
    CSV_COLUMNS,
    MARKER_NAME,
    SCHEMA,
    FlightsInput,
    flights_csv_path,
    local_hhmm_to_utc_ms,
    prepare_flights,
)


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> FlightsInput:
    return prepare_flights(tmp_path_factory.mktemp("flights"))


@pytest.fixture(scope="module")
def oracle() -> pd.DataFrame:
    """The expected rows, computed independently of wire from the CSV's time_hour column."""
    df = pd.read_csv(flights_csv_path(), na_values=["NA"], keep_default_na=False)
    # time_hour is the scheduled hour as a UTC instant; add the scheduled minute.
    hour_ms = pd.to_datetime(df["time_hour"], utc=True).astype("int64") // 1_000_000
    df["sched_dep_ms"] = hour_ms + df["minute"] * 60_000
    delay = df["dep_delay"].fillna(0).astype("int64")
    df["arrival_ms"] = df["sched_dep_ms"] + delay * 60_000
    df["row"] = np.arange(len(df))
    return df.sort_values("arrival_ms", kind="stable").reset_index(drop=True)


def read_all(files) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in files)


def test_counts(full):
    assert full.events == 336_776
    assert full.cancelled == 8_255
    assert len(full.files) == 14  # ceil(336776 / 25000)
    assert sum(pq.read_metadata(f).num_rows for f in full.files) == full.events


def test_files_are_named_in_arrival_order(full):
    names = [Path(f).name for f in full.files]
    assert names == [f"flights-{i:05d}.parquet" for i in range(14)]
    assert sorted(names) == names
    assert all(os.path.isabs(f) for f in full.files)


def test_schema(full):
    table = pq.read_table(full.files[0])
    assert table.schema.equals(SCHEMA)
    assert table.column_names[: len(CSV_COLUMNS)] == list(CSV_COLUMNS)
    assert table.schema.field("dep_delay").type == pa.float64()
    assert table.column_names[-2:] == ["sched_dep_ms", "arrival_ms"]


def test_sched_dep_ms_hand_checked(full):
    table = read_all(full.files).to_pandas()

    def sched(year, month, day, carrier, flight):
        row = table[
            (table.year == year)
            & (table.month == month)
            & (table.day == day)
            & (table.carrier == carrier)
            & (table.flight == flight)
        ]
        assert len(row) == 1
        return int(row.sched_dep_ms.iloc[0]), row.iloc[0]

    # First row of the file: 2013-01-01 05:15 EST = 10:15 UTC.
    ms, row = sched(2013, 1, 1, "UA", 1545)
    assert ms == 1357035300000
    assert row.arrival_ms == ms + 2 * 60_000  # dep_delay 2
    # Summer time, crossing midnight UTC: 2013-07-01 20:29 EDT = 2013-07-02 00:29 UTC.
    ms, row = sched(2013, 7, 1, "B6", 915)
    assert ms == 1372724940000
    assert row.arrival_ms == ms + 212 * 60_000  # dep_delay 212
    # Last minute of the year, crossing into 2014 in UTC: 23:59 EST = 04:59 UTC.
    ms, row = sched(2013, 12, 31, "B6", 839)
    assert ms == 1388552340000


def test_matches_independent_oracle_in_order(full, oracle):
    table = read_all(full.files).to_pandas()
    assert len(table) == len(oracle)
    for column in ["sched_dep_ms", "arrival_ms", "year", "month", "day", "flight", "carrier"]:
        assert table[column].tolist() == oracle[column].tolist(), column
    assert table["tailnum"].isna().tolist() == oracle["tailnum"].isna().tolist()


def test_arrival_order_non_decreasing_across_files(full):
    per_file = [pq.read_table(f)["arrival_ms"].to_numpy() for f in full.files]
    assert (np.diff(np.concatenate(per_file)) >= 0).all()
    assert all(a[-1] <= b[0] for a, b in itertools.pairwise(per_file))


def test_ties_keep_original_file_order(tmp_path):
    limit = 5_000
    prepared = prepare_flights(tmp_path, rows_per_file=777, limit=limit)
    table = read_all(prepared.files)
    # Number the original rows to see where each one went.
    original = pd.read_csv(flights_csv_path(), na_values=["NA"], keep_default_na=False, nrows=limit)
    key = ["year", "month", "day", "carrier", "flight", "sched_dep_time", "origin"]
    assert not original.duplicated(key).any()
    original["row"] = np.arange(limit)
    got = table.to_pandas().merge(original[[*key, "row"]], on=key, how="left", validate="1:1")
    assert got["row"].notna().all()
    ties = got[got.duplicated("arrival_ms", keep=False)]
    assert len(ties) > 100  # the test is about something
    for _, group in ties.groupby("arrival_ms", sort=False):
        assert group["row"].is_monotonic_increasing


def test_cancelled_arrive_at_their_scheduled_departure(full):
    table = read_all(full.files)
    cancelled = table.filter(table["dep_delay"].is_null())
    assert cancelled.num_rows == full.cancelled
    assert cancelled["arrival_ms"].equals(cancelled["sched_dep_ms"])
    flown = table.filter(table["dep_delay"].is_valid())
    delay = flown["dep_delay"].to_numpy().astype(np.int64) * 60_000
    assert (flown["arrival_ms"].to_numpy() == flown["sched_dep_ms"].to_numpy() + delay).all()


def test_limit_keeps_the_first_rows(tmp_path):
    prepared = prepare_flights(tmp_path, rows_per_file=300, limit=1_000)
    assert prepared.events == 1_000
    assert [Path(f).name for f in prepared.files] == [f"flights-{i:05d}.parquet" for i in range(4)]
    table = read_all(prepared.files)
    original = pd.read_csv(flights_csv_path(), na_values=["NA"], keep_default_na=False, nrows=1_000)
    assert sorted(table["flight"].to_pylist()) == sorted(original["flight"].tolist())
    assert prepared.cancelled == int(original["dep_delay"].isna().sum())


def test_reuses_prepared_files(tmp_path):
    first = prepare_flights(tmp_path, rows_per_file=400, limit=1_000)
    mtimes = [os.stat(f).st_mtime_ns for f in first.files]
    again = prepare_flights(tmp_path, rows_per_file=400, limit=1_000)
    assert again == first
    assert [os.stat(f).st_mtime_ns for f in again.files] == mtimes
    marker = json.loads((tmp_path / MARKER_NAME).read_text())
    assert marker["rows"] == [400, 400, 200]


def test_rewrites_when_parameters_change_or_files_do_not_match(tmp_path):
    prepare_flights(tmp_path, rows_per_file=100, limit=1_000)
    assert len(list(tmp_path.glob("flights-*.parquet"))) == 10
    fewer = prepare_flights(tmp_path, rows_per_file=500, limit=1_000)
    assert sorted(str(p) for p in tmp_path.glob("flights-*.parquet")) == list(fewer.files)

    # A file with the wrong row count is not reused.
    pq.write_table(pq.read_table(fewer.files[0]).slice(0, 10), fewer.files[0])
    fixed = prepare_flights(tmp_path, rows_per_file=500, limit=1_000)
    assert pq.read_metadata(fixed.files[0]).num_rows == 500


def test_dst_rules():
    year = np.array([2013] * 5)
    ms = local_hhmm_to_utc_ms(
        year,
        np.array([1, 7, 3, 3, 11]),
        np.array([1, 1, 10, 10, 3]),
        np.array([515, 600, 159, 230, 130]),
    )
    assert ms.tolist() == [
        1357035300000,  # 2013-01-01 05:15 EST = 10:15Z
        1372672800000,  # 2013-07-01 06:00 EDT = 10:00Z
        1362898740000,  # 2013-03-10 01:59 EST = 06:59Z
        1362898800000,  # 02:30 does not exist: shifted forward to 03:00 EDT = 07:00Z
        1383456600000,  # 2013-11-03 01:30 happens twice: the earlier, EDT = 05:30Z
    ]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"rows_per_file": 0}, "rows_per_file"),
        ({"rows_per_file": True}, "rows_per_file"),
        ({"limit": 0}, "limit"),
        ({"limit": 2.5}, "limit"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, parameter):
    with pytest.raises(ConfigError) as info:
        prepare_flights(tmp_path, **kwargs)
    assert info.value.parameter == parameter


def test_bad_out_dir():
    with pytest.raises(ConfigError) as info:
        prepare_flights("")
    assert info.value.parameter == "out_dir"
