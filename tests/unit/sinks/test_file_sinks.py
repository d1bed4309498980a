import dataclasses
import datetime as dt
import json
import math
import pickle

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wire.delivery.epoch_files import STAGING_NAME
from wire.delivery.sink import Sink
from wire.errors import CheckpointError, ConfigError, WireError
from wire.sinks.file_sinks import ConsoleSink, console, jsonl, parquet
from wire.sinks.json_rows import jsonl_lines

OPEN = {"flow_id": "flights", "sink_id": "out", "checkpoint_id": "ckpt-1"}


def sample() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([2**62 + 1, -7, 3, 2**63 - 1], pa.int64()),
            "x": pa.array([1.5, None, -0.25, 1e300], pa.float64()),
            "name": pa.array(["a", None, "ü", 'q"uote\n'], pa.string()),
            "ts": pa.array([1357035300123, 0, None, -1], pa.timestamp("ms", "UTC")),
            "day": pa.array([dt.date(2013, 1, 1), None, dt.date(1999, 12, 31), dt.date(1, 1, 1)]),
            "ok": pa.array([True, False, None, True]),
        }
    )


def write_two_epochs(sink: Sink, table: pa.Table) -> None:
    sink.open(**OPEN)
    sink.write_epoch(0, table.slice(0, 2))
    sink.write_epoch(1, table.schema.empty_table())  # empty epoch: no file
    sink.write_epoch(2, table.slice(2))
    sink.close()


def read_back(sql: str) -> pa.Table:
    return duckdb.connect().sql(sql).arrow().read_all()


@pytest.mark.parametrize("make", [parquet, jsonl])
def test_file_sinks_are_frozen_exactly_once_and_describe_themselves(tmp_path, make):
    sink = make(tmp_path / "x")
    assert sink.guarantee == "exactly_once"
    ext = "parquet" if make is parquet else "jsonl"
    assert sink.describe() == f"{ext} {tmp_path / 'x'} (exactly_once)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        sink.path = "elsewhere"
    before = hash(sink)
    sink.open(**OPEN)
    assert hash(sink) == before and sink == make(tmp_path / "x")


@pytest.mark.parametrize("make", [parquet, jsonl])
def test_one_directory_per_epoch_with_rows(tmp_path, make):
    write_two_epochs(make(tmp_path / "out"), sample())
    ext = "parquet" if make is parquet else "jsonl"
    names = sorted(p.parent.name for p in (tmp_path / "out").glob(f"*/*.{ext}"))
    assert names == ["epoch-0000000000", "epoch-0000000002"]
    assert list((tmp_path / "out" / STAGING_NAME).iterdir()) == []


@pytest.mark.parametrize("make", [parquet, jsonl])
def test_two_phase_tasks_stage_and_the_driver_publishes_the_epoch_whole(tmp_path, make):
    """Executors stage (stagers pickled as Spark ships them); the driver commits."""
    table = sample().append_column("epoch", pa.array([5] * 4, pa.int64()))
    sink = make(tmp_path / "out")
    sink.open(**OPEN)
    ext = "parquet" if make is parquet else "jsonl"
    reader = "read_parquet" if make is parquet else "read_json"

    def visible() -> list[int]:
        if not list((tmp_path / "out").glob(f"*/*.{ext}")):
            return []
        got = read_back(f"select id from {reader}('{tmp_path}/out/*/*.{ext}') order by id")
        return got["id"].to_pylist()

    def run_epoch(already: list[int]) -> list:
        stager = sink.prepare_epoch(5)
        on_executor = [pickle.loads(pickle.dumps(stager)) for _ in range(3)]
        on_executor[1].stage(1, table.slice(0, 1))  # this attempt fails after writing
        parts = [on_executor[2].stage(2, table.slice(1, 3)), on_executor[0].stage(0, table.slice(0, 1))]
        assert visible() == already  # nothing staged is visible before the driver commits
        return parts

    parts = run_epoch([])
    assert sorted(p.partition for p in parts) == [0, 2]
    assert sum(p.rows for p in parts) == 4 and all(p.bytes > 0 for p in parts)
    sink.commit_epoch(5, parts)
    assert visible() == sorted(table.column("id").to_pylist())
    assert len(list((tmp_path / "out").glob(f"*/*.{ext}"))) == 2  # the failed attempt's file is gone

    sink.commit_epoch(5, run_epoch(visible()))  # a replay of the epoch publishes nothing twice
    assert visible() == sorted(table.column("id").to_pylist())
    assert list((tmp_path / "out" / STAGING_NAME).iterdir()) == []


def test_parquet_read_back_by_duckdb_equals_input(tmp_path):
    table = sample()
    write_two_epochs(parquet(tmp_path / "out"), table)
    got = read_back(
        f"select * exclude (filename) from read_parquet('{tmp_path}/out/*/*.parquet', "
        "filename=true) order by filename"
    )
    assert got.cast(table.schema).equals(table)


def test_parquet_keeps_the_schema_including_utc(tmp_path):
    table = sample()
    write_two_epochs(parquet(tmp_path / "out"), table)
    [path] = (tmp_path / "out" / "epoch-0000000000").glob("*.parquet")
    written = pq.read_table(path)
    assert written.schema.equals(table.schema)
    assert written.schema.field("ts").type == pa.timestamp("ms", "UTC")
    assert written.equals(table.slice(0, 2))


def test_jsonl_read_back_by_duckdb_equals_input(tmp_path):
    table = sample()
    write_two_epochs(jsonl(tmp_path / "out"), table)
    got = read_back(
        f"select * exclude (filename) from read_json('{tmp_path}/out/*/*.jsonl', "
        "format='newline_delimited', filename=true) order by filename"
    )
    assert got.cast(table.schema).equals(table)


