"""Windowed ``GROUP BY`` and window top-N (``ROW_NUMBER() ... <= k``) onto ``window().aggregate()``.

``GROUP BY window_start, window_end[, c, ...]`` over a window TVF keys the stream by the
other group columns (one: ``key_by(c)``; several: a JSON key of them, and ``first(c)``
of each; none: a constant key) and aggregates it in the TVF's window. A window top-N is
``top_k`` in the same window, exploded into rows with their rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlglot import exp

import wire
from wire.streaming_sql.exprs import physical_column, resolve, to_spark
from wire.streaming_sql.parse import DIALECT
from wire.streaming_sql.relation import RESERVED_PREFIX, Relation, Side, Window

if TYPE_CHECKING:
    from wire.state.aggregator import Aggregator
    from wire.streaming_sql.compiler import Compiler

AGGREGATES = (
    "COUNT(*), COUNT(c), SUM, MIN, MAX, AVG, FIRST, LAST, COLLECT_LIST, MAX_BY(c, by), MIN_BY(c, by) "
    "over columns or expressions"
)
WINDOW_COLUMNS = ("window_start", "window_end")


def _agg_input(c: Compiler, rel: Relation, arg: exp.Expr, pre: dict[str, str]) -> str:
    """The physical column an aggregate reads; an expression is computed into a new column first."""
    if isinstance(arg, exp.Column) and not isinstance(arg.this, exp.Star):
        return resolve(c.query, rel, arg)
    text = to_spark(c.query, rel, arg)
    for name, existing in pre.items():
        if existing == text:
            return name
    name = f"{RESERVED_PREFIX}in{len(pre)}"
    pre[name] = text
    return name


def _aggregator(c: Compiler, rel: Relation, node: exp.AggFunc, pre: dict[str, str]) -> tuple[Aggregator, str]:
    """Wire's aggregator for ``node`` and the field of its result to read ('' for the result itself)."""
    arg = node.this
    if isinstance(node, exp.Count):
        if isinstance(arg, exp.Star):
            return wire.count(), ""
        if isinstance(arg, exp.Distinct):
            raise c.fail(node, "COUNT(DISTINCT ...)", AGGREGATES)
        return wire.count(_agg_input(c, rel, arg, pre)), ""
    simple = {
        exp.Sum: wire.sum,
        exp.Min: wire.min,
        exp.Max: wire.max,
        exp.Avg: wire.mean,
        exp.First: wire.first,
        exp.FirstValue: wire.first,
        exp.Last: wire.last,
        exp.LastValue: wire.last,
        exp.ArrayAgg: wire.collect,
    }
    for cls, fn in simple.items():
        if type(node) is cls:
            if isinstance(arg, exp.Distinct):
                raise c.fail(node, f"{node.key.upper()}(DISTINCT ...)", AGGREGATES)
            return fn(_agg_input(c, rel, arg, pre)), ""
    if isinstance(node, exp.ArgMax | exp.ArgMin):
        value = _agg_input(c, rel, arg, pre)
        by = _agg_input(c, rel, node.expression, pre)
        by_row = wire.max_by if isinstance(node, exp.ArgMax) else wire.min_by
        return by_row(by, columns=[value]), value
    raise c.fail(node, f"the aggregate {node.sql(DIALECT)}", AGGREGATES)


def _keyed(c: Compiler, stream: wire.Stream, keys: list[str]) -> tuple[wire.Stream, str]:
    """``stream`` keyed by ``keys`` (physical columns): the key column's name."""
    if len(keys) == 1:
        return stream.key_by(keys[0], name=c.step("key")), keys[0]
    key = RESERVED_PREFIX + "key"
    value = (
        "0"
        if not keys
        else "to_json(named_struct(" + ", ".join(f"'k{i}', `{k}`" for i, k in enumerate(keys)) + "))"
    )
    return stream.map(**{key: value}, name=c.step("key")).key_by(key, name=c.step("key")), key


