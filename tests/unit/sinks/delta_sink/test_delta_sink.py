import dataclasses

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from wire.errors import CheckpointError, ConfigError, WireError
from wire.sinks.delta_sink.sink import DeltaSink, delta

OPEN = {"flow_id": "flights", "sink_id": "out", "checkpoint_id": "ckpt-1"}
APP_ID = "flights/out"


def epoch_rows(epoch: int, n: int = 3) -> pa.Table:
    base = epoch * 100
    return pa.table(
        {
            "origin": pa.array([f"o{base + i}" for i in range(n)], pa.string()),
            "window_start": pa.array([(base + i) * 60_000 for i in range(n)], pa.timestamp("ms", "UTC")),
            "count": pa.array([base + i for i in range(n)], pa.int64()),
            "mean": pa.array([None if i == 1 else base + i / 4 for i in range(n)], pa.float64()),
            "epoch": pa.array([epoch] * n, pa.int64()),
        }
    )


def read_sorted(path) -> pa.Table:
    return DeltaTable(str(path)).to_pyarrow_table().sort_by([("epoch", "ascending"), ("count", "ascending")])


def as_delta_types(table: pa.Table) -> pa.Table:
    return table.cast(table.schema.set(1, pa.field("window_start", pa.timestamp("us", "UTC"))))


def test_delta_sink_is_a_frozen_exactly_once_value(tmp_path):
    sink = delta(tmp_path / "t", partition_by="origin")
    assert isinstance(sink, DeltaSink)
    assert sink.guarantee == "exactly_once"
    assert sink.partition_by == ("origin",)
    assert sink == delta(str(tmp_path / "t"), partition_by=["origin"])
    assert sink.describe() == f"delta {tmp_path / 't'} mode=append (exactly_once)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        sink.path = "elsewhere"


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"path": ""}, "path"),
        ({"path": 3}, "path"),
        ({"path": "x", "mode": "upsert"}, "mode"),
        ({"path": "x", "partition_by": ["a", "a"]}, "partition_by"),
        ({"path": "x", "partition_by": [""]}, "partition_by"),
        ({"path": "x", "partition_by": 5}, "partition_by"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs, parameter):
    path = kwargs.pop("path")
    with pytest.raises(ConfigError) as info:
        delta(path, **kwargs)
    assert info.value.parameter == parameter


