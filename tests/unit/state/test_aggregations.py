"""Aggregators over Arrow columns: type rules, partial/merge/result, errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import doctest

import pyarrow as pa
import pytest

from wire.errors import ConfigError
from wire.state import aggregations as agg

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
        },
        schema=SCHEMA,
    )


def aggregate(aggregator, t, name="out"):
    """Partial over the whole table, then result: grouped by k, sorted by k."""
    partial_schema = pa.schema([SCHEMA.field("k"), *aggregator.partial_fields(name, t.schema)])
    p = agg.group_aggregate(t, ["k"], aggregator.partial_aggs(name), partial_schema)
    p = p.sort_by("k")
    return p, aggregator.result(name, p)


def merged(aggregator, t, name="out", split=3):
    """Partial over two halves, merge the partials, then result."""
    schema = pa.schema([SCHEMA.field("k"), *aggregator.partial_fields(name, t.schema)])
    halves = [t.slice(0, split), t.slice(split)]
    parts = [agg.group_aggregate(h, ["k"], aggregator.partial_aggs(name), schema) for h in halves]
    both = pa.concat_tables(parts)
    m = agg.group_aggregate(both, ["k"], aggregator.merge_aggs(name), schema).sort_by("k")
    return aggregator.result(name, m)


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
    assert [(s, f) for s, f, _, _ in agg.count("x").merge_aggs("n")] == [("n__count", "sum")]
    assert [(s, f) for s, f, _, _ in agg.sum("x").merge_aggs("t")] == [("t__sum", "sum")]
    assert [(s, f) for s, f, _, _ in agg.min("x").merge_aggs("lo")] == [("lo__min", "min")]
    assert [(s, f) for s, f, _, _ in agg.max("x").merge_aggs("hi")] == [("hi__max", "max")]
    assert [(s, f, o) for s, f, _, o in agg.mean("x").merge_aggs("m")] == [
        ("m__sum", "sum", "m__sum"),
        ("m__count", "sum", "m__count"),
    ]
    assert agg.count().partial_aggs("n")[0][0] is None  # counts rows, not a column


def test_several_aggregations_over_the_same_column_do_not_collide():
    t = table()
    aggs = agg.sum("f64").partial_aggs("a") + agg.mean("f64").partial_aggs("b")
    aggs += agg.count().partial_aggs("c") + agg.count().partial_aggs("d")
    p = agg.group_aggregate(t, ["k"], aggs).sort_by("k")
    assert p.column_names == ["k", "a__sum", "b__sum", "b__count", "c__count", "d__count"]
    assert p.column("a__sum").to_pylist() == [3.0, 8.0, None]
    assert p.column("b__count").to_pylist() == [2, 2, 0]
    assert p.column("d__count").to_pylist() == [3, 2, 1]


def test_empty_input():
    p, result = aggregate(agg.mean("f64"), table().slice(0, 0))
    assert p.num_rows == 0 and len(result) == 0 and result.type == pa.float64()


@pytest.mark.parametrize("bad", ["", None, 3, b"x"])
@pytest.mark.parametrize("factory", [agg.sum, agg.min, agg.max, agg.mean])
def test_column_must_be_non_empty_str(factory, bad):
    with pytest.raises(ConfigError, match=r"invalid column=.*accepted: a non-empty column name"):
        factory(bad)


@pytest.mark.parametrize("bad", ["", 3])
def test_count_column_must_be_none_or_str(bad):
    with pytest.raises(ConfigError, match=r"accepted: a non-empty column name \(str\) or None"):
        agg.count(bad)


@pytest.mark.parametrize("factory", [agg.count, agg.sum, agg.min, agg.max, agg.mean])
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
    with pytest.raises(
        ConfigError, match=r"accepted: an integer, floating-point or decimal column"
    ) as info:
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


def test_module_docstring_example_runs():
    failures, tried = doctest.testmod(agg, raise_on_error=False)
    assert tried > 0 and failures == 0
