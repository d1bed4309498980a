"""Filter pushdown (``wire.compiler.pushdown``): what translates, and that it never drops a kept row.

The oracle of the soundness tests is Spark's own ``filter`` over the same rows: every row
it keeps must be kept by the pushed predicate (:func:`wire.core.predicate.keep`), and an
exact translation keeps exactly those rows.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import wire
from wire.compiler.pushdown import source_predicate, translate, translate_value
from wire.core.predicate import keep, value
from wire.examples.nexmark_source import nexmark
from wire.sources.base.rows import spark_struct
from wire.testing import MemorySink

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("kind", StringType()), StructField("state", StringType()),
                     StructField("category", LongType()), StructField("x", IntegerType()),
                     StructField("d", DoubleType()), StructField("flag", BooleanType()),
                     StructField("ts", TimestampType())])
ROWS = [("person", "OR", 10, 1, 0.5, True, None), ("auction", "CA", 10, 2, float("nan"), False, None),
        ("bid", None, 3, None, None, None, None), (None, "ID", None, 3000, 2.0, True, None),
        ("auction", "WA", 11, -4, -1.0, None, None), ("person", "CA", None, 0, float("nan"), False, None),
        ("bid", "CA", 2, 3, -0.0, True, None), ("bid", "OR", 1, 2, float("inf"), False, None)]


def condition(spark, predicate):
    empty = spark.createDataFrame([], SCHEMA)
    return empty.filter(F.expr(predicate) if isinstance(predicate, str) else predicate)._jdf \
        .queryExecution().analyzed().condition()


@pytest.mark.parametrize(("predicate", "expected"), [
    ("kind = 'person' AND state IN ('OR', 'ID', 'CA')",
     ["and", ["cmp", "=", ["col", "kind"], ["lit", "person"]], ["in", ["col", "state"], ["OR", "ID", "CA"]]]),
    ("category = 10", ["cmp", "=", ["col", "category"], ["lit", 10]]),  # int literal widened to bigint
    ("x != 3", ["not", ["cmp", "=", ["col", "x"], ["lit", 3]]]),
    ("x >= 3000000000", ["cmp", ">=", ["col", "x"], ["lit", 3000000000]]),  # int column widened
    ("flag", ["col", "flag"]),
    ("state IS NULL OR NOT flag", ["or", ["isnull", ["col", "state"]], ["not", ["col", "flag"]]]),
    ("x IN (1, NULL)", ["in", ["col", "x"], [1, None]]),
    ("kind IN ('col', 'lit')", ["in", ["col", "kind"], ["col", "lit"]]),  # values, not tree nodes
    # floating point: the decimal literal 1.0 and the int literal 0 are cast to double
    ("kind = 'bid' AND d > 1.0", ["and", ["cmp", "=", ["col", "kind"], ["lit", "bid"]],
                                  ["cmp", ">", ["col", "d"], ["lit", 1.0]]]),
    ("d <= 0", ["cmp", "<=", ["col", "d"], ["lit", 0.0]]),
    ("x < 2.5E0", ["cmp", "<", ["col", "x"], ["lit", 2.5]]),  # the int column cast to double
    ("ts IS NOT NULL", ["isnotnull", ["col", "ts"]]),  # any type: a null is a null
    # an AND keeps its translatable side
    ("kind = 'bid' AND upper(state) = 'CA'", ["cmp", "=", ["col", "kind"], ["lit", "bid"]]),
    # arithmetic operands (Nexmark q2), in Spark's ANSI mode: checked
    ("category % 123 = 0", ["cmp", "=", ["arith", "%", ["col", "category"],
                                         ["cast", ["lit", 123, "int32"], "int64"], True], ["lit", 0]]),
])
def test_what_translates(spark, predicate, expected):
    assert translate(condition(spark, predicate)) == expected


@pytest.mark.parametrize("predicate", [
    "kind = 'bid' OR upper(state) = 'CA'",          # an OR needs both sides
    "NOT (kind = 'bid' AND upper(state) = 'CA')",   # under NOT nothing may be weakened
    "upper(kind) = 'BID'",                          # a function call
    "x = '3'",                                      # Spark casts the string column side
    "ts > '2026-01-01'",                            # a timestamp
])
def test_what_does_not_translate(spark, predicate):
    assert translate(condition(spark, predicate)) is None


PREDICATES = [
    "kind = 'person' AND state IN ('OR', 'ID', 'CA')", "category = 10 OR x < 0", "x != 3",
    "x IN (1, NULL)", "NOT (x IN (1, 2))", "flag", "NOT flag", "state IS NULL OR NOT flag",
    "kind = 'bid' AND d > 1.0", "d > 1.0 AND x > 0", "kind >= 'b' AND kind < 'c'",
    "category IS NOT NULL AND NOT (category = 10 AND kind = 'person')", "kind = 'auction' OR kind = 'person'",
    "d = 0", "NOT (d < 1.5)", "d > 1E308", "d != d", "x < 2.5 OR d IN (0.5, 2.0)", "d IS NOT NULL",
    "kind = 'bid' AND upper(state) = 'CA'",
    "category % 3 = 1", "x * 2 > 3 OR -x > 2", "category div 2 = 5 AND x % -3 != 0", "d * 2 > x + 1",
]


def _norm(rows) -> Counter:
    """Rows as a multiset of comparable tuples (NaN is not equal to itself)."""
    return Counter(tuple("NaN" if isinstance(v, float) and v != v else repr(v) for v in r) for r in rows)


@pytest.mark.parametrize("predicate", PREDICATES)
def test_the_pushed_predicate_keeps_every_row_sparks_filter_keeps(spark, predicate):
    df = spark.createDataFrame(ROWS, SCHEMA)
    theirs = _norm(tuple(r) for r in df.filter(F.expr(predicate)).collect())
    pushed = translate(condition(spark, predicate))
    assert pushed is not None
    arrow = pa.schema([("kind", pa.string()), ("state", pa.string()), ("category", pa.int64()),
                       ("x", pa.int32()), ("d", pa.float64()), ("flag", pa.bool_()),
                       ("ts", pa.timestamp("us", "UTC"))])
    table = pa.Table.from_pylist([dict(zip(SCHEMA.fieldNames(), r, strict=True)) for r in ROWS], schema=arrow)
    ours = _norm(r for r, k in zip(ROWS, keep(table, pushed).to_pylist(), strict=True) if k)
    assert not theirs - ours  # never drops a row Spark keeps
    if "upper" not in predicate:  # an exact translation keeps exactly Spark's rows
        assert ours == theirs


EXPRESSIONS = ["(a * 908) div 1000", "a % 7", "a % -3", "a div -7", "-b + a", "b * 3 - a", "d * 2 + b",
               "-(a - b) * 2", "b + 1",
               # CASE WHEN and IF: a null condition is not true; no ELSE gives null
               "CASE WHEN a > b THEN a ELSE b END", "CASE WHEN d > 0 THEN 1 WHEN a IS NULL THEN 2 END",
               "IF(b > 0, d, a)", "CASE WHEN a = 1 OR d < 0 THEN b ELSE -1 END",
               "CASE WHEN b IN (1, 2, NULL) THEN 1 ELSE 0 END", "CASE WHEN NOT (a < 0) THEN a END"]
STRING_CASES = ["CASE WHEN s IN ('arith', 'neg') THEN 1 ELSE 0 END", "IF(s = 'div', a, 0)"]
"""CASE over a string ``s`` whose literals spell tree nodes' names (data, never read as nodes)."""
"""Value expressions (a sink fusion's maps) over a bigint ``a``, an int ``b`` and a double ``d``."""

