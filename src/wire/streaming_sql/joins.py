"""Joins of two tables in SQL: ``a JOIN b ON a.k = b.k [AND time bounds]``, an interval or regular join.

:class:`JoinCompiler` is mixed into :class:`~wire.streaming_sql.compiler.Compiler`: its
``join`` compiles a ``JOIN`` of the ``FROM`` clause onto :meth:`wire.Stream.interval_join`
(time bounds in ``ON``) or :meth:`wire.Stream.join`, pushing the ``WHERE`` terms that read
one side below the join and keeping only the columns the ``SELECT`` reads. A
``FOR SYSTEM_TIME AS OF`` join goes to :mod:`wire.streaming_sql.temporal`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

from sqlglot import exp

from wire.core.time import INT64_MAX, INT64_MIN
from wire.streaming_sql.exprs import and_all, check_expression, conjuncts, interval_ms, resolve
from wire.streaming_sql.relation import (
    RESERVED_PREFIX,
    RIGHT_PREFIX,
    Relation,
    Side,
)

if TYPE_CHECKING:
    from wire.streaming_sql.compiler import Compiler, Options


class JoinCompiler:
    """The ``JOIN`` half of the SQL compiler (mixed into ``Compiler``; see the module docstring)."""

    if TYPE_CHECKING:
        query: str
        options: Options

        def step(self, kind: str) -> str | None:
            """``Compiler.step``: the step id of the next operator."""

        def fail(
            self, node: exp.Expr | None, problem: str, accepted: str, *, keyword: str | None = None
        ) -> Exception:
            """``Compiler.fail``: a SqlError at ``node``."""

        def filter(self, rel: Relation, where: exp.Expr) -> Relation:
            """``Compiler.filter``: ``rel`` filtered by ``where``."""

        def from_item(self, node: exp.Expr) -> Relation:
            """``Compiler.from_item``: the relation of a ``FROM`` / ``JOIN`` item."""

    def join(
        self,
        left: Relation,
        join: exp.Join,
        where: exp.Expr | None,
        references: tuple[set[tuple[str, str]], set[str]] | None = None,
    ) -> tuple[Relation, exp.Expr | None]:
        """``a JOIN b ON a.k = b.k [AND time bounds] [AND ...]``: an interval or regular join.

        The terms of ``where`` (the SELECT's WHERE) that read one side only filter that
        side before the join (less state); the other terms are returned, to filter after.
        ``references``: the (qualifier, column) and unqualified column names the SELECT
        reads (None: all, a ``*``); each side keeps only those (and its key and event-time
        columns) before the join, since a join keeps every column of its inputs in state.
        """
        from wire.streaming_sql.temporal import is_temporal, temporal_join

        if is_temporal(join):
            return temporal_join(cast("Compiler", self), left, join, where, references)
        accepted = (
            "[INNER] JOIN ... ON <left column> = <right column> [AND ...] [AND right.ts BETWEEN "
            "left.ts - INTERVAL ... AND left.ts + INTERVAL ...]"
        )
        if join.side or join.kind not in ("", "INNER"):
            what = (join.side + " " + join.kind).strip()
            raise self.fail(
                join.this,
                f"{what} JOIN"
                + (
                    " (an outer join: Wire's Stream.join and Stream.interval_join emit matched pairs "
                    "only, they have no outer mode to map it to)"
                    if join.side
                    else ""
                ),
                accepted + " (inner joins only)",
                keyword=join.side or join.kind,
            )
        if join.args.get("using"):
            raise self.fail(join, "JOIN ... USING", accepted)
        on = join.args.get("on")
        if on is None:
            raise self.fail(join, "a JOIN without ON", accepted)
        right = self.from_item(join.this)
        for rel, what in ((left, "left"), (right, "right")):
            if len(rel.sides) != 1 or rel.window is not None:
                raise self.fail(
                    join,
                    f"the {what} side of a JOIN is a join or a window TVF",
                    "tables or subqueries on both sides",
                )
        ls, rs = left.sides[0], right.sides[0]
        if ls.name.lower() == rs.name.lower():
            raise self.fail(
                join.this, f"both sides of the JOIN are named {ls.name!r}", "an alias for one side"
            )
        both = Relation(left.stream, (ls, rs), None)
        after: list[exp.Expr] = []
        for term in conjuncts(where):
            side = self._only_side(both, term)
            if side == 0:
                left = self.filter(left, term)
            elif side == 1:
                right = self.filter(right, term)
            else:
                after.append(term)
        keys: list[tuple[str, str]] = []
        lower, upper = INT64_MIN, INT64_MAX
        rest: list[exp.Expr] = []
        for term in conjuncts(on):
            check_expression(self.query, term)
            bounds = self._time_bounds(both, left.time, right.time, term)
            if bounds is not None:
                lower, upper = max(lower, bounds[0]), min(upper, bounds[1])
                continue
            pair = self._key_pair(both, term)
            if pair is not None:
                keys.append(pair)
                continue
            rest.append(term)
        if not keys:
            raise self.fail(on, "no equality between a column of each side in ON (the join key)", accepted)
        if lower > upper:
            raise self.fail(
                on, f"time bounds that no pair meets ({lower} ms > {upper} ms)", "consistent bounds"
            )
        lkey, rkey = [k[0] for k in keys], [k[1] for k in keys]
        left, ls = self._narrow(left, lkey, references)
        right, rs = self._narrow(right, rkey, references)
        if len(keys) == 1 and lkey[0] == rkey[0]:
            key = lkey[0]
            ls_stream, rs_stream = (
                left.stream.key_by(key, name=self.step("key")),
                right.stream.key_by(key, name=self.step("key")),
            )
        else:
            key = RESERVED_PREFIX + "key"
            ls_stream = left.stream.map(**{key: _composite(lkey)}, name=self.step("key")).key_by(
                key, name=self.step("key")
            )
            rs_stream = right.stream.map(**{key: _composite(rkey)}, name=self.step("key")).key_by(
                key, name=self.step("key")
            )
        joined = ls_stream.interval_join(
            rs_stream,
            lower=lower,
            upper=upper,
            right_prefix=RIGHT_PREFIX,
            allowed_lateness=self.options.allowed_lateness_ms,
            name=self.step("join"),
        )
        rel = Relation(
            joined,
            (replace(ls, key=key), replace(rs, prefix=RIGHT_PREFIX, key=key)),
            "event_time",
            pseudo={"event_time": "event_time"},
            late_steps=left.late_steps + right.late_steps + (joined.ref.step,),
        )
        residual = and_all(rest)
        return (self.filter(rel, residual) if residual is not None else rel), and_all(after)

    def _narrow(
        self, rel: Relation, keys: list[str], references: tuple[set[tuple[str, str]], set[str]] | None
    ) -> tuple[Relation, Side]:
        """``rel`` (one side of a join) with only the columns the SELECT reads, its keys and time."""
        side = rel.sides[0]
        if references is None or side.columns is None:
            return rel, side
        qualified, bare = references
        keep = [
            c
            for c in side.columns
            if (side.name.lower(), c.lower()) in qualified
            or c.lower() in bare
            or c in keys
            or (rel.time is not None and c.lower() == rel.time.lower())
        ]
        if len(keep) == len(side.columns):
            return rel, side
        side = replace(side, columns=tuple(keep))
        return replace(rel, stream=rel.stream.select(*keep, name=self.step("columns")), sides=(side,)), side

    def _only_side(self, both: Relation, term: exp.Expr) -> int | None:
        """0 or 1 when every column of ``term`` is of that side of the join, else None."""
        sides: set[int] = set()
        for col in term.find_all(exp.Column):
            if isinstance(col.this, exp.Star):
                return None
            found = self._side_of(both, col) if (col.table or both.columns is not None) else None
            if found is None:
                return None
            sides.add(found[0])
        return sides.pop() if len(sides) == 1 else None

    def _key_pair(self, both: Relation, term: exp.Expr) -> tuple[str, str] | None:
        if not (
            isinstance(term, exp.EQ)
            and isinstance(term.this, exp.Column)
            and isinstance(term.expression, exp.Column)
        ):
            return None
        a, b = self._side_of(both, term.this), self._side_of(both, term.expression)
        if a is None or b is None or a[0] == b[0]:
            return None
        if a[0] == 1:
            a, b = b, a
        return a[1], b[1]

    def _side_of(self, both: Relation, col: exp.Column) -> tuple[int, str] | None:
        """(0 left / 1 right, the column's physical name on its own side) of a column of ``both``."""
        phys = resolve(self.query, both, col)
        for i, s in enumerate(both.sides):
            if col.table and s.name.lower() == col.table.lower():
                return i, s.real_name(col.name) or col.name
        for i, s in enumerate(both.sides):
            if s.real_name(col.name) is not None and s.physical(col.name) == phys:
                return i, s.real_name(col.name) or col.name
        return None

    def _time_bounds(
        self, both: Relation, lt: str | None, rt: str | None, term: exp.Expr
    ) -> tuple[int, int] | None:
        """``(lower, upper)`` of ``right.t - left.t`` that ``term`` states, or None if it states none."""
        if lt is None or rt is None:
            return None
        if isinstance(term, exp.Between):
            lo = self._time_bounds(
                both, lt, rt, exp.GTE(this=term.this.copy(), expression=term.args["low"].copy())
            )
            hi = self._time_bounds(
                both, lt, rt, exp.LTE(this=term.this.copy(), expression=term.args["high"].copy())
            )
            if lo is None or hi is None:
                return None
            return max(lo[0], hi[0]), min(lo[1], hi[1])
        ops: dict[type[exp.Expr], str] = {exp.GTE: ">=", exp.GT: ">", exp.LTE: "<=", exp.LT: "<", exp.EQ: "="}
        op = ops.get(type(term))
        if op is None:
            return None
        a, b = self._time_term(both, lt, rt, term.this), self._time_term(both, lt, rt, term.expression)
        if a is None or b is None or a[0] == b[0]:
            return None
        # a.side.t + a.c  op  b.side.t + b.c   ->   right.t - left.t  op'  c
        if a[0] == 1:  # right.t + ca op left.t + cb  ->  r - l op cb - ca
            c, rel_op = b[1] - a[1], op
        else:  # left.t + ca op right.t + cb  ->  r - l  flip(op)  ca - cb
            c, rel_op = a[1] - b[1], {">=": "<=", ">": "<", "<=": ">=", "<": ">", "=": "="}[op]
        if rel_op == "=":
            return c, c
        if rel_op == ">=":
            return c, INT64_MAX
        if rel_op == ">":
            return c + 1, INT64_MAX
        if rel_op == "<=":
            return INT64_MIN, c
        return INT64_MIN, c - 1

    def _time_term(self, both: Relation, lt: str, rt: str, node: exp.Expr) -> tuple[int, int] | None:
        """``(side, offset ms)`` of ``side.t [+|- INTERVAL]``, if ``node`` is one."""
        node = node.unnest() if isinstance(node, exp.Paren) else node
        offset = 0
        if isinstance(node, exp.Add | exp.Sub) and isinstance(node.expression, exp.Interval):
            offset = interval_ms(self.query, node.expression) * (1 if isinstance(node, exp.Add) else -1)
            node = node.this
        if not isinstance(node, exp.Column):
            return None
        side = self._side_of(both, node)
        if side is None:
            return None
        t = lt if side[0] == 0 else rt
        return (side[0], offset) if side[1].lower() == t.lower() else None


def _composite(columns: list[str]) -> str:
    if len(columns) == 1:
        return f"`{columns[0]}`"
    return "to_json(named_struct(" + ", ".join(f"'k{i}', `{c}`" for i, c in enumerate(columns)) + "))"
