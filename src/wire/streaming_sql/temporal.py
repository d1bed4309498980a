"""``a [LEFT] JOIN t FOR SYSTEM_TIME AS OF a.ts [AS] r ON a.k = r.k``: the event-time temporal join.

Flink's event-time temporal join, onto :meth:`wire.Stream.temporal_join`: each row of
the left table meets the version of its key's row of ``t`` valid at the row's event
time (the version with the largest event time ``<=`` it). ``t`` is seen as a versioned
table (:meth:`wire.Stream.as_table`):

- a table registered from a stream (``flow.table("rates", stream)`` or ``rates=stream``):
  keyed by its columns in the ``ON`` equalities, no deletes;
- a versioned table passed as a keyword (``rates=stream.as_table(key="cur", delete="gone")``):
  keyed by its ``key`` (the ``ON`` clause must equate it with a left column) with its
  delete markers.

The table's columns other than its key carry the right-hand prefix of every SQL join
(``right_``), so the late table's table rows have the columns of a join's right side.

``JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`` of a ``wire.tables`` table passed as a keyword
(``customers=wire.tables.parquet(...)``) is Flink's processing-time lookup join, onto
:meth:`wire.Stream.lookup_join` (the table's columns keep their names; no late port).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from sqlglot import exp

from wire.api.joins import VersionedTable
from wire.streaming_sql.exprs import and_all, check_expression, conjuncts
from wire.streaming_sql.parse import DIALECT
from wire.streaming_sql.relation import RESERVED_PREFIX, RIGHT_PREFIX, Relation, Side, known_columns
from wire.tables.base import LookupTable

if TYPE_CHECKING:
    from wire.streaming_sql.compiler import Compiler

ACCEPTED = (
    "a [INNER | LEFT [OUTER]] JOIN t FOR SYSTEM_TIME AS OF a.<a's event-time column> [AS] r "
    "ON a.k = r.k [AND ...] (an event-time temporal join)"
)
LOOKUP_ACCEPTED = (
    "a [INNER | LEFT [OUTER]] JOIN t FOR SYSTEM_TIME AS OF PROCTIME() [AS] r ON a.k = r.<t's key> "
    "(a lookup join; t a wire.tables table passed as a keyword: wire.sql(..., t=wire.tables.parquet(...)))"
)
VERSION_TIME = "version_time"
"""The joined rows' column of the version met (int64 ms; null when none): an unqualified name."""


def is_temporal(join: exp.Join) -> bool:
    """Whether ``join`` reads a table ``FOR SYSTEM_TIME AS OF ...`` (a temporal join)."""
    return isinstance(join.this, exp.Table) and join.this.args.get("version") is not None


