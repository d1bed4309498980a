"""SQLite sink: executor tasks upsert their rows by a key, one transaction per task (stdlib ``sqlite3``).

The sink is idempotent rather than transactional: a replayed epoch rewrites the
same rows under the same keys, which leaves the table as it was (SPEC §6). The
driver commits nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from wire.core.time import INT64_MAX
from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import EpochStager, ExecutorSink, Guarantee, Sink, StagedPart
from wire.errors import ConfigError, WireError
from wire.sinks.arrow_kinds import is_binary
from wire.sinks.column_checks import column_names, path_text
from wire.sinks.json_rows import _to_json_array

_BUSY_TIMEOUT_S = 60.0
"""How long a task waits for another task's write transaction on the same database file."""


@dataclass(frozen=True)
class _SqliteStager(EpochStager):
    """Executor side of :class:`SqliteSink`: upsert one task's rows in one SQLite transaction."""

    path: str
    table: str
    key: tuple[str, ...]
    where: str
    epoch: int

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Upsert the task's rows by key in one ``BEGIN IMMEDIATE`` transaction; commit; receipt ``{}``.

        Creates the table and its unique key index if missing, then ``INSERT ...
        ON CONFLICT(key) DO UPDATE`` every row in row order, and commits; on any error
        the transaction is rolled back. Tasks writing the same file at once wait for
        each other (SQLite allows one writer; busy timeout 60 s), so the first one
        creates the table and the others find it.

        Raises
        ------
        ConfigError
            When a key column is not among the rows' columns.
        WireError
            When a key value is null; when the existing table lacks one of the rows'
            columns; when a column type has no SQLite encoding; when SQLite fails.
        """
        names = table.column_names
        if len(set(names)) != len(names):
            raise WireError(f"{self.where}: duplicate column names in {names}")
        missing = [k for k in self.key if k not in names]
        if missing:
            raise ConfigError("key", self.key, f"column names of the sink's rows {names}")
        for k in self.key:
            if table.column(k).null_count:
                raise WireError(f"{self.where}: epoch {self.epoch} has null values in key column {k!r}")
        columns = [_to_sqlite(table.column(n).combine_chunks(), n, self.where) for n in names]
        decls = [_declared_type(table.schema.field(n).type) for n in names]
        try:
            with closing(sqlite3.connect(self.path, isolation_level=None, timeout=_BUSY_TIMEOUT_S)) as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._ensure_table(conn, names, decls)
                    conn.executemany(self._upsert_sql(names), _rows(columns))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise WireError(f"{self.where}: epoch {self.epoch} failed: {exc}") from exc
        return StagedPart(partition, table.num_rows, table.nbytes, {})

    def _ensure_table(self, conn: sqlite3.Connection, names: list[str], decls: list[str]) -> None:
        table = _quote(self.table)
        existing = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        if not existing:
            cols = ", ".join(f"{_quote(n)} {d}".rstrip() for n, d in zip(names, decls, strict=True))
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols})")
        else:
            absent = [n for n in names if n not in existing]
            if absent:
                raise WireError(
                    f"{self.where}: table {self.table!r} has no columns {absent} "
                    f"(it has {existing}; schema evolution is not supported)"
                )
        index = _quote(f"wire_{self.table}_key")
        keys = ", ".join(_quote(k) for k in self.key)
        conn.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {index} ON {table} ({keys})")

    def _upsert_sql(self, names: list[str]) -> str:
        cols = ", ".join(_quote(n) for n in names)
        marks = ", ".join("?" for _ in names)
        keys = ", ".join(_quote(k) for k in self.key)
        others = [n for n in names if n not in self.key]
        action = (
            "DO UPDATE SET " + ", ".join(f"{_quote(n)} = excluded.{_quote(n)}" for n in others)
            if others
            else "DO NOTHING"
        )
        return f"INSERT INTO {_quote(self.table)} ({cols}) VALUES ({marks}) ON CONFLICT ({keys}) {action}"


@dataclass(frozen=True)
class SqliteSink(DriverRunSink[str], ExecutorSink):
    """Idempotent SQLite table, upserted by key by the executors; built by :func:`sqlite`."""

    guarantee: ClassVar[Guarantee] = "idempotent"

    path: str
    table: str
    key: tuple[str, ...]

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time."""
        object.__setattr__(self, "path", _check_path(self.path))
        object.__setattr__(self, "table", _check_table(self.table))
        object.__setattr__(self, "key", _check_key(self.key))

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> str:
        """``open``: create the database file's directory; called once at run start on the driver.

        The run is the database file's path, made absolute here, so that
        executors whose working directory differs write the same file. The table
        itself is created by the first task with rows.
        """
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        return os.path.abspath(self.path)

    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver, before the epoch's job: the stager with which each task upserts its rows.

        Raises
        ------
        WireError
            Before :meth:`open`.
        """
        return _SqliteStager(self._opened(), self.table, self.key, self.describe(), epoch)

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver: nothing to publish, every task committed its own upsert (idempotent)."""

    def describe(self) -> str:
        """E.g. ``"sqlite out.db table=counts key=(origin, window_start) (idempotent)"``."""
        return f"sqlite {self.path} table={self.table} key=({', '.join(self.key)}) ({self.guarantee})"


