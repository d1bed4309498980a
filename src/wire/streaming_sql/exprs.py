"""Column references resolved against a relation's scope, and expressions as Spark SQL text.

Wire's stateless operators take Spark SQL expression strings, so an expression of the
query is rewritten (each column reference to its physical, back-quoted column) and
printed in Spark's dialect.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from wire.errors import SqlError
from wire.streaming_sql.parse import DIALECT, fail
from wire.streaming_sql.relation import Relation

INTERVAL_UNITS_MS = {
    "MILLISECOND": 1,
    "MILLISECONDS": 1,
    "SECOND": 1_000,
    "SECONDS": 1_000,
    "MINUTE": 60_000,
    "MINUTES": 60_000,
    "HOUR": 3_600_000,
    "HOURS": 3_600_000,
    "DAY": 86_400_000,
    "DAYS": 86_400_000,
}
INTERVAL_ACCEPTED = "INTERVAL '<integer>' <unit> with unit MILLISECOND, SECOND, MINUTE, HOUR or DAY"


def resolve(query: str, rel: Relation, col: exp.Column) -> str:
    """The physical column of ``rel``'s stream that the reference ``col`` names.

    Raises
    ------
    SqlError
        On an unknown qualifier or column, or an ambiguous unqualified name.
    """
    name, qual = col.name, col.table
    if qual:
        sides = [s for s in rel.sides if s.name.lower() == qual.lower()]
        if not sides:
            raise fail(
                query,
                col,
                f"unknown table or alias {qual!r}",
                f"the tables of this FROM clause: {[s.name for s in rel.sides]}",
            )
        side = sides[0]
        if side.columns is not None and side.real_name(name) is None:
            raise fail(
                query, col, f"table {qual!r} has no column {name!r}", f"its columns {list(side.columns)}"
            )
        return side.physical(name)
    if name.lower() in rel.pseudo:
        return rel.pseudo[name.lower()]
    if len(rel.sides) == 1:
        side = rel.sides[0]
        if side.columns is not None and side.real_name(name) is None:
            raise fail(query, col, f"unknown column {name!r}", f"the columns {list(side.columns)}")
        return side.physical(name)
    having = [s for s in rel.sides if s.real_name(name) is not None]
    unknown = [s for s in rel.sides if s.columns is None]
    if len(having) == 1 and not unknown:
        return having[0].physical(name)
    if len(having) > 1 and all(s.key is not None and name.lower() == s.key.lower() for s in having):
        return having[0].physical(name)  # the join key: the same value on both sides
    if unknown:
        raise fail(
            query,
            col,
            f"column {name!r} without a table: the columns of "
            f"{[s.name for s in unknown]} are not known when the flow is built",
            "a qualified column (alias.column), or sources whose schema is given",
        )
    if having:
        raise fail(query, col, f"ambiguous column {name!r}", "a qualified column (alias.column)")
    raise fail(
        query,
        col,
        f"unknown column {name!r}",
        f"the columns {[f'{s.name}.{c}' for s in rel.sides for c in s.columns or ()]}",
    )


def to_spark(
    query: str, rel: Relation, node: exp.Expr, replace: Callable[[exp.Expr], exp.Expr | None] | None = None
) -> str:
    """``node`` as a Spark SQL expression over ``rel``'s physical columns.

    ``replace`` may substitute sub-expressions first (e.g. an aggregate call by the
    column holding its result): it returns the substitute or None.
    """

    def rewrite(n: exp.Expr) -> exp.Expr:
        if replace is not None:
            sub = replace(n)
            if sub is not None:
                return sub
        if isinstance(n, exp.Column) and not isinstance(n.this, exp.Star):
            return physical_column(resolve(query, rel, n))
        return n

    out = node.copy().transform(rewrite)
    check_expression(query, out)
    return out.sql(DIALECT)


def physical_column(path: str) -> exp.Expr:
    """A back-quoted column reference; ``a.b`` (a struct field) as field access."""
    parts = path.split(".")
    out: exp.Expr = exp.column(parts[0], quoted=True)
    for p in parts[1:]:
        out = exp.Dot(this=out, expression=exp.to_identifier(p, quoted=True))
    return out


def check_expression(query: str, node: exp.Expr) -> None:
    """Refuse what a row-wise expression cannot contain (subqueries, window functions)."""
    for n in node.walk():
        if isinstance(n, exp.Subquery | exp.Select):
            raise fail(
                query,
                n,
                "a subquery inside an expression",
                "subqueries in FROM and JOIN only (write IN (...) lists of literals)",
            )
        if isinstance(n, exp.Window):
            raise fail(
                query,
                n,
                "a window function (OVER) here",
                "ROW_NUMBER() / RANK() OVER (PARTITION BY window_start, window_end ... ORDER BY c) "
                "in a subquery whose outer WHERE keeps rn <= k (window top-N)",
            )


def interval_ms(query: str, node: exp.Expr) -> int:
    """The length of ``INTERVAL '10' SECOND`` (or a plain integer of ms) in ms."""
    if isinstance(node, exp.Interval):
        unit = node.args.get("unit")
        text = node.this.name if isinstance(node.this, exp.Literal) else None
        unit_name = unit.name.upper() if unit is not None else None
        if text is not None and unit_name is None and len(text.split()) == 2:
            text, unit_name = text.split()[0], text.split()[1].upper()
        if text is not None and unit_name in INTERVAL_UNITS_MS and text.strip().lstrip("-").isdigit():
            return int(text) * INTERVAL_UNITS_MS[unit_name]
    if isinstance(node, exp.Neg):
        return -interval_ms(query, node.this)
    raise fail(query, node, f"not an interval: {node.sql(DIALECT)}", INTERVAL_ACCEPTED)


def conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    """The terms of ``a AND b AND ...`` (parentheses removed)."""
    if node is None:
        return []
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def and_all(terms: list[exp.Expr]) -> exp.Expr | None:
    """The conjunction of ``terms`` (None for none)."""
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = exp.And(this=out, expression=t)
    return out


__all__ = ["SqlError", "and_all", "conjuncts", "interval_ms", "resolve", "to_spark"]