def test_three_epochs_then_a_replay_change_nothing(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    for epoch in (1, 2, 3):
        sink.write_epoch(epoch, epoch_rows(epoch))
    table = DeltaTable(str(path))
    version, rows = table.version(), table.to_pyarrow_table().num_rows
    assert rows == 9
    assert table.transaction_version(APP_ID) == 3

    sink.write_epoch(2, epoch_rows(2))  # replay of an already committed epoch

    table = DeltaTable(str(path))
    assert table.version() == version
    assert table.to_pyarrow_table().num_rows == rows
    expected = pa.concat_tables([as_delta_types(epoch_rows(e)) for e in (1, 2, 3)])
    assert read_sorted(path).equals(expected)
    sink.close()


def test_read_back_with_duckdb_equals_the_input(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.write_epoch(0, epoch_rows(0))
    sink.write_epoch(1, epoch_rows(1))
    files = DeltaTable(str(path)).file_uris()
    got = duckdb.connect().sql(f"select * from read_parquet({files!r}) order by count").arrow().read_all()
    expected = pa.concat_tables([as_delta_types(epoch_rows(e)) for e in (0, 1)])
    assert got.to_pylist() == expected.to_pylist()


def test_crash_after_commit_then_replay_of_that_epoch_and_the_next_writes_one_copy(tmp_path):
    path = tmp_path / "t"
    first = delta(path)
    first.open(**OPEN)
    for epoch in (1, 2, 3):
        first.write_epoch(epoch, epoch_rows(epoch))
    # the driver dies after epoch 3's Delta commit but before Spark marks epoch 3 complete

    restarted = delta(path)
    restarted.open(**OPEN)
    restarted.write_epoch(3, epoch_rows(3))
    restarted.write_epoch(4, epoch_rows(4))
    restarted.close()

    got = read_sorted(path)
    assert got.num_rows == 12
    assert got.column("epoch").value_counts().to_pylist() == [
        {"values": e, "counts": 3} for e in (1, 2, 3, 4)
    ]
    assert DeltaTable(str(path)).transaction_version(APP_ID) == 4
    assert DeltaTable(str(path)).version() == 3  # commits 0..3 for epochs 1..4


def test_empty_epoch_makes_no_commit_and_no_table(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.write_epoch(0, epoch_rows(0).schema.empty_table())
    assert not path.exists() or not any(path.iterdir())
    sink.write_epoch(1, epoch_rows(1))
    sink.write_epoch(2, epoch_rows(2).slice(0, 0))
    assert DeltaTable(str(path)).version() == 0
    assert DeltaTable(str(path)).transaction_version(APP_ID) == 1


def test_each_commit_records_the_epoch_and_the_checkpoint(tmp_path):
    sink = delta(tmp_path / "t")
    sink.open(**OPEN)
    sink.write_epoch(7, epoch_rows(7))
    (commit,) = DeltaTable(str(tmp_path / "t")).history()
    assert commit["wire.epoch"] == 7
    assert commit["wire.checkpoint_id"] == "ckpt-1"


def test_another_sink_id_has_its_own_transactions(tmp_path):
    path = tmp_path / "t"
    a, b = delta(path), delta(path)
    a.open(**OPEN)
    b.open(**{**OPEN, "sink_id": "other"})
    a.write_epoch(5, epoch_rows(5))
    b.write_epoch(1, epoch_rows(1))  # not a replay of a's epoch 5
    table = DeltaTable(str(path))
    assert table.to_pyarrow_table().num_rows == 6
    assert table.transaction_version(APP_ID) == 5
    assert table.transaction_version("flights/other") == 1


def test_a_new_checkpoint_on_the_same_table_is_refused(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.write_epoch(4, epoch_rows(4))
    sink.close()
    with pytest.raises(CheckpointError, match="ckpt-1") as info:
        delta(path).open(**{**OPEN, "checkpoint_id": "ckpt-2"})
    assert "run it with fresh=True (`wire run --fresh`)" in str(info.value)
    delta(path).open(**OPEN)  # the same checkpoint may resume


@pytest.mark.parametrize("partition_by", [None, "origin"])
def test_starting_over_removes_this_sinks_files_and_takes_the_new_checkpoints_epochs(tmp_path, partition_by):
    path = tmp_path / "t"
    old = delta(path, partition_by=partition_by)
    old.open(**OPEN)
    for epoch in (0, 1, 2):
        old.write_epoch(epoch, epoch_rows(epoch))
    other = delta(path, partition_by=partition_by)  # another sink of the flow writes the same table
    other.open(**{**OPEN, "sink_id": "other"})
    other.write_epoch(0, epoch_rows(7))
    new = {**OPEN, "checkpoint_id": "ckpt-2"}

    sink = delta(path, partition_by=partition_by)
    sink.supersede(**new)
    sink.supersede(**new)  # idempotent: no second commit
    assert DeltaTable(str(path)).history()[0]["wire.checkpoint_id"] == "ckpt-2"
    assert len(DeltaTable(str(path)).history()) == 5  # 3 + 1 epochs (the first created it), start-over
    assert read_sorted(path).equals(as_delta_types(epoch_rows(7)))  # only the other sink's rows
    sink.open(**new)
    sink.write_epoch(0, epoch_rows(0, n=2))  # epoch 0 of the new checkpoint: written, not skipped
    sink.write_epoch(0, epoch_rows(0, n=2))  # its replay: skipped
    after = read_sorted(path)
    assert after.equals(as_delta_types(pa.concat_tables([epoch_rows(0, n=2), epoch_rows(7)])))
    assert DeltaTable(str(path)).transaction_version(APP_ID) == 0
    with pytest.raises(CheckpointError, match="ckpt-2"):  # the old checkpoint cannot resume now
        delta(path).open(**OPEN)
    old_version = DeltaTable(str(path), version=3).to_pyarrow_table()  # time travel keeps the old files
    assert sorted(old_version["count"].to_pylist()) == [0, 1, 2, 100, 101, 102, 200, 201, 202, 700, 701, 702]


def test_starting_over_a_missing_table_does_nothing(tmp_path):
    delta(tmp_path / "t").supersede(**OPEN)
    assert not (tmp_path / "t").exists()


def test_schema_mismatch_is_a_clear_wire_error(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.write_epoch(0, epoch_rows(0))
    version = DeltaTable(str(path)).version()
    with pytest.raises(WireError, match=r"schema mismatch.*columns"):
        sink.write_epoch(1, epoch_rows(1).drop_columns(["mean"]))
    wrong_type = epoch_rows(2).set_column(0, "origin", pa.array([1, 2, 3], pa.int64()))
    with pytest.raises(WireError, match="schema mismatch: origin"):
        sink.write_epoch(2, wrong_type)
    assert DeltaTable(str(path)).version() == version


def test_compatible_types_and_column_order_are_conformed(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.write_epoch(0, epoch_rows(0))
    later = epoch_rows(1)
    later = later.select(list(reversed(later.column_names)))
    later = later.set_column(later.column_names.index("count"), "count", later["count"].cast(pa.int32()))
    sink.write_epoch(1, later)
    assert read_sorted(path).num_rows == 6
    assert read_sorted(path).schema.field("count").type == pa.int64()


def test_partitioned_table_and_overwrite_mode(tmp_path):
    path = tmp_path / "t"
    sink = delta(path, mode="overwrite", partition_by="epoch")
    sink.open(**OPEN)
    sink.write_epoch(0, epoch_rows(0))
    sink.write_epoch(1, epoch_rows(1, n=2))
    sink.write_epoch(1, epoch_rows(1, n=2))  # replay
    table = DeltaTable(str(path))
    assert table.metadata().partition_columns == ["epoch"]
    assert table.to_pyarrow_table()["epoch"].to_pylist() == [1, 1]
    assert table.version() == 1

    with pytest.raises(WireError, match="partitioned by"):
        other = delta(path, partition_by="origin")
        other.open(**{**OPEN, "sink_id": "other"})
        other.write_epoch(0, epoch_rows(0))


def test_write_before_open_is_an_error(tmp_path):
    with pytest.raises(WireError, match="before open"):
        delta(tmp_path / "t").write_epoch(0, epoch_rows(0))
