"""``wire state``: listing and printing / exporting a step's state (the reader faked, no Spark)."""

from __future__ import annotations

import csv
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from wire.cli import state as cli_state
from wire.cli.main import app
from wire.errors import CheckpointError
from wire.runtime import state_layout, state_reader
from wire.runtime.state_layout import Located
from wire.runtime.state_reader import StepSummary

TABLE = pa.table({
    "key_group": pa.array([1, 1], pa.int32()), "k": ["a", "a"],
    "window_start": pa.array([0, 10], pa.int64()), "window_end": pa.array([10, 20], pa.int64()),
    "n": pa.array([2, 1], pa.int64()),
    "top": pa.array([[{"x": 1}], None], pa.list_(pa.struct([("x", pa.int64())]))),
    "fired": [True, False],
}).replace_schema_metadata({b"wire.kind": b"window", b"wire.epoch": b"4", b"wire.input_watermark": b"12",
                            b"wire.output_watermark": b"10"})


@pytest.fixture
def reader(monkeypatch):
    calls = []

    def read_state(checkpoint, step, epoch=None, *, key=None, flow=None, spark=None):
        calls.append((checkpoint, step, epoch, key))
        if step == "missing":
            raise CheckpointError("epoch 9 is not a committed epoch of 'ck'")
        return TABLE

    def summarize(checkpoint, epoch=None, *, flow=None, spark=None):
        yield StepSummary("dedupe", "process", 2, 3, None, 3, 4_120, 1_000, 12, 10)
        yield StepSummary("win", "window", 1, 1, 1, 2, 21_904, 0, 12, -(2**63))

    monkeypatch.setattr(state_reader, "read_state", read_state)
    monkeypatch.setattr(state_reader, "summarize", summarize)
    monkeypatch.setattr(state_layout, "locate", lambda ck, epoch=None: Located(None, 3, 4, 2))
    monkeypatch.setattr(cli_state, "_session", lambda: None)
    return calls


def test_the_list_has_one_line_per_keyed_step(reader):
    out = CliRunner().invoke(app, ["state", "ck"], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "state of ck at epoch 4" in out.output
    lines = [line for line in out.output.splitlines() if "dedupe" in line or "win " in line]
    assert [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines] == [
        ["dedupe", "process", "2", "3", "-", "3", "4,120", "1000", "12", "10"],
        ["win", "window", "1", "1", "1", "2", "21,904", "0", "12", "-"],
    ]


def test_csv_to_stdout_with_nested_values_as_json(reader):
    out = CliRunner().invoke(app, ["state", "ck", "win", "--key", "a", "--epoch", "3", "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert reader == [("ck", "win", 3, "a")]
    rows = list(csv.reader(io.StringIO(out.output)))
    assert rows[0] == TABLE.column_names
    assert rows[1] == ["1", "a", "0", "10", "2", json.dumps([{"x": 1}]), "True"]
    assert rows[2] == ["1", "a", "10", "20", "1", "", "False"]


def test_parquet_needs_out_and_writes_the_table(reader, tmp_path):
    out = CliRunner().invoke(app, ["state", "ck", "win", "--format", "parquet"])
    assert out.exit_code == 2 and "--out" in out.output
    target = tmp_path / "win.parquet"
    out = CliRunner().invoke(app, ["state", "ck", "win", "--format", "parquet", "--out", str(target)])
    assert out.exit_code == 0, out.output
    assert pq.read_table(target).equals(TABLE)
    out = CliRunner().invoke(app, ["state", "ck", "win", "--format", "json"])
    assert out.exit_code == 2 and "table, csv, parquet" in out.output


def test_a_table_shows_the_watermarks_and_limits_rows(reader):
    out = CliRunner().invoke(app, ["state", "ck", "win", "--limit", "1"], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "step win (window) at epoch 4: input watermark 12 ms, output watermark 10 ms" in out.output
    assert "1 more rows" in out.output


def test_an_unreadable_epoch_exits_1_with_the_reason(reader):
    out = CliRunner().invoke(app, ["state", "ck", "missing"])
    assert out.exit_code == 1
    assert "epoch 9 is not a committed epoch of 'ck'" in out.output
