"""Filter pushdown into sources: which rows a source's tasks may drop before they leave Python.

Spark cannot push a filter into a Python data source's stream, so every event a source
reads crosses from its Python task into the JVM, where the flow's ``filter`` drops it.
When **every** step that reads a source's events is a ``filter`` (a branching flow: one
filter per branch), the source may drop the events that no filter keeps. This module
finds those filters in the plan and translates them, through Spark's own analysis, into a
:data:`wire.core.predicate.Predicate` the source evaluates on Arrow
(:func:`wire.core.predicate.keep`); the source's binding carries it (capability
``"predicate"``, :mod:`wire.sources.base`).

Translation (:func:`translate`): the filter's condition is resolved by Spark against the
source's payload schema (``DataFrame.filter`` on an empty DataFrame of that schema; nothing
runs), so names are matched as Spark matches them and every implicit conversion is an
explicit ``Cast`` node. Supported: ``AND``, ``OR``, ``NOT``, ``= != < <= > >=``, ``IN`` with
literals, ``IS [NOT] NULL`` (of a column of any type), boolean columns; operands are
columns and literals of integer, floating point, string or boolean type; a cast only widens
an integer (``int`` column against a ``bigint`` literal), turns a number into ``double``
(Spark's rule for comparing with floating point, which Arrow's kernels follow: an ``int``
column against ``1.5``, a ``double`` column against ``0``; a decimal literal becomes the
nearest double, as Spark's cast makes it) or types a null literal; an operand may be integer or
floating point arithmetic (:func:`translate_value`, e.g. ``auction_id % 123 = 0``). Anything else is not
translated: a timestamp or decimal column, a function call, a cast from string. An ``AND`` with one side
untranslated keeps the other side, a weaker predicate (it drops fewer rows), which is
still correct; an ``OR`` or a ``NOT`` needs all of its operands. The predicates of several
branches are joined by ``OR``. When nothing translates, nothing is pushed.

The filters still run in Spark, unchanged: a pushed predicate only drops rows every
filter would drop. The source computes its watermark and its metrics (``events``) on
every event it read, before the predicate (SPEC §2: a filtered event still moves the
watermark), and dead letters are never filtered.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from wire.compiler.exprs import to_column
from wire.core.predicate import Predicate
from wire.plan.nodes import OUT, DropNode, FilterNode, Plan, SinkNode

JavaObject = Any
"""A Py4J handle on a Catalyst expression."""

INTEGERS = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
"""Spark's integer types by width: a cast from one to a wider one is lossless."""
FLOATS = ("float", "double")
"""Spark's floating point types: Spark casts a number compared with one to ``double``, as Arrow's
comparison kernels promote it."""
NUMBERS = (*INTEGERS, *FLOATS)
COMPARISON_NODES = {"EqualTo": "=", "LessThan": "<", "LessThanOrEqual": "<=", "GreaterThan": ">",
                    "GreaterThanOrEqual": ">="}
"""Catalyst comparison classes and their :data:`~wire.core.predicate.COMPARISONS` operator."""


def source_predicate(spark: SparkSession, plan: Plan, step: str, payload: StructType) -> Predicate | None:
    """The predicate source ``step`` may apply to its events, or None (push nothing).

    Not None only when every step reading the source's ``out`` port is a filter and each
    filter translates (at least partly, :func:`translate`); side ports (dead letters)
    do not count. Never raises: any failure gives None.
    """
    try:
        filters: list[FilterNode] = []
        for node in plan.nodes:
            if isinstance(node, SinkNode | DropNode):
                if node.source.step == step and node.source.port == OUT:
                    return None
                continue
            if step not in node.inputs():
                continue
            if not isinstance(node, FilterNode):
                return None
            filters.append(node)
        return filters_predicate(spark, filters, payload) if filters else None
    except Exception:  # never a reason to fail a flow: the filters run in Spark anyway
        return None


