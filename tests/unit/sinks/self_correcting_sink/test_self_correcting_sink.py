"""The self-correcting sink against real PostgreSQL and Delta tables, driven without Spark.

Each test folds the same epochs into a plain dict per key (the oracle) and checks
the table against it: drift repair after hand edits, replays, read-only distance,
and two replicas (threads) writing one table at once.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import wire
from wire.core.control_file import control_path, set_sink_mode
from wire.errors import ConfigError
from wire.sinks.self_correcting_sink.tables import _DeltaTable, _PgTable

SCHEMA = pa.schema([("k", pa.string()), ("ws", pa.int64()), ("n", pa.int64()), ("emit", pa.string()),
                    ("epoch", pa.int64())])


def _epoch(epoch: int, rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table({"k": [r[0] for r in rows], "ws": [r[1] for r in rows], "n": [r[2] for r in rows],
                     "emit": ["final"] * len(rows), "epoch": [epoch] * len(rows)}, schema=SCHEMA)


EPOCHS = [
    [("a", 0, 1), ("b", 0, 2), ("c", 0, 3)],
    [("a", 0, 4), ("d", 60, 1)],  # a's window updated
    [("e", 60, 5), ("b", 60, 1)],
    [],
    [("a", 60, 2), ("d", 60, 7)],
]


def _oracle(upto: int) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for rows in EPOCHS[:upto]:
        for k, ws, n in rows:
            out[(k, ws)] = n
    return out


@pytest.fixture(scope="module")
def dsn(pg_server):
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute('CREATE DATABASE "sc_unit"')
    return pg_server.dsn.replace("dbname=postgres", "dbname=sc_unit")


def _pg_rows(dsn: str, table: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return c.execute(f"SELECT k, ws, n FROM {table}").fetchall()


def _as_dict(rows) -> dict[tuple[str, int], int]:
    out = {}
    for k, ws, n in rows:
        assert (k, ws) not in out, f"duplicate key {(k, ws)}"
        out[(k, ws)] = n
    return out


def _open(sink, name: str, ck) -> None:
    sink.bind_checkpoint(str(ck))
    sink.open(flow_id="f", sink_id=name, checkpoint_id=f"ck-{ck.name}")


def test_config_errors_name_the_parameter(tmp_path):
    with pytest.raises(ConfigError, match="key"):
        wire.sinks.self_correcting(str(tmp_path / "t"), key=())
    with pytest.raises(ConfigError, match="table"):
        wire.sinks.self_correcting("host=localhost dbname=x", key="k")
    with pytest.raises(ConfigError, match="table"):
        wire.sinks.self_correcting(str(tmp_path / "t"), key="k", table="t")
    with pytest.raises(ConfigError, match="full_check_every"):
        wire.sinks.self_correcting(str(tmp_path / "t"), key="k", full_check_every=-1)
    with pytest.raises(ConfigError, match="covers"):
        wire.sinks.self_correcting(str(tmp_path / "t"), key="k", covers=("ws", "we"))
    with pytest.raises(ConfigError, match="drop"):
        wire.sinks.self_correcting(str(tmp_path / "t"), key="k", drop=("k",))
    with pytest.raises(ConfigError, match="read_only"):
        wire.sinks.self_correcting(str(tmp_path / "t"), key="k", read_only="yes")


def test_postgres_drift_repair_replay_and_read_only(dsn, tmp_path):
    sink = wire.sinks.self_correcting(dsn, table="drift", key=("k", "ws"))
    _open(sink, "sc", tmp_path / "ck")
    for e in range(3):
        sink.write_epoch(e, _epoch(e, EPOCHS[e]))
    assert _as_dict(_pg_rows(dsn, "drift")) == _oracle(3)
    with psycopg.connect(dsn, autocommit=True) as c:  # hand edits: delete, alter, insert
        c.execute("DELETE FROM drift WHERE k = 'c'")
        c.execute("UPDATE drift SET n = 99 WHERE k = 'e'")
        c.execute("INSERT INTO drift (k, ws, n) VALUES ('zz', 0, 1)")
    sink.write_epoch(3, _epoch(3, EPOCHS[3]))  # an epoch without rows repairs it
    assert sink.last_outcome().drift == 3 and sink.last_outcome().full
    assert _as_dict(_pg_rows(dsn, "drift")) == _oracle(4)
    # a replay of epoch 3 (crash before Spark marked it) in a new run: the table is at its
    # frontier with its rows, nothing written
    sink.close()
    _open(sink, "sc", tmp_path / "ck")
    sink.write_epoch(3, _epoch(3, EPOCHS[3]))
    assert sink.last_outcome().status == "unchanged" and sink.last_outcome().corrections == 0
    # read-only through the control file: computes the distance, writes nothing
    set_sink_mode(control_path(tmp_path / "ck"), "sc", "read_only")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DELETE FROM drift WHERE k = 'a'")
    sink.write_epoch(4, _epoch(4, EPOCHS[4]))
    out = sink.last_outcome()
    assert out.status == "read_only" and out.corrections == 0
    # differing now: a@0 deleted by hand, a@60 new, d@60 changed
    assert out.distance == 3
    assert sink.epoch_metrics()["gauge:sc_read_only"] == 1
    set_sink_mode(control_path(tmp_path / "ck"), "sc", "write")
    sink.write_epoch(5, _epoch(5, []))
    assert _as_dict(_pg_rows(dsn, "drift")) == _oracle(5)
    sink.close()


def test_delta_drift_repair(tmp_path):
    path = str(tmp_path / "delta")
    sink = wire.sinks.self_correcting(path, key=("k", "ws"))
    _open(sink, "sc", tmp_path / "ck")
    for e in range(3):
        sink.write_epoch(e, _epoch(e, EPOCHS[e]))
    assert _as_dict([(r["k"], r["ws"], r["n"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist()]) == (
        _oracle(3))
    dt = DeltaTable(path)
    dt.delete("k = 'c'")
    DeltaTable(path).update(updates={"n": "99"}, predicate="k = 'e'")
    write_deltalake(path, pa.table({"k": ["zz"], "ws": [0], "n": [1]}), mode="append")
    sink.write_epoch(3, _epoch(3, EPOCHS[3]))
    assert sink.last_outcome().drift == 3
    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    assert _as_dict([(r["k"], r["ws"], r["n"]) for r in rows]) == _oracle(4)
    assert DeltaTable(path).transaction_version("wire.self_correcting") == 4
    sink.close()


def _slow_reads(monkeypatch, cls):
    """Widen the window between a replica's read and its append, so that replicas collide."""
    read = cls.read

    def slow(self, keys, token):
        snap = read(self, keys, token)
        time.sleep(0.02)
        return snap

    monkeypatch.setattr(cls, "read", slow)


