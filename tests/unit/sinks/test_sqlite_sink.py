import dataclasses
import datetime as dt
import decimal
import sqlite3

import pyarrow as pa
import pytest

from wire.errors import ConfigError, WireError
from wire.sinks.sqlite_sink import SqliteSink, sqlite

OPEN = {"flow_id": "flights", "sink_id": "counts", "checkpoint_id": "ckpt-1"}
KEY = ("origin", "window_start")


def counts(epoch: int, rows: list[tuple[str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "origin": pa.array([r[0] for r in rows], pa.string()),
            "window_start": pa.array([r[1] for r in rows], pa.timestamp("ms", "UTC")),
            "count": pa.array([r[2] for r in rows], pa.int64()),
            "epoch": pa.array([epoch] * len(rows), pa.int64()),
        }
    )


def select(path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def opened(path, **kwargs) -> SqliteSink:
    sink = sqlite(path, **{"table": "counts", "key": KEY, **kwargs})
    sink.open(**OPEN)
    return sink


def test_sqlite_sink_is_a_frozen_idempotent_value(tmp_path):
    sink = sqlite(tmp_path / "out.db", table="counts", key=["origin", "window_start"])
    assert isinstance(sink, SqliteSink)
    assert sink.guarantee == "idempotent"
    assert sink.key == KEY
    assert sink == sqlite(str(tmp_path / "out.db"), table="counts", key=KEY)
    assert (
        sink.describe()
        == f"sqlite {tmp_path / 'out.db'} table=counts key=(origin, window_start) (idempotent)"
    )
    assert sqlite("x.db", table="t", key="id").key == ("id",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sink.table = "other"


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"key": ()}, "key"),
        ({"key": ["a", "a"]}, "key"),
        ({"key": ["a", ""]}, "key"),
        ({"key": [1]}, "key"),
        ({"key": 5}, "key"),
        ({"key": "", "table": "t"}, "key"),
        ({"table": ""}, "table"),
        ({"table": 3}, "table"),
        ({"path": ""}, "path"),
        ({"path": ":memory:"}, "path"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs, parameter):
    args = {"path": "out.db", "table": "t", "key": "id", **kwargs}
    path = args.pop("path")
    with pytest.raises(ConfigError) as info:
        sqlite(path, **args)
    assert info.value.parameter == parameter


def test_a_key_column_missing_from_the_rows_is_a_config_error(tmp_path):
    sink = opened(tmp_path / "out.db", key=("origin", "nope"))
    with pytest.raises(ConfigError) as info:
        sink.write_epoch(0, counts(0, [("JFK", 0, 1)]))
    assert info.value.parameter == "key"
    assert (
        not (tmp_path / "out.db").exists()
        or select(tmp_path / "out.db", "select name from sqlite_master where name = 'counts'") == []
    )


def test_upsert_updates_by_key_and_a_replay_is_idempotent(tmp_path):
    path = tmp_path / "out.db"
    sink = opened(path)
    sink.write_epoch(0, counts(0, [("JFK", 0, 1), ("LGA", 0, 2)]))
    sink.write_epoch(1, counts(1, [("JFK", 0, 5), ("JFK", 60_000, 1)]))  # JFK@0 updated
    expected = [
        ("JFK", "1970-01-01T00:00:00.000Z", 5, 1),
        ("JFK", "1970-01-01T00:01:00.000Z", 1, 1),
        ("LGA", "1970-01-01T00:00:00.000Z", 2, 0),
    ]
    query = "select origin, window_start, count, epoch from counts order by origin, window_start"
    assert select(path, query) == expected

    sink.write_epoch(1, counts(1, [("JFK", 0, 5), ("JFK", 60_000, 1)]))  # replay
    sink.write_epoch(0, counts(0, [("LGA", 0, 2)]))  # replay of an earlier epoch's row
    assert select(path, query) == expected
    sink.close()


def test_rows_of_one_epoch_with_the_same_key_last_one_wins(tmp_path):
    path = tmp_path / "out.db"
    sink = opened(path)
    sink.write_epoch(0, counts(0, [("JFK", 0, 1), ("JFK", 0, 2), ("JFK", 0, 3)]))
    assert select(path, "select count from counts") == [(3,)]


def test_table_and_unique_key_index_are_created(tmp_path):
    path = tmp_path / "sub" / "out.db"
    sink = opened(path)
    sink.write_epoch(0, counts(0, [("JFK", 0, 1)]))
    (ddl,) = select(path, "select sql from sqlite_master where type = 'table' and name = 'counts'")[0]
    assert '"origin" TEXT' in ddl and '"window_start" TEXT' in ddl and '"count" INTEGER' in ddl
    indexes = select(path, "select name from pragma_index_list('counts') where \"unique\" = 1")
    assert indexes == [("wire_counts_key",)]
    with pytest.raises(sqlite3.IntegrityError), sqlite3.connect(path) as conn:
        conn.execute("insert into counts values ('JFK', '1970-01-01T00:00:00.000Z', 9, 9)")


def test_types_round_trip(tmp_path):
    path = tmp_path / "out.db"
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "small": pa.array([-1, None, 2**31 - 1], pa.int32()),
            "big": pa.array([2**63 - 1, 0, -(2**63)], pa.int64()),
            "u": pa.array([2**63 - 1, 0, 7], pa.uint64()),
            "x": pa.array([1.5, float("nan"), None], pa.float64()),
            "ok": pa.array([True, False, None]),
            "name": pa.array(["a", "ü", None], pa.string()),
            "blob": pa.array([b"\x00\xff", None, b""], pa.binary()),
            "ts": pa.array([1357035300123, 0, None], pa.timestamp("ms", "UTC")),
            "ts_us": pa.array([1, None, 2], pa.timestamp("us", "America/New_York")),
            "naive": pa.array([0, None, 1_000], pa.timestamp("s")),
            "day": pa.array([dt.date(2013, 1, 1), None, dt.date(1999, 12, 31)]),
            "amount": pa.array(
                [decimal.Decimal("1.10"), None, decimal.Decimal("-3.00")], pa.decimal128(5, 2)
            ),
            "wait": pa.array([1500, None, -1], pa.duration("ms")),
            "tags": pa.array([["a", "b"], None, []], pa.list_(pa.string())),
            "cat": pa.array(["x", "y", "x"]).dictionary_encode(),
        }
    )
    sink = sqlite(path, table="t", key="id")
    sink.open(**OPEN)
    sink.write_epoch(0, table)
    with sqlite3.connect(path) as conn:
        cursor = conn.execute("select * from t order by id")
        names = [d[0] for d in cursor.description]
        got = dict(zip(names, zip(*cursor.fetchall(), strict=True), strict=True))
    assert got == {
        "id": (1, 2, 3),
        "small": (-1, None, 2**31 - 1),
        "big": (2**63 - 1, 0, -(2**63)),
        "u": (2**63 - 1, 0, 7),
        "x": (1.5, None, None),  # NaN is stored as NULL
        "ok": (1, 0, None),
        "name": ("a", "ü", None),
        "blob": (b"\x00\xff", None, b""),
        "ts": ("2013-01-01T10:15:00.123Z", "1970-01-01T00:00:00.000Z", None),
        "ts_us": ("1970-01-01T00:00:00.000001Z", None, "1970-01-01T00:00:00.000002Z"),
        "naive": ("1970-01-01T00:00:00", None, "1970-01-01T00:16:40"),
        "day": ("2013-01-01", None, "1999-12-31"),
        "amount": ("1.10", None, "-3.00"),
        "wait": (1500, None, -1),
        "tags": ('["a","b"]', None, "[]"),
        "cat": ("x", "y", "x"),
    }
    types = dict(select(path, "select name, type from pragma_table_info('t')"))
    assert types == {
        "id": "INTEGER",
        "small": "INTEGER",
        "big": "INTEGER",
        "u": "INTEGER",
        "x": "REAL",
        "ok": "INTEGER",
        "name": "TEXT",
        "blob": "BLOB",
        "ts": "TEXT",
        "ts_us": "TEXT",
        "naive": "TEXT",
        "day": "TEXT",
        "amount": "TEXT",
        "wait": "INTEGER",
        "tags": "TEXT",
        "cat": "TEXT",
    }
    # ISO-8601 text parses back to the same instant
    (text,) = select(path, "select ts from t where id = 1")[0]
    back = dt.datetime.fromisoformat(text)
    assert back == dt.datetime(2013, 1, 1, 10, 15, 0, 123000, tzinfo=dt.UTC)