numbers = st.tuples(st.none() | st.integers(-10**9, 10**9), st.none() | st.integers(-10**6, 10**6),
                    st.none() | st.floats(-1e6, 1e6, allow_nan=False))


@settings(max_examples=15, deadline=None)
@given(rows=st.lists(numbers, min_size=1, max_size=20))
def test_value_expressions_equal_sparks(spark, rows):
    """Spark's own evaluation is the oracle: the same values, of the same types, nulls included."""
    schema = StructType([StructField("a", LongType()), StructField("b", IntegerType()),
                         StructField("d", DoubleType()), StructField("s", StringType())])
    rows = [(*r, ["arith", "div", None, "x"][i % 4]) for i, r in enumerate(rows)]
    df = spark.createDataFrame(rows, schema)
    expressions = EXPRESSIONS + STRING_CASES
    theirs = df.select(*[F.expr(e).alias(f"e{i}") for i, e in enumerate(expressions)]).collect()
    arrow = pa.schema([("a", pa.int64()), ("b", pa.int32()), ("d", pa.float64()), ("s", pa.string())])
    table = pa.Table.from_pylist([dict(zip("abds", r, strict=True)) for r in rows], schema=arrow)
    for i, e in enumerate(expressions):
        analyzed = df.select(F.expr(e))._jdf.queryExecution().analyzed().projectList().apply(0)
        tree = translate_value(analyzed)
        assert tree is not None, e
        ours = value(table, tree).to_pylist()
        assert ours == [r[i] for r in theirs], e


