import dataclasses
import datetime as dt
import decimal
import doctest
import os
import re
import socket
import uuid

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

import wire.sinks.postgres_sink.executors as pg_executors
import wire.sinks.postgres_sink.sink as pg_mod
from wire.errors import CheckpointError, ConfigError, WireError
from wire.sinks.postgres_sink.sink import MARKER_TABLE, PostgresAppendSink, PostgresUpsertSink, postgres
from wire.testing.postgres import PostgresServer

UTC = dt.UTC


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dsn(pg_server):
    return pg_server.dsn


@pytest.fixture
def name(request):
    """A table name (and flow id) unique to the test."""
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    return f"{base}_{uuid.uuid4().hex[:6]}"


def query(dsn, statement, params=()):
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        return conn.execute(statement, params).fetchall()


def opened(sink, flow, *, sink_id="out", checkpoint="ckpt-1"):
    sink.open(flow_id=flow, sink_id=sink_id, checkpoint_id=checkpoint)
    return sink


def flights(epoch, ids):
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "origin": pa.array([f"o{i % 3}" for i in ids]),
            "delay": pa.array([i * 1.5 for i in ids], pa.float64()),
            "epoch": pa.array([epoch] * len(ids), pa.int64()),
        }
    )


# --- configuration (no server) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"mode": "merge"}, "mode"),
        ({"mode": "upsert"}, "key"),
        ({"mode": "upsert", "key": ()}, "key"),
        ({"mode": "upsert", "key": ("a", "a")}, "key"),
        ({"mode": "upsert", "key": ("a", 1)}, "key"),
        ({"mode": "append", "key": ("a",)}, "key"),
        ({"table": ""}, "table"),
        ({"table": "x" * 64}, "table"),
        ({"schema": None}, "schema"),
        ({"dsn": 42}, "dsn"),
        ({"dsn": "host=a 'unterminated"}, "dsn"),
    ],
)
def test_bad_configuration_is_a_config_error_at_construction(kwargs, parameter):
    args = {"dsn": "host=db dbname=wire", "table": "t", **kwargs}
    with pytest.raises(ConfigError) as info:
        postgres(args.pop("dsn"), **args)
    assert info.value.parameter == parameter
    assert "accepted" in str(info.value)


def test_mode_picks_class_and_guarantee_and_secrets_stay_hidden():
    dsn = "postgresql://wire:s3cret@db.example:5433/flights"
    append = postgres(dsn, table="delays")
    upsert = postgres(dsn, table="delays", mode="upsert", key=["origin", "window_start"])
    assert isinstance(append, PostgresAppendSink) and append.guarantee == "exactly_once"
    assert isinstance(upsert, PostgresUpsertSink) and upsert.guarantee == "idempotent"
    assert upsert.key == ("origin", "window_start")
    assert postgres(dsn, table="d", mode="upsert", key="origin").key == ("origin",)
    assert append.describe() == "postgres flights@db.example public.delays append (exactly_once)"
    for text in (append.describe(), repr(append), upsert.describe(), repr(upsert)):
        assert "s3cret" not in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        append.table = "other"
    assert append == postgres(dsn, table="delays") and hash(append) == hash(postgres(dsn, table="delays"))


def test_write_before_open_is_an_error():
    with pytest.raises(WireError, match="before open"):
        postgres("dbname=x", table="t").write_epoch(0, flights(0, [1]))


def test_module_examples_run():
    result = doctest.testmod(pg_mod)
    assert result.attempted >= 2 and result.failed == 0


# --- PostgresServer ------------------------------------------------------------------------


def test_available_explains_why_not(tmp_path):
    ok, reason = PostgresServer.available(tmp_path / "no-bin")
    assert not ok
    assert "initdb" in reason and str(tmp_path / "no-bin") in reason
    with pytest.raises(WireError, match=r"cannot start.*not found"):
        PostgresServer(tmp_path / "no-bin").start()
    ok, reason = PostgresServer.available()
    assert ok == (reason == "") and (ok or "PostgreSQL" in reason or "root" in reason)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs an unprivileged user to run the server")
