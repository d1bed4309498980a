"""``wire.sql(flow, query, **tables)``: a SQL query over streams, as a stream."""

from __future__ import annotations

from dataclasses import dataclass

import wire
from wire.api.joins import VersionedTable
from wire.core.time import Duration, to_millis
from wire.errors import ConfigError
from wire.plan.nodes import LATE, PortRef
from wire.streaming_sql.compiler import Compiler, Emit, Options
from wire.streaming_sql.parse import parse
from wire.tables.base import LookupTable


@dataclass(frozen=True)
class SqlResult(wire.Stream):
    """The stream of a SQL query's result; :meth:`late` is the query's late table.

    It is a :class:`wire.Stream` (sink it, branch it, process it further); operators
    on it return plain streams. ``late_steps`` are the window and join steps of the
    query, in plan order.
    """

    late_steps: tuple[str, ...] = ()

    def late(self) -> wire.Stream:
        """The query's late table: the events its windows or joins found late.

        Columns are those of the Python API's late port (:meth:`wire.Stream.late`):
        the event's columns, ``event_time`` (int64 ms), ``watermark`` (int64 ms, the
        watermark when it arrived) and ``reason`` (string); a join's late events also
        carry ``side``. With one window or join in the query, it is that step's late
        port itself.

        Raises
        ------
        wire.PlanError
            If the query has no window or join (nothing can be late), or several (their
            late events have different columns): take one with
            ``sql_late(result, step=...)``.
        """
        return sql_late(self)


def sql(
    flow: wire.Flow,
    query: str,
    *,
    allowed_lateness: Duration = 0,
    emit: Emit = "final",
    name: str | None = None,
    **tables: wire.Stream | VersionedTable | LookupTable,
) -> SqlResult:
    """Compile a SQL query over registered streams into the flow's plan; return its result stream.

    Tables: the streams registered with ``flow.table(name, stream)`` and the keyword
    arguments ``name=stream`` (these win). A table's event time is its source's
    ``event_time`` column and its watermark the source's policy (which a table's
    ``WATERMARK FOR`` clause, ``flow.table(..., watermark=...)``, may give). The query is parsed
    with sqlglot (Spark SQL's dialect for expressions; Flink's window table-valued
    functions) and recorded as Wire operators when this is called, so every error
    comes now, never when the flow runs. docs/sql.md lists what is supported.

    Parameters
    ----------
    flow:
        The flow the query's operators are added to.
    query:
        One ``SELECT`` query (with ``WITH``, ``UNION ALL``, subqueries, window TVFs,
        ``SELECT DISTINCT`` over a window TVF, one ``JOIN`` per ``SELECT``, among them
        the event-time temporal join ``JOIN t FOR SYSTEM_TIME AS OF a.ts``).
    allowed_lateness:
        Allowed lateness of every window and join of the query (``"5m"``, ms,
        ``timedelta``): a window's late events within it update the window; a join
        accepts events up to that far behind the watermark (SPEC §3).
    emit:
        The windows' emission: ``"final"`` (one row per window when the watermark
        passes its end, then ``update`` rows for late changes) or ``"update"`` (also
        ``early`` rows while the window is open). The window's ``emit`` column can be
        selected by name.
    name:
        A prefix for the step ids of the query's operators (``<name>_window3``, ...):
        stable ids keep a checkpoint's state when other parts of the flow change.
        ``None``: Wire's default ids.
    **tables:
        ``name=stream`` tables for this query only; ``name=stream.as_table(key=...,
        delete=...)``, a versioned table with its key and delete markers, for a
        temporal join (``JOIN name FOR SYSTEM_TIME AS OF a.ts``) only; ``name=wire.tables.parquet(...)``
        (any ``wire.tables`` table) for a lookup join (``JOIN name FOR SYSTEM_TIME AS OF PROCTIME()``)
        only.

    Returns
    -------
    SqlResult
        The result stream (a :class:`wire.Stream`); ``.late()`` is the late table.

    Raises
    ------
    wire.streaming_sql.SqlError
        (a ``wire.ConfigError``) with the line and column of what does not parse or is
        not supported, and what is.
    ConfigError
        On an invalid option or a table that is not a stream (or a versioned table) of ``flow``.
    """
    if not isinstance(flow, wire.Flow):
        raise ConfigError("flow", flow, "a wire.Flow")
    if emit not in ("final", "update"):
        raise ConfigError("emit", emit, "'final' or 'update'")
    lateness = to_millis(allowed_lateness, parameter="allowed_lateness")
    all_tables: dict[str, wire.Stream | VersionedTable | LookupTable] = dict(flow.tables())
    for table_name, stream in tables.items():
        if isinstance(stream, LookupTable):
            all_tables[table_name.lower()] = stream
            continue
        inner = stream.stream if isinstance(stream, VersionedTable) else stream
        if not isinstance(inner, wire.Stream) or inner.flow is not flow:
            raise ConfigError(table_name, stream, "a stream of the same flow, or a versioned table of one "
                              "(stream.as_table(key=...))")
        all_tables[table_name.lower()] = stream
    tree = parse(query)
    rel = Compiler(flow, query, all_tables, Options(lateness, emit, name)).query_rel(tree)
    return SqlResult(rel.stream.flow, rel.stream.ref, rel.late_steps)


def sql_late(result: wire.Stream, *, step: str | None = None) -> wire.Stream:
    """The late table of a SQL query's result (see :meth:`SqlResult.late`).

    ``step``: one of ``result.late_steps`` when the query has several windows or joins.

    Raises
    ------
    wire.PlanError
        If ``result`` is not a query's result, the query has no window or join, has
        several and ``step`` is None, or ``step`` is not one of them.
    """
    if not isinstance(result, SqlResult):
        raise wire.PlanError("sql_late(): not the result of wire.sql(...)")
    steps = result.late_steps
    if step is not None:
        if step not in steps:
            raise wire.PlanError(
                f"sql_late(): step {step!r} is not a window or join of the query {list(steps)}"
            )
        return wire.Stream(result.flow, PortRef(step, LATE))
    if not steps:
        raise wire.PlanError("late(): the query has no window or join, so no event can be late")
    if len(steps) > 1:
        raise wire.PlanError(
            f"late(): the query has several windows and joins {list(steps)}; their late "
            "events have different columns: take one with wire.sql_late(result, step=...)"
        )
    return wire.Stream(result.flow, PortRef(steps[0], LATE))
