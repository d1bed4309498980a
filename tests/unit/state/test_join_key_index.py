"""The join buffers' key index (issue 12): probes read only chunks that may hold a probed key.

Oracle: a brute-force nested-loop join in Python over every accepted event of the whole
stream (an event is accepted when ``t + lateness >= wm_in`` of its epoch; the purge rule
never loses a pair, ``wire.state.join``), each pair emitted in the epoch where the later
of its two events arrives. Properties, for random keys (with nulls), epochs, bounds
(including the unbounded join), compaction fan-ins and hash functions (the real one and
one that collides on purpose): the indexed join emits exactly the oracle's pairs, and
the same table (rows and order) as the join without an index; every chunk has an index
entry equal to the hash of its keys and no entry outlives its chunk; missing entries
(old checkpoints, rescales) are rebuilt.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_join_segments import _side

from wire.state import join_segments as JS
from wire.state.join import IntervalJoinSpec
from wire.state.segments import KeyIndex, MemoryChunkStore, MemoryHashStore, Segments

NO_WM, MAX_WM = -(2**63), 2**63 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class CountingStore(MemoryChunkStore):
    """A chunk store that also counts its ``get`` calls."""

    gets = 0

    def get(self, bucket, chunk):
        self.gets += 1
        return super().get(bucket, chunk)


def colliding(keys):
    """A deliberately bad hash: three values for all keys (almost every probe meets every chunk)."""
    return np.unique(JS.key_hashes(keys) % np.uint64(3))


def _pairs(joined):
    return sorted((r["k"], r["a"], r["right_b"], r["left_event_time"], r["right_event_time"])
                  for r in joined.to_pylist())


def _check_index(segments, store, hashes):
    chunk_keys = set(store.chunks)
    assert set(hashes.entries) <= chunk_keys  # no entry outlives its chunk
    for (b, c), h in hashes.entries.items():
        assert np.array_equal(h, segments.keys.of(store.chunks[(b, c)]))


side_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", None]), st.integers(-3000, 6000),
              st.integers(0, 9)),
    max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    left=side_st, right=side_st,
    cuts=st.lists(st.integers(1, 30), max_size=15),
    delays=st.lists(st.integers(-500, 3000), min_size=8, max_size=8),
    bounds=st.sampled_from([(INT64_MIN, INT64_MAX), (INT64_MIN, INT64_MAX), (-1500, 2500), (0, 0),
                            (500, 1200)]),
    lateness=st.sampled_from([0, 700]),
    fanout=st.sampled_from([2, 3, 4]),
    hasher=st.sampled_from([JS.key_hashes, colliding]),
    forget=st.lists(st.booleans(), min_size=9, max_size=9),
)
@example(  # a buffered chunk of keys a, b, c probed by one key only
    left=[("a", 0, 1), ("b", 0, 2), ("c", 0, 3)], right=[("x", 0, 0)] * 3 + [("b", 1, 1)], cuts=[3],
    delays=[10**6] * 8, bounds=(INT64_MIN, INT64_MAX), lateness=0, fanout=4, hasher=JS.key_hashes,
    forget=[False] * 9,
)
def test_indexed_join_equals_the_brute_force_oracle_and_the_unindexed_join(
    left, right, cuts, delays, bounds, lateness, fanout, hasher, forget
):
    lo, hi = bounds
    spec = IntervalJoinSpec("k", lo, hi, ("a",), ("b",), allowed_lateness_ms=lateness)
    n = max(len(left), len(right))
    cutpoints = sorted({0, n, *(c for c in cuts if c < n)})
    store, hashes = MemoryChunkStore(), MemoryHashStore()
    indexed = Segments(None, store, pa.concat_tables, fanout=fanout, keys=KeyIndex("k", hasher, hashes))
    plain = Segments(None, MemoryChunkStore(), pa.concat_tables, fanout=fanout)
    accepted_l, accepted_r = [], []  # (key, a|b, t, epoch)
    wm, seen = NO_WM, NO_WM
    spans = [*itertools.pairwise(cutpoints), (n, n)]
    for i, (a, b) in enumerate(spans):
        lrows, rrows = left[a:b], right[a:b]
        lt, rt = _side(lrows, "a", 1000 + a), _side(rrows, "b", 5000 + a)
        seen = max([seen, *(r[1] for r in lrows + rrows)])
        new_wm = MAX_WM if i == len(spans) - 1 else max(wm, seen - delays[i % len(delays)])
        accepted_l += [(k, v, t, i) for k, t, v in lrows if t + lateness >= wm]
        accepted_r += [(k, v, t, i) for k, t, v in rrows if t + lateness >= wm]
        joined, late = JS.join_segments(indexed, lt, rt, wm, new_wm, spec)
        ref_joined, ref_late = JS.join_segments(plain, lt, rt, wm, new_wm, spec)
        oracle = sorted(
            (lk, la, rb, ltime, rtime)
            for lk, la, ltime, le in accepted_l for rk, rb, rtime, re in accepted_r
            if lk is not None and lk == rk and max(le, re) == i and ltime + lo <= rtime <= ltime + hi)
        assert _pairs(joined) == oracle, f"epoch {i}"
        assert joined.to_pylist() == ref_joined.to_pylist()  # same rows in the same order
        assert late.to_pylist() == ref_late.to_pylist()
        _check_index(indexed, store, hashes)
        if forget[i % len(forget)]:  # as after a rescale or with an old checkpoint: no entries
            hashes.entries.clear()
        wm = new_wm
    assert indexed.buckets() == [] and store.chunks == {} and hashes.entries == {}


def test_a_probe_of_new_keys_reads_no_chunk():
    """The benchmark's shape: every epoch new left keys, right every 2nd of them; no old chunk matches."""
    spec = IntervalJoinSpec("k", INT64_MIN, INT64_MAX, ("a",), ("b",))
    store, hashes = CountingStore(), MemoryHashStore()
    segments = Segments(None, store, pa.concat_tables, fanout=100, keys=KeyIndex("k", JS.key_hashes, hashes))
    total = 0
    for epoch in range(6):
        keys = [f"u{epoch}_{j}" for j in range(50)]
        lt = _side([(k, epoch * 100, j) for j, k in enumerate(keys)], "a", epoch * 1000)
        rt = _side([(k, epoch * 100 + 1, j) for j, k in enumerate(keys[::2])], "b", 10**6 + epoch * 1000)
        store.gets = 0
        joined, _ = JS.join_segments(segments, lt, rt, NO_WM, NO_WM, spec)
        total += joined.num_rows
        assert joined.num_rows == 25
        assert store.gets == 0, f"epoch {epoch} read {store.gets} chunks"
    assert segments.chunks(0) == 6  # the left buffer: one chunk per epoch, none read
    # an old key on the right reads exactly the one left chunk that holds it, and joins it
    store.gets = 0
    joined, _ = JS.join_segments(segments, _side([], "a", 0), _side([("u3_7", 999, 1)], "b", 9), NO_WM,
                                 NO_WM, spec)
    assert store.gets == 1 and joined.column("a").to_pylist() == [7]