def sqlite(path: str | os.PathLike[str], *, table: str, key: str | Sequence[str]) -> Sink:
    """Upsert each epoch's rows into a SQLite table by a key, idempotently.

    The database file at ``path`` and its table ``table`` are created if missing; the
    table gets one column per input column (the ``epoch`` column included, so each row
    shows the last epoch that wrote it) and a unique index ``wire_<table>_key`` on the
    key columns. An existing table must have every input column (it may have more).

    Column encoding (Arrow type → SQLite declared type): booleans → ``INTEGER`` 0/1;
    integers → ``INTEGER`` (unsigned values above 2**63-1 are an error); floats →
    ``REAL`` (NaN becomes NULL); strings → ``TEXT``; binary → ``BLOB``; timestamps →
    ``TEXT`` ISO-8601 at the column's precision, converted to UTC and ending in ``Z``
    when the column has a time zone (e.g. ``2013-01-01T05:15:00.000Z`` for
    ``timestamp[ms, UTC]``), without a zone when it has none — so text order is time
    order and equal instants are equal keys; dates → ``TEXT`` ``YYYY-MM-DD``; times and
    decimals → ``TEXT`` (decimals exact); durations → ``INTEGER`` in the column's unit;
    lists, structs and maps → ``TEXT`` holding JSON (as the ``jsonl`` sink encodes
    them); nulls → NULL.

    Guarantee: ``idempotent``. ``open`` (driver, run start) creates the file's
    directory. Per epoch, **each executor task** with rows opens the database file
    and runs one SQLite transaction (``BEGIN IMMEDIATE``) that creates the table if
    missing, inserts each of its rows or, when its key exists, updates the row's
    other columns (``INSERT ... ON CONFLICT (key) DO UPDATE``), and commits; the
    driver's ``commit_epoch`` does nothing. A task's rows with the same key are
    applied in order, so the last one wins; rows with the same key in different
    Spark partitions of one epoch are applied in no defined order (a keyed window's
    output never has them: it is partitioned by key group). Tasks writing at once
    wait for each other (one SQLite writer at a time, busy timeout 60 s). A replayed
    epoch writes the same rows again, which changes nothing. ``close`` does nothing.
    No data row passes through the driver; the database file must be reachable at
    the same path from the driver and every executor (local mode, or a shared file
    system with working locks).

    Parameters
    ----------
    path:
        The SQLite database file.
    table:
        The table's name.
    key:
        The column name(s) that identify a row, e.g. ``("origin", "window_start")``;
        key values must not be null.

    Returns
    -------
    Sink
        A :class:`SqliteSink`.

    Raises
    ------
    ConfigError
        When ``path`` or ``table`` is empty or ``key`` is not a non-empty sequence of
        distinct column names; on the executors when a key column is not among the
        rows' columns.
    """
    return SqliteSink(path=_check_path(path), table=_check_table(table), key=_check_key(key))


# --- helpers --------------------------------------------------------------------------


def _check_path(path: object) -> str:
    return path_text(path, accepted="a non-empty database file path (str or os.PathLike), not ':memory:'",
                     refused=(":memory:",))


def _check_table(table: object) -> str:
    if not isinstance(table, str) or not table.strip() or "\x00" in table:
        raise ConfigError("table", table, "a non-empty table name")
    return table


def _check_key(key: object) -> tuple[str, ...]:
    return column_names(key, parameter="key",
                        accepted="a column name or a non-empty sequence of distinct column names")

def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _declared_type(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _declared_type(t.value_type)
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_duration(t):
        return "INTEGER"
    if pa.types.is_floating(t):
        return "REAL"
    if is_binary(t):
        return "BLOB"
    if pa.types.is_null(t):
        return ""
    return "TEXT"


def _to_sqlite(arr: pa.Array, name: str, where: str) -> list[object]:
    """The column's values as Python objects ``sqlite3`` binds (see :func:`sqlite`)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _to_sqlite(arr.dictionary_decode(), name, where)
    if pa.types.is_unsigned_integer(t) and len(arr) and (pc.max(arr).as_py() or 0) > INT64_MAX:
        raise WireError(f"{where}: column {name!r} has values above 2**63-1, which SQLite cannot store")
    if pa.types.is_boolean(t):
        return [None if v is None else int(v) for v in arr.to_pylist()]
    if (
        pa.types.is_null(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    ):
        return _pylist(arr)
    if pa.types.is_string_view(t):
        return _pylist(arr.cast(pa.string()))
    if pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return _pylist(arr.cast(pa.binary()))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _pylist(arr)
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return _pylist(pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S"))
        utc = arr.cast(pa.timestamp(t.unit, "UTC"))
        return _pylist(pc.strftime(utc, format="%Y-%m-%dT%H:%M:%SZ"))
    if pa.types.is_duration(t):
        return _pylist(arr.cast(pa.int64()))
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_decimal(t):
        return _pylist(arr.cast(pa.string()))
    try:
        values = _to_json_array(arr).to_pylist()
    except WireError as exc:
        raise WireError(f"{where}: column {name!r} of type {t} has no SQLite encoding") from exc
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    return [None if v is None else dumps(v) for v in values]


def _pylist(arr: pa.Array) -> list[object]:
    """``arr.to_pylist()``, typed (pyarrow's is not)."""
    values: list[object] = arr.to_pylist()
    return values


def _rows(columns: list[list[object]]) -> Iterator[tuple[object, ...]]:
    return zip(*columns, strict=True)
