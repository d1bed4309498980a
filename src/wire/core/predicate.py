"""Filters pushed into a source: a small predicate tree, evaluated on Arrow with SQL's null logic.

A flow's ``filter`` is a Spark SQL expression that Spark evaluates in the JVM, after the
source's Python task has shipped every row there. When each step reading a source's
events is a filter, the compiler (:mod:`wire.compiler.pushdown`) translates the part of
the filters it can into a :data:`Predicate` and gives it to the source, whose tasks drop
the rows it is false or null on before they leave Python (e.g. Nexmark q3 reads persons
and auctions, 8 % of the events). The filter itself still runs in Spark: a pushed
predicate only ever drops rows the filter would drop, so it may be weaker than the
filter (an ``AND`` keeps its translatable side) but never stronger.

The tree is JSON (it travels in a source's binding to the executors)::

    ["col", "state"]                       a payload column
    ["lit", 10]                            an int, float, str or bool literal (or null)
    ["cmp", "=", a, b]                     = != < <= > >=
    ["in", a, [lit, ...]]                  IN (literals; a null among them allowed)
    ["isnull", a] / ["isnotnull", a]
    ["and", a, b] / ["or", a, b] / ["not", a]

Value expressions, the columns a stateless flow's ``map`` or ``select`` computes when its
source's tasks write its sinks (:mod:`wire.compiler.sink_fusion`; :func:`value`)::

    ["lit", 908, "int32"]                  a literal of an Arrow type
    ["cast", a, "int64"]                   a lossless widening (integer to a wider integer or
                                           to floating point, float to double)
    ["arith", op, a, b, checked]           + - * on operands of one type; "div", Spark's
                                           integral division of bigints (truncated toward 0);
                                           "%", the remainder of integers (the dividend's sign)
    ["neg", a, checked]                    unary minus
    ["case", [[p, a], ...], b, type]       CASE WHEN p THEN a ... ELSE b END (b null: no ELSE):
                                           the value of the first branch whose predicate p is
                                           true (false and null are not), else b, else null;
                                           every value cast to the Arrow ``type``

``checked`` (Spark's ANSI mode, its default): an integer overflow raises, as Spark's does;
unchecked (legacy mode): it wraps around, as Java's arithmetic does. A ``div`` or ``%`` by zero
always raises (Spark's ANSI mode; the translator refuses legacy mode, where Spark gives null).
Value expressions may also be the operands of a comparison (e.g. ``auction_id % 123 = 0``).
Every part of a ``case`` is evaluated on every row (Spark evaluates a branch only where it is
taken), so the translator puts nothing that can raise in one.

:func:`mask` evaluates it with three-valued (Kleene) logic, as SQL does: a comparison
with null is null, ``NOT null`` is null, ``false AND null`` is false, ``true OR null`` is
true, and ``x IN (...)`` is null when ``x`` is null or when nothing matches and the list
holds a null. A row is kept when the result is true, as Spark's ``Filter`` keeps it.
Comparisons are between integers, floating point numbers, strings (bytewise, Spark's
default ``UTF8_BINARY`` collation) or booleans; on floating point they follow Spark's rule,
not IEEE's: NaN equals NaN and is greater than every other number (so does PostgreSQL's and
DuckDB's). ``IN`` is evaluated as SQL defines it, an ``OR`` of equalities. The translator
checks the types (:mod:`wire.compiler.pushdown`), so nothing here casts implicitly.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

Predicate: TypeAlias = list[Any]
"""A predicate tree (module docstring), JSON-serializable."""

COMPARISONS = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
               ">": pc.greater, ">=": pc.greater_equal}
"""The comparison operators of a ``["cmp", op, a, b]`` node and their Arrow kernels."""


class NotEvaluable(ValueError):
    """The predicate cannot be evaluated on this table (a missing column, a type Arrow refuses)."""


def mask(table: pa.Table, predicate: Predicate) -> pa.ChunkedArray | pa.Array:
    """The predicate's value on every row of ``table``: a boolean array (true, false or null).

    Raises
    ------
    NotEvaluable
        When a column is missing, a node is unknown, or Arrow has no kernel for the types;
        the caller then keeps every row (the filter in Spark still applies).
    """
    try:
        value = _eval(table, predicate)
    except NotEvaluable:
        raise
    except (pa.ArrowException, KeyError, TypeError, ValueError, IndexError) as e:
        raise NotEvaluable(f"{predicate!r}: {e}") from e
    if isinstance(value, pa.Scalar):  # a predicate over literals only
        return pa.array([value.as_py()] * table.num_rows, pa.bool_())
    if not pa.types.is_boolean(value.type):
        raise NotEvaluable(f"{predicate!r} is of type {value.type}, not boolean")
    return value


ARITHMETIC = {("+", True): pc.add_checked, ("+", False): pc.add, ("-", True): pc.subtract_checked,
              ("-", False): pc.subtract, ("*", True): pc.multiply_checked, ("*", False): pc.multiply,
              ("div", True): pc.divide_checked, ("div", False): pc.divide,
              ("%", True): pc.remainder, ("%", False): pc.remainder}
"""The operators of an ``["arith", op, a, b, checked]`` node and their Arrow kernels (``div`` on
integers truncates toward zero in both, as Java's ``/`` and Spark's ``div`` do; ``remainder``
takes the dividend's sign and gives 0 for ``MIN % -1``, as Java's ``%``, and raises on zero)."""


def value(table: pa.Table, expression: Predicate) -> pa.ChunkedArray | pa.Array:
    """A value expression (module docstring) on every row of ``table``, one value per row.

    Raises
    ------
    NotEvaluable
        When a column is missing or a node is unknown.
    pyarrow.ArrowInvalid
        When checked arithmetic overflows or a ``div`` divides by zero (Spark's ANSI mode fails
        the same row).
    """
    result = _eval(table, expression)
    if isinstance(result, pa.Scalar):  # literals only
        return pa.array([result.as_py()] * table.num_rows, result.type)
    return result


def keep(table: pa.Table, predicate: Predicate) -> pa.Array:
    """Where the predicate is true (false and null: dropped), as one boolean array without nulls."""
    value = mask(table, predicate)
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    return pc.fill_null(value, False)


def columns_of(predicate: Predicate) -> set[str]:
    """The column names a predicate reads."""
    if not isinstance(predicate, list) or not predicate:
        return set()
    if predicate[0] == "col":
        return {predicate[1]}
    if predicate[0] == "lit":
        return set()
    if predicate[0] in ("in", "cast"):  # ["in", operand, [literal values]], ["cast", operand, type]
        return columns_of(predicate[1])
    if predicate[0] == "case":  # ["case", [[predicate, value], ...], else or None, type]
        parts = [part for pair in predicate[1] for part in pair]
        return set().union(*(columns_of(part) for part in parts), columns_of(predicate[2]))
    found: set[str] = set()
    for part in predicate[1:]:
        if isinstance(part, list):
            found |= columns_of(part)
    return found


def _eval(table: pa.Table, node: Predicate) -> Any:
    op = node[0]
    if op == "col":
        if node[1] not in table.column_names:
            raise NotEvaluable(f"no column {node[1]!r}")
        return table.column(node[1])
    if op == "lit":
        return pa.scalar(node[1]) if len(node) < 3 else pa.scalar(node[1], pa.type_for_alias(node[2]))
    if op == "cast":
        return pc.cast(_eval(table, node[1]), pa.type_for_alias(node[2]))
    if op == "arith":
        return ARITHMETIC[(node[1], bool(node[4]))](_eval(table, node[2]), _eval(table, node[3]))
    if op == "neg":
        return (pc.negate_checked if node[2] else pc.negate)(_eval(table, node[1]))
    if op == "case":
        return _case(table, node)
    if op == "cmp":
        return _compare(node[1], _eval(table, node[2]), _eval(table, node[3]), table.num_rows)
    if op == "and":
        return pc.and_kleene(_eval(table, node[1]), _eval(table, node[2]))
    if op == "or":
        return pc.or_kleene(_eval(table, node[1]), _eval(table, node[2]))
    if op == "not":
        return pc.invert(_eval(table, node[1]))
    if op == "isnull":
        return pc.is_null(_eval(table, node[1]))
    if op == "isnotnull":
        return pc.is_valid(_eval(table, node[1]))
    if op == "in":  # SQL's definition: value = item1 OR value = item2 OR ...
        value, result = _eval(table, node[1]), None
        for item in node[2]:
            equal = _compare("=", value, pa.scalar(item), table.num_rows)
            result = equal if result is None else pc.or_kleene(result, equal)
        if result is None:
            raise NotEvaluable("IN with no items")
        return result
    raise NotEvaluable(f"unknown predicate node {op!r}")


def _case(table: pa.Table, node: Predicate) -> pa.Array:
    """``["case", [[p, a], ...], b, type]``: per row, the first value whose ``p`` is true, else ``b``."""
    rows, typ = table.num_rows, pa.type_for_alias(node[3])

    def array(part: Any, of: pa.DataType) -> pa.Array:
        if isinstance(part, pa.Scalar):
            return pa.array([part.as_py()] * rows, of) if part.is_valid else pa.nulls(rows, of)
        return part.combine_chunks() if isinstance(part, pa.ChunkedArray) else part

    conditions = [pc.fill_null(array(_eval(table, p), pa.bool_()), False) for p, _ in node[1]]
    values = [pc.cast(_eval(table, v), typ) for _, v in node[1]]
    otherwise = pa.scalar(None, typ) if node[2] is None else pc.cast(_eval(table, node[2]), typ)
    chosen = pa.StructArray.from_arrays(conditions, names=[str(i) for i in range(len(conditions))])
    return pc.case_when(chosen, *[array(v, typ) for v in values], array(otherwise, typ))


def _compare(op: str, a: Any, b: Any, rows: int) -> Any:
    """``a op b`` with SQL's nulls and Spark's NaN rule on floating point (NaN equals NaN, above all)."""
    if pa.types.is_null(a.type) or pa.types.is_null(b.type):  # a comparison with NULL is null
        return pa.nulls(rows, pa.bool_())
    if not (pa.types.is_floating(a.type) or pa.types.is_floating(b.type)):
        return COMPARISONS[op](a, b)
    a_nan, b_nan = _is_nan(a), _is_nan(b)
    either = pc.or_(a_nan, b_nan)
    equal = pc.if_else(either, pc.and_(a_nan, b_nan), pc.equal(a, b))
    if op in ("=", "!="):
        return pc.invert(equal) if op == "!=" else equal
    if op in ("<", "<="):
        less = pc.if_else(either, pc.and_(pc.invert(a_nan), b_nan), pc.less(a, b))
        return less if op == "<" else pc.or_(less, equal)
    greater = pc.if_else(either, pc.and_(a_nan, pc.invert(b_nan)), pc.greater(a, b))
    return greater if op == ">" else pc.or_(greater, equal)


def _is_nan(value: Any) -> Any:
    """NaN test of a column or scalar; false for non-floating types (null stays null)."""
    if pa.types.is_floating(value.type):
        return pc.is_nan(value)
    return pc.not_equal(value, value)  # false, or null where the value is null