def test_what_values_do_not_translate(spark):
    df = spark.createDataFrame([], StructType([StructField("a", LongType()), StructField("d", DoubleType())]))
    for e in ["a / 2", "d % 2", "cast(a AS int)", "abs(a)", "try_add(a, 1)", "a * 1.5BD",
              # a CASE holding what can raise (every part is evaluated on every row), or a function
              "CASE WHEN a > 0 THEN a + 1 ELSE 0 END", "IF(a div 2 = 1, 1, 2)", "CASE WHEN a > 0 THEN -a END",
              "CASE WHEN abs(a) > 1 THEN 1 ELSE 0 END", "CASE WHEN a > 0 THEN 'x' ELSE 'y' END"]:
        analyzed = df.select(F.expr(e))._jdf.queryExecution().analyzed().projectList().apply(0)
        assert translate_value(analyzed) is None, e


def test_nexmark_q8s_case_when_translates_to_its_hand_derived_tree(spark):
    schema = StructType([StructField("kind", StringType()), StructField("person_id", LongType()),
                         StructField("seller", LongType())])
    df = spark.createDataFrame([], schema)
    trees = [translate_value(df.select(F.expr(e))._jdf.queryExecution().analyzed().projectList().apply(0))
             for e in ("CASE WHEN kind = 'person' THEN person_id ELSE seller END",
                       "CASE WHEN kind = 'person' THEN 1 ELSE 0 END")]
    is_person = ["cmp", "=", ["col", "kind"], ["lit", "person"]]
    assert trees == [["case", [[is_person, ["col", "person_id"]]], ["col", "seller"], "int64"],
                     ["case", [[is_person, ["lit", 1, "int32"]]], ["lit", 0, "int32"], "int32"]]
    table = pa.table({"kind": ["person", "auction", None], "person_id": pa.array([1, None, 3], pa.int64()),
                      "seller": pa.array([None, 20, 30], pa.int64())})
    assert value(table, trees[0]).to_pylist() == [1, 20, 30]  # a null kind is not 'person': ELSE
    assert value(table, trees[1]).to_pylist() == [1, 0, 0]


def _flow():
    flow = wire.Flow("pushdown")
    events = flow.source(nexmark(events=100), event_time="date_time", name="events")
    return flow, events


def _predicate(spark, flow):
    payload = spark_struct(flow.plan().node("events").connector.resolve_schema())
    return source_predicate(spark, flow.plan(), "events", payload)


