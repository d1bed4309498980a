"""max_by / min_by / top_k kernels against a plain-Python batch oracle, for any epoch split.

The oracle ranks each window's events with ``sorted`` (no Arrow): by the order value
(largest or smallest first), then by (event time, arrival). Values come from a tiny
range so that ties are common, with nulls.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from wire.core.envelope import MAX_WATERMARK
from wire.errors import ConfigError
from wire.state import windows as W
from wire.state.kernels import Groups
from wire.state.spec import result_schema

NO_WM = -(2**63)
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("p", pa.string()),
                    ("__et", pa.int64()), ("__seq", pa.int64())])

AGGS = {
    "max_by": lambda: wire.max_by("v", columns=["p", "v"]),
    "min_by": lambda: wire.min_by("v", columns=["p", "v"]),
    "top2_first": lambda: wire.top_k("v", 2, columns=["p", "v"]),
    "top2_all": lambda: wire.top_k("v", 2, columns=["p", "v"], ties="all"),
    "bottom1_all": lambda: wire.top_k("v", 1, columns=["p", "v"], ties="all", largest=False),
}


def oracle_rank(events: list[dict], agg_name: str) -> object:
    """Expected result of aggregation ``agg_name`` over one window's events (dicts)."""
    ranked = [e for e in events if e["v"] is not None]
    largest = agg_name not in ("min_by", "bottom1_all")
    ranked.sort(key=lambda e: ((-e["v"] if largest else e["v"]), e["__et"], e["__seq"]))
    rows = [{"p": e["p"], "v": e["v"]} for e in ranked]
    if agg_name in ("max_by", "min_by"):
        return rows[0] if rows else None
    k = 1 if agg_name == "bottom1_all" else 2
    if agg_name.endswith("_all") and len(ranked) > k:
        kth = ranked[k - 1]["v"]
        return [r for i, r in enumerate(rows) if i < k or r["v"] == kth]
    return rows[:k]


def oracle_windows(events: list[dict], assigner: str) -> dict[tuple, list[dict]]:
    """(key, start, end) -> events of that window, over the whole input at once."""
    out: dict[tuple, list[dict]] = {}
    if assigner == "session":
        for key in sorted({e["k"] for e in events}):
            evs = sorted((e for e in events if e["k"] == key), key=lambda e: e["__et"])
            current: list[dict] = []
            end = None
            for e in evs:
                if current and e["__et"] >= end:
                    out[(key, current[0]["__et"], end)] = current
                    current = []
                end = e["__et"] + GAP if not current else max(end, e["__et"] + GAP)
                current.append(e)
            out[(key, current[0]["__et"], end)] = current
        return out
    size, slide = (SIZE, SIZE) if assigner == "tumbling" else (SIZE, SLIDE)
    for e in events:
        last = e["__et"] // slide * slide
        for start in range(last, e["__et"] - size, -slide):
            out.setdefault((e["k"], start, start + size), []).append(e)
    return out


SIZE, SLIDE, GAP = 10, 5, 4


def spec_of(assigner: str, aggs: list[str], lateness: int) -> W.WindowSpec:
    a = {"tumbling": W.Tumbling(SIZE), "sliding": W.Sliding(SIZE, SLIDE),
         "session": W.Session(GAP)}[assigner]
    return W.WindowSpec(a, lateness, "k", tuple((n, AGGS[n]()) for n in aggs))


events_st = st.lists(
    st.tuples(st.sampled_from("ab"), st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 40)),
    min_size=1, max_size=40,
)


def to_events(raw: list[tuple]) -> list[dict]:
    return [{"k": k, "v": v, "p": f"e{i}", "__et": t, "__seq": i} for i, (k, v, t) in enumerate(raw)]


