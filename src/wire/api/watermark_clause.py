"""Flink's ``WATERMARK FOR ts AS ts - INTERVAL '5' SECOND`` for ``flow.table(..., watermark=...)``.

Wire generates watermarks at sources (SPEC §2): a source's policy is
:class:`wire.BoundedOutOfOrderness`, ``W = max event time seen - max_delay``. The clause
of a table says the same thing in SQL, so it is mapped onto the policy of the source its
stream comes from:

* the table's stream is the source's, or per-row steps of it (``filter``, ``map``,
  ``select``, ``key_by``, ``explode``, ``throttle``: they pass the watermark on
  unchanged); any other step (a window, join, union, process) derives its watermark
  from its inputs', and the clause is refused there;
* the clause's column is the source's ``event_time`` column (kept by name on the way);
* a source given no policy (``flow.source(..., watermark=None)``) takes the clause's:
  ``BoundedOutOfOrderness(delay)``; a source with a policy must have that delay, else
  the clause is refused (a source has one watermark, whichever table reads it).

The clause is parsed with sqlglot (its RisingWave dialect reads Flink's
``WATERMARK FOR`` column constraint). Errors are :class:`wire.SqlError` with parameter
``watermark`` and the line and column in the clause's text.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from wire.core.windowing import BoundedOutOfOrderness
from wire.errors import SqlError
from wire.plan.nodes import OUT, MapNode, SelectNode, SourceNode, UnaryNode

if TYPE_CHECKING:
    from sqlglot import exp

    from wire.api.flow import Flow
    from wire.api.stream import Stream

ACCEPTED = (
    "WATERMARK FOR <event-time column> AS <the column> [- INTERVAL '<n>' <unit>] "
    "(unit MILLISECOND, SECOND, MINUTE, HOUR or DAY), on a table whose stream is a source's "
    "or per-row steps (filter, map, select, key_by, explode, throttle) of one source"
)
_PREFIX = "CREATE TABLE _wire_table ("
_UNITS_MS = {
    "MILLISECOND": 1, "MILLISECONDS": 1, "SECOND": 1_000, "SECONDS": 1_000, "MINUTE": 60_000,
    "MINUTES": 60_000, "HOUR": 3_600_000, "HOURS": 3_600_000, "DAY": 86_400_000, "DAYS": 86_400_000,
}


@dataclass(frozen=True)
class WatermarkClause:
    """A parsed clause: the event-time column, the delay (ms), and where each is in the text."""

    text: str
    column: str
    delay_ms: int
    column_offset: int
    delay_offset: int


def _error(text: str, offset: int | None, problem: str) -> SqlError:
    line = column = None
    if offset is not None:
        offset = max(0, min(offset, len(text)))
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    err = SqlError(f"WATERMARK clause: {problem}", accepted=ACCEPTED, line=line, column=column,
                   snippet=text)
    err.parameter = "watermark"
    return err


def _start(node: exp.Expr, text: str = "") -> int | None:
    """Where ``node`` starts in the clause's text.

    sqlglot keeps the positions of names and literals, not of keywords: an ``INTERVAL``
    starts at the keyword before its literal.
    """
    starts: list[int] = [
        n.meta["start"] for n in node.walk() if isinstance(n.meta, dict) and "start" in n.meta
    ]
    if not starts:
        return None
    start = min(starts) - len(_PREFIX)
    if type(node).__name__ == "Interval":
        keyword = text.upper().rfind("INTERVAL", 0, start)
        start = keyword if keyword >= 0 else start
    return start


def parse_clause(text: str) -> WatermarkClause:
    """Parse ``WATERMARK FOR ts AS ts [- INTERVAL 'n' unit]``.

    Raises
    ------
    SqlError
        (parameter ``watermark``) with the line and column of what does not parse or is
        not that form.
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    if not isinstance(text, str) or not text.strip():
        raise _error("", None, f"{text!r} is not a clause")
    if text.split(None, 1)[0].upper() != "WATERMARK":
        raise _error(text, len(text) - len(text.lstrip()), "the text does not start with WATERMARK")
    try:
        tree = sqlglot.parse_one(_PREFIX + text + ")", read="risingwave")
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        line, col = first.get("line"), first.get("col")
        offset = None
        if line and col:
            lines = text.split("\n")
            col = col - len(_PREFIX) if line == 1 else col
            offset = sum(len(s) + 1 for s in lines[: line - 1]) + max(col - 1, 0)
        raise _error(text, offset, f"syntax error: {first.get('description', str(e))}") from None
    except TokenError as e:
        raise _error(text, None, f"cannot tokenize ({e})") from None
    schema = tree.this if isinstance(tree, exp.Create) else None
    items = list(schema.expressions) if isinstance(schema, exp.Schema) else []
    if len(items) != 1 or not isinstance(items[0], exp.WatermarkColumnConstraint):
        raise _error(text, 0, "not one WATERMARK FOR ... AS ... clause")
    clause = items[0]
    column, expr = clause.this, clause.expression
    if not isinstance(column, exp.Column) or column.table:
        raise _error(text, _start(column), f"WATERMARK FOR {column.sql()}: not a column name")
    delay, delay_node = 0, expr
    if isinstance(expr, exp.Sub):
        delay_node = expr.expression
        delay = _interval_ms(text, delay_node)
        expr = expr.this
    if not (isinstance(expr, exp.Column) and not expr.table and expr.name.lower() == column.name.lower()):
        raise _error(
            text, _start(expr),
            f"AS {clause.expression.sql()}: the watermark is the column {column.name!r} minus a constant "
            "delay (bounded out-of-orderness); other strategies are not Wire's",
        )
    return WatermarkClause(text, column.name, delay, _start(column) or 0, _start(delay_node, text) or 0)


