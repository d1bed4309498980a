"""Tumbling windows: hand-derived transcripts, edge cases and a randomized oracle test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wire.core.envelope import MAX_WATERMARK
from wire.errors import ConfigError
from wire.state import aggregations as agg
from wire.state.assigners import Session, Tumbling
from wire.state.windows import (
    FIRED,
    LATE_REASON,
    WINDOW_END,
    WINDOW_START,
    TumblingSpec,
    WindowSpec,
    advance,
    late_schema,
    partial_schema,
    preaggregate,
    process_epoch,
    result_schema,
    split_late,
    state_schema,
)

NO_WM = -(2**63)
SCHEMA = pa.schema([("k", pa.string()), ("x", pa.float64()), ("v", pa.int64())])
SPEC = TumblingSpec(
    size_ms=10,
    allowed_lateness_ms=5,
    key="k",
    aggregations=(
        ("n", agg.count()),
        ("m", agg.mean("x")),
        ("s", agg.sum("v")),
        ("hi", agg.max("x")),
    ),
)


def events(rows, schema=SCHEMA):
    """rows: list of (k, t, x, v) -> table with __et and __seq (= row order)."""
    return pa.table(
        {
            "k": [r[0] for r in rows],
            "x": [r[2] for r in rows],
            "v": [r[3] for r in rows],
            "__et": [r[1] for r in rows],
            "__seq": list(range(len(rows))),
        },
        schema=schema.append(pa.field("__et", pa.int64())).append(pa.field("__seq", pa.int64())),
    )


def run(state, rows, wm_in, wm_out, spec=SPEC):
    new_state, results, late = process_epoch(state, events(rows), wm_in, wm_out, spec)
    assert new_state.schema == state_schema(spec, SCHEMA)
    assert results.schema == result_schema(spec, SCHEMA)
    assert late.schema == late_schema(spec, SCHEMA)
    return new_state, results, late


def starts_of(t, size):
    return Tumbling(size).assign(np.asarray(t, np.int64))[1].tolist()


def rows_of(table, *cols):
    return [tuple(r[c] for c in cols) for r in table.to_pylist()]


RES = ("k", "window_start", "window_end", "n", "m", "s", "hi", "emit")


# ---------------------------------------------------------------- transcript


def test_transcript_size10_lateness5():
    # epoch 1: no watermark yet; everything accepted, nothing ends by wm_out=8
    st, res, late = run(
        None,
        [("a", 1, 1.0, 1), ("a", 5, 3.0, 2), ("a", 12, 10.0, 3), ("b", 3, None, 4)],
        NO_WM,
        8,
    )
    assert res.num_rows == 0 and late.num_rows == 0
    assert rows_of(st, "k", WINDOW_START, "n__count", "m__sum", "m__count", "s__sum", FIRED) == [
        ("a", 0, 2, 4.0, 2, 3, False),
        ("a", 10, 1, 10.0, 1, 3, False),
        ("b", 0, 1, None, 0, 4, False),
    ]

    # epoch 2: a@7 is behind wm_in=8 but its window [0,10) has not fired yet -> part of
    # the final; b gets no events but its window [0,10) fires on the watermark advance.
    st, res, late = run(st, [("a", 7, 5.0, 5), ("c", 14, 2.0, 6)], 8, 12)
    assert late.num_rows == 0
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 3, 3.0, 8, 5.0, "final"),
        ("b", 0, 10, 1, None, 4, None, "final"),
    ]
    assert rows_of(st, "k", WINDOW_START, "n__count", FIRED) == [
        ("a", 0, 3, True),
        ("a", 10, 1, False),
        ("b", 0, 1, True),
        ("c", 10, 1, False),
    ]

    # epoch 3 (wm_in=12): b@9 within lateness (10+5 > 12) -> update with new aggregate;
    # d@8 opens a window whose on-time moment passed -> update (never final);
    # a@-1 and a@-15 are beyond lateness -> late.
    st, res, late = run(
        st,
        [("b", 9, 7.0, 7), ("a", -1, 100.0, 100), ("d", 8, 4.0, 1), ("a", -15, 1.0, 1)],
        12,
        14,
    )
    assert rows_of(res, *RES) == [
        ("b", 0, 10, 2, 7.0, 11, 7.0, "update"),
        ("d", 0, 10, 1, 4.0, 1, 4.0, "update"),
    ]
    assert late.to_pylist() == [
        {"k": "a", "x": 100.0, "v": 100, "event_time": -1, "watermark": 12, "reason": LATE_REASON},
        {"k": "a", "x": 1.0, "v": 1, "event_time": -15, "watermark": 12, "reason": LATE_REASON},
    ]
    assert rows_of(st, "k", WINDOW_START, "n__count", FIRED) == [
        ("a", 0, 3, True),
        ("a", 10, 1, False),
        ("b", 0, 2, True),
        ("c", 10, 1, False),
        ("d", 0, 1, True),
    ]

    # epoch 4: no events; wm 14 -> 25 fires [10,20) of a and c, then purges every
    # window with end + 5 <= 25 (all of them).
    st, res, late = run(st, [], 14, 25)
    assert rows_of(res, *RES) == [
        ("a", 10, 20, 1, 10.0, 3, 10.0, "final"),
        ("c", 10, 20, 1, 2.0, 6, 2.0, "final"),
    ]
    assert st.num_rows == 0 and late.num_rows == 0

    # epoch 5: a@21 accepted ([20,30): 35 > 25), a@19 late ([10,20): 25 <= 25, purged);
    # end of stream closes and purges everything.
    st, res, late = run(st, [("a", 21, 1.0, 1), ("a", 19, 2.0, 2)], 25, MAX_WATERMARK)
    assert rows_of(res, *RES) == [("a", 20, 30, 1, 1.0, 1, 1.0, "final")]
    assert rows_of(late, "k", "event_time", "watermark") == [("a", 19, 25)]
    assert st.num_rows == 0


def test_update_on_every_change_until_purge():
    st, res, _ = run(None, [("a", 1, 1.0, 1)], NO_WM, 10)
    assert rows_of(res, "n", "emit") == [(1, "final")]
    st, res, _ = run(st, [("a", 2, 3.0, 1)], 10, 12)
    assert rows_of(res, "n", "m", "emit") == [(2, 2.0, "update")]
    st, res, _ = run(st, [], 12, 14)  # untouched: nothing emitted, state kept
    assert res.num_rows == 0 and st.num_rows == 1
    st, res, _ = run(st, [("a", 3, 5.0, 1), ("a", 4, 7.0, 1)], 14, 15)
    assert rows_of(res, "n", "m", "emit") == [(4, 4.0, "update")]  # one row for two events
    assert st.num_rows == 0  # purged at end (10) + lateness (5) <= 15
    _, res, late = run(st, [("a", 5, 1.0, 1)], 15, 15)
    assert res.num_rows == 0 and late.num_rows == 1


def test_final_and_purge_in_same_epoch():
    # the watermark jumps past end + lateness: the window fires final, then is purged
    st, res, late = run(None, [("a", 1, 2.0, 1)], NO_WM, 100)
    assert rows_of(res, "window_start", "n", "emit") == [(0, 1, "final")]
    assert st.num_rows == 0 and late.num_rows == 0


def test_no_emission_while_watermark_stays():
    st, res, _ = run(None, [("a", 1, 2.0, 1)], 0, 0)
    assert res.num_rows == 0 and st.num_rows == 1
    st, res, _ = run(st, [], 0, 9)
    assert res.num_rows == 0
    st, res, _ = run(st, [], 9, 10)  # end is exclusive: wm 10 means no events < 10 remain
    assert rows_of(res, "emit") == [("final",)]


def test_max_watermark_closes_and_purges_all_without_overflow():
    spec = TumblingSpec(10, 2**62, "k", (("n", agg.count()),))
    big = 9 * 10**18  # near the int64 limits (2**63 - 1 = 9.22e18)
    rows = [("a", t, 1.0, 1) for t in (-big, -5, 0, 7, big)] + [("b", 3, 1.0, 1)]
    st, res, late = run(None, rows, NO_WM, NO_WM, spec)
    assert res.num_rows == 0 and late.num_rows == 0 and st.num_rows == 5
    st, res, late = run(st, [], NO_WM, MAX_WATERMARK, spec)
    assert rows_of(res, "k", "window_start", "window_end", "n", "emit") == [
        ("a", -big, -big + 10, 1, "final"),
        ("a", -10, 0, 1, "final"),
        ("a", 0, 10, 2, "final"),
        ("a", big, big + 10, 1, "final"),
        ("b", 0, 10, 1, "final"),
    ]
    assert st.num_rows == 0
    # after the end of the stream every event is late
    _, res, late = run(st, [("a", big, 1.0, 1)], MAX_WATERMARK, MAX_WATERMARK, spec)
    assert res.num_rows == 0 and rows_of(late, "watermark") == [(MAX_WATERMARK,)]


def test_huge_lateness_never_purges_before_end():
    spec = TumblingSpec(10, 2**63 - 1, "k", (("n", agg.count()),))
    st, res, _ = run(None, [("a", 1, 1.0, 1)], NO_WM, 2**62, spec)
    assert rows_of(res, "emit") == [("final",)] and st.num_rows == 1
    st, res, late = run(st, [("a", 2, 1.0, 1)], 2**62, MAX_WATERMARK - 1, spec)
    assert rows_of(res, "n", "emit") == [(2, "update")] and late.num_rows == 0
    assert st.num_rows == 1
    st, _, _ = run(st, [], MAX_WATERMARK - 1, MAX_WATERMARK, spec)
    assert st.num_rows == 0  # the end of the stream purges whatever the lateness
    _, _, late = run(st, [("a", 3, 1.0, 1)], MAX_WATERMARK, MAX_WATERMARK, spec)
    assert late.num_rows == 1


def test_negative_event_times_use_floor():
    starts = starts_of([-21, -20, -11, -10, -1, 0, 9, 10], 10)
    assert starts == [-30, -20, -20, -10, -10, 0, 0, 10]
    assert starts_of([-1, 59_999, 60_000], 60_000) == [
        -60_000,
        0,
        60_000,
    ]
    _, res, _ = run(None, [("a", -1, 1.0, 1), ("a", -10, 3.0, 1)], NO_WM, 0)
    assert rows_of(res, "window_start", "window_end", "n", "m") == [(-10, 0, 2, 2.0)]


def test_nulls_in_aggregated_columns():
    spec = TumblingSpec(
        10,
        0,
        "k",
        (
            ("n", agg.count()),
            ("nx", agg.count("x")),
            ("m", agg.mean("x")),
            ("sv", agg.sum("v")),
            ("lo", agg.min("x")),
        ),
    )
    rows = [("a", 1, None, None), ("a", 2, 4.0, None), ("b", 1, None, None), ("a", 3, 2.0, 5)]
    _, res, _ = run(None, rows, NO_WM, 10, spec)
    assert rows_of(res, "k", "n", "nx", "m", "sv", "lo") == [
        ("a", 3, 2, 3.0, 5, 2.0),
        ("b", 1, 0, None, None, None),
    ]


def test_many_keys_vectorized_against_pandas():
    rng = np.random.default_rng(7)
    n = 20_000
    keys = rng.integers(0, 2_000, n)
    t = rng.integers(-5_000, 5_000, n)
    x = rng.normal(size=n)
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64())])
    table = pa.table({"k": keys, "x": x, "__et": t}, schema=schema.append(pa.field("__et", pa.int64())))
    spec = TumblingSpec(1_000, 0, "k", (("n", agg.count()), ("m", agg.mean("x"))))
    st, res, late = process_epoch(None, table, NO_WM, MAX_WATERMARK, spec)
    assert late.num_rows == 0 and st.num_rows == 0
    df = pd.DataFrame({"k": keys, "ws": np.floor_divide(t, 1000) * 1000, "x": x})
    want = df.groupby(["k", "ws"]).x.agg(["size", "mean"]).reset_index()
    got = res.to_pandas()
    assert (got.emit == "final").all()
    assert got.k.tolist() == want.k.tolist() and got.window_start.tolist() == want.ws.tolist()
    assert got.n.tolist() == want["size"].tolist()
    np.testing.assert_allclose(got.m, want["mean"], rtol=0, atol=1e-9)


# ---------------------------------------------------------------- pieces


def test_split_late_preserves_order_and_appends_window_bounds():
    table = events([("a", 25, 1.0, 1), ("b", 3, 2.0, 2), ("c", 14, 3.0, 3), ("d", 4, 4.0, 4)])
    accepted, late, candidates = split_late(table, 15, SPEC)
    assert accepted.schema.names == ["k", "x", "v", "__et", "__seq", WINDOW_START, WINDOW_END]
    assert rows_of(accepted, "k", WINDOW_START, WINDOW_END) == [("a", 20, 30), ("c", 10, 20)]
    assert rows_of(late, "k", "event_time", "watermark", "reason") == [
        ("b", 3, 15, LATE_REASON),
        ("d", 4, 15, LATE_REASON),
    ]
    assert candidates.num_rows == 0
    with pytest.raises(ValueError, match="__et"):
        split_late(table.drop_columns(["__et"]), 15, SPEC)
    with pytest.raises(ValueError, match="__et"):
        split_late(table.set_column(3, "__et", pa.array([1, None, 2, 3], pa.int64())), 15, SPEC)


def test_missing_or_null_arrival_means_row_order():
    spec = TumblingSpec(10, 0, "k", (("f", agg.first("x")), ("l", agg.last("x"))))
    table = events([("a", 1, 1.0, 1), ("a", 1, 2.0, 2), ("a", 1, 3.0, 3)])
    for t in (table.drop_columns(["__seq"]), table.set_column(4, "__seq", pa.nulls(3, pa.int64()))):
        _, res, _ = process_epoch(None, t, NO_WM, 10, spec)
        assert rows_of(res, "f", "l") == [(1.0, 3.0)]
    # explicit arrival order wins over row order
    t = table.set_column(4, "__seq", pa.array([7, 5, 6], pa.int64()))
    _, res, _ = process_epoch(None, t, NO_WM, 10, spec)
    assert rows_of(res, "f", "l") == [(2.0, 1.0)]


def test_preaggregate_one_row_per_key_window_and_empty():
    table = events([("b", 1, 1.0, 1), ("a", 11, 2.0, 2), ("b", 2, 3.0, 3), ("a", 1, None, 4)])
    accepted, _, _ = split_late(table, NO_WM, SPEC)
    p = preaggregate(accepted, SPEC)
    assert p.schema == partial_schema(SPEC, SCHEMA)
    assert p.schema.names == [
        "k",
        WINDOW_START,
        WINDOW_END,
        "n__count",
        "m__sum",
        "m__count",
        "s__sum",
        "hi__max",
    ]
    assert rows_of(p, "k", WINDOW_START, "n__count", "m__sum", "m__count", "s__sum") == [
        ("a", 0, 1, None, 0, 4),
        ("a", 10, 1, 2.0, 1, 2),
        ("b", 0, 2, 4.0, 2, 4),
    ]
    empty = preaggregate(accepted.slice(0, 0), SPEC)
    assert empty.num_rows == 0 and empty.schema == partial_schema(SPEC, SCHEMA)


def test_advance_merges_partials_into_state():
    table = events([("a", 1, 1.0, 1), ("a", 2, 3.0, 2)])
    p1 = preaggregate(split_late(table, NO_WM, SPEC)[0], SPEC)
    st, res = advance(None, p1, NO_WM, 0, SPEC)
    assert res.num_rows == 0
    st, res = advance(st, p1, 0, 10, SPEC)  # the same partials again: counts add up
    assert rows_of(res, "n", "m", "s", "hi", "emit") == [(4, 2.0, 6, 3.0, "final")]
    assert rows_of(st, "n__count", FIRED) == [(4, True)]
    with pytest.raises(ValueError, match="wm_out"):
        advance(st, p1, 10, 9, SPEC)


def test_result_schema_and_state_schema():
    assert result_schema(SPEC, SCHEMA) == pa.schema(
        [
            ("k", pa.string()),
            ("window_start", pa.int64()),
            ("window_end", pa.int64()),
            ("n", pa.int64()),
            ("m", pa.float64()),
            ("s", pa.int64()),
            ("hi", pa.float64()),
            ("emit", pa.string()),
        ]
    )
    assert state_schema(SPEC, SCHEMA).names[-1] == FIRED
    assert state_schema(SPEC, SCHEMA).field(FIRED).type == pa.bool_()
    assert late_schema(SPEC, SCHEMA).names == ["k", "x", "v", "event_time", "watermark", "reason"]
    # the schemas are the same whether or not the input schema lists __et / __seq
    full = SCHEMA.append(pa.field("__et", pa.int64())).append(pa.field("__seq", pa.int64()))
    assert result_schema(SPEC, full) == result_schema(SPEC, SCHEMA)
    assert state_schema(SPEC, full) == state_schema(SPEC, SCHEMA)
    assert late_schema(SPEC, full) == late_schema(SPEC, SCHEMA)


@pytest.mark.parametrize("column", ["event_time", "watermark", "reason"])
def test_late_schema_renames_clashing_columns(column):
    """An input column named like a late column (a join's ``event_time``) becomes ``input_<name>``."""
    schema = late_schema(SPEC, pa.schema([("k", pa.string()), (column, pa.int64())]))
    assert schema.names == ["k", f"input_{column}", "event_time", "watermark", "reason"]
    with pytest.raises(ConfigError, match=f"input_{column}"):
        late_schema(SPEC, pa.schema([("k", pa.string()), (column, pa.int64()),
                                     (f"input_{column}", pa.int32())]))


def test_schema_errors():
    with pytest.raises(ConfigError, match=r"invalid key='k'.*\['x'\]"):
        partial_schema(SPEC, pa.schema([("x", pa.float64())]))
    with pytest.raises(ConfigError, match="__ws"):
        partial_schema(SPEC, SCHEMA.append(pa.field(WINDOW_START, pa.int64())))
    with pytest.raises(ConfigError, match="column"):
        result_schema(SPEC, pa.schema([("k", pa.string()), ("x", pa.string()), ("v", pa.int64())]))


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"assigner": 10}, "assigner"),
        ({"allowed_lateness_ms": -1}, "allowed_lateness_ms"),
        ({"allowed_lateness_ms": 1.5}, "allowed_lateness_ms"),
        ({"key": "__et"}, "key"),
        ({"emit": "early"}, "emit"),
        ({"before_update": "yes"}, "before_update"),
        ({"after_update": 1}, "after_update"),
        ({"aggregations": (("__n", agg.count()),)}, "aggregations"),
        ({"key": ""}, "key"),
        ({"key": WINDOW_START}, "key"),
        ({"key": "window_start"}, "key"),
        ({"aggregations": ()}, "aggregations"),
        ({"aggregations": (("n", "count"),)}, "aggregations"),
        ({"aggregations": (("n", agg.count()), ("n", agg.sum("v")))}, "aggregations"),
        ({"aggregations": (("k", agg.count()),)}, "aggregations"),
        ({"aggregations": (("emit", agg.count()),)}, "aggregations"),
    ],
)
def test_spec_validation(kwargs, parameter):
    base = {
        "assigner": Tumbling(10),
        "allowed_lateness_ms": 0,
        "key": "k",
        "aggregations": SPEC.aggregations,
    }
    with pytest.raises(ConfigError, match=f"invalid {parameter}="):
        WindowSpec(**(base | kwargs))


