"""The SQL compiler: a sqlglot syntax tree onto Wire's stream API (see :func:`wire.streaming_sql.sql`).

Each ``SELECT`` becomes stream operators: ``FROM`` a registered table (its stream), a
subquery, a window table-valued function or a ``JOIN``; ``WHERE`` a ``filter``; the
select list a ``select``; ``GROUP BY`` over a window TVF a ``window(...).aggregate(...)``
(:mod:`wire.streaming_sql.grouping`), and ``SELECT DISTINCT`` over one a ``GROUP BY``
of its columns; ``ROW_NUMBER() ... <= k`` a ``top_k`` window; ``JOIN t FOR SYSTEM_TIME
AS OF`` a ``temporal_join`` (:mod:`wire.streaming_sql.temporal`); ``UNION ALL`` a ``union``;
a ``WITH`` query the operators of its query, compiled once where first read. Everything
is checked while the plan is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from sqlglot import exp

import wire
from wire.api.joins import VersionedTable
from wire.streaming_sql.exprs import interval_ms, to_spark
from wire.streaming_sql.joins import JoinCompiler
from wire.streaming_sql.parse import DIALECT, fail
from wire.streaming_sql.relation import (
    RESERVED_PREFIX,
    Relation,
    Side,
    Window,
    event_time_column,
    known_columns,
)
from wire.tables.base import LookupTable

Emit = Literal["final", "update"]
"""The windows' emission (as ``Stream.window(emit=...)``)."""

SELECT_ACCEPTED = (
    "[WITH name AS (query), ...] SELECT [DISTINCT] <expressions> FROM <table | subquery | "
    "TABLE(TUMBLE/HOP/SESSION(...)) | a JOIN b ON ...> [WHERE ...] [GROUP BY window_start, window_end, ...] "
    "[HAVING ...], combined with UNION ALL"
)


@dataclass
class Cte:
    """A ``WITH name AS (query)``, compiled when first read.

    Its stream is then shared by every reader; it sees the CTEs defined before it. A CTE
    no query reads records no operator.
    """

    node: exp.CTE
    scope: dict[str, Cte]
    rel: Relation | None = None


@dataclass
class Options:
    """The options of one :func:`wire.sql` call, in ms and Wire's terms."""

    allowed_lateness_ms: int
    emit: Emit
    name: str | None


