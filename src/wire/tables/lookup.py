"""A worker's side of a lookup join: the cache, the batched reads, and the join kernel.

Pure Arrow and Python (no Spark): :mod:`wire.compiler.lookup_join_stage` calls it from
a ``mapInArrow`` task, the unit tests call it directly.

* :class:`KeyCache`: key -> row (or "no row"), least recently used out first when full
  (``cache_size`` entries), each entry dropped ``cache_ttl`` after it was read from the
  table (``cachetools.TTLCache``, clock injectable).
* :class:`DatabaseLookup`: one per worker process and step; per epoch task, the
  distinct keys not in the cache are read in one batched :meth:`LookupTable.fetch`.
* :class:`SnapshotLookup`: one per worker process and step; per epoch task, the table's
  version is read once and the table loaded again when it changed.
* :func:`enrich`: the events with their rows joined (``how="inner"`` / ``"left"``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

import cachetools
import pyarrow as pa
import pyarrow.compute as pc

from wire.tables.base import LookupTable, SnapshotTable, hold_and_retry

How = Literal["inner", "left"]
HOWS: tuple[How, ...] = ("inner", "left")

_ABSENT = object()
"""Cached for a key the table has no row for (a miss is cached like a row)."""


class KeyCache:
    """Rows by key, at most ``size`` of them, each for at most ``ttl_ms`` after it was read.

    ``ttl_ms=0`` or ``size=0`` keep nothing (every epoch reads every key it needs).
    ``clock``: seconds, monotonic (:func:`time.monotonic` by default; tests inject one).
    """

    def __init__(self, ttl_ms: int, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_ms, self.size = ttl_ms, size
        self._cache: cachetools.TTLCache[Hashable, Any] | None = (
            cachetools.TTLCache(maxsize=size, ttl=ttl_ms / 1000, timer=clock) if ttl_ms > 0 and size > 0
            else None)

    def get(self, key: Hashable) -> tuple[bool, tuple[Any, ...] | None]:
        """``(True, row)`` for a cached key (``row`` None: the table has none), else ``(False, None)``."""
        if self._cache is None:
            return False, None
        value = self._cache.get(key, None)
        if value is None:
            return False, None
        return True, None if value is _ABSENT else value

    def put(self, key: Hashable, row: tuple[Any, ...] | None) -> None:
        """Remember ``key``'s row (None: the table has no row for it); may evict the least recently used."""
        if self._cache is not None:
            self._cache[key] = _ABSENT if row is None else row

    def __len__(self) -> int:
        """Live entries (expired ones are dropped first)."""
        if self._cache is None:
            return 0
        self._cache.expire()
        return len(self._cache)


@dataclass
class LookupStats:
    """Counters of one epoch task (the step's metrics)."""

    queries: int = 0
    """Batched reads of a database table (at most one per task, so per key group)."""
    keys_read: int = 0
    """Distinct keys asked of the table."""
    cache_hits: int = 0
    """Distinct keys answered by the cache."""
    loads: int = 0
    """Snapshot loads (a new version)."""

    def as_metrics(self) -> dict[str, int]:
        """A database table's counters under their metric names (a snapshot join reports none)."""
        return {"lookup_queries": self.queries, "lookup_keys": self.keys_read,
                "lookup_cache_hits": self.cache_hits}