def _interval_ms(text: str, node: exp.Expr) -> int:
    from sqlglot import exp

    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal):
        value = node.this.name.strip()
        unit = node.args.get("unit")
        unit_name = unit.name.upper() if unit is not None else None
        if unit_name is None and len(value.split()) == 2:
            value, unit_name = value.split()[0], value.split()[1].upper()
        if unit_name in _UNITS_MS and value.isdigit():
            return int(value) * _UNITS_MS[unit_name]
    raise _error(text, _start(node, text), f"{node.sql()} is not a delay")


def apply_clause(flow: Flow, table: str, stream: Stream, text: str) -> None:
    """Check the clause against the source of ``stream``; set the source's policy if it had none.

    Raises
    ------
    SqlError
        (parameter ``watermark``): a clause that does not parse; a stream that is not a
        source's or per-row steps of one; a column that is not the source's event time
        there; a source whose policy has another delay.
    """
    clause = parse_clause(text)
    plan = flow.plan()
    where = f"table {table!r}"
    if stream.ref.port != OUT:
        raise _error(text, 0, f"{where} is the {stream.ref.port!r} port of step {stream.ref.step!r}, "
                              "which has no watermark of its own")
    node = plan.node(stream.ref.step)
    chain: list[UnaryNode] = []
    while not isinstance(node, SourceNode):
        if not (isinstance(node, UnaryNode) and getattr(node, "stateless", False)):
            raise _error(
                text, 0,
                f"{where} reads step {node.step!r} ({type(node).__name__}), whose watermark Wire derives "
                "from its inputs'; a watermark is generated at a source (SPEC §2): give the clause on a "
                "table of the source's stream or of per-row steps of it",
            )
        chain.append(node)
        node = plan.node(node.upstream)
    source = node
    if clause.column.lower() != source.event_time.lower():
        raise _error(text, clause.column_offset,
                     f"WATERMARK FOR {clause.column}: the event time of {where} (source "
                     f"{source.step!r}) is the column {source.event_time!r}")
    for step in reversed(chain):
        if _hides_time(step, source.event_time):
            raise _error(text, clause.column_offset,
                         f"WATERMARK FOR {clause.column}: step {step.step!r} of {where} replaces or drops "
                         f"the event-time column {source.event_time!r}")
    if flow._policy_given(source.step):
        have = source.watermark.max_delay_ms
        if have != clause.delay_ms:
            raise _error(
                text, clause.delay_offset,
                f"a delay of {clause.delay_ms} ms, but source {source.step!r} of {where} has the watermark "
                f"policy BoundedOutOfOrderness({have} ms) (from flow.source(watermark=...) or an earlier "
                "table's clause); a source has one watermark: give the same delay, or no watermark= at "
                "the source",
            )
        return
    policy = BoundedOutOfOrderness(clause.delay_ms)
    flow._replace_source(replace(source, watermark=policy))


def _hides_time(node: UnaryNode, time: str) -> bool:
    if isinstance(node, MapNode):
        return any(name.lower() == time.lower() for name, _ in node.columns)
    if isinstance(node, SelectNode):
        for c in node.columns:
            if isinstance(c, str) and c.lower() == time.lower():
                return False
            if isinstance(c, tuple) and c[0].lower() == time.lower() and isinstance(c[1], str) and \
                    c[1].strip("`").lower() == time.lower():
                return False
        return True
    return False
