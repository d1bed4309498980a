"""The SQLite sink driven as the runtime drives it: each executor task upserts its own rows."""

import pickle
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from wire.errors import ConfigError, WireError
from wire.sinks.sqlite_sink import sqlite

OPEN = {"flow_id": "f", "sink_id": "out", "checkpoint_id": "c"}


def on_executor(stager):
    """A stager as an executor gets it: pickled on the driver, unpickled in the task."""
    return pickle.loads(pickle.dumps(stager))


def counts(epoch, keys, values):
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(values, pa.int64()),
                     "epoch": pa.array([epoch] * len(keys), pa.int64())})


def read(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT k, v, epoch FROM t ORDER BY k").fetchall()


def test_concurrent_tasks_create_the_table_once_and_upsert_their_rows(tmp_path, monkeypatch):
    path = tmp_path / "db" / "out.db"
    monkeypatch.chdir(tmp_path)  # the sink resolves a relative path at open
    sink = sqlite("db/out.db", table="t", key="k")
    sink.open(**OPEN)
    stager = sink.prepare_epoch(0)
    tasks = [(p, counts(0, [*range(p * 100, p * 100 + 100), p * 100], [1] * 100 + [2])) for p in range(8)]

    with ThreadPoolExecutor(8) as pool:
        parts = list(pool.map(lambda t: on_executor(stager).stage(*t), tasks))
    sink.commit_epoch(0, parts)

    got = read(path)
    assert len(got) == 800 and sum(p.rows for p in parts) == 808
    assert [r for r in got if r[0] % 100 == 0] == [(p * 100, 2, 0) for p in range(8)]  # last row wins
    assert all(v == 1 for k, v, _ in got if k % 100)

    replay = sink.prepare_epoch(0)  # a replay rewrites the same values
    sink.commit_epoch(0, [on_executor(replay).stage(p, rows) for p, rows in tasks])
    later = sink.prepare_epoch(1)
    sink.commit_epoch(1, [on_executor(later).stage(0, counts(1, [5], [9]))])
    sink.close()
    assert read(path) == [(5, 9, 1) if r[0] == 5 else r for r in got]


def test_task_errors_and_prepare_before_open(tmp_path):
    sink = sqlite(tmp_path / "out.db", table="t", key="k")
    with pytest.raises(WireError, match="before open"):
        sink.prepare_epoch(0)
    sink.open(**OPEN)
    stager = on_executor(sink.prepare_epoch(0))
    with pytest.raises(ConfigError):
        stager.stage(0, pa.table({"x": [1]}))
    with pytest.raises(WireError, match="null values in key column 'k'"):
        stager.stage(0, pa.table({"k": [1, None]}))