def temporal_join(
    c: Compiler,
    left: Relation,
    join: exp.Join,
    where: exp.Expr | None,
    references: tuple[set[tuple[str, str]], set[str]] | None,
) -> tuple[Relation, exp.Expr | None]:
    """Compile a temporal (or lookup) join; return it and the WHERE terms left to filter its rows.

    WHERE terms that read the left side only filter it before the join; the others
    (a term on the versioned table would otherwise pick an older version) are returned.
    ``references`` as for :meth:`Compiler.join`.
    """
    table_node: exp.Table = join.this
    version: exp.Version = table_node.args["version"]
    if join.side not in ("", "LEFT") or join.kind not in (("", "OUTER") if join.side else ("", "INNER")):
        what = (join.side + " " + join.kind).strip()
        raise c.fail(
            table_node, f"{what} JOIN ... FOR SYSTEM_TIME AS OF", ACCEPTED + ": an inner or LEFT join",
            keyword=join.side or join.kind,
        )
    how: Literal["inner", "left"] = "left" if join.side == "LEFT" else "inner"
    as_of = version.expression
    if str(version.this).upper() != "TIMESTAMP" or str(version.args.get("kind", "")).upper() != "AS OF":
        raise c.fail(
            as_of if as_of is not None else table_node,
            f"{version.this} {version.args.get('kind')} (a version of a table)",
            ACCEPTED,
        )
    if join.args.get("using"):
        raise c.fail(join, "a temporal JOIN ... USING", ACCEPTED)
    on = join.args.get("on")
    if on is None:
        raise c.fail(join, "a temporal JOIN without ON", ACCEPTED)
    if len(left.sides) != 1 or left.window is not None:
        raise c.fail(join, "the left side of a temporal JOIN is a join or a window TVF",
                     "a table or subquery on the left")
    if table_node.args.get("db") or table_node.args.get("catalog"):
        raise c.fail(table_node, f"a qualified table name {table_node.name}", ACCEPTED)
    name = table_node.name
    alias = table_node.alias or name
    versioned = c.tables.get(name.lower()) if name.lower() not in c.ctes else None
    proctime = (isinstance(as_of, exp.Anonymous) and as_of.name.upper() == "PROCTIME"
                and not as_of.expressions)
    if isinstance(versioned, LookupTable) or proctime:
        if not (isinstance(versioned, LookupTable) and proctime):
            raise c.fail(
                as_of,
                f"FOR SYSTEM_TIME AS OF {as_of.sql(DIALECT)} of "
                + (f"the wire.tables table {name!r}" if isinstance(versioned, LookupTable)
                   else f"{name!r}, which is not a wire.tables table"),
                LOOKUP_ACCEPTED,
            )
        return _lookup(c, left, join, versioned, alias, how, where)
    if isinstance(as_of, exp.Anonymous | exp.Func) and not isinstance(as_of, exp.Column):
        raise c.fail(
            as_of,
            f"FOR SYSTEM_TIME AS OF {as_of.sql(DIALECT)}: only the event-time temporal join (AS OF "
            "the left's event-time column) and the lookup join (AS OF PROCTIME() of a wire.tables "
            "table) are supported",
            ACCEPTED,
        )
    if isinstance(versioned, VersionedTable):
        right = c.stream_relation(table_node, versioned.stream, alias)
    else:
        versioned = None
        right = c.table(table_node, name, alias)
    if len(right.sides) != 1 or right.window is not None:
        raise c.fail(table_node, "a versioned table that is a join or a window TVF", ACCEPTED)
    ls, rs = left.sides[0], right.sides[0]
    if ls.name.lower() == rs.name.lower():
        raise c.fail(table_node, f"both sides of the JOIN are named {ls.name!r}", "an alias for one side")
    if rs.columns is None:
        raise c.fail(
            table_node,
            f"the versioned table {name!r} has columns not known when the flow is built",
            "a table whose stream's schema is known (a source given schema=, a generator, Kafka)",
        )
    if versioned is not None:
        for what, column in (("key", versioned.key), ("delete column", versioned.delete)):
            if column is not None and rs.real_name(column) is None:
                raise c.fail(
                    table_node,
                    f"the versioned table {name!r} has the {what} {column!r}, not one of its columns",
                    f"as_table(key=..., delete=...) of its columns {list(rs.columns)}",
                )
    both = Relation(left.stream, (ls, rs), None)
    _check_as_of(c, both, left, as_of)

    left, after = _filter_stream_side(c, both, left, where)
    pairs: list[tuple[str, str]] = []
    rest: list[exp.Expr] = []
    for term in conjuncts(on):
        check_expression(c.query, term)
        pair = c._key_pair(both, term)
        if pair is not None:
            pairs.append(pair)
        else:
            rest.append(term)
    if not pairs:
        raise c.fail(on, "no equality between a column of each side in ON (the versioned table's key)",
                     ACCEPTED)
    if versioned is not None:
        keyed = [p for p in pairs if p[1].lower() == versioned.key.lower()]
        if not keyed:
            raise c.fail(
                on,
                f"ON does not equate a left column with the versioned table's key {versioned.key!r}",
                f"ON a.<column> = {alias}.{versioned.key}",
            )
        rest += [_eq(ls, rs, p) for p in pairs if p is not keyed[0]]
        pairs = [keyed[0]]
    if rest and how == "left":
        raise c.fail(
            rest[0],
            f"a condition other than the key equality in the ON of a LEFT temporal join "
            f"({rest[0].sql(DIALECT)})",
            "ON <equalities of the key> only; filter in WHERE, or use an inner join",
        )
    return _record(c, left, right, pairs, versioned, how, references, after, rest)


def _filter_stream_side(
    c: Compiler, both: Relation, left: Relation, where: exp.Expr | None
) -> tuple[Relation, list[exp.Expr]]:
    """Apply the WHERE conjuncts of the stream's side alone to ``left`` before the join; the others stay.

    Returns the filtered stream and the conjuncts left for after the join.
    """
    after: list[exp.Expr] = []
    for term in conjuncts(where):
        if c._only_side(both, term) == 0:
            left = c.filter(left, term)
        else:
            after.append(term)
    return left, after


def _check_as_of(c: Compiler, both: Relation, left: Relation, as_of: exp.Expr) -> None:
    """``AS OF`` must name the left side's event-time column."""
    what = f"FOR SYSTEM_TIME AS OF {as_of.sql(DIALECT)}"
    accepted = (
        "AS OF the left table's event-time column "
        + (f"({left.sides[0].name or 'left'}.{left.time})" if left.time else "(it has none)")
        + ": only the event-time temporal join is supported"
    )
    if not isinstance(as_of, exp.Column) or isinstance(as_of.this, exp.Star):
        raise c.fail(as_of, f"{what}: not a column", accepted)
    found = c._side_of(both, as_of)
    if found is None or found[0] != 0:
        raise c.fail(as_of, f"{what}: not a column of the left table", accepted)
    if left.time is None or found[1].lower() != left.time.lower():
        raise c.fail(
            as_of,
            f"{what}: not the left table's event time "
            + (f"(which is {left.time!r})" if left.time else "(its rows' event time is no column)"),
            accepted,
        )


def _eq(ls: Side, rs: Side, pair: tuple[str, str]) -> exp.Expr:
    return exp.EQ(this=exp.column(pair[0], table=ls.name, quoted=True),
                  expression=exp.column(pair[1], table=rs.name, quoted=True))