def test_available_as_root_needs_an_unprivileged_user(tmp_path):
    for binary in ("initdb", "pg_ctl", "postgres"):  # stand-ins: only their presence is checked
        (tmp_path / binary).write_text("#!/bin/sh\n")
        (tmp_path / binary).chmod(0o755)
    ok, reason = PostgresServer.available(tmp_path, run_as="no-such-user-wire")
    assert not ok and "root" in reason and "no-such-user-wire" in reason
    ok, reason = PostgresServer.available(tmp_path, run_as="root")
    assert not ok and "initdb refuses root" in reason
    (tmp_path / "pg_ctl").chmod(0o644)
    ok, reason = PostgresServer.available(tmp_path)
    assert not ok and reason == f"PostgreSQL binaries pg_ctl missing or not executable in {tmp_path}"


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_server_starts_stops_and_cleans_up(dsn):  # dsn: skip like the others when unavailable
    server = PostgresServer()
    with pytest.raises(WireError, match="before start"):
        _ = server.dsn
    with server:
        root, port = server.root, server.port
        assert query(server.dsn, "SELECT current_user, current_setting('TimeZone')") == [("wire", "UTC")]
        assert port_open(port) and (root / "sock").is_dir()
    assert not root.exists() and not port_open(port)
    server.stop()  # twice is fine


