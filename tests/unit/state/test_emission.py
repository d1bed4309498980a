"""Emission modes on tumbling windows: update mode (early rows), callbacks, watermark hold."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from wire.core.envelope import MAX_WATERMARK
from wire.state import aggregations as agg
from wire.state.windows import (
    Tumbling,
    WindowSpec,
    advance,
    output_watermark_hold,
    preaggregate,
    process_epoch,
    result_schema,
    split_late,
    state_schema,
)

NO_WM = -(2**63)
SCHEMA = pa.schema([("k", pa.string()), ("x", pa.int64())])
AGGS = (("n", agg.count()), ("s", agg.sum("x")), ("c", agg.collect("x")))


class Feed:
    """Builds epochs' event tables with a global arrival sequence."""

    def __init__(self):
        self.seq = 0

    def __call__(self, rows):
        seq = list(range(self.seq, self.seq + len(rows)))
        self.seq += len(rows)
        return pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.string()),
                "x": pa.array([r[2] for r in rows], pa.int64()),
                "__et": pa.array([r[1] for r in rows], pa.int64()),
                "__seq": pa.array(seq, pa.int64()),
            }
        )


def rows_of(table, *cols):
    return [tuple(r[c] for c in cols) for r in table.to_pylist()]


RES = ("k", "window_start", "window_end", "n", "s", "c", "emit")


def test_update_mode_emits_early_final_update_and_hold():
    spec = WindowSpec(Tumbling(10), 5, "k", AGGS, emit="update")
    feed = Feed()

    def run(state, rows, wm_in, wm_out):
        st, res, late = process_epoch(state, feed(rows), wm_in, wm_out, spec)
        assert st.schema == state_schema(spec, SCHEMA) and res.schema == result_schema(spec, SCHEMA)
        return st, res, late

    # open windows that changed emit one early row each (not one per event)
    st, res, _ = run(None, [("a", 1, 1), ("a", 3, 2), ("a", 12, 4)], NO_WM, 5)
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 2, 3, [1, 2], "early"),
        ("a", 10, 20, 1, 4, [4], "early"),
    ]
    assert output_watermark_hold(st, spec) == 0
    st, res, _ = run(st, [], 5, 8)  # no change, nothing ends: nothing
    assert res.num_rows == 0
    # the window that changed and ends in this epoch emits final (not early)
    st, res, _ = run(st, [("a", 4, 8)], 8, 12)
    assert rows_of(res, *RES) == [("a", 0, 10, 3, 11, [1, 2, 8], "final")]
    assert output_watermark_hold(st, spec) == 10  # [0,10) fired; [10,20) still held
    # late within lateness -> update; the open window -> early
    st, res, _ = run(st, [("a", 9, 16), ("a", 15, 32)], 12, 13)
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 4, 27, [1, 2, 8, 16], "update"),
        ("a", 10, 20, 2, 36, [4, 32], "early"),
    ]
    # [10,20) fires without new events; [0,10) is purged (10 + 5 <= 20)
    st, res, _ = run(st, [], 13, 20)
    assert rows_of(res, *RES) == [("a", 10, 20, 2, 36, [4, 32], "final")]
    assert rows_of(st, "__ws", "__fired") == [(10, True)]
    assert output_watermark_hold(st, spec) is None
    st, res, late = run(st, [("a", 2, 64)], 20, MAX_WATERMARK)
    assert res.num_rows == 0 and st.num_rows == 0 and late.num_rows == 1
    assert output_watermark_hold(st, spec) is None


def test_final_mode_never_emits_early():
    spec = WindowSpec(Tumbling(10), 0, "k", AGGS)
    _, res, _ = process_epoch(None, Feed()([("a", 1, 1)]), NO_WM, 5, spec)
    assert res.num_rows == 0


def test_callbacks_emit_pre_and_post_event_aggregates():
    calls = []

    def before(aggregate, event):
        calls.append(("before", aggregate.to_pylist(), event.column("x").to_pylist()))
        return pc.greater(event.column("x"), 100)  # a big value: emit what we had before it

    def after(aggregate, event):
        calls.append(("after", aggregate.column("n").to_pylist(), event.column("x").to_pylist()))
        return (aggregate.column("n").to_numpy() % 2 == 0).tolist()  # every second event

    spec = WindowSpec(Tumbling(10), 5, "k", AGGS, before_update=before, after_update=after)
    assert spec.needs_events
    feed = Feed()
    # epoch 1: a@1 x=1, a@2 x=200, b@3 x=5, a@4 x=3
    st, res, _ = process_epoch(
        None, feed([("a", 1, 1), ("a", 2, 200), ("b", 3, 5), ("a", 4, 3)]), NO_WM, 5, spec
    )
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 1, 1, [1], "early"),  # before a@2 (x=200)
        ("a", 0, 10, 2, 201, [1, 200], "early"),  # after a@2: n=2
    ]
    # each callback called once, with one row per event, in (key, window, time, arrival) order
    assert [c[0] for c in calls] == ["before", "after"]
    assert calls[0][1][0] == {"k": "a", "window_start": 0, "window_end": 10, "n": 0, "s": None, "c": []}
    assert calls[0][2] == [1, 200, 3, 5]
    assert calls[1][1] == [1, 2, 3, 1] and calls[1][2] == [1, 200, 3, 5]
    # epoch 2: a@9 -> n=4 (even: early), then the window ends: final; a@11 opens [10,20)
    calls.clear()
    st, res, _ = process_epoch(st, feed([("a", 11, 2), ("a", 9, 1)]), 5, 10, spec)
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 4, 205, [1, 200, 3, 1], "early"),
        ("a", 0, 10, 4, 205, [1, 200, 3, 1], "final"),
        ("b", 0, 10, 1, 5, [5], "final"),
    ]
    assert calls[1][1] == [4, 1]  # running aggregates continue from the state
    # epoch 3: a@8 is late (window fired): update, not shown to callbacks; a@13 -> n=2 in [10,20)
    calls.clear()
    st, res, _ = process_epoch(st, feed([("a", 8, 7), ("a", 13, 4)]), 10, 12, spec)
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 5, 212, [1, 200, 3, 7, 1], "update"),
        ("a", 10, 20, 2, 6, [2, 4], "early"),
    ]
    assert [c[2] for c in calls] == [[4], [4]]


def test_callback_result_length_is_checked():
    spec = WindowSpec(Tumbling(10), 0, "k", AGGS, after_update=lambda a, e: [True])
    with pytest.raises(ValueError, match="after_update returned"):
        process_epoch(None, Feed()([("a", 1, 1), ("a", 2, 1)]), NO_WM, 5, spec)


def test_advance_with_events_equals_advance_with_partials():
    spec = WindowSpec(Tumbling(10), 5, "k", AGGS, emit="update")
    cb = WindowSpec(
        Tumbling(10), 5, "k", AGGS, emit="update", after_update=lambda a, e: np.zeros(len(e), bool)
    )
    ev = Feed()([("a", 1, 1), ("b", 12, 2), ("a", 3, 3)])
    accepted, _, _ = split_late(ev, NO_WM, spec)
    s1, r1 = advance(None, preaggregate(accepted, spec), NO_WM, 10, spec)
    s2, r2 = advance(None, None, NO_WM, 10, cb, events=accepted)
    assert s1.equals(s2) and r1.equals(r2)
    with pytest.raises(ValueError, match="needs the epoch's accepted events"):
        advance(None, preaggregate(accepted, spec), NO_WM, 10, cb)
    with pytest.raises(ValueError, match="not both"):
        advance(None, preaggregate(accepted, spec), NO_WM, 10, spec, events=accepted)
