"""Quiet input still repairs drift within ``repair_interval`` (issue 26 item 14), driven without Spark.

A few epochs are written, then the table is edited by hand and no epoch comes: the
sink's timer must repair it. Expectations are a plain fold of the epochs (a dict per
key); the test polls the table's contents (no timing assertion).
"""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import wire
from wire.errors import ConfigError

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("epoch", pa.int64())])
EPOCHS = [[("a", 1), ("b", 2), ("c", 3)], [("a", 4), ("d", 5)], [("e", 6)]]
WANT = {"a": 4, "b": 2, "c": 3, "d": 5, "e": 6}


def _epoch(e: int) -> pa.Table:
    return pa.table({"k": [k for k, _ in EPOCHS[e]], "n": [n for _, n in EPOCHS[e]],
                     "epoch": [e] * len(EPOCHS[e])}, schema=SCHEMA)


@pytest.fixture(scope="module")
def dsn(pg_server):
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute('CREATE DATABASE "sc_quiet"')
    return pg_server.dsn.replace("dbname=postgres", "dbname=sc_quiet")


def _as_dict(rows) -> dict[str, int]:
    keys = [k for k, _ in rows]
    assert len(keys) == len(set(keys)), f"duplicate keys in {rows}"
    return dict(rows)


def _until_equal(read, want, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while _as_dict(read()) != want:
        assert time.monotonic() < deadline, f"not repaired: {sorted(read())} != {sorted(want.items())}"
        time.sleep(0.1)


def test_repair_interval_is_checked_at_build():
    for bad in (0, -5, "soon", True):
        with pytest.raises(ConfigError, match="repair_interval"):
            wire.sinks.self_correcting("/tmp/t", key="k", repair_interval=bad)
    assert wire.sinks.self_correcting("/tmp/t", key="k", repair_interval="2s").repair_interval == 2000
    assert wire.sinks.self_correcting("/tmp/t", key="k",
                                      repair_interval=timedelta(minutes=1)).repair_interval == 60_000
    assert wire.sinks.self_correcting("/tmp/t", key="k").repair_interval == 60_000
    assert wire.sinks.self_correcting("/tmp/t", key="k", repair_interval=None).repair_interval is None


def _run_quiet(sink, ck, read, edit) -> None:
    sink.bind_checkpoint(str(ck))
    sink.open(flow_id="f", sink_id="sc", checkpoint_id=ck.name)
    try:
        for e in range(len(EPOCHS)):
            sink.write_epoch(e, _epoch(e))
        assert _as_dict(read()) == WANT
        edit()  # by hand: delete a, alter b, insert zz; then no epoch comes
        _until_equal(read, WANT)
        assert sink.totals()["sc_quiet_checks"] >= 1 and sink.totals()["sc_drift_rows"] >= 3
        edit()  # again, later: repaired again
        _until_equal(read, WANT)
    finally:
        sink.close()


def test_quiet_postgres_table_is_repaired(dsn, tmp_path):
    sink = wire.sinks.self_correcting(dsn, table="quiet", key="k", repair_interval=300)

    def read():
        with psycopg.connect(dsn) as c:
            return c.execute("SELECT k, n FROM quiet").fetchall()

    def edit():
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("DELETE FROM quiet WHERE k = 'a'")
            c.execute("UPDATE quiet SET n = 99 WHERE k = 'b'")
            c.execute("INSERT INTO quiet (k, n) VALUES ('zz', 1)")

    _run_quiet(sink, tmp_path / "ck", read, edit)


def test_quiet_delta_table_is_repaired(tmp_path):
    path = str(tmp_path / "delta")
    sink = wire.sinks.self_correcting(path, key="k", repair_interval="300ms")

    def read():
        return [(r["k"], r["n"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist()]

    def edit():
        dt = DeltaTable(path)
        dt.delete("k = 'a'")
        DeltaTable(path).update(updates={"n": "99"}, predicate="k = 'b'")
        write_deltalake(path, pa.table({"k": ["zz"], "n": [1]}), mode="append")

    _run_quiet(sink, tmp_path / "ck", read, edit)


def test_no_check_after_close(tmp_path):
    """A closed sink's timer is gone: a hand edit after the run ends stays (the next run repairs it)."""
    path = str(tmp_path / "delta")
    sink = wire.sinks.self_correcting(path, key="k", repair_interval=50)
    sink.bind_checkpoint(str(tmp_path / "ck"))
    sink.open(flow_id="f", sink_id="sc", checkpoint_id="ck")
    sink.write_epoch(0, _epoch(0))
    run = sink._run
    sink.close()
    assert run is not None and run.timer is not None and not run.timer.is_alive()