def test_stop_falls_back_to_killing_the_postmaster(dsn, monkeypatch):
    server = PostgresServer().start()
    root, port = server.root, server.port
    pid = int((root / "data" / "postmaster.pid").read_text().splitlines()[0])
    real_run = server._run

    def failing_pg_ctl(binary, *args):
        if args[:1] == ("stop",):
            raise WireError("pg_ctl stop failed (simulated)")
        return real_run(binary, *args)

    monkeypatch.setattr(server, "_run", failing_pg_ctl)
    server.stop()
    assert not root.exists() and not port_open(port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- append: exactly once ------------------------------------------------------------------


def test_append_three_epochs_and_a_replay_write_each_row_once(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    for epoch, ids in [(0, [1, 2]), (1, [3]), (2, [4, 5, 6])]:
        sink.write_epoch(epoch, flights(epoch, ids))
    sink.write_epoch(2, flights(2, [4, 5, 6]))  # replay in the same run
    sink.close()
    restarted = opened(postgres(dsn, table=name), name)  # replay after a restart
    restarted.write_epoch(2, flights(2, [4, 5, 6]))
    restarted.write_epoch(3, flights(3, [7]))
    restarted.close()

    rows = query(
        dsn, sql.SQL("SELECT id, origin, delay, epoch FROM {} ORDER BY id").format(sql.Identifier(name))
    )
    assert rows == [
        (i, f"o{i % 3}", i * 1.5, e) for e, i in [(0, 1), (0, 2), (1, 3), (2, 4), (2, 5), (2, 6), (3, 7)]
    ]
    markers = query(
        dsn,
        f"SELECT sink, epoch, checkpoint, committed_at IS NOT NULL FROM {MARKER_TABLE} "
        "WHERE flow = %s ORDER BY epoch",
        (name,),
    )
    assert markers == [("out", e, "ckpt-1", True) for e in range(4)]


def test_append_empty_epoch_writes_nothing(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    sink.write_epoch(0, flights(0, []))
    sink.close()
    assert query(dsn, "SELECT to_regclass(%s)", (name,)) == [(None,)]
    assert query(dsn, f"SELECT count(*) FROM {MARKER_TABLE} WHERE flow = %s", (name,)) == [(0,)]


def test_crash_mid_transaction_leaves_nothing_and_the_replay_writes_once(dsn, name, monkeypatch):
    real_copy = pg_executors._copy_csv
    calls = []

    def copy_then_crash(conn, target, table):
        calls.append(table.num_rows)
        real_copy(conn, target, table)  # the rows are in the open transaction...
        if len(calls) == 2:
            raise RuntimeError("driver crashed before commit")  # ...which never commits

    monkeypatch.setattr(pg_executors, "_copy_csv", copy_then_crash)
    sink = opened(postgres(dsn, table=name), name)
    sink.write_epoch(0, flights(0, [1, 2]))
    with pytest.raises(RuntimeError, match="crashed"):
        sink.write_epoch(1, flights(1, [3, 4]))
    table = sql.Identifier(name)
    assert query(dsn, sql.SQL("SELECT id FROM {} ORDER BY id").format(table)) == [(1,), (2,)]
    assert query(dsn, f"SELECT epoch FROM {MARKER_TABLE} WHERE flow = %s", (name,)) == [(0,)]

    sink.write_epoch(1, flights(1, [3, 4]))  # the replay
    sink.write_epoch(1, flights(1, [3, 4]))  # and a replay of the replay
    sink.close()
    assert calls == [2, 2, 2]  # the last one was skipped by the marker
    assert query(dsn, sql.SQL("SELECT id, epoch FROM {} ORDER BY id").format(table)) == [
        (1, 0),
        (2, 0),
        (3, 1),
        (4, 1),
    ]


def test_rejected_row_rolls_back_the_whole_epoch(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    good = pa.table({"id": pa.array([1, 2], pa.int64()), "note": ["a", "b"]})
    bad = pa.table({"id": pa.array([3, 4], pa.int64()), "note": ["fine", "nul\x00byte"]})
    sink.write_epoch(0, good)
    with pytest.raises(WireError, match=r"epoch 1 not written \(rolled back\)"):
        sink.write_epoch(1, bad)
    assert query(dsn, sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier(name))) == [(1,), (2,)]
    assert query(dsn, f"SELECT epoch FROM {MARKER_TABLE} WHERE flow = %s", (name,)) == [(0,)]
    sink.write_epoch(1, bad.set_column(1, "note", pa.array(["fine", "no nul"])))  # connection still usable
    sink.close()
    assert query(dsn, sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))) == [(4,)]


def test_epochs_of_another_checkpoint_are_refused_at_open(dsn, name):
    sink = opened(postgres(dsn, table=name), name, checkpoint="ckpt-1")
    sink.write_epoch(0, flights(0, [1]))
    sink.close()
    fresh = postgres(dsn, table=name)
    with pytest.raises(CheckpointError, match="'ckpt-1', not this run's 'ckpt-2'") as info:
        opened(fresh, name, checkpoint="ckpt-2")
    assert "run it with fresh=True (`wire run --fresh`)" in str(info.value)
    assert f"public.{name[:40]}_superseded_ckpt1" in str(info.value)  # within 63 bytes
    opened(fresh, name, sink_id="other", checkpoint="ckpt-2").close()  # another sink id is fine


def test_starting_over_moves_the_rows_aside_and_takes_the_new_checkpoints_epochs(dsn, name):
    sink = opened(postgres(dsn, table=name), name, checkpoint="ckpt-1")
    sink.write_epoch(0, flights(0, [1, 2]))
    sink.write_epoch(1, flights(1, [3]))
    sink.close()
    other = opened(postgres(dsn, table=f"{name}_o"), name, sink_id="other", checkpoint="ckpt-1")
    other.write_epoch(0, flights(0, [9]))
    other.close()
    table, aside = sql.Identifier(name), sql.Identifier(f"{name[:40]}_superseded_ckpt1")

    sink = postgres(dsn, table=name)
    sink.supersede(flow_id=name, sink_id="out", checkpoint_id="ckpt-2")
    sink.supersede(flow_id=name, sink_id="out", checkpoint_id="ckpt-2")  # idempotent

    moved = query(dsn, sql.SQL("SELECT id, epoch FROM {} ORDER BY id").format(aside))
    assert moved == [(1, 0), (2, 0), (3, 1)]
    assert query(dsn, sql.SQL("SELECT count(*) FROM {}").format(table)) == [(0,)]
    markers = f"SELECT sink, epoch, checkpoint FROM {MARKER_TABLE} WHERE flow = %s ORDER BY sink, epoch"
    assert query(dsn, markers, (name,)) == [("other", 0, "ckpt-1")]  # the other sink keeps its own
    opened(sink, name, checkpoint="ckpt-2")
    sink.write_epoch(0, flights(0, [5]))  # epoch 0 of the new checkpoint: written, not skipped
    sink.write_epoch(0, flights(0, [5]))  # its replay: skipped
    sink.close()
    assert query(dsn, sql.SQL("SELECT id, epoch FROM {}").format(table)) == [(5, 0)]
    assert query(dsn, markers, (name,)) == [("other", 0, "ckpt-1"), ("out", 0, "ckpt-2")]
    with pytest.raises(CheckpointError, match="'ckpt-2', not this run's 'ckpt-1'"):
        opened(postgres(dsn, table=name), name, checkpoint="ckpt-1")  # the old checkpoint cannot resume


def test_starting_over_before_any_epoch_does_nothing(dsn, name):
    postgres(dsn, table=name).supersede(flow_id=name, sink_id="out", checkpoint_id="ckpt-1")
    assert query(dsn, "SELECT to_regclass(%s)", (name,)) == [(None,)]


def test_reconnects_once_after_the_connection_dropped(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    sink.write_epoch(0, flights(0, [1]))
    killed = query(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (f"wire {name}/out",),
    )
    assert killed == [(True,)]
    sink.write_epoch(1, flights(1, [2]))
    sink.write_epoch(1, flights(1, [2]))
    sink.close()
    assert query(dsn, sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier(name))) == [(1,), (2,)]


def test_unreachable_database_is_a_wire_error_at_open(name):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink = postgres(f"host=127.0.0.1 port={port} user=wire connect_timeout=2", table=name)
    with pytest.raises(WireError, match="cannot open"):
        opened(sink, name)


# --- upsert: idempotent -----------------------------------------------------------------


def delays(rows):
    origin, start, avg, n = zip(*rows, strict=True)
    return pa.table(
        {
            "origin": pa.array(origin),
            "window_start": pa.array(start, pa.timestamp("ms", "UTC")),
            "avg_delay": pa.array(avg, pa.float64()),
            "n": pa.array(n, pa.int64()),
        }
    )


def test_upsert_last_row_per_key_wins_and_replays_are_idempotent(dsn, name):
    h = 3_600_000
    sink = opened(postgres(dsn, table=name, mode="upsert", key=("origin", "window_start")), name)
    sink.write_epoch(
        0, delays([("JFK", 0, 1.0, 1), ("EWR", 0, 2.0, 1), ("JFK", 0, 3.0, 2), ("JFK", h, 4.0, 1)])
    )
    sink.write_epoch(1, delays([("EWR", 0, 5.0, 2), ("LGA", h, 6.0, 1), ("EWR", 0, 7.0, 3)]))
    sink.write_epoch(1, delays([("EWR", 0, 5.0, 2), ("LGA", h, 6.0, 1), ("EWR", 0, 7.0, 3)]))  # replay
    sink.close()
    opened(postgres(dsn, table=name, mode="upsert", key=("origin", "window_start")), name).write_epoch(
        1, delays([("EWR", 0, 5.0, 2), ("LGA", h, 6.0, 1), ("EWR", 0, 7.0, 3)])
    )
    t0, t1 = dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1, 1, tzinfo=UTC)
    rows = query(dsn, sql.SQL("SELECT * FROM {} ORDER BY origin, window_start").format(sql.Identifier(name)))
    assert rows == [("EWR", t0, 7.0, 3), ("JFK", t0, 3.0, 2), ("JFK", t1, 4.0, 1), ("LGA", t1, 6.0, 1)]
    pk = query(
        dsn,
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) "
        "AND i.indisprimary",
        (name,),
    )
    assert pk == [(["origin", "window_start"],)]


