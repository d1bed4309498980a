"""Session windows: hand-derived transcripts, late merges, candidates, randomized oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wire.core.envelope import MAX_WATERMARK
from wire.state import aggregations as agg
from wire.state.windows import (
    SESSION_LATE_REASON,
    Session,
    WindowSpec,
    late_schema,
    output_watermark_hold,
    preaggregate,
    process_epoch,
    resolve_candidates,
    result_schema,
    split_late,
    state_schema,
)

NO_WM = -(2**63)
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
AGGS = (("n", agg.count()), ("c", agg.collect("v")))
SPEC = WindowSpec(Session(10), 5, "k", AGGS)
RES = ("k", "window_start", "window_end", "n", "c", "emit")


class Feed:
    def __init__(self):
        self.seq = 0

    def __call__(self, rows):
        seq = range(self.seq, self.seq + len(rows))
        self.seq += len(rows)
        return pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.string()),
                "v": pa.array([r[2] for r in rows], pa.int64()),
                "__et": pa.array([r[1] for r in rows], pa.int64()),
                "__seq": pa.array(seq, pa.int64()),
            }
        )


def rows_of(table, *cols):
    return [tuple(r[c] for c in cols) for r in table.to_pylist()]


def test_transcript_gap10_lateness5():
    feed = Feed()

    def run(state, rows, wm_in, wm_out, spec=SPEC):
        st, res, late = process_epoch(state, feed(rows), wm_in, wm_out, spec)
        assert st.schema == state_schema(spec, SCHEMA) and res.schema == result_schema(spec, SCHEMA)
        assert late.schema == late_schema(spec, SCHEMA)
        return st, res, late

    # epoch 1: a@1 [1,11) and a@5 [5,15) merge into [1,15); a@30 [30,40); b@2 [2,12)
    st, res, late = run(None, [("a", 1, 1), ("a", 5, 2), ("a", 30, 3), ("b", 2, 4)], NO_WM, 0)
    assert res.num_rows == 0 and late.num_rows == 0
    assert rows_of(st, "k", "__ws", "__we", "n__count", "c__values", "__fired") == [
        ("a", 1, 15, 2, [1, 2], False),
        ("a", 30, 40, 1, [3], False),
        ("b", 2, 12, 1, [4], False),
    ]
    assert output_watermark_hold(st, SPEC) == 1
    # epoch 2: a@20 [20,30) only touches [30,40): separate. Watermark 16 closes [1,15) and [2,12)
    st, res, late = run(st, [("a", 20, 5)], 0, 16)
    assert rows_of(res, *RES) == [("a", 1, 15, 2, [1, 2], "final"), ("b", 2, 12, 1, [4], "final")]
    assert rows_of(st, "k", "__ws", "__we", "__fired") == [
        ("a", 1, 15, True),  # kept: 15 + 5 > 16
        ("a", 20, 30, False),
        ("a", 30, 40, False),
        ("b", 2, 12, True),
    ]
    assert output_watermark_hold(st, SPEC) == 20
    # epoch 3 (wm 16): late a@8 and a@12 are accepted (t + 10 + 5 > 16); a@12 [12,22) bridges
    # [1,15) and [20,30): one session [1,30) of 5 events, emitted as update (it had fired).
    # b@-5 and b@-12 are candidates (t + 15 <= 16): b@-5 [-5,5) overlaps b's [2,12) in state,
    # b@-12 [-12,-2) reaches it through b@-5 -> accepted; b@-25 [-25,-15) merges with nothing.
    events = [("a", 8, 6), ("a", 12, 7), ("b", -25, 8), ("b", -12, 10), ("b", -5, 9)]
    st, res, late = run(st, events, 16, 19)
    assert rows_of(res, *RES) == [
        ("a", 1, 30, 5, [1, 2, 6, 7, 5], "update"),
        ("b", -12, 12, 3, [10, 9, 4], "update"),
    ]
    assert rows_of(late, "k", "v", "event_time", "watermark", "reason") == [
        ("b", 8, -25, 16, SESSION_LATE_REASON)
    ]
    # the merged-away sessions are gone; b's [-12,12) is purged at 19 (12 + 5 <= 19)
    assert rows_of(st, "k", "__ws", "__we", "n__count", "__fired") == [
        ("a", 1, 30, 5, True),
        ("a", 30, 40, 1, False),
    ]
    assert output_watermark_hold(st, SPEC) == 30
    # epoch 4: [30,40) fires; [1,30) already fired: no second final
    st, res, late = run(st, [], 19, 45)
    assert rows_of(res, *RES) == [("a", 30, 40, 1, [3], "final")]
    assert st.num_rows == 0 and output_watermark_hold(st, SPEC) is None


def test_split_late_and_resolve_candidates():
    spec = WindowSpec(Session(10), 0, "k", AGGS)
    feed = Feed()
    accepted, late, candidates = split_late(feed([("a", 5, 1), ("a", 1, 2), ("b", 0, 3)]), 11, spec)
    assert rows_of(accepted, "k", "__ws", "__we") == [("a", 5, 15)]  # 15 > 11
    assert late.num_rows == 0
    assert rows_of(candidates, "k", "__et") == [("a", 1), ("b", 0)]  # 11 <= 11, 10 <= 11
    live = pa.table(
        {
            "k": ["a", "b", "b"],
            "__ws": pa.array([12, -30, 9], pa.int64()),
            "__we": pa.array([22, 11, 19], pa.int64()),  # b [-30,11) is closed at 11: ignored
        }
    )
    ok, rejected = resolve_candidates(live, candidates, 11, spec)
    assert rows_of(ok, "k", "__ws", "__we") == [("b", 0, 10)]  # [0,10) overlaps b [9,19)
    assert rows_of(rejected, "k", "event_time", "watermark", "reason") == [
        ("a", 1, 11, SESSION_LATE_REASON)  # [1,11) touches nothing of a's [12,22)
    ]
    # with the epoch's partials as live sessions, a@1 merges with a@5's [5,15)
    live2 = pa.concat_tables([live, preaggregate(accepted, spec).select(["k", "__ws", "__we"])])
    ok, rejected = resolve_candidates(live2, candidates, 11, spec)
    assert rows_of(ok, "k", "__et") == [("a", 1), ("b", 0)] and rejected.num_rows == 0
    # nothing is alive after the end of the stream
    ok, rejected = resolve_candidates(live2, candidates, MAX_WATERMARK, spec)
    assert ok.num_rows == 0 and rejected.num_rows == 2


def test_preaggregate_merges_overlapping_events_of_a_batch():
    spec = WindowSpec(
        Session(10), 0, "k", (("n", agg.count()), ("f", agg.first("v")), ("l", agg.last("v")))
    )
    accepted, _, _ = split_late(
        Feed()([("a", 12, 1), ("a", 3, 2), ("a", 30, 3), ("a", 21, 4), ("b", 3, 5)]), NO_WM, spec
    )
    p = preaggregate(accepted, spec)
    # a: 3 [3,13) + 12 [12,22) + 21 [21,31) chain; 30 [30,40) overlaps [21,31) too
    assert rows_of(p, "k", "__ws", "__we", "n__count", "f__value", "l__value") == [
        ("a", 3, 40, 4, 2, 3),
        ("b", 3, 13, 1, 5, 5),
    ]


def test_update_mode_sessions_emit_early_until_final():
    spec = WindowSpec(Session(10), 0, "k", AGGS, emit="update")
    feed = Feed()
    st, res, _ = process_epoch(None, feed([("a", 1, 1), ("a", 3, 2)]), NO_WM, 0, spec)
    assert rows_of(res, *RES) == [("a", 1, 13, 2, [1, 2], "early")]
    st, res, _ = process_epoch(st, feed([("a", 20, 3)]), 0, 5, spec)
    assert rows_of(res, *RES) == [("a", 20, 30, 1, [3], "early")]  # [1,13) unchanged: no row
    st, res, _ = process_epoch(st, feed([("a", 12, 4)]), 5, 14, spec)  # bridges: [1,30)
    assert rows_of(res, *RES) == [("a", 1, 30, 4, [1, 2, 4, 3], "early")]
    assert output_watermark_hold(st, spec) == 1
    st, res, _ = process_epoch(st, feed([]), 14, 30, spec)
    assert rows_of(res, *RES) == [("a", 1, 30, 4, [1, 2, 4, 3], "final")]
    assert st.num_rows == 0


def test_callbacks_on_sessions_use_the_merged_session():
    seen = []

    def before(aggregate, event):
        seen.append(rows_of(aggregate, "window_start", "window_end", "n", "c"))
        return np.zeros(aggregate.num_rows, bool)

    spec = WindowSpec(
        Session(10),
        0,
        "k",
        AGGS,
        before_update=before,
        after_update=lambda a, e: pa.array([True] * a.num_rows),
    )
    feed = Feed()
    st, res, _ = process_epoch(None, feed([("a", 5, 2), ("a", 1, 1)]), NO_WM, 0, spec)
    assert seen == [[(1, 15, 0, []), (1, 15, 1, [1])]]
    assert rows_of(res, *RES) == [("a", 1, 15, 1, [1], "early"), ("a", 1, 15, 2, [1, 2], "early")]
    # a@14 [14,24) extends the session; running aggregates start from the state
    st, res, _ = process_epoch(st, feed([("a", 14, 3)]), 0, 2, spec)
    assert seen[-1] == [(1, 24, 2, [1, 2])]
    assert rows_of(res, *RES) == [("a", 1, 24, 3, [1, 2, 3], "early")]


# ---------------------------------------------------------------- randomized oracles


def simulate(seed, delay, spec, n=1000, n_keys=6):
    rng = np.random.default_rng(seed)
    t = (np.arange(n) * 3 + rng.integers(-25, 25, n)).astype(np.int64)
    keys = rng.integers(0, n_keys, n).astype(np.int64)
    x = rng.normal(size=n)
    ids = np.arange(n, dtype=np.int64)
    cuts = np.sort(rng.choice(np.arange(1, n), size=60, replace=False))
    bounds = [0, *cuts.tolist(), n]
    state, wm, max_seen = None, NO_WM, None
    results, lates, epoch_wm = [], [], np.empty(n, np.int64)
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
        epoch_wm[lo:hi] = wm
        state, res, late = process_epoch(state, table, wm, wm_out, spec)
        df = res.to_pandas()
        df["epoch"], df["wm_in"], df["wm_out"] = epoch, wm, wm_out
        results.append(df)
        lates.append(late.to_pandas())
        wm = wm_out
    assert state.num_rows == 0
    ev = pd.DataFrame({"k": keys, "id": ids, "t": t, "x": x, "wm": epoch_wm})
    return ev, pd.concat(results, ignore_index=True), pd.concat(lates, ignore_index=True)


R_AGGS = (
    ("n", agg.count()),
    ("m", agg.mean("x")),
    ("ids", agg.collect("id")),
    ("f", agg.first("id")),
    ("l", agg.last("id")),
)


def batch_sessions(ev, gap):
    ev = ev.sort_values(["k", "t", "id"])
    new = (ev.k != ev.k.shift()) | (ev.t - ev.t.shift() >= gap)  # sorted by t: prev max end = prev t + gap
    ev = ev.assign(session=new.cumsum())
    return (
        ev.groupby("session")
        .agg(
            k=("k", "first"),
            ws=("t", "min"),
            we=("t", "max"),
            n=("id", "size"),
            m=("x", "mean"),
            ids=("id", list),
        )
        .assign(we=lambda d: d.we + gap)
    )


@pytest.mark.parametrize("gap", [5, 12, 40])
def test_large_delay_equals_batch_sessions(gap):
    spec = WindowSpec(Session(gap), 0, "k", R_AGGS)
    ev, res, late = simulate(31, 10**6, spec)
    assert len(late) == 0 and (res.emit == "final").all()
    want = batch_sessions(ev, gap).sort_values(["k", "ws"])
    got = res.sort_values(["k", "window_start"])
    assert (
        got[["k", "window_start", "window_end", "n"]].values.tolist()
        == want[["k", "ws", "we", "n"]].values.tolist()
    )
    np.testing.assert_allclose(got.m.to_numpy(float), want.m.to_numpy(float), atol=1e-9)
    assert [list(v) for v in got.ids] == want.ids.tolist()
    assert got.f.tolist() == [v[0] for v in want.ids] and got.l.tolist() == [v[-1] for v in want.ids]


def current_results(res):
    """Drop rows superseded by a later row of the same key that contains all their events.

    (Interval cover is not enough: a session purged after its final may lie inside a
    later session made of other events.)
    """
    keep = []
    for _, rows in res.groupby("k", sort=False):
        kept = []
        for _, r in rows.iloc[::-1].iterrows():
            if not any(set(r.ids) <= set(s.ids) for s in kept):
                kept.append(r)
        keep += kept
    return pd.DataFrame(keep)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_delay_every_event_in_one_current_session_or_late(seed):
    gap, lateness = 8, 6
    spec = WindowSpec(Session(gap), lateness, "k", R_AGGS)
    ev, res, late = simulate(seed, 10, spec)
    assert len(late) > 0 and (res.emit == "update").any()
    cur = current_results(res)
    ids = [i for v in cur.ids for i in v]
    assert len(ids) == len(set(ids))  # no event twice
    assert sorted(ids + late.id.tolist()) == ev.id.tolist()  # every event exactly once
    assert (late.reason == SESSION_LATE_REASON).all()
    e = ev.set_index("id")
    # a late event could not be accepted on its own: t + gap + lateness <= watermark at arrival
    assert (late.event_time + gap + lateness <= e.wm[late.id].to_numpy()).all()
    assert (late.watermark.to_numpy() == e.wm[late.id].to_numpy()).all()
    for _, r in cur.iterrows():  # every current session is one connected session of its key
        t = np.sort(e.t[list(r.ids)].to_numpy())
        assert (e.k[list(r.ids)] == r.k).all()
        assert r.window_start == t[0] and r.window_end == t[-1] + gap and (np.diff(t) < gap).all()
        assert r.n == len(r.ids) and list(r.ids) == sorted(r.ids, key=lambda i: (e.t[i], i))
    # (current sessions of a key may overlap: an event accepted by its own [t, t + gap) after
    # an overlapping session was purged starts a new session; Flink behaves the same)
    finals = res[res.emit == "final"]
    assert ((finals.window_end <= finals.wm_out) & (finals.window_end > finals.wm_in)).all()
    assert not finals.duplicated(["k", "window_start", "window_end"]).any()