def aggregate(c: Compiler, rel: Relation, sel: exp.Select, group: exp.Group | None) -> Relation:
    """``GROUP BY`` over a window TVF: one window aggregation, then the select list."""
    accepted = (
        "GROUP BY window_start, window_end[, columns] over TABLE(TUMBLE/HOP/SESSION(...)); "
        "aggregates: " + AGGREGATES
    )
    if rel.window is None:
        node = group if group is not None else sel
        raise c.fail(
            node,
            "an aggregation that is not over a window TVF (an unbounded, updating aggregation: "
            "Wire aggregates only in windows, Stream.window(...).aggregate(...); it has no "
            "unwindowed keyed aggregation to map it to)",
            accepted,
            keyword="GROUP BY" if group is not None else None,
        )
    items = list(group.expressions) if group is not None else []
    for extra in ("rollup", "cube", "grouping_sets"):
        if group is not None and group.args.get(extra):
            raise c.fail(group, f"GROUP BY {extra.upper()}", accepted)
    names = [i.name.lower() for i in items if isinstance(i, exp.Column)]
    missing = [w for w in WINDOW_COLUMNS if w not in names]
    if missing:
        raise c.fail(group or sel, f"GROUP BY without {' and '.join(missing)}", accepted)
    keys: list[str] = []
    for item in items:
        if not isinstance(item, exp.Column):
            raise c.fail(
                item,
                f"GROUP BY an expression ({item.sql(DIALECT)})",
                "GROUP BY columns (compute the expression in a subquery)",
            )
        if item.name.lower() not in WINDOW_COLUMNS:
            keys.append(resolve(c.query, rel, item))
    # the aggregate calls of the select list and HAVING, each once
    having = sel.args.get("having")
    calls: dict[str, exp.AggFunc] = {}
    for root in [*sel.expressions, *([having.this] if having is not None else [])]:
        for n in root.walk():
            if isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Window) is None:
                calls.setdefault(n.sql(DIALECT), n)
    pre: dict[str, str] = {}
    aggs: dict[str, Aggregator] = {}
    results: dict[str, str] = {}
    for i, (text, call) in enumerate(calls.items()):
        agg, field = _aggregator(c, rel, call, pre)
        name = f"{RESERVED_PREFIX}a{i}"
        aggs[name] = agg
        results[text] = f"{name}.{field}" if field else name
    stream = rel.stream
    if pre:
        stream = stream.map(**pre, name=c.step("map"))
    keyed, key = _keyed(c, stream, keys)
    group_cols: dict[str, str] = {}
    if len(keys) == 1:
        group_cols[keys[0]] = key
    else:
        for i, k in enumerate(keys):
            aggs[f"{RESERVED_PREFIX}g{i}"] = wire.first(k)
            group_cols[k] = f"{RESERVED_PREFIX}g{i}"
    if not aggs:
        aggs[f"{RESERVED_PREFIX}n"] = wire.count()
    windowed = keyed.window(
        rel.window.window, allowed_lateness=c.options.allowed_lateness_ms, emit=c.options.emit
    ).aggregate(name=c.step("window"), **aggs)

    def after(node: exp.Expr) -> exp.Expr | None:
        if isinstance(node, exp.AggFunc) and node.sql(DIALECT) in results:
            return physical_column(results[node.sql(DIALECT)])
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            if node.name.lower() in (*WINDOW_COLUMNS, "emit") and not node.table:
                return physical_column(node.name.lower())
            phys = resolve(c.query, rel, node)
            if phys in group_cols:
                return physical_column(group_cols[phys])
            if node.name.lower() in WINDOW_COLUMNS:
                return physical_column(node.name.lower())
            raise c.fail(
                node,
                f"the column {node.sql(DIALECT)} is neither in GROUP BY nor aggregated",
                "grouped columns, window_start, window_end, emit and aggregates",
            )
        return None

    out = Relation(
        windowed,
        (Side("", None),),
        "window_start",
        aggregated=rel.window,
        window_columns=WINDOW_COLUMNS,
        late_steps=(*rel.late_steps, windowed.ref.step),
    )
    if having is not None:
        out = replace(
            out, stream=out.stream.filter(to_spark(c.query, out, having.this, after), name=c.step("having"))
        )
    return c.project(out, sel.expressions, after, time_text="`window_start`")


def is_top_n(node: exp.Expr) -> bool:
    """Whether a FROM item is a subquery with ``ROW_NUMBER()`` / ``RANK()`` in its select list."""
    return (
        isinstance(node, exp.Subquery)
        and isinstance(node.this, exp.Select)
        and any(isinstance(e.unalias(), exp.Window) for e in node.this.expressions)
    )