def test_upsert_with_only_key_columns_does_nothing_on_conflict(dsn, name):
    sink = opened(postgres(dsn, table=name, mode="upsert", key="k"), name)
    sink.write_epoch(0, pa.table({"k": ["a", "b", "a"]}))
    sink.write_epoch(1, pa.table({"k": ["b", "c"]}))
    sink.close()
    assert query(dsn, sql.SQL("SELECT k FROM {} ORDER BY k").format(sql.Identifier(name))) == [
        ("a",),
        ("b",),
        ("c",),
    ]


def test_upsert_refuses_null_keys_and_missing_key_columns(dsn, name):
    sink = opened(postgres(dsn, table=name, mode="upsert", key="k"), name)
    with pytest.raises(WireError, match="key column 'k' has nulls"):
        sink.write_epoch(0, pa.table({"k": ["a", None], "v": [1, 2]}))
    sink.close()
    other = opened(postgres(dsn, table=name + "_2", mode="upsert", key="k"), name)
    with pytest.raises(WireError, match=r"key column\(s\) \['k'\] not among the rows' columns \['v'\]"):
        other.write_epoch(0, pa.table({"v": [1]}))
    other.close()


def test_upsert_into_an_existing_table_without_a_matching_unique_constraint(dsn, name):
    query_ddl = sql.SQL("CREATE TABLE {} (k text, v bigint)").format(sql.Identifier(name))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query_ddl)
    sink = opened(postgres(dsn, table=name, mode="upsert", key="k"), name)
    with pytest.raises(WireError, match=r"no primary key or unique constraint on exactly \('k',\)"):
        sink.write_epoch(0, pa.table({"k": ["a"], "v": [1]}))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (k)").format(sql.Identifier(name)))
    sink.write_epoch(0, pa.table({"k": ["a"], "v": [1]}))
    sink.close()
    assert query(dsn, sql.SQL("SELECT * FROM {}").format(sql.Identifier(name))) == [("a", 1)]