def test_jsonl_encoding(tmp_path):
    table = pa.table(
        {
            "big": pa.array([2**63 - 1], pa.int64()),
            "ts": pa.array([1357035300123], pa.timestamp("ms", "UTC")),
            "ts_ny": pa.array([1357035300], pa.timestamp("s", "America/New_York")),
            "naive": pa.array([1], pa.timestamp("us")),
            "day": pa.array([dt.date(2013, 3, 10)]),
            "raw": pa.array([b"\x00\xffwire"]),
            "nan": pa.array([math.nan]),
            "inf": pa.array([-math.inf]),
            "nested": pa.array([{"when": dt.date(2000, 1, 2), "xs": [1.0, math.nan]}]),
        }
    )
    sink = jsonl(tmp_path / "out")
    sink.open(**OPEN)
    sink.write_epoch(4, table)
    [path] = (tmp_path / "out" / "epoch-0000000004").glob("*.jsonl")
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 1
    assert "9223372036854775807" in text  # exact, not 9.223372036854776e18
    assert json.loads(text) == {
        "big": 2**63 - 1,
        "ts": "2013-01-01T10:15:00.123Z",
        "ts_ny": "2013-01-01T10:15:00Z",
        "naive": "1970-01-01T00:00:00.000001",
        "day": "2013-03-10",
        "raw": "AP93aXJl",
        "nan": None,
        "inf": None,
        "nested": {"when": "2000-01-02", "xs": [1.0, None]},
    }


def test_jsonl_rejects_duplicate_column_names():
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(WireError, match="duplicate column names"):
        jsonl_lines(table)


@pytest.mark.parametrize("make", [parquet, jsonl])
def test_replayed_epoch_is_skipped(tmp_path, make):
    table = sample()
    sink = make(tmp_path / "out")
    sink.open(**OPEN)
    sink.write_epoch(7, table)
    [path] = (tmp_path / "out").glob("epoch-*/part-*")
    content, mtime = path.read_bytes(), path.stat().st_mtime_ns
    sink.write_epoch(7, table)  # replay in the same run
    sink.close()

    restarted = make(tmp_path / "out")  # replay after a crash and restart
    restarted.open(**OPEN)
    restarted.write_epoch(7, table)
    assert list((tmp_path / "out").glob("epoch-*/part-*")) == [path]
    assert path.read_bytes() == content
    assert path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("make", [parquet, jsonl])
def test_crash_between_staging_and_publish(tmp_path, make):
    table = sample()
    sink = make(tmp_path / "out")
    sink.open(**OPEN)
    sink.write_epoch(0, table.slice(0, 1))
    ext = "parquet" if make is parquet else "jsonl"
    # The crashed attempt of epoch 1 left its half-written staged file behind.
    leftover = tmp_path / "out" / STAGING_NAME / "epoch-0000000001.deadbeef" / f"part-00000-ab.{ext}"
    leftover.parent.mkdir()
    leftover.write_bytes(b"PAR1 half")
    reader = "read_parquet" if make is parquet else "read_json"

    def visible_rows() -> int:
        counted = read_back(f"select count(*) n from {reader}('{tmp_path}/out/*/*.{ext}')")
        return counted["n"][0].as_py()

    assert visible_rows() == 1

    restarted = make(tmp_path / "out")
    restarted.open(**OPEN)
    assert not leftover.exists()
    restarted.write_epoch(1, table.slice(1))
    assert visible_rows() == table.num_rows


def test_ownership_mismatch_raises(tmp_path):
    first = parquet(tmp_path / "out")
    first.open(**OPEN)
    first.write_epoch(0, sample())
    other = parquet(tmp_path / "out")
    with pytest.raises(CheckpointError) as info:
        other.open(flow_id="another-flow", sink_id="out", checkpoint_id="ckpt-9")
    message = str(info.value)
    assert str(tmp_path / "out") in message
    assert "flights" in message and "ckpt-1" in message
    assert "another-flow" in message and "ckpt-9" in message


def test_write_before_open_raises(tmp_path):
    with pytest.raises(WireError, match="before open"):
        parquet(tmp_path / "out").write_epoch(0, sample())


def test_console_prints_epoch_count_and_first_rows(capsys):
    sink = console(max_rows=2)
    assert isinstance(sink, ConsoleSink)
    assert sink.guarantee == "at_least_once"
    assert sink.describe() == "console max_rows=2 (at_least_once)"
    sink.open(**OPEN)
    sink.write_epoch(12, pa.table({"carrier": ["UA", "AA", "B6"], "n": [1, 2, 3]}))
    sink.write_epoch(13, pa.table({"carrier": pa.array([], pa.string())}))
    sink.close()
    out = capsys.readouterr().out
    assert "epoch 12: 3 rows (first 2 shown)" in out
    assert "UA" in out and "AA" in out and "B6" not in out
    assert "epoch 13: 0 rows" in out


def test_console_replay_prints_again(capsys):
    sink = console()
    table = pa.table({"a": [1]})
    sink.write_epoch(1, table)
    sink.write_epoch(1, table)
    assert capsys.readouterr().out.count("epoch 1: 1 rows") == 2


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "20"])
def test_console_bad_max_rows(value):
    with pytest.raises(ConfigError) as info:
        console(max_rows=value)
    assert info.value.parameter == "max_rows"
    assert "max_rows" in str(info.value)


@pytest.mark.parametrize("make", [parquet, jsonl])
@pytest.mark.parametrize("value", ["", "   ", None, 3])
def test_file_sink_bad_path(make, value):
    with pytest.raises(ConfigError) as info:
        make(value)
    assert info.value.parameter == "path"
    assert "path" in str(info.value)