def test_branches_push_the_or_of_their_filters(spark):
    flow, events = _flow()
    events.filter("kind = 'person'", name="p").sink(MemorySink(), name="a")
    events.filter("KIND = 'auction' AND category = 10", name="q").sink(MemorySink(), name="b")
    assert _predicate(spark, flow) == [
        "or", ["cmp", "=", ["col", "kind"], ["lit", "person"]],
        ["and", ["cmp", "=", ["col", "kind"], ["lit", "auction"]],
         ["cmp", "=", ["col", "category"], ["lit", 10]]]]


def test_a_reader_that_is_not_a_filter_stops_the_pushdown(spark):
    flow, events = _flow()
    events.filter("kind = 'person'", name="p").sink(MemorySink(), name="a")
    events.select("kind", "price").sink(MemorySink(), name="b")  # reads every event
    assert _predicate(spark, flow) is None


def test_a_sink_on_the_source_stops_it_but_one_on_its_dead_letters_does_not(spark):
    flow, events = _flow()
    events.filter("kind = 'person'", name="p").sink(MemorySink(), name="a")
    events.dead_letters().sink(MemorySink(), name="dead")
    assert _predicate(spark, flow) == ["cmp", "=", ["col", "kind"], ["lit", "person"]]
    flow, events = _flow()
    events.sink(MemorySink(), name="all")
    assert _predicate(spark, flow) is None


def test_the_predicate_is_found_once_and_reaches_the_source(spark, tmp_path, monkeypatch):
    """Column pruning compiles a flow twice; the pushdown is found in the first, reused in the second."""
    import pyarrow.parquet as pq

    from wire.compiler import plan_compiler

    pq.write_table(pa.table({"t": [1, 2], "kind": ["bid", "person"], "price": [3, 4], "x": [0, 0]}),
                   tmp_path / "part-0.parquet")
    calls = []
    real = plan_compiler.source_predicate
    monkeypatch.setattr(plan_compiler, "source_predicate", lambda *a: calls.append(a[2]) or real(*a))
    requests = []
    real_read = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet").__class__.read_stream

    def read_stream(self, spark, request):
        requests.append(request)
        return real_read(self, spark, request)

    source = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet")
    monkeypatch.setattr(type(source), "read_stream", read_stream)
    flow = wire.Flow("pushdown")
    events = flow.source(source, event_time="t", name="events")
    events.filter("kind = 'bid'").select("price").sink(MemorySink())
    compiled = plan_compiler.compile_plan(flow.plan(), spark, 2)
    assert compiled.source_columns == {"events": ("t", "kind", "price")}  # pruned: compiled twice
    assert calls == ["events"]
    assert [r.predicate for r in requests] == [["cmp", "=", ["col", "kind"], ["lit", "bid"]]] * 2


def test_names_are_the_schemas_and_literal_values_are_left_alone():
    from wire.compiler.pushdown import _named

    tree = ["and", ["in", ["col", "KIND"], ["col", "lit"]],
            ["not", ["cmp", "<", ["col", "Price"], ["lit", 3]]]]
    assert _named(tree, ["kind", "price"]) == [
        "and", ["in", ["col", "kind"], ["col", "lit"]], ["not", ["cmp", "<", ["col", "price"], ["lit", 3]]]]
    assert _named(["isnull", ["col", "k"]], ["K", "k"]) == ["isnull", ["col", "k"]]  # exact name first
    assert _named(["isnull", ["col", "x"]], ["X1", "y"]) is None  # no such column
    assert _named(["isnull", ["col", "a"]], ["A", "a_"]) == ["isnull", ["col", "A"]]
    three = ["cast", ["lit", 3, "int32"], "int64"]
    arithmetic = ["cmp", "=", ["arith", "%", ["neg", ["col", "ID"], True], three, True], ["lit", 0]]
    assert _named(arithmetic, ["id"]) == [
        "cmp", "=", ["arith", "%", ["neg", ["col", "id"], True], three, True], ["lit", 0]]