def run_epochs(events: list[dict], cuts: list[int], spec: W.WindowSpec, *, delay: int | None,
               parts: int) -> pa.Table:
    """Run the kernels epoch by epoch (each epoch pre-aggregated in ``parts`` batches).

    ``delay`` None: no watermark until the end; else watermark = max time seen - delay.
    """
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    state, results, wm, seen = None, [], NO_WM, NO_WM
    for lo, hi in itertools.pairwise(bounds):
        batch = pa.Table.from_pylist(events[lo:hi], schema=SCHEMA)
        seen = max(seen, max(e["__et"] for e in events[lo:hi]))
        new_wm = wm if delay is None else max(wm, seen - delay)
        partials, late = [], []
        step = max(1, math.ceil(batch.num_rows / parts))
        for start in range(0, batch.num_rows, step):
            accepted, late_part, candidates = W.split_late(batch.slice(start, step), wm, spec)
            assert candidates.num_rows == 0
            late.append(late_part.num_rows)
            partials.append(W.preaggregate(accepted, spec))
        assert sum(late) == 0
        state, out = W.advance(state, pa.concat_tables(partials), wm, new_wm, spec)
        results.append(out)
        wm = new_wm
    state, out = W.advance(state, None if state is None else state.schema.empty_table().drop_columns(
        ["__fired"]), wm, MAX_WATERMARK, spec)
    results.append(out)
    assert state.num_rows == 0
    return pa.concat_tables(results)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=events_st, cuts=st.lists(st.integers(0, 40), max_size=5),
       assigner=st.sampled_from(["tumbling", "sliding", "session"]),
       delay=st.one_of(st.none(), st.integers(0, 10)), parts=st.integers(1, 3))
def test_last_result_per_window_equals_the_batch_oracle(raw, cuts, assigner, delay, parts):
    events = to_events(raw)
    names = list(AGGS)
    # allowed lateness covers the whole input: nothing is late, late events update windows
    spec = spec_of(assigner, names, lateness=100)
    results = run_epochs(events, cuts, spec, delay=delay, parts=parts)
    last: dict[tuple, dict] = {}
    for row in results.to_pylist():
        last[(row["k"], row["window_start"], row["window_end"])] = row
    expected = oracle_windows(events, assigner)
    for window, evs in expected.items():
        assert window in last, window
        for name in names:
            assert last[window][name] == oracle_rank(evs, name), (window, name)
    if assigner != "session":  # sessions also emit the partial sessions they later merged
        assert set(last) == set(expected)


@settings(max_examples=100, deadline=None)
@given(raw=events_st, name=st.sampled_from(list(AGGS)), n_init=st.integers(0, 5))
def test_running_results_equal_the_oracle_on_each_prefix(raw, name, n_init):
    """Callbacks see the result before and after each event: the oracle on each prefix."""
    events = to_events([("a", v, t) for _, v, t in raw])
    agg = AGGS[name]()
    initial_events, rest = events[:n_init], events[n_init:]
    if not rest:
        return
    schema = SCHEMA
    names = agg.partial_names(name)
    if initial_events:
        t = pa.Table.from_pylist(initial_events, schema=schema)
        initial = pa.table(agg.partial(name, t, Groups.from_new(np.eye(1, len(t), dtype=bool)[0])),
                           names=names)
    else:
        fields = agg.partial_fields(name, schema)
        initial = pa.table([pa.nulls(1, f.type) for f in fields], names=names)
    t = pa.Table.from_pylist(rest, schema=schema)
    before, after = agg.running(name, initial, t, Groups.from_new(np.eye(1, len(t), dtype=bool)[0]))
    for i in range(len(rest)):
        empty = [] if name not in ("max_by", "min_by") else None
        prefix = initial_events + rest[:i]
        assert before[i].as_py() == (oracle_rank(prefix, name) if prefix else empty)
        assert after[i].as_py() == oracle_rank([*prefix, rest[i]], name)


def test_ties_and_nulls_by_hand():
    t = pa.table({"k": ["a"] * 6, "v": [2.0, None, 5.0, 5.0, float("nan"), 2.0], "p": list("uvwxyz"),
                  "__et": [1, 2, 3, 3, 4, 0], "__seq": [0, 1, 3, 2, 4, 5]})
    g = Groups.from_new([True] + [False] * 5)

    def run(agg):
        names = agg.partial_names("o")
        return agg.result("o", pa.table(agg.partial("o", t, g), names=names)).to_pylist()

    # 5.0 twice at t=3: arrival 2 (x) before 3 (w); NaN and null are not ranked
    assert run(wire.max_by("v", columns=["p"])) == [{"p": "x"}]
    assert run(wire.min_by("v", columns=["p"])) == [{"p": "z"}]  # 2.0 at t=0 before t=1
    assert run(wire.top_k("v", 1, columns=["p"], ties="all")) == [[{"p": "x"}, {"p": "w"}]]
    assert run(wire.top_k("v", 3, columns=["p"])) == [[{"p": "x"}, {"p": "w"}, {"p": "z"}]]
    assert run(wire.top_k("v", 3, columns=["p"], ties="all")) == [
        [{"p": "x"}, {"p": "w"}, {"p": "z"}, {"p": "u"}]]
    # all columns by default (internal __ columns left out), in input order
    assert run(wire.max_by("v")) == [{"k": "a", "v": 5.0, "p": "x"}]
    only_null = t.filter(pa.array([False, True, False, False, False, False]))
    agg = wire.max_by("v", columns=["p"])
    names = agg.partial_names("o")
    one = Groups.from_new([True])
    assert agg.result("o", pa.table(agg.partial("o", only_null, one), names=names)).to_pylist() == [None]
    top = wire.top_k("v", 2, columns=["p"])
    assert top.result("o", pa.table(top.partial("o", only_null, one), names=names)).to_pylist() == [[]]