def test_spec_accepts_list_and_is_frozen():
    spec = TumblingSpec(10, 0, "k", [("n", agg.count())])
    assert spec == WindowSpec(Tumbling(10), 0, "k", (("n", agg.count()),))
    assert spec.emit == "final" and not spec.needs_events and not spec.sessions
    assert WindowSpec(Tumbling(10), 0, "k", spec.aggregations, after_update=print).needs_events
    with pytest.raises(AttributeError):
        spec.key = "x"  # type: ignore[misc]


# ---------------------------------------------------------------- randomized oracle


def simulate(seed, delay, size=10, lateness=5, n=1500, n_keys=7):
    """Feed random out-of-order events in random epochs; return everything observed."""
    rng = np.random.default_rng(seed)
    t = (np.arange(n) * 2 + rng.integers(-40, 40, n)).astype(np.int64)
    keys = rng.integers(0, n_keys, n).astype(np.int64)
    x = rng.normal(10, 3, n)
    x[rng.random(n) < 0.1] = np.nan
    ids = np.arange(n, dtype=np.int64)
    schema = pa.schema([("k", pa.int64()), ("id", pa.int64()), ("x", pa.float64())])
    spec = TumblingSpec(size, lateness, "k", (("n", agg.count()), ("m", agg.mean("x"))))
    cuts = np.sort(rng.choice(np.arange(1, n), size=60, replace=False))
    bounds = [0, *cuts.tolist(), n]

    state, wm, max_seen = None, NO_WM, None
    results, lates, epoch_wm = [], [], np.empty(n, np.int64)
    for epoch, (lo, hi) in enumerate([*itertools.pairwise(bounds), (n, n)]):
        table = pa.table(
            {
                "k": keys[lo:hi],
                "id": ids[lo:hi],
                "x": pa.array(x[lo:hi], from_pandas=True),
                "__et": t[lo:hi],
                "__seq": ids[lo:hi],
            },
        )
        if hi > lo:
            seen = int(t[lo:hi].max())
            max_seen = seen if max_seen is None else max(max_seen, seen)
            wm_out = max(wm, max_seen - delay)
        else:
            wm_out = MAX_WATERMARK  # end of stream
        epoch_wm[lo:hi] = wm
        state, res, late = process_epoch(state, table, wm, wm_out, spec)
        assert state.schema == state_schema(spec, schema)
        df = res.to_pandas()
        df["epoch"], df["wm_in"], df["wm_out"] = epoch, wm, wm_out
        results.append(df)
        lates.append(late.to_pandas())
        wm = wm_out
    events_df = pd.DataFrame({"k": keys, "id": ids, "t": t, "x": x, "wm": epoch_wm})
    events_df["ws"] = np.floor_divide(t, size) * size
    return events_df, pd.concat(results), pd.concat(lates), state


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_randomized_every_event_accounted_once(seed):
    size, lateness = 10, 5
    ev, res, late, state = simulate(seed, delay=15, size=size, lateness=lateness)
    assert state.num_rows == 0
    # oracle for lateness: the event's window end + lateness <= watermark at arrival
    oracle_late = ev[ev.ws + size + lateness <= ev.wm]
    assert 0 < len(oracle_late) < len(ev)  # the scenario exercises both paths
    assert late.id.tolist() == oracle_late.id.tolist()
    assert late.watermark.tolist() == oracle_late.wm.tolist()
    assert late.event_time.tolist() == oracle_late.t.tolist()
    assert (late.reason == LATE_REASON).all()

    accepted = ev[~ev.id.isin(oracle_late.id)]
    want = accepted.groupby(["k", "ws"]).x.agg(["size", "mean"]).reset_index()
    last = res.groupby(["k", "window_start"]).tail(1).sort_values(["k", "window_start"])
    assert last.k.tolist() == want.k.tolist()
    assert last.window_start.tolist() == want.ws.tolist()
    assert last.n.tolist() == want["size"].tolist()
    assert int(last.n.sum()) + len(late) == len(ev)
    np.testing.assert_allclose(last.m.to_numpy(float), want["mean"].to_numpy(), atol=1e-9)

    assert set(res.emit) <= {"final", "update"}
    assert not res.duplicated(["k", "window_start", "epoch"]).any()
    finals = res[res.emit == "final"]
    assert not finals.duplicated(["k", "window_start"]).any()
    assert (finals.window_end <= finals.wm_out).all()
    assert (finals.window_end > finals.wm_in).all()
    # an update comes after the window's on-time moment (fired before, or end <= wm_in)
    updates = res[res.emit == "update"]
    assert (updates.window_end <= updates.wm_in).all()
    assert len(updates) > 0


