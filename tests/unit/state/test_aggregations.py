"""Aggregators over Arrow columns: type rules, partial/merge/result, errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import doctest

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wire.errors import ConfigError
from wire.state import aggregations as agg
from wire.state import user
from wire.state.kernels import Groups, changes

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("i32", pa.int32()),
        ("u8", pa.uint8()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("dec", pa.decimal128(6, 2)),
        ("s", pa.string()),
        ("ts", pa.timestamp("ms")),
        ("b", pa.bool_()),
        ("lst", pa.list_(pa.int64())),
    ]
)


def table():
    return pa.table(
        {
            "k": ["a", "a", "b", "a", "b", "c"],
            "i32": [1, None, 3, 4, None, None],
            "u8": [1, 2, 3, 4, 5, 6],
            "f32": [0.5, 1.5, None, 2.0, 1.0, None],
            "f64": [1.0, 2.0, 3.0, None, 5.0, None],
            "dec": [decimal.Decimal("1.25"), None, decimal.Decimal("2.50"), None, None, None],
            "s": ["x", "z", None, "y", "q", None],
            "ts": [dt.datetime(2024, 1, d) for d in (3, 1, 2, 5, 4, 6)],
            "b": [True, False, True, None, False, True],
            "lst": [[1], [2], [3], [4], [5], [6]],
            # processing order inside k="a": rows 3 (t=1), 1 (t=2, seq 0), 0 (t=2, seq 5)
            "__et": [2, 2, 7, 1, 3, 9],
            "__seq": [5, 0, 1, 2, 3, 4],
        },
        schema=SCHEMA.append(pa.field("__et", pa.int64())).append(pa.field("__seq", pa.int64())),
    )


def partials_by_k(aggregator, t, name="out"):
    """Partial per k: rows sorted by (k, __et, __seq); one partial row per k, sorted by k."""
    t = t.sort_by([("k", "ascending"), ("__et", "ascending"), ("__seq", "ascending")])
    groups = Groups.from_new(changes(t, ["k"]))
    fields = aggregator.partial_fields(name, t.schema)
    cols = aggregator.partial(name, t, groups)
    assert [c.type for c in cols] == [f.type for f in fields]
    assert [f.name for f in fields] == aggregator.partial_names(name)
    keys = t.column("k").take(pa.array(groups.starts))
    return pa.Table.from_arrays([keys, *cols], schema=pa.schema([SCHEMA.field("k"), *fields]))


def aggregate(aggregator, t, name="out"):
    """Partial over the whole table, then result: grouped by k, sorted by k."""
    p = partials_by_k(aggregator, t, name)
    return p, aggregator.result(name, p)


def merged(aggregator, t, name="out", split=3):
    """Partial over two halves (rows in input order), merge the partials, then result."""
    parts = [partials_by_k(aggregator, h, name) for h in (t.slice(0, split), t.slice(split))]
    both = pa.concat_tables(parts).sort_by("k")  # stable: first half's row first
    groups = Groups.from_new(changes(both, ["k"]))
    cols = aggregator.merge(name, both, groups)
    return aggregator.result(name, pa.table(cols, names=aggregator.partial_names(name)))


@pytest.mark.parametrize(
    ("aggregator", "expected", "rtype"),
    [
        (agg.count(), [3, 2, 1], pa.int64()),
        (agg.count("i32"), [2, 1, 0], pa.int64()),
        (agg.count("lst"), [3, 2, 1], pa.int64()),
        (agg.sum("i32"), [5, 3, None], pa.int64()),
        (agg.sum("u8"), [7, 8, 6], pa.int64()),
        (agg.sum("f32"), [4.0, 1.0, None], pa.float64()),
        (agg.sum("dec"), [1.25, 2.5, None], pa.float64()),
        (agg.min("i32"), [1, 3, None], pa.int32()),
        (agg.max("f64"), [2.0, 5.0, None], pa.float64()),
        (agg.min("s"), ["x", "q", None], pa.string()),
        (agg.max("s"), ["z", "q", None], pa.string()),
        (
            agg.max("dec"),
            [decimal.Decimal("1.25"), decimal.Decimal("2.50"), None],
            SCHEMA.field("dec").type,
        ),
        (
            agg.min("ts"),
            [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 6)],
            pa.timestamp("ms"),
        ),
        (agg.mean("i32"), [2.5, 3.0, None], pa.float64()),
        (agg.mean("f32"), [4.0 / 3.0, 1.0, None], pa.float64()),
        (agg.mean("dec"), [1.25, 2.5, None], pa.float64()),
        (agg.first("f64"), [None, 5.0, None], pa.float64()),
        (agg.first("s"), ["y", "q", None], pa.string()),
        (agg.last("f64"), [1.0, 3.0, None], pa.float64()),
        (
            agg.last("ts"),
            [dt.datetime(2024, 1, 3), dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 6)],
            pa.timestamp("ms"),
        ),
        (agg.collect("f64"), [[None, 2.0, 1.0], [5.0, 3.0], [None]], pa.list_(pa.float64())),
        (agg.collect("lst"), [[[4], [2], [1]], [[5], [3]], [[6]]], pa.list_(pa.list_(pa.int64()))),
        (
            agg.aggregate(
                create=set,
                add=lambda s, v: s | {v},
                merge=lambda a, b: a | b,
                result=len,
                column="b",
                result_type=pa.int64(),
            ),
            [3, 2, 1],
            pa.int64(),
        ),
        (
            agg.aggregate(
                create=list,
                add=lambda acc, e: [*acc, e["u8"]],
                merge=lambda a, b: a + b,
                result=sorted,
                result_type=pa.list_(pa.int64()),
            ),
            [[1, 2, 4], [3, 5], [6]],
            pa.list_(pa.int64()),
        ),
    ],
    ids=repr,
)
def test_values_and_types(aggregator, expected, rtype):
    _, result = aggregate(aggregator, table())
    assert result.type == rtype
    assert aggregator.result_field("out", SCHEMA) == pa.field("out", rtype)
    assert_values(result.to_pylist(), expected)
    # merging two partials gives the same result as one partial over everything
    assert_values(merged(aggregator, table()).to_pylist(), expected)
    assert_values(merged(aggregator, table(), split=1).to_pylist(), expected)


def assert_values(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if isinstance(e, float):
            assert g == pytest.approx(e, abs=1e-12)
        else:
            assert g == e and type(g) is type(e)


def test_first_last_ties_go_by_arrival_then_state_first():
    # k="a": two events at t=2 with arrival 0 and 5; first/last follow the arrival order
    t = table()
    assert agg.first("u8").result("o", partials_by_k(agg.first("u8"), t, "o")).to_pylist() == [4, 5, 6]
    same_time = t.set_column(t.schema.get_field_index("__et"), "__et", pa.array([5] * 6, pa.int64()))
    firsts = aggregate(agg.first("u8"), same_time)[1].to_pylist()
    lasts = aggregate(agg.last("u8"), same_time)[1].to_pylist()
    assert firsts == [2, 3, 6] and lasts == [1, 5, 6]  # a: arrivals 0 (u8=2) .. 5 (u8=1)
    # merging: on a full (time, arrival) tie the earlier partial row (the state) wins
    a = pa.table({"o__value": [10, 20], "o__et": [5, 5], "o__seq": [1, 1]})
    g = Groups.from_new(np.array([True, False]))
    assert agg.first("x").merge("o", a, g)[0].to_pylist() == [10]
    assert agg.last("x").merge("o", a, g)[0].to_pylist() == [20]


def test_collect_merge_interleaves_by_event_time():
    # state partial [t=1, t=5] merged with a late partial [t=3]: values in time order
    p = pa.table(
        {
            "c__values": pa.array([["a", "c"], ["b"]]),
            "c__et": pa.array([[1, 5], [3]]),
            "c__seq": pa.array([[0, 1], [2]]),
        }
    )
    out = agg.collect("x").merge("c", p, Groups.from_new(np.array([True, False])))
    assert out[0].to_pylist() == [["a", "b", "c"]] and out[1].to_pylist() == [[1, 3, 5]]


def test_user_aggregator_uses_merge_and_equals_pandas():
    calls = {"merge": 0}

    def merge(a, b):
        calls["merge"] += 1
        return a | b

    distinct = agg.aggregate(
        create=set, add=lambda s, v: s | {v}, merge=merge, result=len, column="v", result_type=pa.int64()
    )
    rng = np.random.default_rng(3)
    n = 500
    t = pa.table(
        {"k": rng.integers(0, 9, n), "v": rng.integers(0, 30, n), "__et": np.arange(n), "__seq": np.arange(n)}
    )
    parts = [partials_by_k_any(distinct, t.slice(i, 100)) for i in range(0, n, 100)]
    both = pa.concat_tables(parts).sort_by("k")
    groups = Groups.from_new(changes(both, ["k"]))
    res = distinct.result("d", pa.table(distinct.merge("d", both, groups), names=["d__acc"]))
    want = t.to_pandas().groupby("k").v.nunique()
    assert res.to_pylist() == want.tolist()
    assert calls["merge"] > 0


def partials_by_k_any(aggregator, t, name="d"):
    t = t.sort_by([("k", "ascending"), ("__et", "ascending")])
    groups = Groups.from_new(changes(t, ["k"]))
    keys = t.column("k").take(pa.array(groups.starts))
    return pa.table(
        [keys, *aggregator.partial(name, t, groups)], names=["k", *aggregator.partial_names(name)]
    )


RUNNING = [
    agg.count(),
    agg.count("f64"),
    agg.sum("i32"),
    agg.sum("f64"),
    agg.mean("f32"),
    agg.min("s"),
    agg.max("f64"),
    agg.min("ts"),
    agg.first("u8"),
    agg.last("s"),
    agg.collect("i32"),
    agg.aggregate(
        create=list,
        add=lambda a, v: [*a, v],
        merge=lambda a, b: a + b,
        result=lambda a: len(a),
        column="s",
        result_type=pa.int64(),
    ),
]


@pytest.mark.parametrize("aggregator", RUNNING, ids=repr)
def test_running_equals_recomputing_every_prefix(aggregator):
    # state rows (initial) for group a (late events interleave with it) and none for b/c
    t = table().sort_by([("k", "ascending"), ("__et", "ascending"), ("__seq", "ascending")])
    groups = Groups.from_new(changes(t, ["k"]))
    names = aggregator.partial_names("o")
    init_events = pa.table({c: t.column(c) for c in t.column_names}).slice(0, 1)
    init_events = init_events.set_column(
        init_events.schema.get_field_index("__et"), "__et", pa.array([2], pa.int64())
    )  # t=2, seq 0 ties a state row
    state = aggregator.partial("o", init_events, Groups.singletons(1))
    schema = pa.schema(aggregator.partial_fields("o", t.schema))
    initial = pa.Table.from_arrays([pa.concat_arrays([s, pa.nulls(2, s.type)]) for s in state], schema=schema)
    before, after = aggregator.running("o", initial, t, groups)
    # oracle: for event i, partial over (state events + events of its group up to i)
    exp_before, exp_after = [], []
    for g in range(groups.n):
        lo, hi = groups.offsets[g], groups.offsets[g + 1]
        base = [init_events] if g == 0 else []
        for i in range(lo, hi + 1):
            prefix = pa.concat_tables([*base, t.slice(lo, i - lo)]) if base or i > lo else None
            if prefix is None or prefix.num_rows == 0:
                value = aggregator.result(
                    "o", pa.Table.from_arrays([pa.nulls(1, f.type) for f in schema], schema=schema)
                ).to_pylist()[0]
            else:
                prefix = prefix.sort_by([("__et", "ascending"), ("__seq", "ascending")])
                p = aggregator.partial(
                    "o", prefix, Groups.from_new(np.r_[True, np.zeros(prefix.num_rows - 1, bool)])
                )
                value = aggregator.result("o", pa.table(p, names=names)).to_pylist()[0]
            if i < hi:
                exp_before.append(value)
            if i > lo:
                exp_after.append(value)
    assert before.to_pylist() == exp_before
    assert after.to_pylist() == exp_after


def test_partial_names_and_types():
    assert [(f.name, f.type) for f in agg.mean("f64").partial_fields("mean_dep_delay", SCHEMA)] == [
        ("mean_dep_delay__sum", pa.float64()),
        ("mean_dep_delay__count", pa.int64()),
    ]
    assert [f.name for f in agg.count().partial_fields("n", SCHEMA)] == ["n__count"]
    assert [f.name for f in agg.sum("i32").partial_fields("t", SCHEMA)] == ["t__sum"]
    assert [f.type for f in agg.sum("i32").partial_fields("t", SCHEMA)] == [pa.int64()]
    assert [f.name for f in agg.min("s").partial_fields("lo", SCHEMA)] == ["lo__min"]
    assert [f.name for f in agg.max("s").partial_fields("hi", SCHEMA)] == ["hi__max"]


def test_merge_rules():
    # merged partials: count and sum add up, min/max of partial extremes
    p = pa.table({"n__count": [2, 3], "t__sum": [1.5, None], "lo__min": [4, 2], "hi__max": [4, 2]})
    g = Groups.from_new(np.array([True, False]))
    assert agg.count("x").merge("n", p, g)[0].to_pylist() == [5]
    assert agg.sum("x").merge("t", p, g)[0].to_pylist() == [1.5]
    assert agg.min("x").merge("lo", p, g)[0].to_pylist() == [2]
    assert agg.max("x").merge("hi", p, g)[0].to_pylist() == [4]


def test_several_aggregations_over_the_same_column_do_not_collide():
    names = (
        agg.sum("f64").partial_names("a")
        + agg.mean("f64").partial_names("b")
        + agg.count().partial_names("c")
        + agg.first("f64").partial_names("d")
    )
    assert names == ["a__sum", "b__sum", "b__count", "c__count", "d__value", "d__et", "d__seq"]
    assert aggregate(agg.mean("f64"), table(), "b")[0].column("b__count").to_pylist() == [2, 2, 0]


@pytest.mark.parametrize("aggregator", RUNNING, ids=repr)
def test_empty_input(aggregator):
    p, result = aggregate(aggregator, table().slice(0, 0))
    assert p.num_rows == 0 and len(result) == 0
    assert result.type == aggregator.result_field("o", table().schema).type


@pytest.mark.parametrize("bad", ["", None, 3, b"x"])
@pytest.mark.parametrize("factory", [agg.sum, agg.min, agg.max, agg.mean, agg.first, agg.last, agg.collect])
def test_column_must_be_non_empty_str(factory, bad):
    with pytest.raises(ConfigError, match=r"invalid column=.*accepted: a non-empty column name"):
        factory(bad)


@pytest.mark.parametrize("bad", ["", 3])
def test_count_column_must_be_none_or_str(bad):
    with pytest.raises(ConfigError, match=r"accepted: a non-empty column name \(str\) or None"):
        agg.count(bad)


@pytest.mark.parametrize(
    "factory", [agg.count, agg.sum, agg.min, agg.max, agg.mean, agg.first, agg.last, agg.collect]
)
def test_missing_column_lists_available_columns(factory):
    with pytest.raises(ConfigError) as info:
        factory("nope").partial_fields("o", SCHEMA)
    assert info.value.parameter == "column" and info.value.value == "nope"
    assert "'k'" in info.value.accepted and "'lst'" in info.value.accepted
    with pytest.raises(ConfigError, match="invalid column='nope'"):
        factory("nope").result_field("o", SCHEMA)


@pytest.mark.parametrize("factory", [agg.sum, agg.mean])
@pytest.mark.parametrize("column", ["s", "ts", "b", "lst"])
def test_sum_and_mean_need_numeric(factory, column):
    with pytest.raises(ConfigError, match=r"accepted: an integer, floating-point or decimal column") as info:
        factory(column).partial_fields("o", SCHEMA)
    assert column in str(info.value)
    with pytest.raises(ConfigError):
        factory(column).result_field("o", SCHEMA)


@pytest.mark.parametrize("factory", [agg.min, agg.max])
@pytest.mark.parametrize("column", ["b", "lst"])
def test_min_max_reject_unordered_types(factory, column):
    with pytest.raises(ConfigError, match="accepted: a numeric, temporal or string column"):
        factory(column).result_field("o", SCHEMA)


def test_aggregators_are_frozen_values():
    assert agg.sum("x") == agg.Sum("x") and agg.sum("x") != agg.sum("y")
    assert agg.count() == agg.count() and agg.count() != agg.count("x")
    assert isinstance(agg.mean("x"), agg.Aggregator)
    with pytest.raises(dataclasses.FrozenInstanceError):
        agg.min("x").column = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        agg.Aggregator("x")  # type: ignore[abstract]


def test_user_aggregator_validation():
    ok = {"create": set, "add": max, "merge": max, "result": len, "result_type": pa.int64()}
    for parameter in ("create", "add", "merge", "result"):
        with pytest.raises(ConfigError, match=f"invalid {parameter}="):
            agg.aggregate(**(ok | {parameter: 3}))
    with pytest.raises(ConfigError, match="invalid result_type="):
        agg.aggregate(**(ok | {"result_type": int}))
    with pytest.raises(ConfigError, match="invalid column="):
        agg.aggregate(**ok, column="")
    with pytest.raises(ConfigError, match="invalid column='nope'"):
        agg.aggregate(**ok, column="nope").result_field("o", SCHEMA)
    assert agg.aggregate(**ok).result_field("o", SCHEMA) == pa.field("o", pa.int64())


def test_running_matches_pandas_cumulative_ops():
    rng = np.random.default_rng(5)
    n = 3000
    k = np.sort(rng.integers(0, 50, n))
    x = rng.normal(size=n)
    x[rng.random(n) < 0.2] = np.nan
    t = pa.table({"k": k, "x": pa.array(x, from_pandas=True), "__et": np.arange(n), "__seq": np.arange(n)})
    groups = Groups.from_new(changes(t, ["k"]))
    df = pd.DataFrame({"k": k, "x": x})
    g = df.groupby("k").x
    for aggregator, want in [
        (agg.sum("x"), g.cumsum()),
        (agg.max("x"), g.cummax()),
        (agg.min("x"), g.cummin()),
        (agg.count("x"), g.cumcount() + 1 - df.x.isna().groupby(df.k).cumsum()),
    ]:
        fields = aggregator.partial_fields("o", t.schema)
        initial = pa.Table.from_arrays([pa.nulls(groups.n, f.type) for f in fields], schema=pa.schema(fields))
        _, after = aggregator.running("o", initial, t, groups)
        got = after.to_numpy(zero_copy_only=False).astype(float)
        # pandas leaves NaN where the current value is NaN; compare where it has a value
        has = ~np.isnan(want.to_numpy(float))
        np.testing.assert_allclose(got[has], want.to_numpy(float)[has], atol=1e-9)


@pytest.mark.parametrize("module", [agg, user])
def test_module_docstring_example_runs(module):
    failures, tried = doctest.testmod(module, raise_on_error=False)
    assert tried > 0 and failures == 0