class Compiler(JoinCompiler):
    """Compiles one query of one flow; ``steps`` counts the steps it named."""

    def __init__(
        self,
        flow: wire.Flow,
        query: str,
        tables: dict[str, wire.Stream | VersionedTable | LookupTable],
        options: Options,
    ) -> None:
        self.flow = flow
        self.query = query
        self.tables = tables
        self.options = options
        self.steps = 0
        self.ctes: dict[str, Cte] = {}

    # -- helpers ------------------------------------------------------------------------
    def step(self, kind: str) -> str | None:
        """The step id of the next operator: ``<name>_<kind><n>`` with ``name=``, else Wire's default."""
        if self.options.name is None:
            return None
        self.steps += 1
        return f"{self.options.name}_{kind}{self.steps}"

    def fail(
        self, node: exp.Expr | None, problem: str, accepted: str, *, keyword: str | None = None
    ) -> Exception:
        """A SqlError at ``node`` (or at ``keyword`` in its SELECT)."""
        return fail(self.query, node, problem, accepted, keyword=keyword)

    # -- queries --------------------------------------------------------------------------
    def query_rel(self, node: exp.Expr) -> Relation:
        """Compile a query: a SELECT, a UNION ALL of queries, or a parenthesized query.

        Its ``WITH`` clause, if any, names queries for its ``FROM`` items (and those of
        its subqueries) only.
        """
        with_ = node.args.get("with_")
        if with_ is None:
            return self._query_body(node)
        saved = self.ctes
        self.ctes = dict(saved)
        try:
            self.with_clause(with_)
            return self._query_body(node)
        finally:
            self.ctes = saved

    def with_clause(self, with_: exp.With) -> None:
        """Record the CTEs of ``WITH`` (compiled when a FROM item reads them)."""
        accepted = "WITH name AS (query)[, name2 [(column, ...)] AS (query) ...] SELECT ..."
        if with_.args.get("recursive"):
            raise self.fail(with_, "WITH RECURSIVE", accepted + " (not recursive)", keyword="RECURSIVE")
        defined: set[str] = set()
        for cte in with_.expressions:
            name = cte.alias
            if not name:
                raise self.fail(cte, "a CTE without a name", accepted)
            if name.lower() in defined:
                raise self.fail(cte.args["alias"], f"the CTE name {name!r} twice in one WITH", accepted)
            defined.add(name.lower())
            self.ctes[name.lower()] = Cte(cte, dict(self.ctes))

    def cte(self, cte: Cte) -> Relation:
        """The relation of a CTE (compiled once; its column list renames the columns)."""
        if cte.rel is not None:
            return cte.rel
        saved = self.ctes
        self.ctes = cte.scope
        try:
            rel = self.query_rel(cte.node.this)
        finally:
            self.ctes = saved
        columns = list(cte.node.args["alias"].args.get("columns") or [])
        if columns:
            if rel.columns is None or len(rel.columns) != len(columns):
                raise self.fail(
                    cte.node.args["alias"],
                    f"{len(columns)} column names for a query of "
                    + ("unknown columns" if rel.columns is None else f"{len(rel.columns)} columns"),
                    "as many names as the query has columns (known when the flow is built)",
                )
            items: list[exp.Expr] = [
                exp.alias_(exp.column(old, quoted=True), new.name)
                for old, new in zip(rel.columns, columns, strict=True)
            ]
            rel = self.project(rel, items)
        cte.rel = self.alias(rel, "")
        return cte.rel

    def _query_body(self, node: exp.Expr) -> Relation:
        if isinstance(node, exp.Subquery):
            return self.query_rel(node.this)
        if isinstance(node, exp.Union):
            if node.args.get("distinct"):
                raise self.fail(
                    node.right,
                    "UNION (distinct)",
                    "UNION ALL (a distinct union needs unbounded state)",
                    keyword="UNION",
                )
            left, right = self.query_rel(node.left), self.query_rel(node.right)
            if (
                left.columns is not None
                and right.columns is not None
                and len(left.columns) != len(right.columns)
            ):
                raise self.fail(
                    node,
                    f"UNION ALL of {len(left.columns)} and {len(right.columns)} columns",
                    "queries with the same number of columns",
                )
            right_stream = right.stream
            if left.columns is not None and right.columns is not None and left.columns != right.columns:
                right_stream = right.stream.select(
                    *[(lc, f"`{rc}`") for lc, rc in zip(left.columns, right.columns, strict=True)],
                    name=self.step("union_select"),
                )
            stream = left.stream.union(right_stream, name=self.step("union"))
            time = left.time if left.time == right.time else None
            return Relation(
                stream, (Side("", left.columns),), time, late_steps=left.late_steps + right.late_steps
            )
        if isinstance(node, exp.Select):
            return self.select(node)
        if isinstance(node, exp.Intersect | exp.Except):
            raise self.fail(node, f"{type(node).__name__.upper()}", "UNION ALL")
        raise self.fail(node, f"{node.key.upper()} statement", "a SELECT query (SELECT ... FROM ...)")

    def select(self, sel: exp.Select) -> Relation:
        """Compile one SELECT."""
        from wire.streaming_sql.grouping import aggregate, is_top_n, top_n

        allowed = {"expressions", "from_", "from", "where", "group", "having", "joins", "with_", "distinct"}
        for key, value in sel.args.items():
            if value in (None, [], False) or key in allowed:
                continue
            node = value if isinstance(value, exp.Expr) else None
            label = {
                "distinct": "SELECT DISTINCT",
                "order": "ORDER BY",
                "limit": "LIMIT",
                "with_": "WITH",
                "qualify": "QUALIFY",
                "laterals": "LATERAL VIEW",
                "offset": "OFFSET",
            }.get(key, key.upper())
            raise self.fail(
                node or sel,
                f"{label} is not supported",
                SELECT_ACCEPTED,
                keyword=label.split()[-1] if key == "distinct" else label,
            )
        source = sel.args.get("from_") or sel.args.get("from")
        if source is None:
            raise self.fail(sel, "SELECT without FROM", SELECT_ACCEPTED)
        distinct = sel.args.get("distinct")
        if is_top_n(source.this):
            rel, where = top_n(self, source.this, sel.args.get("where"), _referenced(sel))
        else:
            rel = self.from_item(source.this)
            joins = sel.args.get("joins") or []
            if len(joins) > 1:
                raise self.fail(
                    joins[1],
                    "more than one JOIN in one SELECT",
                    "one JOIN per SELECT; join the result of a subquery for more",
                )
            where = sel.args.get("where")
            where = where.this if where is not None else None
            if joins:
                rel, where = self.join(rel, joins[0], where, _join_references(sel))
        group = sel.args.get("group")
        if distinct:
            group = self.distinct(rel, sel, distinct, group)
        if group is not None or _has_aggregate(sel):
            if where is not None:
                rel = self.filter(rel, where)
            return aggregate(self, rel, sel, group)
        if rel.window is not None:
            raise self.fail(
                source.this,
                "a window table-valued function without GROUP BY or ROW_NUMBER",
                "GROUP BY window_start, window_end[, columns] over TUMBLE/HOP/SESSION, or a window "
                "top-N (ROW_NUMBER() OVER (PARTITION BY window_start, window_end ...) <= k)",
            )
        if sel.args.get("having") is not None:
            raise self.fail(sel.args["having"], "HAVING without GROUP BY", "HAVING after a windowed GROUP BY")
        if where is not None:
            rel = self.filter(rel, where)
        return self.project(rel, sel.expressions)

    def distinct(
        self, rel: Relation, sel: exp.Select, distinct: exp.Distinct, group: exp.Group | None
    ) -> exp.Group:
        """``SELECT DISTINCT`` over a window TVF: a ``GROUP BY`` of every selected column."""
        accepted = (
            "SELECT DISTINCT <columns, with window_start and window_end> FROM TABLE(TUMBLE/HOP/SESSION(...)) "
            "(a GROUP BY of all of them: the distinct rows of each window)"
        )
        if distinct.args.get("on") is not None:
            raise self.fail(sel, "SELECT DISTINCT ON", accepted, keyword="DISTINCT")
        if rel.window is None:
            raise self.fail(
                sel,
                "SELECT DISTINCT of rows that are not in a window (distinct over a whole stream "
                "needs unbounded state)",
                accepted,
                keyword="DISTINCT",
            )
        if group is not None or _has_aggregate(sel):
            raise self.fail(sel, "SELECT DISTINCT with GROUP BY or aggregates", accepted, keyword="DISTINCT")
        columns: list[exp.Expr] = []
        for item in sel.expressions:
            inner = item.this if isinstance(item, exp.Alias) else item
            if isinstance(inner, exp.Star) or (
                isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)
            ):
                side = rel.sides[0]
                if side.columns is None:
                    raise self.fail(item, "SELECT DISTINCT * over unknown columns", accepted)
                columns.extend(exp.column(c, quoted=True) for c in side.columns)
                continue
            if not isinstance(inner, exp.Column):
                raise self.fail(
                    item,
                    f"SELECT DISTINCT of an expression ({inner.sql(DIALECT)})",
                    accepted + "; compute it in a subquery",
                )
            columns.append(inner.copy())
        names = {c.name.lower() for c in columns if isinstance(c, exp.Column)}
        missing = [w for w in ("window_start", "window_end") if w not in names]
        if missing:
            raise self.fail(
                sel, f"SELECT DISTINCT without {' and '.join(missing)}", accepted, keyword="DISTINCT"
            )
        return exp.Group(expressions=columns)

    def filter(self, rel: Relation, where: exp.Expr) -> Relation:
        """``WHERE``: a filter step."""
        predicate = to_spark(self.query, rel, where)
        return replace(rel, stream=rel.stream.filter(predicate, name=self.step("where")))

    def project(
        self,
        rel: Relation,
        items: list[exp.Expr],
        replace_fn: Callable[[exp.Expr], exp.Expr | None] | None = None,
        *,
        time_text: str | None = None,
    ) -> Relation:
        """The select list: a select step (none for a bare ``*`` over one table).

        ``replace_fn`` substitutes sub-expressions (aggregates, ranked fields) before
        columns are resolved; ``time_text``: the expression whose column is the rows'
        event time (default: ``rel``'s time column).
        """
        if time_text is None and _time_physical(rel) is not None:
            time_text = f"`{_time_physical(rel)}`"
        if (
            len(items) == 1
            and replace_fn is None
            and isinstance(items[0], exp.Star)
            and len(rel.sides) == 1
            and not rel.sides[0].prefix
        ):
            return replace(rel, sides=(Side("", rel.sides[0].columns),))
        out: list[tuple[str, str]] = []
        time = None
        for item in items:
            if isinstance(item, exp.Star) or (
                isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
            ):
                qual = item.table if isinstance(item, exp.Column) else ""
                sides = [s for s in rel.sides if not qual or s.name.lower() == qual.lower()]
                if not sides:
                    raise self.fail(
                        item, f"unknown table or alias {qual!r}", f"{[s.name for s in rel.sides]}"
                    )
                for s in sides:
                    if s.columns is None:
                        raise self.fail(
                            item,
                            f"'*' over {repr(s.name) if s.name else 'a table'} whose columns are not known "
                            "when the flow is built",
                            "named columns, or a source whose schema is given",
                        )
                    for c in s.columns:
                        if s.repeats_key(c):
                            continue  # the join key, already listed with the left side
                        out.append((c, f"`{s.physical(c)}`"))
                        if rel.time is not None and c.lower() == rel.time.lower():
                            time = c
                continue
            name = item.alias_or_name if isinstance(item, exp.Alias | exp.Column) else None
            if not name:
                raise self.fail(
                    item,
                    f"the expression {item.sql(DIALECT)} has no name",
                    "a name for each computed column: <expression> AS <name>",
                )
            expr = item.this if isinstance(item, exp.Alias) else item
            text = to_spark(self.query, rel, expr, replace_fn)
            out.append((name, text))
            if isinstance(expr, exp.Column) and text == time_text:
                time = name
        names = [n.lower() for n, _ in out]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise self.fail(
                items[0],
                f"the column names {dups} appear more than once in the result",
                "distinct names: rename with AS",
            )
        if any(n.startswith(RESERVED_PREFIX) for n in names):
            raise self.fail(
                items[0],
                f"a result column name starting with {RESERVED_PREFIX!r}",
                "other names (the prefix is the compiler's)",
            )
        columns = [n if e == f"`{n}`" and "." not in n else (n, e) for n, e in out]  # names stay names
        stream = rel.stream.select(*columns, name=self.step("select"))
        return Relation(
            stream,
            (Side("", tuple(n for n, _ in out)),),
            time,
            late_steps=rel.late_steps,
            aggregated=rel.aggregated,
            window_columns=_window_columns(rel, out),
        )

    # -- FROM -------------------------------------------------------------------------------
    def from_item(self, node: exp.Expr) -> Relation:
        """A table, subquery or window TVF of ``FROM`` / ``JOIN``."""
        alias = node.alias if isinstance(node, exp.Table | exp.Subquery) else ""
        if isinstance(node, exp.Subquery):
            rel = self.query_rel(node.this)
            return self.alias(rel, alias)
        if isinstance(node, exp.Table):
            if node.args.get("version") is not None:
                raise self.fail(
                    node.args["version"].expression or node,
                    "FOR SYSTEM_TIME AS OF outside a JOIN",
                    "a [LEFT] JOIN t FOR SYSTEM_TIME AS OF a.<event-time column> ON ... (a temporal join)",
                )
            inner = node.this
            if (
                isinstance(inner, exp.Anonymous)
                and inner.name.upper() == "TABLE"
                and len(inner.expressions) == 1
            ):
                inner = inner.expressions[0]
            if isinstance(inner, exp.Anonymous | exp.Func) and not isinstance(inner, exp.Identifier):
                return self.alias(self.window_tvf(inner), alias)
            if isinstance(inner, exp.Identifier):
                if node.args.get("db") or node.args.get("catalog"):
                    raise self.fail(
                        node,
                        f"a qualified table name {node.sql(DIALECT)}",
                        "a table registered by name (flow.table(name, stream) or name=stream)",
                    )
                return self.table(node, inner.name, alias or inner.name)
        raise self.fail(node, f"{node.sql(DIALECT)} in FROM", SELECT_ACCEPTED)

    def table(self, node: exp.Expr, name: str, alias: str) -> Relation:
        """A CTE or registered table: its stream, known columns and event-time column."""
        cte = self.ctes.get(name.lower())
        if cte is not None:
            return self.alias(self.cte(cte), alias)
        stream = self.tables.get(name.lower())
        if stream is None:
            raise self.fail(
                node,
                f"unknown table {name!r}",
                "the tables registered with flow.table(...) or passed as keywords, and the WITH "
                f"queries in scope: {sorted({*self.tables, *self.ctes})}",
            )
        if isinstance(stream, LookupTable):
            raise self.fail(
                node,
                f"the wire.tables table {name!r} read as a stream",
                f"a wire.tables table in a lookup join only: JOIN {name} FOR SYSTEM_TIME AS OF PROCTIME() "
                "AS r ON a.k = r.<key>",
            )
        if isinstance(stream, VersionedTable):
            raise self.fail(
                node,
                f"the versioned table {name!r} read as a stream",
                f"a versioned table (stream.as_table(...)) in a temporal join only: JOIN {name} FOR "
                "SYSTEM_TIME AS OF a.<event-time column> ...; pass the stream itself to read its rows",
            )
        return self.stream_relation(node, stream, alias)

    def stream_relation(self, node: exp.Expr, stream: wire.Stream, alias: str) -> Relation:
        """The relation of a table's stream: its known columns and event-time column."""
        return Relation(stream, (Side(alias, known_columns(stream)),), event_time_column(stream))

    def alias(self, rel: Relation, alias: str) -> Relation:
        """``rel`` under the qualifier ``alias`` (a one-side relation)."""
        if len(rel.sides) != 1:
            return rel
        return replace(rel, sides=(replace(rel.sides[0], name=alias or rel.sides[0].name),))

    def window_tvf(self, call: exp.Expr) -> Relation:
        """``TUMBLE(TABLE t, DESCRIPTOR(ts), size)``, ``HOP(..., slide, size)``, ``SESSION(..., gap)``."""
        fn = call.name.upper() if isinstance(call, exp.Anonymous) else type(call).__name__.upper()
        args = list(call.expressions) if isinstance(call, exp.Anonymous) else list(call.args.values())
        accepted = (
            "TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size)), TABLE(HOP(TABLE t, DESCRIPTOR(ts), slide, size)), "
            "TABLE(SESSION(TABLE t, DESCRIPTOR(ts), gap)); sizes as INTERVAL '10' SECOND"
        )
        arity = {"TUMBLE": 3, "HOP": 4, "SESSION": 3}
        if fn not in arity:
            raise self.fail(call, f"table function {fn}", accepted)
        if len(args) != arity[fn]:
            raise self.fail(call, f"{fn} with {len(args)} arguments (an offset is not supported)", accepted)
        table_arg, descriptor = args[0], args[1]
        if isinstance(table_arg, exp.Column) and not table_arg.table:
            rel = self.table(table_arg, table_arg.name, table_arg.name)
        elif isinstance(table_arg, exp.Subquery):
            rel = self.alias(self.query_rel(table_arg.this), "")
        else:
            raise self.fail(table_arg, f"{table_arg.sql(DIALECT)} as the table of {fn}", accepted)
        if rel.window is not None:
            raise self.fail(table_arg, "a window TVF over a window TVF", "aggregate the inner one first")
        if not (
            isinstance(descriptor, exp.Anonymous)
            and descriptor.name.upper() == "DESCRIPTOR"
            and len(descriptor.expressions) == 1
            and isinstance(descriptor.expressions[0], exp.Column)
        ):
            raise self.fail(
                descriptor,
                f"{descriptor.sql(DIALECT)} as the time column of {fn}",
                "DESCRIPTOR(<event-time column>)",
            )
        ts = descriptor.expressions[0]
        if rel.time is None or ts.name.lower() != rel.time.lower():
            raise self.fail(
                ts,
                f"DESCRIPTOR({ts.name}): windows are over the rows' event time, which "
                + (f"is the column {rel.time!r}" if rel.time else "is no column of this table"),
                "DESCRIPTOR(<the source's event_time column>; window_start after a windowed "
                "GROUP BY; event_time after a JOIN)",
            )
        sizes = [interval_ms(self.query, a) for a in args[2:]]
        for a, ms in zip(args[2:], sizes, strict=True):
            if ms <= 0:
                raise self.fail(a, f"a window length of {ms} ms", "a positive INTERVAL")
        window: Window
        if fn == "TUMBLE":
            window = Window(wire.Tumbling(sizes[0]), sizes[0])
        elif fn == "HOP":
            slide, size = sizes
            if size % slide:
                raise self.fail(
                    args[3],
                    f"HOP size {size} ms not a multiple of slide {slide} ms",
                    "a size that is a multiple of the slide",
                )
            window = Window(wire.Sliding(size, slide), slide)
        else:
            window = Window(wire.Session(sizes[0]), None)
        side = rel.sides[0]
        columns = None if side.columns is None else (*side.columns, "window_start", "window_end")
        return replace(rel, window=window, sides=(Side(side.name, columns),))



