"""Bucketed join buffers (issue 12) against the whole-buffer reference kernel.

The reference is :func:`wire.state.join.join_epoch` with each side's whole buffer as
one table (checked against hand-derived cases and a nested-loop oracle in
``test_join.py``). Property: for any input, epoch split, watermarks, bounds (including
the unbounded join), lateness and compaction fan-in, the bucketed buffers give the same
pairs and late events, and every event the reference still buffers is buffered.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.state import join_segments as JS
from wire.state.join import IntervalJoinSpec, join_epoch
from wire.state.segments import MemoryChunkStore, Segments

NO_WM = -(2**63)
MAX_WM = 2**63 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _side(rows, col, seq0):
    return pa.table({
        "k": pa.array([r[0] for r in rows], pa.string()),
        col: pa.array([r[2] for r in rows], pa.int64()),
        "__et": pa.array([r[1] for r in rows], pa.int64()),
        "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64()),
    })


def _sorted(table):
    return sorted(tuple(str(v) for v in r.values()) for r in table.to_pylist())


def _ids(table):
    return sorted(table.column("__seq").to_pylist()) if table is not None else []


side_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-3000, 6000), st.integers(0, 9)),
                   max_size=30)
CASES = {
    "left": side_st, "right": side_st,
    "cuts": st.lists(st.integers(1, 30), max_size=6),
    "delays": st.lists(st.integers(-500, 3000), min_size=8, max_size=8),
    "bounds": st.sampled_from([(-1500, 2500), (0, 0), (-4000, -1000), (INT64_MIN, INT64_MAX), (500, 1200)]),
    "lateness": st.sampled_from([0, 700]),
}
"""Join inputs, epoch cuts, watermark delays, bounds (including the unbounded join) and lateness."""


@settings(max_examples=150, deadline=None)
@given(
    **CASES,
    fanout=st.sampled_from([2, 4]),
)
def test_bucketed_buffers_equal_the_whole_buffer_reference(
    left, right, cuts, delays, bounds, lateness, fanout
):
    spec = IntervalJoinSpec("k", bounds[0], bounds[1], ("a",), ("b",), allowed_lateness_ms=lateness)
    n = max(len(left), len(right))
    cutpoints = sorted({0, n, *(c for c in cuts if c < n)})
    segments = Segments(None, MemoryChunkStore(), pa.concat_tables, fanout=fanout)
    ls = rs = None
    wm, seen = NO_WM, NO_WM
    pairs = list(itertools.pairwise(cutpoints))
    for i, (a, b) in enumerate([*pairs, (n, n)]):
        lrows, rrows = left[a:b], right[a:b]
        lt, rt = _side(lrows, "a", 1000 + a), _side(rrows, "b", 5000 + a)
        seen = max([seen, *(r[1] for r in lrows + rrows)])
        new_wm = MAX_WM if i == len(pairs) else max(wm, seen - delays[i % len(delays)])
        ls, rs, ref_joined, ref_late = join_epoch(ls, rs, lt, rt, wm, new_wm, spec)
        joined, late = JS.join_segments(segments, lt, rt, wm, new_wm, spec)
        assert _sorted(joined) == _sorted(ref_joined), f"epoch {i}"
        assert late.to_pylist() == ref_late.to_pylist()
        assert set(_ids(ls)) <= set(_ids(JS.buffered(segments, JS.LEFT)))
        assert set(_ids(rs)) <= set(_ids(JS.buffered(segments, JS.RIGHT)))
        wm = new_wm
    assert segments.buckets() == []


def test_an_unbounded_join_appends_and_never_rewrites():
    """Hand-derived: 8 epochs, 3 new left events each, one key; right events only at the end."""
    spec = IntervalJoinSpec("k", INT64_MIN, INT64_MAX, ("a",), ("b",))
    store = MemoryChunkStore()
    segments = Segments(None, store, pa.concat_tables, fanout=4)
    calls = []
    for e in range(8):
        before = store.calls
        lt = _side([("x", 1000 * e + j, j) for j in range(3)], "a", 3 * e)
        JS.join_segments(segments, lt, _side([], "b", 0), 1000 * e - 1, 1000 * e, spec)
        calls.append(store.calls - before)
    # all events fall in one 1-hour bucket: one put per epoch, no read (no right events to
    # probe for); epochs 4 and 8 compact 4 chunks: 1 put + 4 get + 4 delete + 1 put
    assert calls == [1, 1, 1, 10, 1, 1, 1, 10]
    assert segments.rows() == 24 and segments.chunks(JS.LEFT) == 2
    right = _side([("x", 9000, 7)], "b", 100)
    joined, _ = JS.join_segments(segments, _side([], "a", 0), right, 8000, 9000, spec)
    assert joined.num_rows == 24  # the new right event meets every buffered left event


def test_migrated_whole_buffers_join_like_the_reference():
    spec = IntervalJoinSpec("k", -1500, 2500, ("a",), ("b",))
    left = _side([("x", 100, 1), ("x", 4000, 2), ("y", 2500, 3)], "a", 0)
    right = _side([("x", 1200, 4), ("y", 9000, 5)], "b", 10)
    ls, rs, _, _ = join_epoch(None, None, left, right, NO_WM, 0, spec)
    segments = Segments(None, MemoryChunkStore(), pa.concat_tables)
    JS.migrate(segments, ls, rs, spec)
    new_right = _side([("x", 3000, 6), ("y", 3000, 7)], "b", 20)
    _, _, ref, _ = join_epoch(ls, rs, _side([], "a", 0), new_right, 0, 100, spec)
    joined, _ = JS.join_segments(segments, _side([], "a", 0), new_right, 0, 100, spec)
    # r.t - l.t in [-1500, 2500]: x@4000 (-1000) and y@2500 (500) meet 3000; x@100 (2900) does not
    assert _sorted(joined) == _sorted(ref) and joined.num_rows == 2