@pytest.mark.parametrize("backend", ["postgres", "delta"])
def test_two_replicas_in_process_converge(backend, dsn, tmp_path, monkeypatch):
    _slow_reads(monkeypatch, _PgTable if backend == "postgres" else _DeltaTable)
    path = str(tmp_path / "delta")

    def make():
        if backend == "postgres":
            return wire.sinks.self_correcting(dsn, table="replicas", key=("k", "ws"))
        return wire.sinks.self_correcting(path, key=("k", "ws"))

    epochs = [[(f"k{(e * 7 + i) % 13}", 60 * (e // 3), e * 10 + i) for i in range(4)] for e in range(12)]
    want: dict[tuple[str, int], int] = {}
    for rows in epochs:
        for k, ws, n in rows:
            want[(k, ws)] = n
    sinks = [make(), make()]
    errors: list[BaseException] = []

    def replica(i: int) -> None:
        try:
            _open(sinks[i], "sc", tmp_path / f"ck{i}")
            for e, rows in enumerate(epochs):
                sinks[i].write_epoch(e, _epoch(e, rows))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    conflicts = sum(s.totals().get("sc_cas_conflicts", 0) for s in sinks)
    print(f"{backend}: CAS conflicts {conflicts}, epochs behind "
          f"{sum(s.totals().get('sc_epochs_behind', 0) for s in sinks)}")
    if backend == "postgres":
        got = _as_dict(_pg_rows(dsn, "replicas"))
    else:
        got = _as_dict([(r["k"], r["ws"], r["n"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist()])
    assert got == want
    for s in sinks:
        s.close()


def test_docstring_example_runs():
    import doctest

    from wire.sinks.self_correcting_sink import sink as self_correcting_sink

    result = doctest.testmod(self_correcting_sink)
    assert result.failed == 0 and result.attempted > 0