def _rank_bound(c: Compiler, where: exp.Expr | None, rn: str) -> int | None:
    from wire.streaming_sql.exprs import conjuncts

    best: int | None = None
    for term in conjuncts(where):
        if not isinstance(term, exp.LTE | exp.LT | exp.EQ | exp.GTE | exp.GT):
            continue
        a, b = term.this, term.expression
        op: type[exp.Expr] = type(term)
        if isinstance(b, exp.Column) and isinstance(a, exp.Literal):
            a, b = b, a
            mirror: dict[type[exp.Expr], type[exp.Expr]] = {
                exp.GTE: exp.LTE,
                exp.GT: exp.LT,
                exp.LTE: exp.GTE,
                exp.LT: exp.GT,
                exp.EQ: exp.EQ,
            }
            op = mirror[op]
        if not (
            isinstance(a, exp.Column)
            and a.name.lower() == rn.lower()
            and isinstance(b, exp.Literal)
            and not b.is_string
            and b.name.isdigit()
        ):
            continue
        bounds: dict[type[exp.Expr], int] = {
            exp.LTE: int(b.name),
            exp.LT: int(b.name) - 1,
            exp.EQ: int(b.name),
        }
        k = bounds.get(op)
        if k is not None and (op is not exp.EQ or k == 1):
            best = k if best is None else min(best, k)
    return best