def _record(
    c: Compiler,
    left: Relation,
    right: Relation,
    pairs: list[tuple[str, str]],
    versioned: VersionedTable | None,
    how: Literal["inner", "left"],
    references: tuple[set[tuple[str, str]], set[str]] | None,
    after: list[exp.Expr],
    rest: list[exp.Expr],
) -> tuple[Relation, exp.Expr | None]:
    """The operators: both sides' key, the table's columns prefixed, ``as_table``, ``temporal_join``."""
    from wire.streaming_sql.joins import _composite

    lkey, rkey = [p[0] for p in pairs], [p[1] for p in pairs]
    left, ls = c._narrow(left, lkey, references)
    rs = right.sides[0]
    assert rs.columns is not None
    delete = versioned.delete if versioned is not None else None
    keep = [
        col for col in rs.columns
        if (delete is None or col.lower() != delete.lower())
        and (references is None or (rs.name.lower(), col.lower()) in references[0]
             or col.lower() in references[1] or col in rkey)
    ]
    table_stream = right.stream
    if len(pairs) == 1 and lkey[0] == rkey[0]:
        key = lkey[0]
        stream = left.stream
        columns: list[str | tuple[str, str]] = [key]
    else:
        key = RESERVED_PREFIX + "key"
        stream = left.stream.map(**{key: _composite(lkey)}, name=c.step("key"))
        table_stream = table_stream.map(**{key: _composite(rkey)}, name=c.step("key"))
        columns = [key]
    columns += [(RIGHT_PREFIX + col, f"`{col}`") for col in keep if col != key]
    if delete is not None:
        columns.append((RIGHT_PREFIX + delete, f"`{delete}`"))
    table = table_stream.select(*columns, name=c.step("table")).as_table(
        key=key, delete=None if delete is None else RIGHT_PREFIX + delete
    )
    joined = stream.temporal_join(table, on=key, how=how, name=c.step("temporal_join"))
    rel = Relation(
        joined,
        (replace(ls, key=key), replace(rs, columns=tuple(keep), prefix=RIGHT_PREFIX, key=key)),
        left.time,
        pseudo={VERSION_TIME: VERSION_TIME},
        late_steps=left.late_steps + right.late_steps + (joined.ref.step,),
    )
    residual = and_all(rest)
    return (c.filter(rel, residual) if residual is not None else rel), and_all(after)


def _lookup(
    c: Compiler,
    left: Relation,
    join: exp.Join,
    table: LookupTable,
    alias: str,
    how: Literal["inner", "left"],
    where: exp.Expr | None,
) -> tuple[Relation, exp.Expr | None]:
    """``JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`` of a ``wire.tables`` table: ``Stream.lookup_join``.

    The table's joined columns keep their names (``lookup_join`` has no prefix; a name the
    left table has too is an error); ``r.<key>`` is the left's ``ON`` column. No late port.
    """
    on = join.args["on"]
    ls = left.sides[0]
    if ls.name.lower() == alias.lower():
        raise c.fail(join.this, f"both sides of the JOIN are named {ls.name!r}", "an alias for one side")
    joined = table.columns
    if joined is None and table.snapshot:  # a local Parquet / Delta table: its schema is cheap to read
        try:
            joined = tuple(table.resolve_schema().names[1:])
        except Exception:
            joined = None  # unknown now; lookup_join reports it when the flow compiles
    rs = Side(alias, None if joined is None else (table.key, *joined), key=table.key)
    both = Relation(left.stream, (ls, rs), None)
    left, after = _filter_stream_side(c, both, left, where)
    key: str | None = None
    rest: list[exp.Expr] = []
    for term in conjuncts(on):
        check_expression(c.query, term)
        pair = c._key_pair(both, term)
        if pair is not None and key is None and pair[1].lower() == table.key.lower():
            key = pair[0]
        else:
            rest.append(term)
    if key is None:
        raise c.fail(on, f"ON does not equate a left column with the table's key {table.key!r}",
                     f"ON a.<column> = {alias}.{table.key}")
    if rest and how == "left":
        raise c.fail(rest[0], f"a condition other than the key equality in the ON of a LEFT lookup join "
                     f"({rest[0].sql(DIALECT)})", "ON a.<column> = r.<key> only; filter in WHERE")
    columns = known_columns(left.stream)
    clash = sorted({j.lower() for j in joined or ()} & {col.lower() for col in columns or ()})
    if clash:
        raise c.fail(join.this, f"the table's columns {clash} are also the left table's (lookup_join "
                     "adds the table's columns under their own names)",
                     "rename the left's columns in a subquery, or list the table's columns= without them")
    stream = left.stream.lookup_join(table, on=key, how=how, name=c.step("lookup_join"))
    rel = Relation(
        stream,
        (replace(ls, key=key), replace(rs, key_column=key)),
        left.time,
        late_steps=left.late_steps,
    )
    residual = and_all(rest)
    return (c.filter(rel, residual) if residual is not None else rel), and_all(after)
