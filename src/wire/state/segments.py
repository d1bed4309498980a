"""Keyed state in segments: an epoch reads and writes the buckets it touches (issue 12).

A key group's state rows are split into **buckets**, each named by an int64 that the
operator chooses: the window end for tumbling and sliding windows
(:mod:`wire.state.window_segments`), ``0`` for state kept whole (sessions, windows
with callbacks). A bucket is a list of **chunks**, Arrow tables stored one per entry
of a key-value store: on Spark a ``MapState`` keyed by ``(bucket, chunk)``, in tests
a dict (:class:`MemoryChunkStore`). The index of chunks (bucket, chunk, rows, level)
is a small table that the operator keeps next to its watermarks.

Cost model
    * Appending rows to a bucket writes one new chunk: O(rows appended), no read.
    * Reading a bucket reads its chunks; dropping it deletes them. Buckets an epoch
      does not touch are neither read nor written.
    * **Size-tiered compaction** (the LSM rule, fan-in :data:`FANOUT`): a new chunk
      has level 0; whenever the tail of a bucket holds ``FANOUT`` chunks of one level,
      they are merged (the operator's ``merge``: for windows, rows of one window become
      one row) into one chunk of the next level. A row is rewritten at most
      ``log_FANOUT(epochs)`` times, and a bucket holds at most ``(FANOUT - 1)`` chunks
      per level, so reading a bucket costs a bounded number of store calls.
    * Store calls per epoch: one ``put`` per appended chunk, ``FANOUT`` ``get`` + one
      ``put`` + ``FANOUT`` ``delete`` per compaction, one ``get`` per chunk of a bucket
      read, one ``delete`` per chunk of a bucket dropped. :attr:`MemoryChunkStore.calls`
      and the Spark store count them (metric ``state_calls``).

Key index (optional, :class:`KeyIndex`; the joins use it)
    Per chunk, the **sorted distinct 64-bit hashes of its keys** (a uint64 array, 8 bytes
    per distinct key of the chunk), kept in a second store under the chunk's
    ``(bucket, chunk)``. :meth:`Segments.read_matching` reads a bucket's hash arrays
    (small: 8 bytes per key against the whole rows) and then only the chunks whose hashes
    meet the probe's (``searchsorted``, O(probe keys x log chunk keys) per chunk).
    A hash collision is harmless: it only reads a chunk that holds none of the probe's
    keys (the caller still matches keys exactly). Entries are written with their chunk
    (appends, compaction: the merged chunk's entry is rebuilt from its rows) and deleted
    with it; a missing entry (a checkpoint written before the index, or seeded by a
    rescale, which carries only the chunks) is **rebuilt from the chunk on first use**
    and written back. Store calls: one more ``put`` per chunk written, one more
    ``delete`` per chunk deleted, and a probe makes one index ``get`` per chunk of the
    bucket plus one chunk ``get`` per chunk that may match.

The store is the only side effect; everything else here is pure and unit-tested
without Spark (``tests/unit/state/test_segments.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa

FANOUT = 4
"""Chunks of one level merged into one chunk of the next level (size-tiered compaction)."""

BASE_LEVEL = 64
"""Level of a bucket rewritten whole (:meth:`Segments.replace`): above any level that
appends reach, so later small chunks are merged among themselves, not into it."""

INDEX_SCHEMA = pa.schema(
    [
        pa.field("bucket", pa.int64()),
        pa.field("chunk", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("level", pa.int64()),
    ]
)
"""The chunk index as kept in the operator's state: one row per chunk, in bucket order,
chunks of a bucket oldest first."""


class ChunkStore(Protocol):
    """Where chunks live: a map ``(bucket, chunk) -> Arrow table``."""

    def get(self, bucket: int, chunk: int) -> pa.Table:
        """The chunk's rows (KeyError if absent)."""
        ...

    def put(self, bucket: int, chunk: int, table: pa.Table) -> None:
        """Write (or overwrite) a chunk."""
        ...

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk (absent: nothing happens)."""
        ...


@dataclass
class MemoryChunkStore:
    """A :class:`ChunkStore` in a dict, for tests and pure reference runs."""

    chunks: dict[tuple[int, int], pa.Table] = field(default_factory=dict)
    calls: int = 0
    """Store calls so far (each one a Python↔JVM round trip on Spark)."""

    def get(self, bucket: int, chunk: int) -> pa.Table:
        """The chunk's rows."""
        self.calls += 1
        return self.chunks[(bucket, chunk)]

    def put(self, bucket: int, chunk: int, table: pa.Table) -> None:
        """Write a chunk."""
        self.calls += 1
        self.chunks[(bucket, chunk)] = table

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk."""
        self.calls += 1
        self.chunks.pop((bucket, chunk), None)


class HashStore(Protocol):
    """Where the key index lives: a map ``(bucket, chunk) -> sorted uint64 array``."""

    def get(self, bucket: int, chunk: int) -> np.ndarray | None:
        """The chunk's key hashes (None if absent)."""
        ...

    def put(self, bucket: int, chunk: int, hashes: np.ndarray) -> None:
        """Write (or overwrite) a chunk's key hashes."""
        ...

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk's entry (absent: nothing happens)."""
        ...