def test_missing_entries_are_rebuilt_from_the_chunks():
    spec = IntervalJoinSpec("k", INT64_MIN, INT64_MAX, ("a",), ("b",))
    store, hashes = CountingStore(), MemoryHashStore()
    segments = Segments(None, store, pa.concat_tables, fanout=100, keys=KeyIndex("k", JS.key_hashes, hashes))
    for epoch in range(3):
        JS.join_segments(segments, _side([(f"x{epoch}", 1, epoch)], "a", epoch), _side([], "b", 0), NO_WM,
                         NO_WM, spec)
    saved = dict(hashes.entries)
    hashes.entries.clear()
    joined, _ = JS.join_segments(segments, _side([], "a", 0), _side([("x1", 5, 0)], "b", 50), NO_WM,
                                 NO_WM, spec)
    assert joined.column("a").to_pylist() == [1]
    assert set(hashes.entries) == {*saved, (JS.RIGHT, 0)}  # rebuilt, and the appended right chunk's
    assert all(np.array_equal(hashes.entries[k], v) for k, v in saved.items())


def test_key_hashes_agree_across_chunking_and_integer_widths():
    assert np.array_equal(JS.key_hashes(pa.chunked_array([["a", None], ["b", "a"]])),
                          JS.key_hashes(pa.array(["b", "a"])))
    assert np.array_equal(JS.key_hashes(pa.array([3, 1, 3], pa.int32())), JS.key_hashes(pa.array([1, 3])))
    assert JS.indexable(pa.string()) and JS.indexable(pa.int64()) and JS.indexable(pa.timestamp("ms"))
    assert not JS.indexable(pa.float64()) and not JS.indexable(pa.list_(pa.int64()))