# --- tables and types ------------------------------------------------------------------------


def all_types():
    ny = pa.timestamp("us", "America/New_York")
    return pa.table(
        {
            "i64": pa.array([2**63 - 1, None, -7], pa.int64()),
            "i32": pa.array([2**31 - 1, None, -1], pa.int32()),
            "u64": pa.array([2**64 - 1, None, 0], pa.uint64()),
            "f64": pa.array([1e300, None, -0.1], pa.float64()),
            "f32": pa.array([0.5, None, float("inf")], pa.float32()),
            "nan": pa.array([float("nan"), 1.0, None], pa.float64()),
            "dec": pa.array(
                [decimal.Decimal("1.230"), None, decimal.Decimal("-0.001")], pa.decimal128(10, 3)
            ),
            "s": pa.array(["", None, 'q"u,o\nte ü \\. \t'], pa.string()),
            "ls": pa.array(["x", None, "y"], pa.large_string()),
            "cat": pa.array(["a", None, "a"]).dictionary_encode(),
            "ok": pa.array([True, None, False]),
            "ts": pa.array([1357035300123, None, -1], pa.timestamp("ms", "UTC")),
            "ts_ny": pa.array([1357035300123456, None, 0], ny),
            "ts_ns": pa.array([1_000_000_001_999, None, 0], pa.timestamp("ns", "UTC")),
            "naive": pa.array([1357035300123456, None, 0], pa.timestamp("us")),
            "day": pa.array([dt.date(2013, 1, 1), None, dt.date(1, 1, 1)]),
            "tod": pa.array([dt.time(10, 15, 1, 123000), None, dt.time(0)], pa.time64("us")),
            "bin": pa.array([b'\x00\xff,\n"', None, b""], pa.binary()),
            "lst": pa.array([[1, None, 3], None, []], pa.list_(pa.int64())),
            "rec": pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}]),
            "nothing": pa.nulls(3),
        }
    )


