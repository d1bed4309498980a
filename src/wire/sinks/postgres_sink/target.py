"""The PostgreSQL sinks' target table and connection, as both the driver and the executors use them.

Configuration checks (:func:`_check_name`, :func:`_check_dsn`, :func:`_check_key`),
the connection (:func:`_connect`), the table as the sink sees it (:class:`_Target`:
create it from an Arrow schema or check that the existing one fits), and the move
of a staging table's rows into it (:func:`_move`). Used by
:mod:`wire.sinks.postgres_sink.sink` and :mod:`wire.sinks.self_correcting_sink.sink`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from wire.errors import ConfigError, WireError, needs_extra
from wire.sinks.column_checks import column_names
from wire.sinks.postgres_sink.column_types import _pg_type

with needs_extra("postgres", "wire.sinks.postgres"):
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

_MAX_IDENT = 63  # PostgreSQL's NAMEDATALEN - 1: longer names are silently truncated


# --- configuration --------------------------------------------------------------------


def _check_name(parameter: str, value: object) -> str:
    accepted = f"a non-empty identifier of at most {_MAX_IDENT} bytes"
    if not isinstance(value, str) or not value or len(value.encode()) > _MAX_IDENT or "\x00" in value:
        raise ConfigError(parameter, value, accepted)
    return value


def _check_dsn(dsn: object) -> str:
    accepted = "a libpq connection string or postgresql:// URL"
    if not isinstance(dsn, str):
        raise ConfigError("dsn", dsn, accepted)
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise ConfigError("dsn", "<unparsable, not shown>", accepted) from None
    return dsn


def _check_key(key: object) -> tuple[str, ...]:
    return column_names(key, parameter="key", accepted="a column name or a non-empty tuple of distinct "
                        "column names (required for mode='upsert')")

# --- shared by the driver and the executors --------------------------------------------


def _connect(dsn: str, app: str) -> psycopg.Connection:
    """An autocommit connection in UTC and UTF-8, named ``app`` in ``pg_stat_activity``."""
    conn = psycopg.connect(dsn, autocommit=True, application_name=app[:_MAX_IDENT])
    try:
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("SET client_encoding TO 'UTF8'")
    except BaseException:
        conn.close()
        raise
    return conn


@dataclass(frozen=True)
class _Target:
    """The sink's table as both the driver and the executors check it (picklable)."""

    schema: str
    table: str
    key: tuple[str, ...]
    """Upsert key; empty in append mode."""
    where: str
    """The sink's :meth:`~wire.delivery.sink.Sink.describe`, for messages."""

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    def ensure(self, conn: psycopg.Connection, schema: pa.Schema) -> None:
        """Create the table from the Arrow schema, or check that the existing one fits.

        Runs in its own transaction (a savepoint when ``conn`` is in one) under an
        advisory lock on the table's name, so that concurrent tasks creating the same
        table wait for each other instead of failing.
        """
        names = schema.names
        if len(set(names)) != len(names):
            raise WireError(f"{self.where}: duplicate column names in {names}")
        too_long = [n for n in names if len(n.encode()) > _MAX_IDENT or not n]
        if too_long:
            raise WireError(f"{self.where}: column names empty or longer than {_MAX_IDENT} bytes: {too_long}")
        missing = [k for k in self.key if k not in names]
        if missing:
            raise WireError(f"{self.where}: key column(s) {missing} not among the rows' columns {names}")
        columns = [
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.type, self.where)[0]))
            for f in schema
        ]
        if self.key:
            keys = sql.SQL(", ").join(map(sql.Identifier, self.key))
            columns.append(sql.SQL("PRIMARY KEY ({})").format(keys))
        with conn.transaction():
            lock = f"wire table {self.schema}.{self.table}"
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            create = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})")
            conn.execute(create.format(self.ident, sql.SQL(", ").join(columns)))
            self._check(conn, schema)

    def column_types(self, conn: psycopg.Connection) -> dict[str, str]:
        """The table's columns and their SQL types (``format_type``)."""
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (self.schema, self.table),
        ).fetchall()
        return dict(rows)

    def _check(self, conn: psycopg.Connection, schema: pa.Schema) -> None:
        row = conn.execute(
            "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (self.schema, self.table),
        ).fetchone()
        if row is None or row[1] not in ("r", "p"):
            raise WireError(f"{self.where}: {self.schema}.{self.table} exists but is not a table")
        oid = row[0]
        actual: dict[str, str] = dict(
            conn.execute(
                "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
                (oid,),
            ).fetchall()
        )
        problems = []
        for f in schema:
            _, accepted = _pg_type(f.type, self.where)
            if f.name not in actual:
                problems.append(f"column {f.name!r} is missing")
            elif accepted and actual[f.name] not in accepted:
                problems.append(
                    f"column {f.name!r} is {actual[f.name]} but Arrow type {f.type} needs one of "
                    f"{', '.join(sorted(accepted))}"
                )
        if self.key:
            problems += self._check_unique(conn, oid)
        if problems:
            raise WireError(
                f"{self.where}: existing table {self.schema}.{self.table} does not fit the rows: "
                f"{'; '.join(problems)}. Alter or drop the table, or write to another one"
            )

    def _check_unique(self, conn: psycopg.Connection, oid: int) -> list[str]:
        rows = conn.execute(
            "SELECT i.indexrelid, a.attname FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL "
            "AND k.ord <= i.indnkeyatts",
            (oid,),
        ).fetchall()
        unique: dict[int, set[str]] = {}
        for index, column in rows:
            unique.setdefault(index, set()).add(column)
        if set(self.key) not in unique.values():
            return [f"no primary key or unique constraint on exactly {self.key} for ON CONFLICT"]
        return []


def _move(conn: psycopg.Connection, target: _Target, staging: str, columns: pa.Schema,
          types: dict[str, str]) -> None:
    """``INSERT INTO target SELECT ... FROM staging``, each column cast to the target column's type."""
    select = [
        sql.SQL("CAST({} AS {})").format(
            sql.SQL("NULL") if pa.types.is_null(f.type) else sql.Identifier(f.name), sql.SQL(types[f.name])
        )
        for f in columns
    ]
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
            target.ident,
            sql.SQL(", ").join(sql.Identifier(f.name) for f in columns),
            sql.SQL(", ").join(select),
            sql.Identifier(target.schema, staging),
        )
    )
