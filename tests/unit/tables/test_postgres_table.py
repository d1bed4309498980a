"""wire.tables.postgres against a throw-away PostgreSQL server: types, batched reads, errors."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import psycopg
import pytest

import wire
from wire.tables import postgres_table


@pytest.fixture(scope="module")
def dsn(pg_server):
    return pg_server.dsn


@pytest.fixture
def table(dsn):
    name = f"t_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE {name} (code text PRIMARY KEY, n int2, big int8, f float4, ok bool,
            amount numeric(8, 3), day date, at timestamptz, local timestamp, raw bytea, id uuid, doc jsonb,
            label varchar(10), spot point)""")
        conn.execute(f"""INSERT INTO {name} VALUES
            ('a', 1, 10000000000, 1.5, true, 12.345, '2026-01-02', '2026-01-02T03:04:05Z',
             '2026-01-02T03:04:05', '\\x0102', '00000000-0000-0000-0000-000000000001', '{{"x": 1}}', 'A',
             '(1,2)'),
            ('b', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""")
    return name


def test_columns_map_to_arrow_types_and_one_query_reads_a_batch_of_keys(dsn, table):
    t = wire.tables.postgres(dsn, table, key="code", columns=[
        "n", "big", "f", "ok", "amount", "day", "at", "local", "raw", "id", "doc", "label"])
    schema = t.resolve_schema()
    assert [str(f.type) for f in schema] == [
        "string", "int16", "int64", "float", "bool", "decimal128(8, 3)", "date32[day]",
        "timestamp[us, tz=UTC]", "timestamp[us]", "binary", "string", "string", "string"]
    rows = t.fetch(["a", "b", "zz"])
    assert rows.schema == schema
    by_key = {r["code"]: r for r in rows.to_pylist()}
    assert set(by_key) == {"a", "b"}
    a = by_key["a"]
    assert (a["n"], a["big"], a["ok"], a["amount"], a["day"], a["raw"], a["id"], a["doc"]) == (
        1, 10_000_000_000, True, decimal.Decimal("12.345"), dt.date(2026, 1, 2), b"\x01\x02",
        "00000000-0000-0000-0000-000000000001", '{"x": 1}')
    assert a["at"] == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert all(v is None for k, v in by_key["b"].items() if k != "code")
    t.close()


def test_an_unsupported_column_type_is_refused_naming_it(dsn, table):
    with pytest.raises(wire.ConfigError, match=r"invalid columns='spot'; accepted: .*'spot' is point.*"
                                               r"columns=\[\.\.\.\]"):
        wire.tables.postgres(dsn, table, key="code").resolve_schema()


def test_a_missing_table_key_or_column_is_refused(dsn, table):
    with pytest.raises(wire.ConfigError, match=r"invalid table='nope_table'; accepted: an existing table"):
        wire.tables.postgres(dsn, "nope_table", key="id").resolve_schema()
    with pytest.raises(wire.ConfigError, match=r"invalid key='nope'; accepted: a column of postgres table"):
        wire.tables.postgres(dsn, table, key="nope", columns=["n"]).resolve_schema()


def test_a_refused_connection_is_transient_a_bad_query_is_not(dsn, table):
    t = wire.tables.postgres("host=127.0.0.1 port=1 connect_timeout=2", table, key="code", columns=["n"])
    with pytest.raises(psycopg.OperationalError) as refused:
        t.resolve_schema()
    assert t.transient(refused.value)
    assert not t.transient(psycopg.errors.UndefinedColumn("no such column"))
    assert postgres_table._CONNECTIONS.get(t.dsn) is None


@pytest.mark.parametrize(("dsn", "timeout"), [("host=db dbname=shop", "10"),
                                              ("postgresql://u@db:5432/shop", "10"),
                                              ("host=db connect_timeout=3", "3")])
def test_a_connection_attempt_is_bounded_unless_the_dsn_says_how(monkeypatch, dsn, timeout):
    from psycopg.conninfo import conninfo_to_dict

    seen = []

    class Conn:
        closed = False

    monkeypatch.setattr(psycopg, "connect", lambda conninfo, **kw: seen.append(conninfo) or Conn())
    t = wire.tables.postgres(dsn, "customers", key="id")
    t._connection()
    t.close()
    assert conninfo_to_dict(seen[0])["connect_timeout"] == timeout