def filters_predicate(
    spark: SparkSession, filters: list[FilterNode], payload: StructType, *, exact: bool = False,
    join: str = "or",
) -> Predicate | None:
    """The predicate of ``filters`` over a stream of ``payload`` columns, their parts joined by ``join``.

    ``join``: ``"or"`` for branches (a row any branch keeps is kept), ``"and"`` for a chain
    of filters. ``exact``: each filter must translate exactly (:func:`_exact`; no ``AND``
    weakened to one side), as a predicate that replaces the filters needs. None when a
    filter does not translate (exactly) or a column name is ambiguous.
    """
    empty = empty_frame(spark, payload)._jdf
    parts = []
    for f in filters:
        condition = empty.filter(to_column(f.predicate, parameter="predicate", step=f.step)._jc)
        resolved = condition.queryExecution().analyzed().condition()
        part = _exact(resolved) if exact else translate(resolved)
        if part is None:
            return None
        parts.append(part)
    result = parts[0]
    for part in parts[1:]:
        result = [join, result, part]
    return _named(result, payload.fieldNames())


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """An empty DataFrame of ``schema``, to resolve expressions against (nothing runs).

    Made in the JVM: PySpark's ``createDataFrame`` costs twice as much in a new session
    (183 against 87 ms).
    """
    jspark = spark._jsparkSession
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    empty = jspark.createDataFrame(jvm.java.util.ArrayList(), jspark.parseDataType(schema.json()))
    return DataFrame(empty, spark)


def _named(predicate: Predicate, names: list[str]) -> Predicate | None:
    """The predicate with each column named as in the schema (Spark matches names case-insensitively).

    None when a name matches no column or several.
    """
    if predicate[0] == "col":
        if predicate[1] in names:
            return predicate
        found = [n for n in names if n.lower() == str(predicate[1]).lower()]
        return ["col", found[0]] if len(found) == 1 else None
    if predicate[0] == "lit":
        return predicate
    if predicate[0] == "in":  # ["in", operand, [literal values]]
        value = _named(predicate[1], names)
        return None if value is None else ["in", value, predicate[2]]
    if predicate[0] in ("cmp", "arith"):  # ["cmp", op, a, b], ["arith", op, a, b, checked]
        a, b = _named(predicate[2], names), _named(predicate[3], names)
        return None if a is None or b is None else [*predicate[:2], a, b, *predicate[4:]]
    if predicate[0] == "case":  # ["case", [[condition, value], ...], else or None, type]
        pairs = [[_named(c, names), _named(v, names)] for c, v in predicate[1]]
        otherwise = None if predicate[2] is None else _named(predicate[2], names)
        if any(p is None for pair in pairs for p in pair) or (predicate[2] is not None and otherwise is None):
            return None
        return ["case", pairs, otherwise, predicate[3]]
    if predicate[0] in ("cast", "neg"):  # ["cast", a, type], ["neg", a, checked]
        inner = _named(predicate[1], names)
        return None if inner is None else [predicate[0], inner, predicate[2]]
    parts = [_named(part, names) for part in predicate[1:]]  # and, or, not, isnull, isnotnull
    return None if any(p is None for p in parts) else [predicate[0], *parts]


def translate(expr: JavaObject) -> Predicate | None:
    """A resolved Catalyst boolean expression as a predicate; None if it does not translate.

    An ``AND`` may translate to one of its sides only (weaker, see the module docstring).
    """
    kind = _kind(expr)
    children = _children(expr)
    if kind == "And":
        left, right = translate(children[0]), translate(children[1])
        if left is None or right is None:
            return left if right is None else right
        return ["and", left, right]
    if kind == "Or":
        left, right = translate(children[0]), translate(children[1])
        return None if left is None or right is None else ["or", left, right]
    if kind == "Not":
        inner = _exact(children[0])
        return None if inner is None else ["not", inner]
    return _exact(expr)


