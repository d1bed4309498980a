"""Pushed-down predicates on Arrow (``wire.core.predicate``) against DuckDB's SQL over the same rows.

DuckDB evaluates the SQL text of each predicate with SQL's three-valued logic and Spark's
NaN rule (NaN equals NaN and is above every number), an independent implementation of the
rules Spark's ``Filter`` follows on integers, floating point, strings and booleans: the rows
:func:`keep` keeps must be exactly the rows ``WHERE <sql>`` returns.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.core.predicate import NotEvaluable, columns_of, keep, mask

COLUMNS = {"n": pa.int64(), "m": pa.int32(), "f": pa.float64(), "s": pa.string(), "b": pa.bool_()}
INTS = st.one_of(st.none(), st.integers(-3, 3))
STRS = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é"]))
BOOLS = st.one_of(st.none(), st.booleans())
FLOATS = st.one_of(st.none(), st.sampled_from([float("nan"), -0.0, 0.0, 1.5, -2.0, 3.0, float("inf")]))
VALUES = {"n": INTS, "m": INTS, "f": FLOATS, "s": STRS, "b": BOOLS}
KINDS = {"int": ["n", "m"], "num": ["n", "m", "f"], "str": ["s"], "bool": ["b"]}
"""Operands that compare: integers, numbers (integers and floating point mixed), strings, booleans."""


def sql(node: list) -> str:
    """The predicate as SQL text (the oracle's input)."""
    op = node[0]
    if op == "col":
        return f'"{node[1]}"'
    if op == "lit":
        v = node[1]
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        if isinstance(v, float):
            return f"CAST('{v!r}' AS DOUBLE)"
        return str(v)
    if op == "cmp":
        return f"({sql(node[2])} {'<>' if node[1] == '!=' else node[1]} {sql(node[3])})"
    if op == "in":
        return f"({sql(node[1])} IN ({', '.join(sql(['lit', v]) for v in node[2])}))"
    if op == "isnull":
        return f"({sql(node[1])} IS NULL)"
    if op == "isnotnull":
        return f"({sql(node[1])} IS NOT NULL)"
    if op in ("and", "or"):
        return f"({sql(node[1])} {op.upper()} {sql(node[2])})"
    assert op == "not"
    return f"(NOT {sql(node[1])})"


def _lit(kind: str) -> st.SearchStrategy:
    numbers = st.one_of(st.integers(-3, 3), FLOATS.filter(lambda x: x is not None))
    values = {"int": st.integers(-3, 3), "num": numbers, "str": STRS.filter(lambda x: x is not None),
              "bool": st.booleans()}
    return st.builds(lambda v: ["lit", v], values[kind])


def _operand(kind: str) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(KINDS[kind]).map(lambda c: ["col", c]), _lit(kind))


@st.composite
def atoms(draw: st.DrawFn) -> list:
    kind = draw(st.sampled_from(list(KINDS)))
    shape = draw(st.sampled_from(["cmp", "in", "isnull", "isnotnull", "boolcol"]))
    col = draw(st.sampled_from(KINDS[kind]))
    if shape == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        return ["cmp", op, ["col", col], draw(_operand(kind))]
    if shape == "in":
        items = draw(st.lists(st.one_of(st.none(), _lit(kind).map(lambda x: x[1])), min_size=1, max_size=4))
        return ["in", ["col", col], items]
    if shape == "boolcol":
        return ["col", "b"]
    return [shape, ["col", col]]


predicates = st.recursive(atoms(), lambda inner: st.one_of(
    st.tuples(st.sampled_from(["and", "or"]), inner, inner).map(list),
    inner.map(lambda p: ["not", p])), max_leaves=6)


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 12))
    return pa.table({c: pa.array([draw(VALUES[c]) for _ in range(n)], t) for c, t in COLUMNS.items()})


def oracle(table: pa.Table, predicate: list) -> list[int]:
    """Row indexes DuckDB's ``WHERE`` keeps."""
    con = duckdb.connect()
    con.register("t", table.append_column("i", pa.array(range(table.num_rows), pa.int64())))
    return [r[0] for r in con.execute(f"SELECT i FROM t WHERE {sql(predicate)} ORDER BY i").fetchall()]


@settings(max_examples=300, deadline=None)
@given(table=tables(), predicate=predicates)
def test_keep_is_sqls_where_on_any_rows_and_predicate(table, predicate):
    kept = keep(table, predicate).to_pylist()
    assert [i for i, k in enumerate(kept) if k] == oracle(table, predicate)


@pytest.mark.parametrize(("predicate", "expected"), [
    # x IN (1, NULL): true on 1; null (dropped) on 2 and on null; never false
    (["in", ["col", "n"], [1, None]], [True, None, None]),
    (["in", ["col", "n"], [1]], [True, False, None]),
    # NOT null is null; false AND null is false; true OR null is true
    (["not", ["cmp", "=", ["col", "n"], ["lit", 1]]], [False, True, None]),
    (["and", ["cmp", "=", ["col", "n"], ["lit", 2]], ["isnull", ["col", "n"]]], [False, False, None]),
    (["or", ["cmp", "=", ["col", "n"], ["lit", 1]], ["cmp", "=", ["col", "n"], ["lit", 7]]],
     [True, False, None]),
])
def test_sql_null_logic_by_hand(predicate, expected):
    table = pa.table({"n": pa.array([1, 2, None], pa.int64())})
    assert mask(table, predicate).to_pylist() == expected


def test_a_predicate_the_rows_cannot_answer_is_not_evaluable():
    table = pa.table({"n": [1, 2], "s": ["a", "b"]})
    with pytest.raises(NotEvaluable):
        mask(table, ["cmp", "=", ["col", "missing"], ["lit", 1]])
    with pytest.raises(NotEvaluable):
        mask(table, ["cmp", "=", ["col", "s"], ["lit", 1]])  # no string = int kernel
    with pytest.raises(NotEvaluable):
        mask(table, ["between", ["col", "n"], ["lit", 1], ["lit", 2]])  # a node it does not know


def test_columns_of_names_every_column_read():
    assert columns_of(["and", ["in", ["col", "s"], ["a"]], ["not", ["isnull", ["col", "n"]]]]) == {"s", "n"}