def test_unsigned_values_sqlite_cannot_hold_fail_the_epoch_and_write_nothing(tmp_path):
    path = tmp_path / "out.db"
    sink = sqlite(path, table="t", key="id")
    sink.open(**OPEN)
    with pytest.raises(WireError, match="2\\*\\*63-1"):
        sink.write_epoch(0, pa.table({"id": pa.array([2**63], pa.uint64())}))
    assert not path.exists()


def test_null_key_values_are_an_error(tmp_path):
    sink = opened(tmp_path / "out.db")
    with pytest.raises(WireError, match="null values in key column 'origin'"):
        sink.write_epoch(0, counts(0, [("JFK", 0, 1)]).set_column(0, "origin", pa.array([None], pa.string())))


def test_a_failing_epoch_is_rolled_back_whole(tmp_path):
    path = tmp_path / "out.db"
    sink = opened(path)
    sink.write_epoch(0, counts(0, [("JFK", 0, 1)]))
    with sqlite3.connect(path) as conn:  # a trigger that fails on the second row of the next epoch
        conn.execute(
            "create trigger boom before insert on counts when new.origin = 'BAD' "
            "begin select raise(abort, 'boom'); end"
        )
    with pytest.raises(WireError, match="boom"):
        sink.write_epoch(1, counts(1, [("LGA", 0, 7), ("BAD", 0, 1)]))
    assert select(path, "select origin, count from counts") == [("JFK", 1)]


