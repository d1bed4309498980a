"""What every lookup table is: a key column, a schema, and a way to read rows by key.

Two kinds (:attr:`LookupTable.snapshot`):

* a **database table** (:class:`LookupTable`, e.g. PostgreSQL) is asked for the rows of
  a batch of keys (:meth:`LookupTable.fetch`); a worker caches the answers
  (:mod:`wire.tables.lookup`);
* a **snapshot table** (:class:`SnapshotTable`, Delta, Parquet) is loaded whole by each
  worker (:meth:`SnapshotTable.load`) and loaded again when its version
  (:meth:`SnapshotTable.version`) changes; the version is checked once per epoch.

A table is a frozen, picklable value: the driver checks it and reads its schema when
the flow is compiled (:meth:`LookupTable.resolve_schema`); the executors read rows.
Reads that fail for a reason that may pass (:meth:`LookupTable.transient`: a refused
connection, a missing file) are retried with backoff for up to
``unavailable_timeout_ms`` (:func:`hold_and_retry`), then fail with
:class:`wire.errors.TableUnavailable` naming the table.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from wire.core.time import Duration, to_millis
from wire.errors import ConfigError, TableUnavailable

T = TypeVar("T")

DEFAULT_UNAVAILABLE_TIMEOUT = "60s"
"""How long a lookup holds and retries an unavailable table before the flow fails."""

FIRST_BACKOFF_S = 0.2
"""The first wait between two tries of a failed read (s); it doubles up to :data:`MAX_BACKOFF_S`."""
MAX_BACKOFF_S = 5.0


class LookupTable(ABC):
    """Base of the tables ``Stream.lookup_join`` reads (a database table; see the module docstring).

    Subclasses are frozen dataclasses with at least ``key`` (the table's key column),
    ``columns`` (the columns joined to each event; None: every column) and
    ``unavailable_timeout_ms``.
    """

    snapshot: ClassVar[bool] = False
    """True for a table loaded whole and re-read when its version changes."""

    key: str
    columns: tuple[str, ...] | None
    unavailable_timeout_ms: int

    @abstractmethod
    def resolve_schema(self) -> pa.Schema:
        """The key column, then the joined columns, with their Arrow types (on the driver).

        Raises
        ------
        ConfigError
            When the key or a requested column is not in the table, or a column's type
            is not supported.
        TableUnavailable
            When the table cannot be reached.
        """

    @abstractmethod
    def describe(self) -> str:
        """How errors and the dashboard name the table, e.g. ``"postgres table 'customers'"``."""

    def fetch(self, keys: Sequence[Any]) -> pa.Table:
        """The rows whose key is one of ``keys``: one batched read (executors).

        The result has :meth:`resolve_schema`'s columns; keys without a row are absent.
        Only database tables implement it.
        """
        raise NotImplementedError

    def transient(self, error: BaseException) -> bool:
        """True when ``error`` may pass (the table is unreachable), so the read is retried."""
        return isinstance(error, OSError)

    def close(self) -> None:  # noqa: B027 - most tables hold nothing open
        """Release what the executor process holds open for this table (connections)."""


class SnapshotTable(LookupTable):
    """A table loaded whole, whose version can be read cheaply (Delta version, files' mtime)."""

    snapshot: ClassVar[bool] = True

    @abstractmethod
    def version(self) -> Hashable:
        """The table's current version: a new value when its content may have changed."""

    @abstractmethod
    def load(self, version: Hashable) -> pa.Table:
        """The table's rows at ``version`` (:meth:`resolve_schema`'s columns)."""


def check_key_and_columns(key: object, columns: object) -> tuple[str, tuple[str, ...] | None]:
    """``key`` and ``columns`` as the table dataclasses keep them, checked.

    Raises
    ------
    ConfigError
        When ``key`` is not a non-empty string, or ``columns`` is not None or a
        non-empty list of distinct column names without the key.
    """
    if not isinstance(key, str) or not key:
        raise ConfigError("key", key, "the name of the table's key column (a non-empty string)")
    if columns is None:
        return key, None
    if isinstance(columns, str) or not isinstance(columns, list | tuple) or not columns or not all(
            isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns):
        raise ConfigError("columns", columns, "None (every column) or a list of distinct column names")
    if key in columns:
        raise ConfigError("columns", columns, f"columns other than the key {key!r} (it is always read)")
    return key, tuple(columns)


def timeout_ms(value: Duration) -> int:
    """``unavailable_timeout`` in ms (positive)."""
    return to_millis(value, parameter="unavailable_timeout", allow_zero=False)


def pick_columns(schema: pa.Schema, key: str, columns: tuple[str, ...] | None, where: str) -> pa.Schema:
    """The key field, then ``columns`` (None: every other field) of a table's ``schema``.

    Raises
    ------
    ConfigError
        When the key or a column is not in ``schema`` (``where`` names the table).
    """
    if key not in schema.names:
        raise ConfigError("key", key, f"a column of {where}: {schema.names}")
    wanted = [n for n in schema.names if n != key] if columns is None else list(columns)
    missing = [c for c in wanted if c not in schema.names]
    if missing:
        raise ConfigError("columns", list(columns or ()), f"columns of {where}: {schema.names}")
    return pa.schema([schema.field(key), *(schema.field(c) for c in wanted)])


def hold_and_retry(
    table: LookupTable,
    read: Callable[[], T],
    *,
    step: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``read()``, retried with backoff while it fails transiently, for up to the table's timeout.

    The epoch waits meanwhile (like an unavailable sink, the flow holds: no later epoch
    starts). Waits start at :data:`FIRST_BACKOFF_S` and double up to :data:`MAX_BACKOFF_S`.
    An error that is not transient (:meth:`LookupTable.transient`) is raised at once.

    Raises
    ------
    TableUnavailable
        When the table stayed unavailable for ``table.unavailable_timeout_ms``; the
        message names the step, the table, the time waited and the last error.
    """
    deadline = clock() + table.unavailable_timeout_ms / 1000
    wait = FIRST_BACKOFF_S
    tries = 0
    while True:
        tries += 1
        try:
            return read()
        except Exception as e:
            if not table.transient(e):
                raise
            table.close()  # a broken connection: open a new one on the next try
            left = deadline - clock()
            if left <= 0:
                raise TableUnavailable(
                    f"lookup join {step!r}: {table.describe()} unavailable for "
                    f"{table.unavailable_timeout_ms} ms ({tries} tries; unavailable_timeout="
                    f"{table.unavailable_timeout_ms} ms): {type(e).__name__}: {str(e).strip()}"
                ) from e
            sleep(min(wait, left))
            wait = min(wait * 2, MAX_BACKOFF_S)