def test_randomized_large_delay_equals_pandas_aggregation():
    ev, res, late, state = simulate(11, delay=10**6)
    assert len(late) == 0 and state.num_rows == 0
    assert (res.emit == "final").all()
    want = ev.groupby(["k", "ws"]).x.agg(["size", "mean"]).reset_index()
    got = res.sort_values(["k", "window_start"])
    assert not got.duplicated(["k", "window_start"]).any()
    assert got.n.tolist() == want["size"].tolist()
    np.testing.assert_allclose(got.m.to_numpy(float), want["mean"].to_numpy(), atol=1e-9)
    assert math.isclose(got.n.sum(), len(ev))


def test_user_aggregator_across_epochs_and_sessions_equals_pandas():
    distinct = agg.aggregate(
        create=set,
        add=lambda s, v: s | {v},
        merge=lambda a, b: a | b,
        result=len,
        column="v",
        result_type=pa.int64(),
    )
    rng = np.random.default_rng(9)
    n = 600
    t = np.sort(rng.integers(0, 3000, n))
    k = rng.integers(0, 4, n)
    v = rng.integers(0, 12, n)
    table = pa.table({"k": k, "v": v, "__et": t, "__seq": np.arange(n)})

    for assigner, window in [(Tumbling(100), t // 100 * 100), (Session(15), None)]:
        spec = WindowSpec(assigner, 0, "k", (("d", distinct),))
        state, got = None, []
        for lo in range(0, n, 50):  # 12 epochs: partials merged into state every epoch
            state, res, late = process_epoch(state, table.slice(lo, 50), NO_WM, NO_WM, spec)
            assert late.num_rows == 0
            got.append(res)
        state, res, _ = process_epoch(state, table.slice(0, 0), NO_WM, MAX_WATERMARK, spec)
        got = res.to_pandas()
        df = pd.DataFrame({"k": k, "v": v, "t": t})
        if window is None:  # sessions: break where the gap to the previous event of the key >= 15
            df = df.sort_values(["k", "t"], kind="stable")
            df["w"] = ((df.k != df.k.shift()) | (df.t.diff() >= 15)).cumsum()
        else:
            df["w"] = window
        want = df.groupby(["k", "w"]).v.nunique()
        assert got.d.tolist() == want.tolist() and len(got) == len(want)
