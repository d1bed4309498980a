"""The Delta sink's two-phase protocol driven directly: stagers on "executors", commit on the driver."""

import datetime as dt
import json
import pickle
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from wire.errors import WireError
from wire.sinks.delta_sink.sink import STAGING_DIR, delta

OPEN = {"flow_id": "flights", "sink_id": "out", "checkpoint_id": "ckpt-1"}
APP_ID = "flights/out"


def rows(epoch: int, ids: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "origin": pa.array([None if i % 4 == 3 else f"o {i % 3}/x:%" for i in ids], pa.string()),
            "at": pa.array([1_357_035_300_123 + i for i in ids], pa.timestamp("ms", "UTC")),
            "delay": pa.array([i * 1.5 for i in ids], pa.float64()),
            "epoch": pa.array([epoch] * len(ids), pa.int64()),
        }
    )


def on_executor(stager):
    """A stager as an executor gets it: pickled on the driver, unpickled in the task."""
    return pickle.loads(pickle.dumps(stager))


def read(path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().sort_by("id").to_pylist()


def expected(*tables: pa.Table) -> list[dict]:
    table = pa.concat_tables(tables)
    table = table.set_column(2, "at", table["at"].cast(pa.timestamp("us", "UTC")))
    return table.sort_by("id").to_pylist()


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet") if STAGING_DIR not in p.parts}


def staging_leftovers(path: Path) -> list[Path]:
    staging = path / STAGING_DIR
    return [p for p in staging.rglob("*") if p.is_file()] if staging.exists() else []


@pytest.mark.parametrize("partition_by", [None, "origin"])
def test_tasks_stage_then_one_commit_creates_the_table_without_failed_files(tmp_path, partition_by):
    path = tmp_path / "t"
    sink = delta(path, partition_by=partition_by)
    sink.open(**OPEN)
    stager = sink.prepare_epoch(0)
    parts = [on_executor(stager).stage(0, rows(0, [1, 2, 3, 4])),
             on_executor(stager).stage(2, rows(0, [7, 8]))]
    failed = on_executor(stager).stage(1, rows(0, [5, 6]))  # the task then failed: no receipt
    retried = on_executor(stager).stage(1, rows(0, [5, 6]))
    assert all(json.loads(json.dumps(p.receipt)) == p.receipt for p in parts)  # JSON-able
    failed_files = {f["path"] for f in failed.receipt["files"]}
    assert failed_files and failed_files <= data_files(path)
    assert not path.joinpath("_delta_log").exists()  # nothing visible before the commit

    sink.commit_epoch(0, [*parts, retried])

    table = DeltaTable(str(path))
    assert table.version() == 0  # table, data and transaction in one commit
    assert table.transaction_version(APP_ID) == 0
    assert table.metadata().partition_columns == ([partition_by] if partition_by else [])
    assert read(path) == expected(rows(0, [1, 2, 3, 4, 5, 6, 7, 8]))
    assert data_files(path) == {f["path"] for p in [*parts, retried] for f in p.receipt["files"]}
    assert not failed_files & data_files(path)
    assert staging_leftovers(path) == []
    assert sum(p.rows for p in [*parts, retried]) == 8
    sink.close()


def test_partition_values_and_statistics_match_what_deltalake_writes(tmp_path):
    path = tmp_path / "t"
    sink = delta(path, partition_by=("origin", "epoch"))
    sink.open(**OPEN)
    sink.write_epoch(0, rows(0, list(range(12))))
    got = DeltaTable(str(path))
    adds = pa.table(got.get_add_actions(flatten=True)).to_pylist()
    assert {a["partition.origin"] for a in adds} == {None, "o 0/x:%", "o 1/x:%", "o 2/x:%"}
    assert all(a["num_records"] == 3 for a in adds)
    for a in adds:  # the statistics must never prune a file that holds a match
        at = pa.scalar(a["max.at"], pa.timestamp("us", "UTC"))
        hit = got.to_pyarrow_dataset().to_table(filter=pc.field("at") == at)
        assert hit.num_rows == 1
    files = got.file_uris()
    via_duckdb = duckdb.connect().sql(
        f"select id from read_parquet({files!r}, hive_partitioning=false) order by id"
    ).fetchall()
    assert via_duckdb == [(i,) for i in range(12)]


def test_a_replayed_epoch_publishes_nothing_and_deletes_its_files(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    early = sink.prepare_epoch(1)  # staged before an earlier attempt of epoch 1 committed
    sink.write_epoch(1, rows(1, [1, 2]))
    version, files = DeltaTable(str(path)).version(), data_files(path)

    late = [on_executor(early).stage(0, rows(1, [1])), on_executor(early).stage(1, rows(1, [2]))]
    assert data_files(path) > files
    sink.commit_epoch(1, late)  # found at commit: the transaction version is already 1
    again = sink.prepare_epoch(1)  # found at prepare: stages nothing
    skipped = on_executor(again).stage(0, rows(1, [1, 2]))
    assert skipped.rows == 0 and skipped.receipt["files"] == []
    sink.commit_epoch(1, [skipped])

    assert DeltaTable(str(path)).version() == version
    assert data_files(path) == files
    assert read(path) == expected(rows(1, [1, 2]))
    assert staging_leftovers(path) == []


def test_a_crash_between_staging_and_commit_is_cleaned_at_open_and_replayed_once(tmp_path):
    path = tmp_path / "t"
    first = delta(path)
    first.open(**OPEN)
    first.write_epoch(0, rows(0, [1]))
    committed = data_files(path)
    stager = first.prepare_epoch(1)
    on_executor(stager).stage(0, rows(1, [2, 3]))
    on_executor(stager).stage(1, rows(1, [4]))
    assert len(data_files(path)) == len(committed) + 2 and staging_leftovers(path)
    # the driver dies here: epoch 1 staged, never committed

    restarted = delta(path)
    restarted.open(**OPEN)
    assert staging_leftovers(path) == []
    assert data_files(path) == committed  # only epoch 0's file is left
    stager = restarted.prepare_epoch(1)
    restarted.commit_epoch(1, [on_executor(stager).stage(p, t) for p, t in
                               [(0, rows(1, [2, 3])), (1, rows(1, [4]))]])
    assert read(path) == expected(rows(0, [1]), rows(1, [2, 3, 4]))
    assert DeltaTable(str(path)).transaction_version(APP_ID) == 1


def test_a_crash_after_the_commit_keeps_the_committed_files(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    stager = sink.prepare_epoch(0)
    parts = [on_executor(stager).stage(0, rows(0, [1, 2]))]
    intents = staging_leftovers(path)
    saved = {p: p.read_bytes() for p in intents}
    sink.commit_epoch(0, parts)
    for p, content in saved.items():  # as if the driver died before removing the intents
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)

    delta(path).open(**OPEN)
    assert staging_leftovers(path) == []
    assert read(path) == expected(rows(0, [1, 2]))


def test_executors_conform_to_the_existing_schema_and_refuse_a_mismatch(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.write_epoch(0, rows(0, [1]))
    stager = on_executor(sink.prepare_epoch(1))
    later = rows(1, [2])
    later = later.select(list(reversed(later.column_names)))
    narrow = later.set_column(later.column_names.index("id"), "id", later["id"].cast(pa.int32()))
    part = stager.stage(0, narrow)
    with pytest.raises(WireError, match="schema mismatch: origin"):
        stager.stage(1, rows(1, [3]).set_column(1, "origin", pa.array([3], pa.int64())))
    sink.commit_epoch(1, [part])
    assert read(path) == expected(rows(0, [1]), rows(1, [2]))


def test_naive_timestamps_and_empty_epochs(tmp_path):
    path = tmp_path / "t"
    sink = delta(path)
    sink.open(**OPEN)
    sink.commit_epoch(0, [])  # no task had rows: no commit, no table
    assert not path.exists()
    naive = pa.table({"at": pa.array([dt.datetime(2013, 1, 1, 5, 15)], pa.timestamp("ms")),
                      "epoch": pa.array([1], pa.int64())})
    sink.write_epoch(1, naive)
    assert DeltaTable(str(path)).to_pyarrow_table().to_pylist() == [
        {"at": dt.datetime(2013, 1, 1, 5, 15), "epoch": 1}
    ]