@dataclass
class MemoryHashStore:
    """A :class:`HashStore` in a dict, for tests and pure reference runs."""

    entries: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    calls: int = 0

    def get(self, bucket: int, chunk: int) -> np.ndarray | None:
        """The chunk's key hashes."""
        self.calls += 1
        return self.entries.get((bucket, chunk))

    def put(self, bucket: int, chunk: int, hashes: np.ndarray) -> None:
        """Write a chunk's key hashes."""
        self.calls += 1
        self.entries[(bucket, chunk)] = hashes

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk's entry."""
        self.calls += 1
        self.entries.pop((bucket, chunk), None)


Hasher = Callable[[pa.Array | pa.ChunkedArray], np.ndarray]
"""``hasher(keys) -> sorted distinct uint64 hashes of the non-null keys``."""


@dataclass(frozen=True)
class KeyIndex:
    """The key index of :class:`Segments` (see the module docstring).

    ``column``: the key column of the chunks; ``hasher``: the hash of a key array, the
    same for chunks and probes; ``store``: where the entries are.
    """

    column: str
    hasher: Hasher
    store: HashStore

    def of(self, table: pa.Table) -> np.ndarray:
        """The entry of a chunk: sorted distinct hashes of its keys."""
        return self.hasher(table.column(self.column))


def meets(hashes: np.ndarray, probe: np.ndarray) -> bool:
    """Whether two sorted uint64 arrays share a value (O(len(probe) x log len(hashes)))."""
    if not len(hashes) or not len(probe):
        return False
    pos = np.searchsorted(hashes, probe)
    return bool((hashes[np.minimum(pos, len(hashes) - 1)] == probe).any())


@dataclass
class _Chunk:
    id: int
    rows: int
    level: int


Merge = Callable[[list[pa.Table]], pa.Table]
"""Combine several chunks of one bucket into one (same schema; may shrink the rows)."""