def test_existing_table_missing_a_column_is_an_error(tmp_path):
    path = tmp_path / "out.db"
    sink = opened(path)
    sink.write_epoch(0, counts(0, [("JFK", 0, 1)]))
    with pytest.raises(WireError, match=r"no columns \['extra'\]"):
        sink.write_epoch(1, counts(1, [("JFK", 0, 1)]).append_column("extra", pa.array([1])))


def test_all_key_columns_do_nothing_on_conflict_and_empty_epochs_write_nothing(tmp_path):
    path = tmp_path / "out.db"
    sink = sqlite(path, table="seen", key=("id",))
    sink.open(**OPEN)
    sink.write_epoch(0, pa.table({"id": pa.array([], pa.int64())}))
    assert not path.exists()
    sink.write_epoch(1, pa.table({"id": [1, 2, 1]}))
    sink.write_epoch(1, pa.table({"id": [1, 2, 1]}))
    assert select(path, "select id from seen order by id") == [(1,), (2,)]


def test_odd_table_and_column_names_are_quoted(tmp_path):
    path = tmp_path / "out.db"
    sink = sqlite(path, table='my "table"', key='a "b"')
    sink.open(**OPEN)
    sink.write_epoch(0, pa.table({'a "b"': [1], "select": ["x"]}))
    sink.write_epoch(1, pa.table({'a "b"': [1], "select": ["y"]}))
    assert select(path, 'select * from "my ""table"""') == [(1, "y")]


def test_write_before_open_is_an_error(tmp_path):
    with pytest.raises(WireError, match="before open"):
        sqlite(tmp_path / "x.db", table="t", key="id").write_epoch(0, pa.table({"id": [1]}))
