"""The join operator's epoch kernel (``state.join_epoch.on_epoch``), the one the engine runs.

Reference: :func:`wire.state.join.join_epoch` over each side's whole buffer (checked
against hand-derived cases and a nested-loop oracle in ``test_join.py``). Properties, for
any input, split into epochs and into Spark tasks, watermarks, bounds and lateness:

* the kernel emits the reference's pairs and late events;
* the Beam watermark-hold rule (SPEC §2): no joined row is behind the output watermark
  the operator forwarded before it (a downstream operator never sees the join's own
  rows as late), and the output watermark is ``max(old, new_in - allowed_lateness)``;
* the end of input empties the buffers.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_join_segments import CASES, _side, _sorted

from wire.state import join_epoch as JE
from wire.state.join import IntervalJoinSpec, join_epoch
from wire.state.segments import MemoryChunkStore, MemoryHashStore

NO_WM = -(2**63)
MAX_WM = 2**63 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LEFT = pa.schema([("k", pa.string()), ("a", pa.int64())])
RIGHT = pa.schema([("k", pa.string()), ("b", pa.int64())])


def _tasks(table: pa.Table, tasks: int) -> list[pa.Table]:
    """The table as ``tasks`` Spark tasks would ship it: round-robin shares, one blob each."""
    n = table.num_rows
    return [table.take(pa.array(range(t, n, tasks), pa.int64())) for t in range(tasks)]


@settings(max_examples=150, deadline=None)
@given(
    **CASES,
    tasks=st.integers(1, 3),
    indexed=st.booleans(),
)
def test_on_epoch_equals_the_reference_and_holds_its_output_watermark(
    left, right, cuts, delays, bounds, lateness, tasks, indexed
):
    spec = IntervalJoinSpec("k", bounds[0], bounds[1], ("a",), ("b",), allowed_lateness_ms=lateness)
    n = max(len(left), len(right))
    cutpoints = sorted({0, n, *(c for c in cuts if c < n)})
    store, hashes, index = MemoryChunkStore(), MemoryHashStore() if indexed else None, None
    ls = rs = None
    wm, seen, wm_out = NO_WM, NO_WM, NO_WM
    pairs = list(itertools.pairwise(cutpoints))
    for i, (a, b) in enumerate([*pairs, (n, n)]):
        lrows, rrows = left[a:b], right[a:b]
        lt, rt = _side(lrows, "a", 1000 + a), _side(rrows, "b", 5000 + a)
        seen = max([seen, *(r[1] for r in lrows + rrows)])
        new_wm = MAX_WM if i == len(pairs) else max(wm, seen - delays[i % len(delays)])
        ls, rs, ref_joined, ref_late = join_epoch(ls, rs, lt, rt, wm, new_wm, spec)
        out = JE.on_epoch(store, index, JE.JoinInputs(_tasks(lt, tasks), _tasks(rt, tasks)),
                          wm_in=wm, new_in=new_wm, wm_out=wm_out, spec=spec,
                          left_payload=LEFT, right_payload=RIGHT, hashes=hashes)
        assert _sorted(out.joined) == _sorted(ref_joined), f"epoch {i}"
        assert _sorted(out.late) == _sorted(ref_late)
        # hold: nothing emitted now is behind what was forwarded before
        assert all(t >= wm_out for t in out.joined.column("event_time").to_pylist())
        assert out.wm_out == max(wm_out, new_wm - lateness if new_wm < MAX_WM else MAX_WM)
        assert out.stats["joined"] == out.joined.num_rows and out.stats["late"] == out.late.num_rows
        index, wm_out, wm = out.index, out.wm_out, new_wm
    assert out.stats["gauge:buffered"] == 0 and not store.chunks  # the end of input purges all


def test_hand_derived_transcript():
    """Bounds [-5 s, +5 s], allowed lateness 700 ms, one key.

    epoch 0: left a@1000; watermark -inf -> 2000. No partner yet; held output
             watermark max(-inf, 2000 - 700) = 1300.
    epoch 1: right a@1500 arrives at watermark 2000: 1500 + 700 >= 2000, accepted; it
             meets the buffered left a@1000 (|1500 - 1000| <= 5000): one row, event
             time max(1000, 1500) = 1500 >= 1300 (not late downstream). right a@1200:
             1200 + 700 < 2000, late. Watermark -> 4000: output 3300.
    epoch 2: end of input: output watermark the maximum, buffers empty.
    """
    spec = IntervalJoinSpec("k", -5000, 5000, ("a",), ("b",), allowed_lateness_ms=700)
    store, hashes = MemoryChunkStore(), MemoryHashStore()
    kw = {"spec": spec, "left_payload": LEFT, "right_payload": RIGHT, "hashes": hashes}
    e0 = JE.on_epoch(store, None, JE.JoinInputs([_side([("a", 1000, 1)], "a", 0)]),
                     wm_in=NO_WM, new_in=2000, wm_out=NO_WM, **kw)
    assert e0.joined.num_rows == 0 and e0.late.num_rows == 0 and e0.wm_out == 1300
    assert e0.stats["gauge:buffered"] == 1
    e1 = JE.on_epoch(store, e0.index, JE.JoinInputs(right=[_side([("a", 1500, 7), ("a", 1200, 8)], "b", 10)]),
                     wm_in=2000, new_in=4000, wm_out=e0.wm_out, **kw)
    assert e1.joined.select(["k", "a", "right_b", "event_time"]).to_pylist() == [
        {"k": "a", "a": 1, "right_b": 7, "event_time": 1500}]
    assert [(r["side"], r["event_time"]) for r in e1.late.to_pylist()] == [("right", 1200)]
    assert e1.wm_out == 3300
    e2 = JE.on_epoch(store, e1.index, JE.JoinInputs(), wm_in=4000, new_in=MAX_WM, wm_out=e1.wm_out, **kw)
    assert e2.wm_out == MAX_WM and e2.stats["gauge:buffered"] == 0


def test_watermarks_never_go_back():
    spec = IntervalJoinSpec("k", 0, 0, ("a",), ("b",))
    with pytest.raises(ValueError, match="never decrease"):
        JE.on_epoch(MemoryChunkStore(), None, JE.JoinInputs(), wm_in=10, new_in=5, wm_out=0, spec=spec,
                    left_payload=LEFT, right_payload=RIGHT)
