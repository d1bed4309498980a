"""PackedChunks: the same store contents as a plain store, in one entry per key group and epoch."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.state.packed_chunks import PACK, PackedChunks, unpack
from wire.state.segments import MemoryChunkStore


def table(n: int, tag: int) -> pa.Table:
    return pa.table({"k": [f"key-{tag}-{i}" for i in range(n)], "v": list(range(n))})


OPS = st.lists(st.lists(st.tuples(st.sampled_from(["put", "delete", "get"]), st.integers(0, 3),
                                  st.integers(0, 3), st.integers(0, 300)), max_size=12), max_size=6)


@settings(max_examples=150, deadline=None)
@given(epochs=OPS, chunk_bytes=st.sampled_from([0, 1500, 4000, 10**9]),
       pack_bytes=st.sampled_from([0, 3000, 10**9]))
def test_packed_store_holds_what_a_plain_store_holds(epochs, chunk_bytes, pack_bytes):
    """Epochs of random puts (of new ids, as Segments writes), deletes and gets, a flush after
    each: every get, and the chunks readable at the end, equal a plain store's; small and
    large chunks both."""
    plain, backing = MemoryChunkStore(), MemoryChunkStore()
    packed = PackedChunks(backing, chunk_bytes=chunk_bytes, pack_bytes=pack_bytes)
    for epoch, ops in enumerate(epochs):
        for op, bucket, chunk, n in ops:
            if op == "put" and (bucket, chunk) not in plain.chunks:  # Segments' use: a new id
                t = table(n, epoch)
                plain.put(bucket, chunk, t)
                packed.put(bucket, chunk, t)
            elif op == "delete":
                plain.delete(bucket, chunk)
                packed.delete(bucket, chunk)
            elif (bucket, chunk) in plain.chunks:
                assert packed.get(bucket, chunk).equals(plain.chunks[(bucket, chunk)])
        packed.flush()
    stored = dict(backing.chunks)
    pack = stored.pop(PACK, None)
    if pack is not None:
        held = unpack(pack)
        assert not set(held) & set(stored)  # a chunk lives in one place only
        stored.update(held)
    assert stored.keys() == plain.chunks.keys()
    assert all(stored[k].equals(plain.chunks[k]) for k in stored)


def test_an_epoch_of_small_chunks_costs_one_get_and_one_put():
    """Hand-derived: 20 buckets appended, then 20 read and deleted, then 20 more appended."""
    backing = MemoryChunkStore()
    packed = PackedChunks(backing)
    for b in range(20):
        packed.put(b, 0, table(3, b))
    packed.flush()
    assert backing.calls == 2  # the get of the missing pack, the put of the new one
    before = backing.calls
    for b in range(20):
        assert packed.get(b, 0).num_rows == 3
        packed.delete(b, 0)
    for b in range(20, 40):
        packed.put(b, 0, table(3, b))
    packed.flush()
    assert backing.calls - before == 2
    assert sorted(unpack(backing.chunks[PACK])) == [(b, 0) for b in range(20, 40)]


def test_chunks_an_earlier_wire_stored_alone_are_read_and_deleted_there():
    backing = MemoryChunkStore({(5, 0): table(2, 0), (5, 1): table(4, 1)})
    packed = PackedChunks(backing)
    assert packed.get(5, 1).num_rows == 4
    packed.delete(5, 0)
    packed.flush()
    assert set(backing.chunks) == {(5, 1)}  # nothing packed: no pack entry written