def _exact(expr: JavaObject) -> Predicate | None:
    """Translate ``expr`` exactly (no weakening: under a ``NOT``, a weaker predicate is stronger)."""
    kind = _kind(expr)
    children = _children(expr)
    if kind in ("And", "Or"):
        left, right = _exact(children[0]), _exact(children[1])
        return None if left is None or right is None else [kind.lower(), left, right]
    if kind == "Not":
        inner = _exact(children[0])
        return None if inner is None else ["not", inner]
    if kind in COMPARISON_NODES:
        left, right = _operand(children[0]), _operand(children[1])
        return None if left is None or right is None else ["cmp", COMPARISON_NODES[kind], left, right]
    if kind in ("IsNull", "IsNotNull"):
        if _kind(children[0]) == "AttributeReference":  # nulls are nulls whatever the type
            return [kind.lower(), ["col", str(children[0].name())]]
        inner = _operand(children[0])
        return None if inner is None else [kind.lower(), inner]
    if kind == "In":
        value = _operand(children[0])
        items = [_operand(c) for c in children[1:]]
        if value is None or value[0] != "col" or any(i is None or i[0] != "lit" for i in items):
            return None
        return ["in", value, [i[1] for i in items if i is not None]]
    if kind == "AttributeReference" and str(expr.dataType().simpleString()) == "boolean":
        return ["col", str(expr.name())]
    return None


def _operand(expr: JavaObject) -> list[Any] | None:
    """A column or literal of integer, string or boolean type, through lossless casts only."""
    kind = _kind(expr)
    if kind == "Cast":
        inner = _children(expr)[0]
        to, of = _type(expr), _type(inner)
        if _kind(inner) == "Literal" and of == "void":
            return ["lit", None]
        if to in INTEGERS and of in INTEGERS and INTEGERS[to] >= INTEGERS[of]:
            return _operand(inner)
        if to == "double" and (of in NUMBERS or of.startswith("decimal")):
            operand = _operand(inner) if of in NUMBERS else _decimal(inner)
            if operand is not None and operand[0] == "lit" and operand[1] is not None:
                return ["lit", float(operand[1])]  # Spark casts the literal once, to the nearest double
            return operand
        return None
    kind_type = _type(expr)
    if kind_type not in NUMBERS and kind_type not in ("string", "boolean", "void"):
        return None
    if kind in ARITHMETIC_NODES or kind == "UnaryMinus":
        return translate_value(expr)
    if kind == "AttributeReference":
        return None if kind_type == "void" else ["col", str(expr.name())]
    if kind == "Literal":
        value = expr.value()
        if value is None:
            return ["lit", None]
        if kind_type == "string":
            return ["lit", str(value.toString())]
        if kind_type == "boolean":
            return ["lit", bool(value)]
        if kind_type in FLOATS:
            return ["lit", float(value)]
        return ["lit", int(value)]
    return None


ARROW_NUMBERS = {"tinyint": "int8", "smallint": "int16", "int": "int32", "bigint": "int64",
                 "float": "float", "double": "double"}
"""Spark's number types and the Arrow types Spark hands them to Python as."""
ARITHMETIC_NODES = {"Add": "+", "Subtract": "-", "Multiply": "*", "IntegralDivide": "div", "Remainder": "%"}
"""Catalyst arithmetic classes and their ``["arith", op, ...]`` operator (:mod:`wire.core.predicate`)."""


