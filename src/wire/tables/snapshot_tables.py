"""Snapshot tables: ``wire.tables.delta(path, key=...)`` and ``wire.tables.parquet(path, key=...)``.

Each worker process loads the whole table (its key and joined columns) and keeps it;
once per epoch task it reads the table's version and loads the table again when the
version changed: the Delta table's version, or the names, sizes and modification times
of the Parquet files. A key with several rows joins its last one (in file order).
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from wire.core.time import Duration
from wire.errors import ConfigError, needs_extra, require_extra
from wire.tables.base import (
    DEFAULT_UNAVAILABLE_TIMEOUT,
    SnapshotTable,
    check_key_and_columns,
    pick_columns,
    timeout_ms,
)


@dataclass(frozen=True)
class DeltaTable(SnapshotTable):
    """A Delta table read whole at its newest version; built by :func:`delta`."""

    path: str
    key: str
    columns: tuple[str, ...] | None = None
    unavailable_timeout_ms: int = 60_000

    def describe(self) -> str:
        """``"delta table '<path>'"``."""
        return f"delta table {self.path!r}"

    def _open(self, version: int | None = None) -> Any:
        with needs_extra("delta", "wire.tables.delta"):
            import deltalake
        return deltalake.DeltaTable(self.path, version=version)

    def transient(self, error: BaseException) -> bool:
        """I/O errors and a table that is not (yet) there (``TableNotFoundError``)."""
        return isinstance(error, OSError) or type(error).__name__ == "TableNotFoundError"

    def resolve_schema(self) -> pa.Schema:
        """The key, then the joined columns, from the newest version's schema."""
        schema = pa.schema(self._open().schema().to_arrow())
        return pick_columns(schema, self.key, self.columns, self.describe())

    def version(self) -> Hashable:
        """The newest version number."""
        return int(self._open().version())

    def load(self, version: Hashable) -> pa.Table:
        """The rows of ``version``: the key and the joined columns."""
        assert isinstance(version, int)
        names = self.resolve_schema().names
        return pa.table(self._open(version).to_pyarrow_table(columns=names))


@dataclass(frozen=True)
class ParquetTable(SnapshotTable):
    """A Parquet file, or a directory of them, read whole; built by :func:`parquet`."""

    path: str
    key: str
    columns: tuple[str, ...] | None = None
    unavailable_timeout_ms: int = 60_000

    def describe(self) -> str:
        """``"parquet table '<path>'"``."""
        return f"parquet table {self.path!r}"

    def _files(self) -> list[Path]:
        root = Path(self.path)
        if root.is_dir():
            files = sorted(p for p in root.rglob("*.parquet") if not p.name.startswith((".", "_")))
            if not files:
                raise FileNotFoundError(f"no .parquet file under {self.path}")
            return files
        if not root.exists():
            raise FileNotFoundError(self.path)
        return [root]

    def resolve_schema(self) -> pa.Schema:
        """The key, then the joined columns, from the first file's schema."""
        schema = pq.read_schema(self._files()[0])
        return pick_columns(pa.schema(list(schema)), self.key, self.columns, self.describe())

    def version(self) -> Hashable:
        """Each file's path, size and modification time (ns)."""
        out = []
        for p in self._files():
            st = os.stat(p)
            out.append((str(p), st.st_size, st.st_mtime_ns))
        return tuple(out)

    def load(self, version: Hashable) -> pa.Table:
        """The key and the joined columns of every file (in file name order)."""
        names = self.resolve_schema().names
        tables = [pq.read_table(p, columns=names) for p in self._files()]
        return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


def _snapshot_args(path: object, key: object, columns: object, unavailable_timeout: Duration
                   ) -> tuple[str, str, tuple[str, ...] | None, int]:
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise ConfigError("path", path, "a path (str or os.PathLike) of the table")
    k, cols = check_key_and_columns(key, columns)
    return str(os.fspath(path)), k, cols, timeout_ms(unavailable_timeout)


def delta(
    path: str | os.PathLike[str],
    *,
    key: str,
    columns: list[str] | None = None,
    unavailable_timeout: Duration = DEFAULT_UNAVAILABLE_TIMEOUT,
) -> DeltaTable:
    """A Delta table to enrich a stream from with ``Stream.lookup_join`` (a snapshot table).

    Each worker loads the newest version whole (the key and ``columns``) and, once per
    epoch, loads it again if a newer version was committed.

    Parameters
    ----------
    path:
        The Delta table's location (a local path or a URI deltalake reads).
    key:
        The column the events' ``on`` column is matched with; a key with several rows
        joins the last one in the table's file order.
    columns:
        The columns joined to each event (default: every column but the key).
    unavailable_timeout:
        How long an epoch holds and retries while the table cannot be read, before the
        flow fails with :class:`wire.errors.TableUnavailable`.

    Raises
    ------
    ConfigError
        On a bad path, key, columns or timeout (when the flow is compiled: a key or
        column the table does not have).
    MissingExtraError
        Without the pip extra ``wire[delta]``.
    """
    require_extra("delta", "wire.tables.delta")
    return DeltaTable(*_snapshot_args(path, key, columns, unavailable_timeout))


def parquet(
    path: str | os.PathLike[str],
    *,
    key: str,
    columns: list[str] | None = None,
    unavailable_timeout: Duration = DEFAULT_UNAVAILABLE_TIMEOUT,
) -> ParquetTable:
    """A Parquet file or directory to enrich a stream from with ``Stream.lookup_join``.

    Each worker loads the files whole (the key and ``columns``) and, once per epoch,
    loads them again when a file was added, removed or rewritten (its size or
    modification time changed). Replace a file atomically (write it elsewhere, then
    rename it over the old one) so that no worker reads half a file.

    Parameters
    ----------
    path:
        A ``.parquet`` file, or a directory whose ``*.parquet`` files (recursively, in
        name order; names starting with ``.`` or ``_`` skipped) form the table.
    key:
        The column the events' ``on`` column is matched with; a key with several rows
        joins the last one in file order.
    columns:
        The columns joined to each event (default: every column but the key).
    unavailable_timeout:
        How long an epoch holds and retries while the files cannot be read.

    Raises
    ------
    ConfigError
        On a bad path, key, columns or timeout (when the flow is compiled: a key or
        column the files do not have).

    Examples
    --------
    >>> import wire
    >>> wire.tables.parquet("customers.parquet", key="id", columns=["id", "name"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    wire.errors.ConfigError: invalid columns=['id', 'name']; accepted: columns other than the key 'id' ...
    """
    return ParquetTable(*_snapshot_args(path, key, columns, unavailable_timeout))
