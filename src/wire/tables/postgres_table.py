"""A PostgreSQL table to look rows up in: ``wire.tables.postgres(dsn, table, key=...)``.

Each worker process keeps one autocommit connection per DSN (each query sees the table
as committed when it runs) and asks for the keys its cache lacks in one query per
epoch task: ``SELECT key, columns FROM table WHERE key = ANY(%s)``. Needs the pip
extra ``wire[postgres]`` (psycopg).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from wire.core.time import Duration
from wire.errors import ConfigError, needs_extra, require_extra
from wire.tables.base import (
    DEFAULT_UNAVAILABLE_TIMEOUT,
    LookupTable,
    check_key_and_columns,
    pick_columns,
    timeout_ms,
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?")

_ARROW: dict[str, pa.DataType] = {
    "int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(),
    "float4": pa.float32(), "float8": pa.float64(), "bool": pa.bool_(),
    "text": pa.string(), "varchar": pa.string(), "bpchar": pa.string(), "name": pa.string(),
    "uuid": pa.string(), "json": pa.string(), "jsonb": pa.string(),
    "date": pa.date32(), "timestamp": pa.timestamp("us"), "timestamptz": pa.timestamp("us", tz="UTC"),
    "bytea": pa.binary(),
}
"""PostgreSQL type -> Arrow type of a joined column (``numeric(p, s)`` -> ``decimal128(p, s)``)."""

_AS_TEXT = {"uuid", "json", "jsonb"}
"""Types read as their text form."""

CONNECT_TIMEOUT_S = 10
"""libpq's ``connect_timeout`` (s) when the DSN sets none."""

_CONNECTIONS: dict[str, Any] = {}
"""This process's open connection per DSN (executors: one per Python worker process)."""


@dataclass(frozen=True)
class PostgresTable(LookupTable):
    """A PostgreSQL table read by key; built by :func:`postgres`."""

    dsn: str
    table: str
    key: str
    columns: tuple[str, ...] | None = None
    unavailable_timeout_ms: int = 60_000

    def __repr__(self) -> str:
        return f"PostgresTable(table={self.table!r}, key={self.key!r}, columns={self.columns!r})"

    def describe(self) -> str:
        """``"postgres table '<table>' (host ..., port ...)"`` (no password)."""
        where = " ".join(p for p in self.dsn.split() if p.split("=")[0] in ("host", "port", "dbname"))
        return f"postgres table {self.table!r}" + (f" ({where})" if where else "")

    def _connection(self) -> Any:
        conn = _CONNECTIONS.get(self.dsn)
        if conn is None or conn.closed:
            with needs_extra("postgres", "wire.tables.postgres"):
                import psycopg
            # a connection attempt that hangs (an unreachable host) must not outlast the hold
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            dsn = self.dsn
            if "connect_timeout" not in conninfo_to_dict(dsn):
                dsn = make_conninfo(dsn, connect_timeout=CONNECT_TIMEOUT_S)
            conn = psycopg.connect(dsn, autocommit=True)
            _CONNECTIONS[self.dsn] = conn
        return conn

    def close(self) -> None:
        """Close this process's connection to the table's database (a new one opens on the next read)."""
        conn = _CONNECTIONS.pop(self.dsn, None)
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection: nothing more to release
                conn.close()

    def transient(self, error: BaseException) -> bool:
        """A connection that failed or dropped (``psycopg.OperationalError``, ``InterfaceError``)."""
        import psycopg

        return isinstance(error, psycopg.OperationalError | psycopg.InterfaceError | OSError)

    def _types(self) -> dict[str, tuple[str, int | None, int | None]]:
        """Each column's type name, precision and scale (one catalog query)."""
        schema, _, name = self.table.rpartition(".")
        rows = self._connection().execute(
            "SELECT a.attname, t.typname, information_schema._pg_numeric_precision(a.atttypid, a.atttypmod),"
            " information_schema._pg_numeric_scale(a.atttypid, a.atttypmod)"
            " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
            " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            [f"{schema}.{name}" if schema else name]).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def resolve_schema(self) -> pa.Schema:
        """The key, then the joined columns, with Arrow types from the catalog.

        Raises
        ------
        ConfigError
            No such table, no such key or column, or a column type without an Arrow
            counterpart (accepted: integers, floats, bool, text types, uuid, json,
            date, timestamp(tz), bytea, numeric(p, s)).
        """
        types = self._types()
        if not types:
            raise ConfigError("table", self.table,
                              f"an existing table or view of the database ({self.describe()})")
        fields = []
        for column, (typ, precision, scale) in types.items():
            if typ == "numeric" and precision is not None:
                fields.append(pa.field(column, pa.decimal128(precision, scale or 0)))
            elif typ in _ARROW:
                fields.append(pa.field(column, _ARROW[typ]))
            else:
                fields.append(pa.field(column, pa.null(), metadata={"pg_type": typ}))
        schema = pick_columns(pa.schema(fields), self.key, self.columns, self.describe())
        for f in schema:
            if f.type == pa.null():
                pg_type = f.metadata[b"pg_type"].decode()
                raise ConfigError("columns", f.name, f"columns of a supported type ({f.name!r} is {pg_type}; "
                                  f"supported: {', '.join(sorted(_ARROW))}, numeric(p, s)); list the "
                                  "others with columns=[...]")
        return schema

    def fetch(self, keys: Sequence[Any]) -> pa.Table:
        """The rows whose key is in ``keys``: one ``WHERE key = ANY(%s)`` query."""
        from psycopg import sql

        schema = self.resolved()
        types = self._types_cached()
        cols = [sql.SQL("{}::text").format(sql.Identifier(f.name)) if types[f.name][0] in _AS_TEXT
                else sql.Identifier(f.name) for f in schema]
        query = sql.SQL("SELECT {cols} FROM {table} WHERE {key} = ANY(%s::{typ}[])").format(
            cols=sql.SQL(", ").join(cols), table=sql.Identifier(*self.table.split(".")),
            key=sql.Identifier(self.key), typ=sql.Identifier(types[self.key][0]))
        rows = self._connection().execute(query, [list(keys)]).fetchall()
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
        arrays = [pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)]
        return pa.table(arrays, schema=schema)

    def resolved(self) -> pa.Schema:
        """:meth:`resolve_schema`, read once per process."""
        got = _SCHEMAS.get(repr(self) + self.dsn)
        if got is None:
            got = _SCHEMAS[repr(self) + self.dsn] = self.resolve_schema()
        return got

    def _types_cached(self) -> dict[str, tuple[str, int | None, int | None]]:
        got = _TYPES.get(repr(self) + self.dsn)
        if got is None:
            got = _TYPES[repr(self) + self.dsn] = self._types()
        return got


