"""The self-correcting sink's desired collection and where it is kept (SPEC §8).

:class:`DesiredCollection` is the flow's current result collection, one row per
key, folded epoch by epoch; :class:`DesiredStore` keeps it as one Parquet file per
epoch, and :class:`ShardedDesiredStore` splits it into partitions of the keys
(:func:`~wire.sinks.self_correcting_sink.rows.shard_of`), one store each. Used by
:mod:`wire.sinks.self_correcting_sink.writer` and the sink's executor tasks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from wire.errors import WireError
from wire.sinks.self_correcting_sink.rows import Key, Row, key_of, norm, shard_of

__all__ = ["DesiredCollection", "DesiredStore", "ShardedDesiredStore"]


class DesiredCollection:
    """The flow's current result collection: one row (dict) per key.

    Parameters
    ----------
    key:
        Key column names.
    retract_column:
        A boolean column: a row with True deletes its key (and is not kept).
    covers:
        ``(start, end)`` column names: a row also retracts the rows of the same key
        without ``start`` / ``end`` whose ``[start, end)`` lies inside its own (a
        merged session). Both columns must be in ``key`` or be ``start`` in ``key``.
    """

    def __init__(self, key: Sequence[str], *, retract_column: str | None = None,
                 covers: tuple[str, str] | None = None, schema: pa.Schema | None = None) -> None:
        self.key = tuple(key)
        self.retract_column = retract_column
        self.covers = covers
        self.schema = schema
        """Arrow schema of the rows (set by the first :meth:`apply`), without retraction column."""
        self.rows: dict[Key, Row] = {}
        self._groups: dict[Key, set[Key]] = {}

    def _group(self, row: Mapping[str, Any]) -> Key:
        assert self.covers is not None
        return tuple(norm(row[k]) for k in self.key if k not in self.covers)

    def _put(self, k: Key, row: Row) -> None:
        self.rows[k] = row
        if self.covers is not None:
            self._groups.setdefault(self._group(row), set()).add(k)

    def _drop(self, k: Key) -> None:
        row = self.rows.pop(k, None)
        if row is not None and self.covers is not None:
            members = self._groups.get(self._group(row))
            if members is not None:
                members.discard(k)

    def apply(self, table: pa.Table) -> set[Key]:
        """Fold one epoch's rows in (in row order); return the keys touched.

        Touched keys: every key replaced, added or retracted (the correction is
        computed over them).

        Raises
        ------
        WireError
            When a key or covers column is missing from the rows.
        """
        needed = [*self.key, *(self.covers or ())]
        missing = [c for c in needed if c not in table.column_names]
        if missing:
            raise WireError(
                f"self-correcting sink: column(s) {missing} not among the rows' {table.column_names}")
        data = table
        if self.retract_column is not None and self.retract_column in table.column_names:
            data = table.drop_columns([self.retract_column])
        if self.schema is None and table.num_rows:
            self.schema = data.schema
        flags = (table.column(self.retract_column).to_pylist()
                 if self.retract_column is not None and self.retract_column in table.column_names
                 else [False] * table.num_rows)
        touched: set[Key] = set()
        for row, retract in zip(data.to_pylist(), flags, strict=True):
            k = key_of(row, self.key)
            touched.add(k)
            if retract:
                self._drop(k)
                continue
            if self.covers is not None:
                start, end = self.covers
                lo, hi = row[start], row[end]
                for other in list(self._groups.get(self._group(row), ())):
                    old = self.rows[other]
                    if other != k and lo <= old[start] and old[end] <= hi:
                        self._drop(other)
                        touched.add(other)
            self._put(k, row)
        return touched

    def columns(self) -> list[str]:
        """The data columns (from the schema)."""
        return list(self.schema.names) if self.schema is not None else list(self.key)

    def to_arrow(self) -> pa.Table:
        """All rows as one Arrow table in :attr:`schema` (in no particular order)."""
        if self.schema is None:
            return pa.table({})
        return pa.Table.from_pylist(list(self.rows.values()), schema=self.schema)

    def load(self, table: pa.Table) -> None:
        """Replace the contents with ``table``'s rows (as written by :meth:`to_arrow`)."""
        self.rows.clear()
        self._groups.clear()
        if table.num_columns:
            self.schema = table.schema
        for row in table.to_pylist():
            self._put(key_of(row, self.key), row)


