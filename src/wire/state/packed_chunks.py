"""A key group's small chunks kept together in one entry of its chunk store (issue 25).

On Spark every :class:`~wire.state.segments.ChunkStore` call is one Python↔JVM round trip
(a MapState get, put or remove of the ``transformWithStateInPandas`` processor). When a key
group holds few keys, its chunks are tiny (a bucket of a 1 h tumbling window over three
airports holds three rows) and the calls, not the data, are the cost: the flights job made
about 75 calls per key group per epoch, 180 ms of Python CPU per epoch (py-spy,
``docs/architecture.md``).

:class:`PackedChunks` keeps every chunk whose Arrow IPC form is at most ``chunk_bytes``
in one *pack*, while the pack stays under ``pack_bytes``: a table of ``(bucket, chunk,
rows)`` stored as the single chunk :data:`PACK` of the underlying store. A key group's
epoch then costs one get (the pack) and at most one put (the pack, if anything in it
changed), whatever the number of buckets. Larger chunks go to their own entries as
before, so a key group with a large state pays per chunk, as the bucketed layout intends
(an epoch reads only what it touches). Which chunks exist, their buckets and their order
are unchanged (:class:`~wire.state.segments.Segments` keeps the index), so the window,
join and process kernels see the same store; chunks an earlier Wire wrote, each in its own
entry, are read from there.

Lifetime: one instance serves one key group's epoch at a time. The processor calls
:meth:`flush` at the end of the key group's epoch, before its state is committed with the
epoch; the next key group starts from its own pack.
"""

from __future__ import annotations

import pyarrow as pa

from wire.core.envelope import decode_table, encode_table
from wire.state.segments import ChunkStore

PACK = (-(2**63), 0)
"""The ``(bucket, chunk)`` of the pack in the underlying store (no bucket id is int64's minimum:
buckets are window ends, event-time buckets or small constants)."""

PACK_SCHEMA = pa.schema([("bucket", pa.int64()), ("chunk", pa.int64()), ("rows", pa.binary())])
"""The pack: one row per packed chunk, its Arrow IPC stream bytes in ``rows``."""

CHUNK_BYTES = 256 * 1024
PACK_BYTES = 4 * 1024 * 1024


def unpack(pack: pa.Table) -> dict[tuple[int, int], pa.Table]:
    """The chunks held in a pack table (:data:`PACK_SCHEMA`); for readers of a checkpoint."""
    cols = [pack.column(n).to_pylist() for n in PACK_SCHEMA.names]
    return {(int(b), int(c)): decode_table(r) for b, c, r in zip(*cols, strict=True)}


class PackedChunks:
    """:class:`~wire.state.segments.ChunkStore` keeping small chunks in one entry of ``store``.

    Parameters
    ----------
    store : ChunkStore
        Where the pack and the chunks too large for it live (a key group's MapState on Spark).
    chunk_bytes, pack_bytes : int
        A chunk joins the pack when its IPC form has at most ``chunk_bytes`` and the pack
        stays within ``pack_bytes`` (bytes).
    """

    def __init__(self, store: ChunkStore, *, chunk_bytes: int = CHUNK_BYTES,
                 pack_bytes: int = PACK_BYTES) -> None:
        self.store, self.chunk_bytes, self.pack_bytes = store, chunk_bytes, pack_bytes
        self._pack: dict[tuple[int, int], bytes] | None = None
        self._size = 0
        self._dirty = False

    @property
    def calls(self) -> int:
        """Calls of the underlying store so far (each a Python↔JVM round trip on Spark)."""
        return int(getattr(self.store, "calls", 0))

    def _loaded(self) -> dict[tuple[int, int], bytes]:
        if self._pack is None:
            try:
                table = self.store.get(*PACK)
            except KeyError:
                table = None
            self._pack = {} if table is None else {
                (int(b), int(c)): bytes(r) for b, c, r in zip(
                    *(table.column(n).to_pylist() for n in PACK_SCHEMA.names), strict=True)}
            self._size = sum(len(v) for v in self._pack.values())
        return self._pack

    def get(self, bucket: int, chunk: int) -> pa.Table:
        """The chunk's rows (KeyError if absent)."""
        blob = self._loaded().get((bucket, chunk))
        return decode_table(blob) if blob is not None else self.store.get(bucket, chunk)

    def put(self, bucket: int, chunk: int, table: pa.Table) -> None:
        """Write (or overwrite) a chunk: into the pack when it fits, else its own entry.

        Contract: a chunk is written once; its id is written again only after
        :meth:`delete` (:class:`~wire.state.segments.Segments` numbers a bucket's new chunks
        after its live ones), so an id never lives in the pack and in its own entry at once.
        """
        pack = self._loaded()
        blob = encode_table(table)
        old = pack.pop((bucket, chunk), None)
        if old is not None:
            self._size -= len(old)
            self._dirty = True
        if len(blob) <= self.chunk_bytes and self._size + len(blob) <= self.pack_bytes:
            pack[(bucket, chunk)] = blob
            self._size += len(blob)
            self._dirty = True
        else:
            self.store.put(bucket, chunk, table)

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk (absent: nothing happens)."""
        pack = self._loaded()
        old = pack.pop((bucket, chunk), None)
        if old is None:
            self.store.delete(bucket, chunk)
        else:
            self._size -= len(old)
            self._dirty = True

    def flush(self) -> None:
        """Write the pack if it changed (removed when empty); the next call starts afresh."""
        if self._pack is not None and self._dirty:
            if self._pack:
                items = sorted(self._pack.items())
                self.store.put(*PACK, pa.Table.from_arrays([
                    pa.array([k[0] for k, _ in items], pa.int64()),
                    pa.array([k[1] for k, _ in items], pa.int64()),
                    pa.array([v for _, v in items], pa.binary())], schema=PACK_SCHEMA))
            else:
                self.store.delete(*PACK)
        self._pack, self._size, self._dirty = None, 0, False