@dataclass
class DatabaseLookup:
    """A worker's reader of a database table, with its :class:`KeyCache`."""

    table: LookupTable
    schema: pa.Schema
    """The table's key, then its joined columns (:meth:`LookupTable.resolve_schema`)."""
    step: str
    cache: KeyCache
    sleep: Callable[[float], None] = time.sleep
    stats: LookupStats = field(default_factory=LookupStats)

    def begin_epoch(self) -> None:
        """Start an epoch task's counters."""
        self.stats = LookupStats()

    def rows(self, keys: pa.Array) -> pa.Table:
        """The table's rows for the distinct, non-null ``keys`` (a cache miss: one batched read)."""
        wanted = pc.unique(keys.drop_null()).to_pylist()
        found: dict[Hashable, tuple[Any, ...]] = {}
        missing = []
        for k in wanted:
            hit, row = self.cache.get(k)
            if hit:
                self.stats.cache_hits += 1
                if row is not None:
                    found[k] = row
            else:
                missing.append(k)
        if missing:
            fetched = hold_and_retry(self.table, lambda: self.table.fetch(missing), step=self.step,
                                     sleep=self.sleep)
            self.stats.queries += 1
            self.stats.keys_read += len(missing)
            names = self.schema.names
            got = dict.fromkeys(missing)
            for r in fetched.select(names).to_pylist():
                got[r[names[0]]] = tuple(r[n] for n in names)
            for k, row in got.items():
                self.cache.put(k, row)
                if row is not None:
                    found[k] = row
        columns: list[tuple[Any, ...]] = (list(zip(*found.values(), strict=True)) if found
                                          else [() for _ in self.schema])
        return pa.table([pa.array(list(c), f.type) for c, f in zip(columns, self.schema, strict=True)],
                        schema=self.schema)


@dataclass
class SnapshotLookup:
    """A worker's copy of a snapshot table, loaded again when its version changes."""

    table: SnapshotTable
    schema: pa.Schema
    step: str
    sleep: Callable[[float], None] = time.sleep
    version: Hashable = None
    data: pa.Table | None = None
    stats: LookupStats = field(default_factory=LookupStats)

    def begin_epoch(self) -> None:
        """Read the table's version (once per epoch task); load the table when it changed."""
        self.stats = LookupStats()
        version = hold_and_retry(self.table, self.table.version, step=self.step, sleep=self.sleep)
        if self.data is None or version != self.version:
            loaded = hold_and_retry(self.table, lambda: self.table.load(version), step=self.step,
                                    sleep=self.sleep)
            self.data = last_row_per_key(loaded.select(self.schema.names).cast(self.schema))
            self.version = version
            self.stats.loads += 1

    def rows(self, keys: pa.Array) -> pa.Table:
        """The loaded snapshot (every row; :func:`enrich` picks those of ``keys``)."""
        assert self.data is not None, "begin_epoch() first"
        return self.data


def last_row_per_key(table: pa.Table) -> pa.Table:
    """One row per non-null key (the first column): the last one in the table's order."""
    keys = table.column(0)
    table = table.filter(pc.is_valid(keys))
    if not table.num_rows:
        return table
    n = table.num_rows
    idx = pa.array(range(n), pa.int64())
    last = pa.table({"k": table.column(0), "i": idx}).group_by("k", use_threads=False).aggregate(
        [("i", "max")]).column("i_max")
    if len(last) == n:
        return table
    return table.take(pc.take(last, pc.sort_indices(last)))


def enrich(events: pa.Table, on: str, rows: pa.Table, *, how: str) -> tuple[pa.Table, int]:
    """``events`` with the columns of their ``rows`` appended, and how many events had no row.

    ``rows``: the key (first column, one row per key) then the joined columns; each event
    is matched on its ``on`` column = the key. An event whose ``on`` is null or has no
    row is dropped (``how="inner"``) or kept with nulls in the joined columns
    (``how="left"``). Events keep their order.
    """
    keys = rows.column(0)
    event_keys = events.column(on)
    if keys.type != event_keys.type:
        keys = keys.cast(event_keys.type)
    idx = pc.index_in(event_keys, value_set=keys)
    unmatched = idx.null_count
    if how == "inner" and unmatched:
        mask = pc.is_valid(idx)
        events, idx = events.filter(mask), idx.filter(mask)
    for name in rows.column_names[1:]:
        events = events.append_column(rows.schema.field(name), rows.column(name).take(idx))
    return events, unmatched