def top_n(
    c: Compiler, sub: exp.Subquery, where: exp.Where | None, needed: set[str] | None
) -> tuple[Relation, exp.Expr | None]:
    """A window top-N: the ranked rows of ``sub`` (with their rank column); the outer WHERE to apply.

    ``needed``: the columns the outer query reads (None: all); a ``*`` of ``sub`` keeps
    only those in the ranked rows (``top_k`` keeps fewer columns per event).
    """
    accepted = (
        "SELECT ... FROM (SELECT ..., ROW_NUMBER() | RANK() OVER (PARTITION BY window_start, window_end"
        "[, columns] ORDER BY c [DESC]) AS rn FROM <window TVF | windowed GROUP BY>) WHERE rn <= k"
    )
    inner: exp.Select = sub.this
    for key, value in inner.args.items():
        if value not in (None, [], False) and key not in ("expressions", "from_", "from", "where"):
            raise c.fail(
                value if isinstance(value, exp.Expr) else inner,
                f"{key.upper()} in a ranking subquery",
                accepted,
            )
    windows = [e for e in inner.expressions if isinstance(e.unalias(), exp.Window)]
    if len(windows) != 1 or not isinstance(windows[0], exp.Alias):
        raise c.fail(windows[-1], "a window function without a name, or several", accepted)
    rank_item = windows[0]
    win: exp.Window = rank_item.this
    rn = rank_item.alias
    if not isinstance(win.this, exp.RowNumber | exp.Rank):
        raise c.fail(win, f"the window function {win.this.sql(DIALECT)}", accepted)
    if win.args.get("spec") is not None:
        raise c.fail(win, "a window frame (ROWS/RANGE)", accepted)
    where_expr = where.this if where is not None else None
    k = _rank_bound(c, where_expr, rn)
    if k is None or k < 1:
        raise c.fail(where or sub, f"no bound on {rn} in the outer WHERE (an unbounded ranking)", accepted)
    source = inner.args.get("from_") or inner.args.get("from")
    if source is None:
        raise c.fail(inner, "a ranking subquery without FROM", accepted)
    x = c.from_item(source.this)
    if inner.args.get("where") is not None:
        x = c.filter(x, inner.args["where"].this)
    side = x.sides[0]
    parts = list(win.args.get("partition_by") or [])
    pnames = [p.name.lower() for p in parts if isinstance(p, exp.Column)]
    if len(pnames) != len(parts):
        raise c.fail(parts[0] if parts else win, "PARTITION BY an expression", accepted)
    window: Window
    if x.window is not None:
        window = x.window
        starts = WINDOW_COLUMNS
        in_columns = (
            None
            if side.columns is None
            else tuple(col for col in side.columns if col.lower() not in WINDOW_COLUMNS)
        )
    elif x.aggregated is not None and x.window_columns is not None:
        if x.aggregated.slide_ms is None:
            raise c.fail(source.this, "ranking the rows of a SESSION aggregation", "TUMBLE or HOP windows")
        window = Window(wire.Tumbling(x.aggregated.slide_ms), x.aggregated.slide_ms)
        starts = (x.window_columns[0].lower(), x.window_columns[1].lower())
        in_columns = side.columns
    else:
        raise c.fail(source.this, "ranking rows that are not in a window", accepted)
    missing = [s for s in starts if s not in pnames]
    if missing:
        raise c.fail(win, f"PARTITION BY without {' and '.join(missing)}", accepted)
    if in_columns is None:
        raise c.fail(
            source.this,
            "ranking rows whose columns are not known when the flow is built",
            "a source whose schema is given",
        )
    inner_star = any(isinstance(e, exp.Star) for e in inner.expressions)
    keep = (
        None
        if inner_star and needed is None
        else {n.name.lower() for e in inner.expressions for n in e.walk() if isinstance(n, exp.Column)}
        | (needed or set() if inner_star else set())
    )
    if keep is not None:
        keep |= set(starts) | {ordered_name.lower() for ordered_name in _order_names(win)}
        in_columns = tuple(col for col in in_columns if col.lower() in keep)
    keys = [resolve(c.query, x, p) for p in parts if p.name.lower() not in starts]
    order = win.args.get("order")
    if order is None or len(order.expressions) != 1 or not isinstance(order.expressions[0].this, exp.Column):
        raise c.fail(win, "ORDER BY other than one column", accepted)
    ordered = order.expressions[0]
    by = resolve(c.query, x, ordered.this)
    largest = bool(ordered.args.get("desc"))
    columns = [side.physical(col) for col in in_columns]
    ties = "first" if isinstance(win.this, exp.RowNumber) else "all"
    top = f"{RESERVED_PREFIX}top"
    keyed, _ = _keyed(c, x.stream, keys)
    ranked = keyed.window(
        window.window, allowed_lateness=c.options.allowed_lateness_ms, emit=c.options.emit
    ).aggregate(
        name=c.step("window"), **{top: wire.top_k(by, k, columns=columns, ties=ties, largest=largest)}
    )
    if ties == "first":
        rank = f"transform(`{top}`, (x, i) -> named_struct('row', x, 'rn', i + 1))"
    else:
        cmp = ">" if largest else "<"
        rank = (
            f"transform(`{top}`, x -> named_struct('row', x, 'rn', "
            f"size(filter(`{top}`, y -> y.`{by}` {cmp} x.`{by}`)) + 1))"
        )
    rows = ranked.map(**{top: rank}, name=c.step("rank")).explode(top, name=c.step("explode"))
    phys = {col.lower(): side.physical(col) for col in in_columns}

    def inside(node: exp.Expr) -> exp.Expr | None:
        if isinstance(node, exp.Window):
            return physical_column(f"{top}.rn")
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            name = node.name.lower()
            if x.window is not None and name in WINDOW_COLUMNS:
                return physical_column(name)
            if name in phys:
                return physical_column(f"{top}.row.{phys[name]}")
            raise c.fail(node, f"unknown column {node.sql(DIALECT)}", f"the columns {list(in_columns)}")
        return None

    items: list[exp.Expr] = []
    for e in inner.expressions:
        if isinstance(e, exp.Star):
            all_cols = list(in_columns) + (list(WINDOW_COLUMNS) if x.window is not None else [])
            items.extend(exp.column(col) for col in all_cols)
        else:
            items.append(e)
    time_text = "`window_start`" if x.window is not None else f"`{top}`.`row`.`{phys[starts[0]]}`"
    post = Relation(rows, (Side("", None),), None, late_steps=(*x.late_steps, ranked.ref.step))
    out = c.project(post, items, inside, time_text=time_text)
    return c.alias(out, sub.alias), where_expr


def _order_names(win: exp.Window) -> list[str]:
    order = win.args.get("order")
    return [
        o.this.name
        for o in (order.expressions if order is not None else [])
        if isinstance(o.this, exp.Column)
    ]


Replace = Callable[[exp.Expr], exp.Expr | None]
