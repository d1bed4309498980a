"""Bucketed window state (issue 12) against the whole-state reference kernel.

The reference is :func:`wire.state.windows.process_epoch` over one Arrow table of the
whole state (itself checked against DuckDB oracles in ``test_windows.py`` and
``test_pipeline_metamorphic.py``). Property: for any input, any split into epochs, any
watermark sequence, allowed lateness, emission mode and compaction fan-in, the bucketed
kernel emits the same rows, routes the same events late, keeps the same windows, and
gives the same output watermark (Beam hold rule).
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.state import aggregations as agg
from wire.state import window_segments as WS
from wire.state.assigners import Session, Sliding, Tumbling
from wire.state.segments import MemoryChunkStore, Segments
from wire.state.windows import (
    FIRED,
    WindowSpec,
    compact,
    output_watermark,
    preaggregate,
    process_epoch,
    split_late,
)

NO_WM = -(2**63)
MAX_WM = 2**63 - 1
ORDER = ["k", "window_start", "window_end", "emit"]


def _spec(kind: str, lateness: int, emit: str) -> WindowSpec:
    assigner = Tumbling(10) if kind == "tumbling" else Sliding(10, 5)
    aggs = (("n", agg.count()), ("s", agg.sum("x")), ("hi", agg.max("x")), ("first", agg.first("x")))
    return WindowSpec(assigner, lateness, "k", aggs, emit=emit)


def _events(rows: list[tuple[str, int, int]], seq0: int) -> pa.Table:
    return pa.table({
        "k": pa.array([r[0] for r in rows], pa.string()),
        "x": pa.array([r[2] for r in rows], pa.int64()),
        "__et": pa.array([r[1] for r in rows], pa.int64()),
        "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64()),
    })


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: tuple(str(r[c]) for c in ORDER))


def _merge(spec: WindowSpec):
    return lambda chunks: compact(chunks, spec)


def _state_rows(table: pa.Table | None) -> list[dict]:
    if table is None or not table.num_rows:
        return []
    return _rows(table.drop_columns([FIRED]).rename_columns(
        ["k", "window_start", "window_end", *table.column_names[3:-1]]).append_column(
        "emit", pa.array([""] * table.num_rows)))


events_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 80), st.integers(-5, 5)),
    min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(
    events=events_st,
    cuts=st.lists(st.integers(1, 60), max_size=8),
    delays=st.lists(st.integers(-10, 30), min_size=10, max_size=10),
    kind=st.sampled_from(["tumbling", "sliding"]),
    lateness=st.sampled_from([0, 5, 20]),
    emit=st.sampled_from(["final", "update"]),
    fanout=st.sampled_from([2, 3, 4]),
    slice_rows=st.sampled_from([1, 3, 10**9]),
    tasks=st.integers(1, 3),
)
def test_bucketed_epochs_equal_the_whole_state_reference(
    events, cuts, delays, kind, lateness, emit, fanout, slice_rows, tasks
):
    """Also the chunked processing of issue 12: a firing bucket merged in key slices of
    ``slice_rows`` stored rows (1 and 3: many slices) gives the results of one slice.

    An epoch's partials come from ``tasks`` Spark tasks, each pre-aggregating its share of
    the events, concatenated as the operator receives them: several rows per window, not
    sorted as a whole."""
    spec = _spec(kind, lateness, emit)
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    batches = [events[a:b] for a, b in itertools.pairwise(bounds)]
    state = None
    segments = Segments(None, MemoryChunkStore(), _merge(spec), fanout=fanout)
    wm = NO_WM
    out_ref = out_seg = NO_WM
    seen_max = NO_WM
    seq = 0
    for i, batch in enumerate([*batches, []]):  # a last empty epoch carries the end of input
        table = _events(batch, seq)
        seq += len(batch)
        seen_max = max([seen_max, *(r[1] for r in batch)])
        new_wm = MAX_WM if i == len(batches) else max(wm, seen_max - delays[i % len(delays)])
        state, ref_results, ref_late = process_epoch(state, table, wm, new_wm, spec)

        accepted, late, _ = split_late(table, wm, spec)
        n = accepted.num_rows
        shares = [accepted.take(pa.array(range(t, n, tasks), pa.int64())) for t in range(tasks)]
        partials = pa.concat_tables([preaggregate(share, spec) for share in shares])
        results = WS.advance_segments(segments, partials, wm, new_wm, spec, slice_rows=slice_rows)
        assert _rows(results) == _rows(ref_results), f"epoch {i}"
        assert late.to_pylist() == ref_late.to_pylist()
        # the same windows are kept (compaction may leave several rows per window)
        chunks = [c for b in segments.buckets() for c in segments.read(b)]
        kept = compact(chunks, spec) if chunks else None
        assert _state_rows(kept) == _state_rows(state)
        out_ref = output_watermark(out_ref, new_wm, state, spec)
        out_seg = WS.output_watermark(out_seg, new_wm, segments, spec)
        assert out_seg == out_ref
        wm = new_wm
    assert segments.buckets() == []  # the end of input purges everything


def test_an_epoch_on_an_open_window_writes_one_chunk_and_reads_nothing():
    """Hand-derived: 12 epochs of 5 new keys into one open window [0, 3600000)."""
    spec = WindowSpec(Tumbling(3_600_000), 0, "k", (("n", agg.count()),))
    store = MemoryChunkStore()
    segments = Segments(None, store, _merge(spec), fanout=4)
    calls = []
    for epoch in range(12):
        keys = [f"u{epoch}-{i}" for i in range(5)]
        table = _events([(k, 1000 * epoch, 1) for k in keys], epoch * 5)
        accepted, _, _ = split_late(table, 1000 * epoch - 1, spec)
        before = store.calls
        WS.advance_segments(segments, preaggregate(accepted, spec), 1000 * epoch - 1, 1000 * epoch, spec)
        calls.append(store.calls - before)
    # level-0 appends are one put; every 4th append merges 4 chunks: 1 put + 4 get + 4 delete + 1 put;
    # the 16th would merge four level-1 chunks. Epochs 4, 8 and 12 compact.
    assert calls == [1, 1, 1, 10, 1, 1, 1, 10, 1, 1, 1, 10]
    assert [segments.chunks(b) for b in segments.buckets()] == [3]
    assert segments.rows() == 60
    # the watermark passes the end: one final row per key, the bucket is dropped
    results = WS.advance_segments(segments, preaggregate(_events([], 60), spec), 12_000, 3_600_000, spec)
    assert results.num_rows == 60 and set(results.column("emit").to_pylist()) == {"final"}
    assert segments.buckets() == []


def test_sessions_and_callbacks_are_not_bucketed():
    assert not WS.bucketed(WindowSpec(Session(10), 0, "k", (("n", agg.count()),)))
    cb = WindowSpec(Tumbling(10), 0, "k", (("n", agg.count()),), after_update=lambda a, e: [True])
    assert not WS.bucketed(cb)
    with pytest.raises(ValueError, match="tumbling or sliding"):
        WS.advance_segments(Segments(None, MemoryChunkStore(), _merge(cb)), pa.table({}), 0, 0, cb)


def test_migrate_splits_a_whole_state_by_window_end():
    spec = _spec("sliding", 0, "final")
    table = _events([("a", 1, 1), ("b", 7, 2), ("a", 12, 3)], 0)
    state, _, _ = process_epoch(None, table, NO_WM, 0, spec)
    segments = Segments(None, MemoryChunkStore(), _merge(spec))
    WS.migrate(segments, state, spec)
    assert segments.buckets() == sorted(set(state.column("__we").to_pylist()))
    assert segments.rows() == state.num_rows