_SCHEMAS: dict[str, pa.Schema] = {}
_TYPES: dict[str, dict[str, tuple[str, int | None, int | None]]] = {}


def postgres(
    dsn: str,
    table: str,
    *,
    key: str,
    columns: list[str] | None = None,
    unavailable_timeout: Duration = DEFAULT_UNAVAILABLE_TIMEOUT,
) -> PostgresTable:
    """A PostgreSQL table (or view) to enrich a stream from with ``Stream.lookup_join``.

    Parameters
    ----------
    dsn:
        libpq connection string, e.g. ``"host=db port=5432 dbname=shop user=wire"``.
    table:
        ``"name"`` or ``"schema.name"``.
    key:
        The column the events' ``on`` column is matched with (one row per key: a
        primary or unique key; with several rows per key one of them is joined).
    columns:
        The columns joined to each event (default: every column but the key).
    unavailable_timeout:
        How long an epoch holds and retries (with backoff) while the database cannot
        be reached, before the flow fails with :class:`wire.errors.TableUnavailable`.

    Raises
    ------
    ConfigError
        On an empty DSN, a table name that is not ``name`` / ``schema.name``, a bad key,
        columns or timeout (when the flow is compiled: a table, key or column that the
        database does not have).
    MissingExtraError
        Without the pip extra ``wire[postgres]``.

    Examples
    --------
    >>> import wire
    >>> customers = wire.tables.postgres("host=127.0.0.1 dbname=shop", "customers", key="id",
    ...                                  columns=["name", "tier"])
    >>> customers.describe()
    "postgres table 'customers' (host=127.0.0.1 dbname=shop)"
    >>> wire.tables.postgres("host=x", "customers; drop", key="id")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    wire.errors.ConfigError: invalid table='customers; drop'; accepted: a table name, ...
    """
    require_extra("postgres", "wire.tables.postgres")
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError("dsn", dsn, "a libpq connection string, e.g. 'host=db port=5432 dbname=shop'")
    if not isinstance(table, str) or not _NAME.fullmatch(table):
        raise ConfigError("table", table, "a table name, 'name' or 'schema.name' (letters, digits, '_', '$')")
    key, cols = check_key_and_columns(key, columns)
    return PostgresTable(dsn, table, key, cols, timeout_ms(unavailable_timeout))