def test_types_round_trip_with_nulls_and_utc_instants(dsn, name):
    sink = opened(postgres(dsn, table=name, schema=f"S {name}"), name)
    sink.write_epoch(0, all_types())
    sink.close()
    target = sql.Identifier(f"S {name}", name)
    types = dict(
        query(
            dsn,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s",
            (f"S {name}", name),
        )
    )
    assert types == {
        "i64": "bigint",
        "i32": "integer",
        "u64": "numeric",
        "f64": "double precision",
        "f32": "real",
        "nan": "double precision",
        "dec": "numeric",
        "s": "text",
        "ls": "text",
        "cat": "text",
        "ok": "boolean",
        "ts": "timestamp with time zone",
        "ts_ny": "timestamp with time zone",
        "ts_ns": "timestamp with time zone",
        "naive": "timestamp without time zone",
        "day": "date",
        "tod": "time without time zone",
        "bin": "bytea",
        "lst": "jsonb",
        "rec": "jsonb",
        "nothing": "text",
    }
    names = all_types().column_names
    rows = query(dsn, sql.SQL("SELECT {} FROM {} ORDER BY i32 NULLS FIRST").format(
        sql.SQL(", ").join(map(sql.Identifier, names)), target
    ))  # fmt: skip
    got = [dict(zip(names, r, strict=True)) for r in rows]
    null_row, neg_row, max_row = got
    assert set(null_row.values()) == {None, 1.0}  # every column null but "nan"
    assert max_row["i64"] == 2**63 - 1 and max_row["u64"] == 2**64 - 1 and max_row["f64"] == 1e300
    assert max_row["nan"] != max_row["nan"] and neg_row["f32"] == float("inf") and neg_row["f64"] == -0.1
    assert max_row["dec"] == decimal.Decimal("1.230") and neg_row["dec"] == decimal.Decimal("-0.001")
    assert max_row["s"] == "" and neg_row["s"] == 'q"u,o\nte ü \\. \t'
    assert max_row["cat"] == "a" and max_row["ok"] is True and neg_row["ok"] is False
    assert max_row["ts"] == dt.datetime(2013, 1, 1, 10, 15, 0, 123000, tzinfo=UTC)
    assert neg_row["ts"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
    assert max_row["ts_ny"] == dt.datetime(2013, 1, 1, 10, 15, 0, 123456, tzinfo=UTC)
    assert max_row["ts_ns"] == dt.datetime(1970, 1, 1, 0, 16, 40, 2, tzinfo=UTC)  # rounded to µs
    assert max_row["naive"] == dt.datetime(2013, 1, 1, 10, 15, 0, 123456)
    assert max_row["day"] == dt.date(2013, 1, 1) and neg_row["day"] == dt.date(1, 1, 1)
    assert max_row["tod"] == dt.time(10, 15, 1, 123000)
    assert max_row["bin"] == b'\x00\xff,\n"' and neg_row["bin"] == b""
    assert max_row["lst"] == [1, None, 3] and neg_row["lst"] == []
    assert max_row["rec"] == {"a": 1, "b": "x"} and neg_row["rec"] == {"a": None, "b": "y"}


def test_identifiers_are_quoted(dsn, name):
    odd = f'{name} "Quoted"; DROP'
    sink = opened(postgres(dsn, table=odd), name)
    sink.write_epoch(0, pa.table({'weird "col"': [1], "Case": ["x"], "select": [True]}))
    sink.close()
    rows = query(dsn, sql.SQL("SELECT * FROM {}").format(sql.Identifier("public", odd)))
    assert rows == [(1, "x", True)]


def test_existing_compatible_table_is_used_as_is(dsn, name):
    ddl = sql.SQL(
        "CREATE TABLE {} (id numeric, small integer, note varchar(10), extra text DEFAULT 'd', "
        "at timestamptz)"
    ).format(sql.Identifier(name))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ddl)
    sink = opened(postgres(dsn, table=name), name)
    sink.write_epoch(
        0,
        pa.table(
            {
                "id": pa.array([5], pa.int64()),
                "small": pa.array([7], pa.int16()),
                "note": ["n"],
                "at": pa.array([0], pa.timestamp("s", "UTC")),
            }
        ),
    )
    sink.close()
    rows = query(dsn, sql.SQL("SELECT * FROM {}").format(sql.Identifier(name)))
    assert rows == [(decimal.Decimal(5), 7, "n", "d", dt.datetime(1970, 1, 1, tzinfo=UTC))]


def test_existing_incompatible_table_is_a_clear_wire_error(dsn, name):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id integer, origin text)").format(sql.Identifier(name)))
    sink = opened(postgres(dsn, table=name), name)
    with pytest.raises(WireError) as info:
        sink.write_epoch(0, flights(0, [1]))
    sink.close()
    message = str(info.value)
    assert f"existing table public.{name} does not fit" in message
    assert "column 'id' is int4 but Arrow type int64 needs one of int8, numeric" in message
    assert "column 'delay' is missing" in message and "column 'epoch' is missing" in message
    assert "column 'origin'" not in message
    assert query(dsn, sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))) == [(0,)]


def test_unmapped_arrow_type_is_a_wire_error(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    with pytest.raises(WireError, match=r"no PostgreSQL type for Arrow type duration\[us\]"):
        sink.write_epoch(0, pa.table({"d": pa.array([1], pa.duration("us"))}))
    sink.close()


def test_a_large_epoch_is_copied_in_batches(dsn, name):
    n = 200_000
    ids = pa.array(range(n), pa.int64())
    table = pa.table(
        {"id": ids, "s": pa.compute.cast(ids, pa.string()), "epoch": pa.array([0] * n, pa.int64())}
    )
    sink = opened(postgres(dsn, table=name), name)
    sink.write_epoch(0, table)
    sink.close()
    assert query(
        dsn, sql.SQL("SELECT count(*), sum(id), count(DISTINCT s) FROM {}").format(sql.Identifier(name))
    ) == [(n, n * (n - 1) // 2, n)]