def translate_value(expr: JavaObject) -> list[Any] | None:
    """A resolved Catalyst number expression as a value expression (:func:`wire.core.predicate.value`).

    Columns and literals of Spark's integer and floating point types, ``+ - *``, ``div``
    (``IntegralDivide``) and ``%`` of integers (``Remainder``), unary minus, the lossless
    casts Spark's type coercion inserts (a wider integer, integer or float to floating point),
    and ``CASE WHEN`` / ``IF`` of such values under conditions that translate exactly, when no
    part of it can raise (:func:`_case`).
    Arithmetic in Spark's ANSI mode (its default) is checked, as Spark's raises; legacy ``+ - *``
    wrap around as Spark's do; ``div`` and ``%`` only in ANSI mode, no ``TRY`` arithmetic. None
    when anything else appears (a function, a decimal, ``/``, a string): not translated.
    """
    kind, of = _kind(expr), _type(expr)
    if of not in ARROW_NUMBERS:
        return None
    children = _children(expr)
    if kind == "Alias":
        return translate_value(children[0])
    if kind == "AttributeReference":
        return ["col", str(expr.name())]
    if kind == "Literal":
        literal = expr.value()
        if literal is None:
            return ["lit", None, ARROW_NUMBERS[of]]
        return ["lit", float(literal) if of in FLOATS else int(literal), ARROW_NUMBERS[of]]
    if kind == "Cast":
        inner = _type(children[0])
        widening = (of in INTEGERS and inner in INTEGERS and INTEGERS[of] >= INTEGERS[inner]) or (
            of in FLOATS and (inner in INTEGERS or inner == "float"))
        operand = translate_value(children[0]) if widening else None
        return None if operand is None else ["cast", operand, ARROW_NUMBERS[of]]
    if kind in ARITHMETIC_NODES:
        mode = str(expr.evalMode().toString())
        if mode not in ("ANSI", "LEGACY") or (kind in ("IntegralDivide", "Remainder") and mode != "ANSI"):
            return None
        if kind == "Remainder" and of not in INTEGERS:
            return None  # a floating point remainder by zero raises in Spark, not in Arrow
        left, right = translate_value(children[0]), translate_value(children[1])
        if left is None or right is None or _type(children[0]) != _type(children[1]):
            return None
        return ["arith", ARITHMETIC_NODES[kind], left, right, mode == "ANSI"]
    if kind == "UnaryMinus":
        inner_value = translate_value(children[0])
        return None if inner_value is None else ["neg", inner_value, bool(expr.failOnError())]
    if kind in ("CaseWhen", "If"):
        return _case(children, of)
    return None


def _case(children: list[JavaObject], of: str) -> list[Any] | None:
    """``CASE WHEN c1 THEN v1 ... [ELSE e] END`` or ``IF(c, v, e)`` as ``["case", [[c1, v1], ...], e, type]``.

    ``children``: Catalyst's, for both ``c1, v1, c2, v2, ...`` then ``e`` if there is one.

    Each condition must translate exactly (:func:`_exact`), each value with
    :func:`translate_value`. Spark evaluates a branch's condition only where no earlier one
    was true, and its value only where it is chosen; the task evaluates every part on every
    row, so nothing that can raise may appear anywhere in it (checked arithmetic, ``div``,
    ``%``, checked unary minus): such a CASE is not translated.
    """
    pairs = zip(children[0::2], children[1::2], strict=False)  # an ELSE is the odd one out
    otherwise = children[-1] if len(children) % 2 else None
    translated = []
    for condition, result in pairs:
        when, then = _exact(condition), translate_value(result)
        if when is None or then is None:
            return None
        translated.append([when, then])
    fallback = None if otherwise is None else translate_value(otherwise)
    if otherwise is not None and fallback is None:
        return None
    tree = ["case", translated, fallback, ARROW_NUMBERS[of]]
    return None if _may_raise(tree) else tree


def _may_raise(tree: Any) -> bool:
    """Whether a translated tree holds a node whose evaluation can raise (:mod:`wire.core.predicate`)."""
    if not isinstance(tree, list) or not tree:
        return False
    if not isinstance(tree[0], str):  # a case's list of [condition, value] pairs, or one pair
        return any(_may_raise(part) for part in tree)
    if tree[0] in ("lit", "col"):
        return False
    if tree[0] == "in":  # ["in", operand, [literal values]]: the values are data, not nodes
        return _may_raise(tree[1])
    if tree[0] == "arith" and (tree[4] or tree[1] in ("div", "%")):
        return True
    if tree[0] == "neg" and tree[2]:
        return True
    return any(_may_raise(part) for part in tree[1:] if isinstance(part, list))


def _decimal(expr: JavaObject) -> list[Any] | None:
    """A decimal literal (Spark's type for ``2.5``) as a literal of its exact text, else None."""
    if _kind(expr) != "Literal":
        return None
    value = expr.value()
    return ["lit", None] if value is None else ["lit", str(value.toString())]


def _kind(expr: JavaObject) -> str:
    return str(expr.getClass().getSimpleName())


def _type(expr: JavaObject) -> str:
    return str(expr.dataType().simpleString())


def _children(expr: JavaObject) -> list[JavaObject]:
    seq = expr.children()
    return [seq.apply(i) for i in range(seq.size())]