def _time_physical(rel: Relation) -> str | None:
    if rel.time is None:
        return None
    if rel.time.lower() in rel.pseudo:
        return rel.pseudo[rel.time.lower()]
    for s in rel.sides:
        if s.real_name(rel.time) is not None:
            return s.physical(rel.time)
    return rel.time


def _window_columns(rel: Relation, out: list[tuple[str, str]]) -> tuple[str, str] | None:
    if rel.window_columns is None:
        return None
    start, end = rel.window_columns
    names = {e.strip("`").lower(): n for n, e in out}
    if start.lower() in names and end.lower() in names:
        return names[start.lower()], names[end.lower()]
    return None


def _join_references(sel: exp.Select) -> tuple[set[tuple[str, str]], set[str]] | None:
    """The columns a SELECT with a JOIN reads: (qualifier, name) and unqualified names; None for ``*``."""
    qualified: set[tuple[str, str]] = set()
    bare: set[str] = set()
    roots: list[exp.Expr] = list(sel.expressions)
    for key in ("where", "group", "having"):
        if sel.args.get(key) is not None:
            roots.append(sel.args[key])
    roots += [j.args["on"] for j in sel.args.get("joins") or [] if j.args.get("on") is not None]
    for node in (n for root in roots for n in root.walk()):
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
            return None
        if isinstance(node, exp.Column):
            if node.table:
                qualified.add((node.table.lower(), node.name.lower()))
            else:
                bare.add(node.name.lower())
    return qualified, bare


def _referenced(sel: exp.Select) -> set[str] | None:
    """The lower-case names of the columns ``sel`` reads (None: all, a ``*``)."""
    names: set[str] = set()
    roots = [*sel.expressions, *([sel.args["where"]] if sel.args.get("where") is not None else [])]
    for n in (node for root in roots for node in root.walk()):
        if isinstance(n, exp.Star) or (isinstance(n, exp.Column) and isinstance(n.this, exp.Star)):
            return None
        if isinstance(n, exp.Column):
            names.add(n.name.lower())
    return names


def _has_aggregate(sel: exp.Select) -> bool:
    return any(
        isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Window) is None
        for item in sel.expressions
        for n in item.walk()
    )
