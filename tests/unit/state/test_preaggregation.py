"""The hashing pre-aggregation (``wire.state.preaggregation``) against the sorting one of
``wire.state.windows.preaggregate`` per key group: any rows, nulls, watermarks, window kinds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.state.test_windows import NO_WM, events

from wire.state import aggregations as agg
from wire.state.assigners import Session, Sliding, Tumbling
from wire.state.preaggregation import (
    hash_columns,
    hash_preaggregable,
    pane_preaggregable,
    preaggregate_by,
    preaggregate_panes_by,
    split_late_panes,
)
from wire.state.windows import WINDOW_END, WINDOW_START, WindowSpec, preaggregate, split_late

HASHED = (("n", agg.count()), ("nx", agg.count("x")), ("m", agg.mean("x")), ("s", agg.sum("v")),
          ("lo", agg.min("v")), ("hi", agg.max("x")))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 200),
    sliding=st.booleans(),
    groups=st.integers(1, 4),
    nulls=st.booleans(),
    pick=st.lists(st.integers(0, len(HASHED) - 1), min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 2**31),
)
def test_preaggregate_by_equals_a_sorting_preaggregate_per_group(n, sliding, groups, nulls, pick, seed):
    """The hashing pre-aggregation of all key groups at once, over the accepted rows narrowed to
    the columns it reads, equals the sorting one of each key group's whole rows (pyarrow sort +
    running groups), for any rows, nulls, watermark and window kind: the same partial rows, in
    (key, __ws, __we) order, for the same key groups in order."""
    rng = np.random.default_rng(seed)
    aggs = tuple(HASHED[i] for i in pick)
    assigner = Sliding(20, 5) if sliding else Tumbling(10)
    spec = WindowSpec(assigner, 0, "k", aggs)
    x = rng.normal(size=n)
    table = events([(str(rng.choice(["a", "b", "c"])), int(rng.integers(-30, 60)),
                     None if nulls and rng.random() < 0.3 else float(x[i]),
                     None if nulls and rng.random() < 0.3 else int(rng.integers(-5, 5)))
                    for i in range(n)])
    watermark = int(rng.integers(-40, 40)) if rng.random() < 0.5 else NO_WM
    accepted, late, _ = split_late(table, watermark, spec)
    kg = pa.array(rng.integers(0, groups, accepted.num_rows), pa.int32())
    accepted = accepted.append_column("__kg", kg)
    narrow, narrow_late, _ = split_late(table, watermark, spec, hash_columns(spec))
    assert narrow_late.equals(late)  # late rows keep every column
    assert narrow.column_names == [*hash_columns(spec), "__et", "__seq", WINDOW_START, WINDOW_END]

    got = preaggregate_by(narrow.append_column("__kg", kg), spec, "__kg")

    want = []
    for g in range(groups):
        rows = accepted.filter(pc.equal(accepted.column("__kg"), g)).drop_columns(["__kg"])
        if rows.num_rows:
            want.append((g, preaggregate(rows, spec)))
    assert [g for g, _ in got] == [g for g, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a.schema == b.schema
        assert _close(a, b)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 150),
    window=st.sampled_from([(20, 5), (30, 10), (12, 4), (10, 5)]),
    lateness=st.sampled_from([0, 7, 25]),
    groups=st.integers(1, 4),
    nulls=st.booleans(),
    pick=st.lists(st.integers(0, len(HASHED) - 1), min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 2**31),
)
def test_pane_preaggregation_equals_the_per_window_one(n, window, lateness, groups, nulls, pick, seed):
    """Sliding windows of a whole number of slides: one row per event, folded per pane and then
    per window (split_late_panes + preaggregate_panes_by), gives split_late's late events exactly
    and preaggregate_by's partials (floating point sums up to rounding), for any events, nulls,
    watermark (on either side of the windows' ends, and the end of stream), allowed lateness and
    key groups (per event, as a key's hash gives them)."""
    rng = np.random.default_rng(seed)
    spec = WindowSpec(Sliding(*window), lateness, "k", tuple(HASHED[i] for i in pick))
    assert pane_preaggregable(spec)
    x = rng.normal(size=n)
    table = events([(str(rng.choice(["a", "b", "c"])), int(rng.integers(-30, 60)),
                     None if nulls and rng.random() < 0.3 else float(x[i]),
                     None if nulls and rng.random() < 0.3 else int(rng.integers(-5, 5)))
                    for i in range(n)])
    watermark = int(rng.choice([rng.integers(-60, 90), NO_WM, 2**63 - 1]))
    kg = pa.array(rng.integers(0, groups, n), pa.int32())
    columns = hash_columns(spec)
    windows, late, _ = split_late(table.append_column("__kg", kg), watermark, spec, [*columns, "__kg"])
    split = split_late_panes(table.append_column("__kg", kg), watermark, spec, [*columns, "__kg"])
    assert split is not None
    panes, pane_late = split
    assert pane_late.equals(late)
    want = preaggregate_by(windows, spec, "__kg")
    got = preaggregate_panes_by(panes, spec, "__kg")
    assert [g for g, _ in got] == [g for g, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a.schema == b.schema
        assert _close(a, b)


def test_panes_only_for_whole_slides_and_not_at_the_int64_ends():
    aggs = (("n", agg.count()),)
    assert not pane_preaggregable(WindowSpec(Sliding(10, 4), 0, "k", aggs))  # 10 is not 2.5 slides
    assert not pane_preaggregable(WindowSpec(Sliding(10, 10), 0, "k", aggs))  # a tumbling window
    assert not pane_preaggregable(WindowSpec(Tumbling(10), 0, "k", aggs))
    assert not pane_preaggregable(WindowSpec(Sliding(20, 5), 0, "k", (("f", agg.first("x")),)))
    spec = WindowSpec(Sliding(20, 5), 0, "k", aggs)
    near_end = events([("a", -(2**63) + 10, 1.0, 1)])
    assert split_late_panes(near_end, NO_WM, spec) is None  # Sliding.assign drops unrepresentable windows


def _close(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables but for float rounding (sums added in another order)."""
    assert a.num_rows == b.num_rows
    for name in a.column_names:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        if pa.types.is_floating(a.schema.field(name).type):
            assert [v is None for v in x] == [v is None for v in y], name
            assert [v for v in x if v is not None] == pytest.approx([v for v in y if v is not None]), name
        else:
            assert x == y, name
    return True


def test_hash_preaggregable_only_for_order_free_tumbling_and_sliding():
    """Sessions and aggregations that need processing order (first, last, collect) keep the sort."""
    assert hash_preaggregable(WindowSpec(Tumbling(10), 0, "k", HASHED))
    assert hash_preaggregable(WindowSpec(Sliding(20, 5), 0, "k", HASHED))
    assert not hash_preaggregable(WindowSpec(Session(10), 0, "k", HASHED))
    assert not hash_preaggregable(WindowSpec(Tumbling(10), 0, "k", (("f", agg.first("x")),)))
    ordered = (("n", agg.count()), ("l", agg.last("x")))
    assert not hash_preaggregable(WindowSpec(Tumbling(10), 0, "k", ordered))
    with pytest.raises(ValueError, match="preaggregate_by"):
        preaggregate_by(pa.table({"k": ["a"]}), WindowSpec(Session(10), 0, "k", HASHED), "__kg")