def test_cumulative_of_no_rows_is_empty():
    agg = wire.top_k("v", 2, columns=["p"])
    empty = pa.table([pa.array([], f.type) for f in agg.partial_fields("o", SCHEMA)],
                     names=agg.partial_names("o"))
    out = agg.cumulative("o", empty, Groups.from_new(np.zeros(0, dtype=bool)))
    assert [len(a) for a in out] == [0, 0, 0, 0]


def test_result_types_keep_the_input_types():
    schema = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("d", pa.decimal128(6, 2)), ("__et", pa.int64()), ("__seq", pa.int64())])
    spec = W.WindowSpec(W.Tumbling(10), 0, "k", (("m", wire.max_by("d")),
                                                         ("t", wire.top_k("ts", 2, columns=["d"]))))
    out = result_schema(spec, schema)
    assert out.field("m").type == pa.struct([("k", pa.string()), ("ts", pa.timestamp("us", tz="UTC")),
                                             ("d", pa.decimal128(6, 2))])
    assert out.field("t").type == pa.list_(pa.struct([("d", pa.decimal128(6, 2))]))
    t = pa.table({"k": ["a", "a"], "ts": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * 2,
                  "d": pa.array([1, 2], pa.decimal128(6, 2)), "__et": [1, 2], "__seq": [0, 1]},
                 schema=schema)
    _, res = W.advance(None, W.preaggregate(W.split_late(t, NO_WM, spec)[0], spec), NO_WM,
                       MAX_WATERMARK, spec)
    assert res.column("m").to_pylist()[0]["d"] == 2


@pytest.mark.parametrize(
    ("build", "parameter"),
    [
        (lambda: wire.top_k("v", 0), "k"),
        (lambda: wire.top_k("v", -1), "k"),
        (lambda: wire.top_k("v", True), "k"),
        (lambda: wire.top_k("v", 1.5), "k"),
        (lambda: wire.top_k("v", 2, ties="last"), "ties"),
        (lambda: wire.top_k("v", 2, largest="yes"), "largest"),
        (lambda: wire.max_by(""), "order_column"),
        (lambda: wire.max_by(None), "order_column"),
        (lambda: wire.max_by("v", columns="p"), "columns"),
        (lambda: wire.max_by("v", columns=[]), "columns"),
        (lambda: wire.min_by("v", columns=["p", "p"]), "columns"),
        (lambda: wire.min_by("v", columns=["p", 3]), "columns"),
    ],
)
def test_bad_configuration_names_the_parameter(build, parameter):
    with pytest.raises(ConfigError) as e:
        build()
    assert e.value.parameter == parameter
    assert e.value.accepted


@pytest.mark.parametrize(
    ("agg", "parameter", "accepted"),
    [
        (wire.max_by("nope"), "order_column", "one of the input columns"),
        (wire.top_k("lst", 1), "order_column", "numeric, temporal or string"),
        (wire.min_by("b"), "order_column", "numeric, temporal or string"),
        (wire.top_k("v", 1, columns=["p", "nope"]), "columns", "names of input columns"),
        (wire.max_by("v", columns=["__et"]), "columns", "names of input columns"),
    ],
)
def test_schema_errors_name_the_parameter(agg, parameter, accepted):
    schema = pa.schema([("k", pa.string()), ("v", pa.int64()), ("p", pa.string()),
                        ("lst", pa.list_(pa.int64())), ("b", pa.bool_()),
                        ("__et", pa.int64()), ("__seq", pa.int64())])
    spec = W.WindowSpec(W.Tumbling(10), 0, "k", (("o", agg),))
    with pytest.raises(ConfigError) as e:
        result_schema(spec, schema)
    assert e.value.parameter == parameter
    assert accepted in e.value.accepted