class Segments:
    """One key group's buckets of chunks, over a :class:`ChunkStore`.

    Parameters
    ----------
    index : pyarrow.Table or None
        The chunk index in :data:`INDEX_SCHEMA` as returned by :meth:`index` after the
        previous epoch (None: empty state).
    store : ChunkStore
        Where the chunks are.
    merge : callable
        ``merge(chunks) -> chunk``: what compaction does with the chunks of one bucket.
    fanout : int
        Compaction fan-in (default :data:`FANOUT`), >= 2.
    keys : KeyIndex or None
        Keep a key index of every chunk (:meth:`read_matching`); None: no index.
    """

    def __init__(
        self, index: pa.Table | None, store: ChunkStore, merge: Merge, *, fanout: int = FANOUT,
        keys: KeyIndex | None = None,
    ) -> None:
        if fanout < 2:
            raise ValueError(f"fanout must be >= 2, got {fanout}")
        self.store, self.merge, self.fanout, self.keys = store, merge, fanout, keys
        self._buckets: dict[int, list[_Chunk]] = {}
        if index is not None:
            for b, c, r, lv in zip(*(index.column(n).to_pylist() for n in INDEX_SCHEMA.names), strict=True):
                self._buckets.setdefault(int(b), []).append(_Chunk(int(c), int(r), int(lv)))

    def buckets(self) -> list[int]:
        """Bucket ids with at least one chunk, ascending."""
        return sorted(self._buckets)

    def rows(self, bucket: int | None = None) -> int:
        """Rows stored in ``bucket`` (all buckets if None).

        Rows of one window in two chunks count twice until compaction merges them.
        """
        chunks = self._buckets.get(bucket, []) if bucket is not None else [
            c for cs in self._buckets.values() for c in cs]
        return sum(c.rows for c in chunks)

    def chunks(self, bucket: int) -> int:
        """Number of chunks of ``bucket``."""
        return len(self._buckets.get(bucket, []))

    def read(self, bucket: int) -> Iterator[pa.Table]:
        """The chunks of ``bucket``, oldest first, one at a time (one store call each)."""
        for c in list(self._buckets.get(bucket, [])):
            yield self.store.get(bucket, c.id)

    def read_matching(self, bucket: int, probe: np.ndarray) -> Iterator[pa.Table]:
        """The chunks of ``bucket`` that may hold a key hashed in ``probe``, oldest first.

        ``probe``: sorted uint64 hashes (:attr:`KeyIndex.hasher` of the probe keys). Without
        a key index, every chunk. A chunk whose index entry is missing is read, its entry
        rebuilt and written back (then it is yielded only if it may match).
        """
        if self.keys is None:
            yield from self.read(bucket)
            return
        for c in list(self._buckets.get(bucket, [])):
            hashes = self.keys.store.get(bucket, c.id)
            table = None
            if hashes is None:
                table = self.store.get(bucket, c.id)
                hashes = self.keys.of(table)
                self.keys.store.put(bucket, c.id, hashes)
            if meets(hashes, probe):
                yield table if table is not None else self.store.get(bucket, c.id)

    def append(self, bucket: int, table: pa.Table) -> None:
        """Add ``table`` to ``bucket`` as a new chunk, then compact the bucket's tail."""
        if not table.num_rows:
            return
        chunks = self._buckets.setdefault(bucket, [])
        self._put(bucket, table, level=0)
        while len(chunks) >= self.fanout and len({c.level for c in chunks[-self.fanout:]}) == 1:
            tail = chunks[-self.fanout:]
            merged = self.merge([self.store.get(bucket, c.id) for c in tail])
            for c in tail:
                self._delete(bucket, c.id)
            del chunks[-self.fanout:]
            self._put(bucket, merged, level=tail[0].level + 1)

    def replace(self, bucket: int, table: pa.Table | list[pa.Table] | None) -> None:
        """Make ``table`` (or each table of a list) the bucket's chunks; nothing: drop the bucket."""
        self.drop(bucket)
        tables = table if isinstance(table, list) else [table]
        for t in tables:
            if t is not None and t.num_rows:
                self._put(bucket, t, level=BASE_LEVEL)

    def drop(self, bucket: int) -> None:
        """Delete every chunk of ``bucket``."""
        for c in self._buckets.pop(bucket, []):
            self._delete(bucket, c.id)

    def index(self) -> pa.Table:
        """The chunk index to keep for the next epoch (:data:`INDEX_SCHEMA`)."""
        rows = [(b, c.id, c.rows, c.level) for b in self.buckets() for c in self._buckets[b]]
        return pa.Table.from_arrays(
            [pa.array([r[i] for r in rows], pa.int64()) for i in range(4)], schema=INDEX_SCHEMA)

    def _put(self, bucket: int, table: pa.Table, *, level: int) -> None:
        chunks = self._buckets.setdefault(bucket, [])
        chunk = max((c.id for c in chunks), default=-1) + 1
        self.store.put(bucket, chunk, table)
        if self.keys is not None:
            self.keys.store.put(bucket, chunk, self.keys.of(table))
        chunks.append(_Chunk(chunk, table.num_rows, level))

    def _delete(self, bucket: int, chunk: int) -> None:
        self.store.delete(bucket, chunk)
        if self.keys is not None:
            self.keys.store.delete(bucket, chunk)
