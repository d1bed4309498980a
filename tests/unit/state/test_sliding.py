"""Sliding windows: hand-derived transcript, partial lateness, randomized pandas oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wire.core.envelope import MAX_WATERMARK
from wire.state import aggregations as agg
from wire.state.windows import (
    LATE_REASON,
    Sliding,
    WindowSpec,
    late_schema,
    output_watermark_hold,
    process_epoch,
    result_schema,
    split_late,
    state_schema,
)

NO_WM = -(2**63)
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
SPEC = WindowSpec(Sliding(10, 5), 3, "k", (("n", agg.count()), ("s", agg.sum("v"))))


def feed(rows, seq0=0):
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
            "__et": pa.array([r[1] for r in rows], pa.int64()),
            "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64()),
        }
    )


def rows_of(table, *cols):
    return [tuple(r[c] for c in cols) for r in table.to_pylist()]


RES = ("k", "window_start", "window_end", "n", "s", "emit")


def run(state, rows, wm_in, wm_out, spec=SPEC):
    st, res, late = process_epoch(state, feed(rows), wm_in, wm_out, spec)
    assert st.schema == state_schema(spec, SCHEMA)
    assert res.schema == result_schema(spec, SCHEMA)
    assert late.schema == late_schema(spec, SCHEMA)
    return st, res, late


def test_transcript_size10_slide5_lateness3():
    # epoch 1: a@1 -> [-5,5),[0,10); a@7 -> [0,10),[5,15); b@12 -> [5,15),[10,20)
    st, res, late = run(None, [("a", 1, 1), ("a", 7, 2), ("b", 12, 4)], NO_WM, 9)
    assert rows_of(res, *RES) == [("a", -5, 5, 1, 1, "final")]  # end 5 <= 9
    assert rows_of(st, "k", "__ws", "__we", "n__count", "__fired") == [
        ("a", 0, 10, 2, False),  # [-5,5) purged: 5 + 3 <= 9
        ("a", 5, 15, 1, False),
        ("b", 5, 15, 1, False),
        ("b", 10, 20, 1, False),
    ]
    assert output_watermark_hold(st, SPEC) == 0
    # epoch 2: a@4 and a@2 are partially late: [-5,5) is purged, [0,10) still open;
    # a@-1 is late in both its windows [-10,0) and [-5,5) -> one late row
    st, res, late = run(st, [("a", 4, 10), ("a", -1, 100), ("a", 2, 20)], 9, 15)
    assert rows_of(res, *RES) == [
        ("a", 0, 10, 4, 33, "final"),
        ("a", 5, 15, 1, 2, "final"),
        ("b", 5, 15, 1, 4, "final"),
    ]
    assert rows_of(late, "k", "v", "event_time", "watermark", "reason") == [("a", 100, -1, 9, LATE_REASON)]
    assert rows_of(st, "k", "__ws", "__fired") == [("a", 5, True), ("b", 5, True), ("b", 10, False)]
    assert output_watermark_hold(st, SPEC) == 10
    # epoch 3: a@14 updates the fired [5,15) (15 + 3 > 15) and opens [10,20)
    st, res, late = run(st, [("a", 14, 5)], 15, 18)
    assert rows_of(res, *RES) == [("a", 5, 15, 2, 7, "update")]
    assert late.num_rows == 0
    assert rows_of(st, "k", "__ws", "n__count") == [("a", 10, 1), ("b", 10, 1)]  # 18 purges [5,15)
    # end of stream
    st, res, _ = run(st, [], 18, MAX_WATERMARK)
    assert rows_of(res, *RES) == [("a", 10, 20, 1, 5, "final"), ("b", 10, 20, 1, 4, "final")]
    assert st.num_rows == 0 and output_watermark_hold(st, SPEC) is None


def test_split_late_one_row_per_event_window_and_one_late_row_per_event():
    spec = WindowSpec(Sliding(10, 5), 0, "k", (("n", agg.count()),))
    accepted, late, candidates = split_late(feed([("a", 7, 1), ("a", 3, 2), ("b", 12, 3)]), 10, spec)
    assert rows_of(accepted, "k", "__et", "__ws", "__we") == [
        ("a", 7, 5, 15),  # [0,10) closed at watermark 10 (lateness 0)
        ("b", 12, 5, 15),
        ("b", 12, 10, 20),
    ]
    assert rows_of(late, "k", "event_time") == [("a", 3)]
    assert candidates.num_rows == 0


def test_update_mode_and_callbacks_on_sliding():
    seen = []

    def after(aggregate, event):
        seen.append(rows_of(aggregate, "window_start", "n"))
        return np.ones(aggregate.num_rows, bool)

    spec = WindowSpec(Sliding(10, 5), 0, "k", (("n", agg.count()),), after_update=after)
    _, res, _ = process_epoch(None, feed([("a", 7, 1), ("a", 3, 1)]), NO_WM, 10, spec)
    # a@3 -> [-5,5),[0,10); a@7 -> [0,10),[5,15); processing order inside a window: time
    assert seen == [[(-5, 1), (0, 1), (0, 2), (5, 1)]]
    assert rows_of(res, "window_start", "n", "emit") == [
        (-5, 1, "early"),
        (-5, 1, "final"),
        (0, 1, "early"),
        (0, 2, "early"),
        (0, 2, "final"),
        (5, 1, "early"),
    ]


# ---------------------------------------------------------------- randomized oracles


def simulate(seed, delay, spec, n=1200, n_keys=5, callbacks=False):
    rng = np.random.default_rng(seed)
    t = (np.arange(n) * 2 + rng.integers(-30, 30, n)).astype(np.int64)
    keys = rng.integers(0, n_keys, n).astype(np.int64)
    x = rng.normal(10, 3, n)
    ids = np.arange(n, dtype=np.int64)
    cuts = np.sort(rng.choice(np.arange(1, n), size=50, replace=False))
    bounds = [0, *cuts.tolist(), n]
    state, wm, max_seen = None, NO_WM, None
    results, lates, epoch_wm = [], [], np.empty(n, np.int64)
    epoch_of = np.empty(n, np.int64)
    for epoch, (lo, hi) in enumerate([*itertools.pairwise(bounds), (n, n)]):
        table = pa.table(
            {"k": keys[lo:hi], "id": ids[lo:hi], "x": x[lo:hi], "__et": t[lo:hi], "__seq": ids[lo:hi]}
        )
        if hi > lo:
            seen = int(t[lo:hi].max())
            max_seen = seen if max_seen is None else max(max_seen, seen)
            wm_out = max(wm, max_seen - delay)
        else:
            wm_out = MAX_WATERMARK
        epoch_wm[lo:hi], epoch_of[lo:hi] = wm, epoch
        state, res, late = process_epoch(state, table, wm, wm_out, spec)
        df = res.to_pandas()
        df["epoch"], df["wm_in"], df["wm_out"] = epoch, wm, wm_out
        results.append(df)
        lates.append(late.to_pandas())
        wm = wm_out
    assert state.num_rows == 0
    ev = pd.DataFrame({"k": keys, "id": ids, "t": t, "x": x, "wm": epoch_wm, "epoch": epoch_of})
    return ev, pd.concat(results, ignore_index=True), pd.concat(lates, ignore_index=True)


def explode(ev, size, slide):
    """(event, window) pairs by brute force: every start k*slide with start <= t < start + size."""
    n_max = -(-size // slide)
    out = []
    for j in range(n_max):
        ws = ev.t - ev.t % slide - j * slide
        part = ev[ev.t < ws + size].copy()
        part["ws"] = ws[ev.t < ws + size]
        out.append(part)
    pairs = pd.concat(out)
    pairs["we"] = pairs.ws + size
    return pairs.sort_values(["k", "ws", "t", "id"])


AGGS = (
    ("n", agg.count()),
    ("m", agg.mean("x")),
    ("ids", agg.collect("id")),
    ("f", agg.first("id")),
    ("l", agg.last("id")),
)


@pytest.mark.parametrize(("size", "slide"), [(10, 5), (30, 7), (20, 20)])
def test_large_delay_equals_batch(size, slide):
    spec = WindowSpec(Sliding(size, slide), 0, "k", AGGS)
    ev, res, late = simulate(21, 10**6, spec)
    assert len(late) == 0 and (res.emit == "final").all()
    assert not res.duplicated(["k", "window_start"]).any()
    pairs = explode(ev, size, slide)
    want = pairs.groupby(["k", "ws"]).agg(
        n=("id", "size"), m=("x", "mean"), ids=("id", list), we=("we", "first")
    )
    got = res.sort_values(["k", "window_start"]).set_index(["k", "window_start"])
    assert got.index.tolist() == want.index.tolist()
    assert got.n.tolist() == want.n.tolist() and got.window_end.tolist() == want.we.tolist()
    np.testing.assert_allclose(got.m.to_numpy(float), want.m.to_numpy(), atol=1e-9)
    assert [list(v) for v in got.ids] == want.ids.tolist()  # collect in (time, arrival) order
    assert got.f.tolist() == [v[0] for v in want.ids] and got.l.tolist() == [v[-1] for v in want.ids]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_delay_every_event_window_pair_accounted_once(seed):
    size, slide, lateness = 20, 5, 4
    spec = WindowSpec(Sliding(size, slide), lateness, "k", AGGS)
    ev, res, late = simulate(seed, 12, spec)
    pairs = explode(ev, size, slide)
    pairs["open"] = pairs.we + lateness > pairs.wm  # window still had state when the event arrived
    accepted_events = set(pairs[pairs.open].id)
    oracle_late = ev[~ev.id.isin(accepted_events)]
    partially_late = pairs[~pairs.open & pairs.id.isin(accepted_events)]
    assert len(oracle_late) > 0 and len(partially_late) > 0  # both paths are exercised
    assert sorted(late.id) == sorted(oracle_late.id)
    assert (late.reason == LATE_REASON).all()
    by_id = late.set_index("id")
    assert (by_id.loc[oracle_late.id, "watermark"].to_numpy() == oracle_late.wm.to_numpy()).all()
    # the last result of each window lists exactly its accepted (event, window) pairs, once each
    last = res.groupby(["k", "window_start"]).tail(1).set_index(["k", "window_start"]).sort_index()
    want = pairs[pairs.open].groupby(["k", "ws"]).id.agg(list)
    assert last.index.tolist() == want.index.tolist()
    assert [sorted(v) for v in last.ids] == [sorted(v) for v in want]
    assert all(len(set(v)) == len(v) for v in last.ids)
    assert (last.n == last.ids.map(len)).all()
    # emission rules
    assert set(res.emit) == {"final", "update"}
    finals = res[res.emit == "final"]
    assert not finals.duplicated(["k", "window_start"]).any()
    assert ((finals.window_end <= finals.wm_out) & (finals.window_end > finals.wm_in)).all()
    updates = res[res.emit == "update"]
    assert (updates.window_end <= updates.wm_in).all()
    assert not res.duplicated(["k", "window_start", "epoch"]).any()


def test_callbacks_see_running_aggregates_continuing_across_epochs():
    calls = []

    def after(aggregate, event):
        calls.append(len(event))
        return np.ones(len(event), bool)

    spec = WindowSpec(
        Sliding(20, 10), 0, "k", (("n", agg.count()), ("ids", agg.collect("id"))), after_update=after
    )
    ev, res, late = simulate(5, 10**6, spec, n=400)
    early = res[res.emit == "early"]
    assert len(early) == len(explode(ev, 20, 10)) and len(late) == 0  # one per (event, window)
    assert 0 < len(calls) <= res.epoch.max() and all(c > 0 for c in calls)  # once per epoch at most
    # every early row of a window adds exactly one event to the previous one; events are
    # added in processing order (epoch, then event time, then arrival); lists stay time-ordered
    ev = ev.set_index("id")
    pairs = explode(ev.reset_index(), 20, 10)
    for (k, ws), rows in early.groupby(["k", "window_start"], sort=False):
        prev: set[int] = set()
        added = []
        for ids in rows.ids:
            cur = set(ids)
            assert len(ids) == len(cur) == len(prev) + 1 and prev < cur
            added += list(cur - prev)
            assert list(ids) == sorted(ids, key=lambda i: (ev.t[i], i))
            prev = cur
        assert added == sorted(added, key=lambda i: (ev.epoch[i], ev.t[i], i))
        assert (rows.n.to_numpy() == np.arange(1, len(rows) + 1)).all()
        assert prev == set(pairs[(pairs.k == k) & (pairs.ws == ws)].id)