class DesiredStore:
    """The desired collection of every epoch, kept as Parquet files under ``directory``.

    ``desired-<epoch>.parquet`` holds the collection after ``epoch``; written
    atomically (rename) after the epoch's rows were folded in. To process epoch
    ``e`` the sink loads the newest file of an epoch ``< e`` (a replay of ``e`` after
    a crash finds the one before and recomputes ``e`` from the same rows). An
    epoch that changed nothing saves no file. Once ``e`` is saved only it and the
    newest file before it are kept. Cost: one Parquet write of the collection per
    epoch that changed it, and its disk size twice.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _epochs(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        out = []
        for p in self.directory.glob("desired-*.parquet"):
            stem = p.stem[len("desired-"):]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def newest_before(self, epoch: int) -> int | None:
        """The newest saved epoch ``< epoch``, or None."""
        older = [e for e in self._epochs() if e < epoch]
        return older[-1] if older else None

    def load_before(self, epoch: int) -> tuple[int, pa.Table] | None:
        """The newest saved ``(epoch', table)`` with ``epoch' < epoch``, or None."""
        e = self.newest_before(epoch)
        if e is None:
            return None
        return e, pq.read_table(self.directory / f"desired-{e}.parquet")

    def save(self, epoch: int, table: pa.Table) -> None:
        """Write the collection after ``epoch``; keep only it and the newest file before it.

        Epochs that changed nothing need no file: the newest one before them holds
        their collection.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"desired-{epoch}.parquet"
        tmp = final.with_suffix(".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        before = self.newest_before(epoch)
        for e in self._epochs():
            if before is not None and e < before:
                (self.directory / f"desired-{e}.parquet").unlink(missing_ok=True)


class ShardedDesiredStore:
    """The desired collection split into shards (:func:`shard_of`), one :class:`DesiredStore` each.

    Layout: ``<directory>/shards.json`` (``{"shards": n}``, fixed for the
    directory's life: set by the first run) and ``<directory>/shard-<i>/desired-<epoch>.parquet``.
    Each shard is loaded, folded and saved by its own task (an executor), so no
    process holds the whole collection. A directory written by an unsharded
    :class:`DesiredStore` (files directly under ``directory``) is read as the
    shards' starting point.
    """

    def __init__(self, directory: str | os.PathLike[str], shards: int) -> None:
        self.directory = Path(directory)
        self.shards = shards

    @classmethod
    def open(cls, directory: str | os.PathLike[str], shards: int) -> ShardedDesiredStore:
        """The store at ``directory``: its recorded number of shards, or ``shards`` for a new one."""
        path = Path(directory) / "shards.json"
        if path.is_file():
            return cls(directory, int(json.loads(path.read_text())["shards"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"shards": shards}))
        os.replace(tmp, path)
        return cls(directory, shards)

    def shard(self, n: int) -> DesiredStore:
        """Shard ``n``'s own store."""
        return DesiredStore(self.directory / f"shard-{n}")

    def load_before(self, n: int, epoch: int, columns: Sequence[str]) -> pa.Table | None:
        """Shard ``n``'s newest collection saved before ``epoch`` (rows sharded on ``columns``)."""
        got = self.shard(n).load_before(epoch)
        if got is not None:
            return got[1]
        legacy = DesiredStore(self.directory).load_before(epoch)
        if legacy is None:
            return None
        table = legacy[1]
        keep = [shard_of(r, columns, self.shards) == n for r in table.select(list(columns)).to_pylist()]
        return table.filter(pa.array(keep, pa.bool_())) if table.num_columns else table

