"""What the SQL compiler knows of a relation: its stream, columns, event time and scope.

A :class:`Relation` is the compiled form of a ``FROM`` item or a query: the
:class:`~wire.api.stream.Stream` that carries its rows, the SQL names of its columns
(``None`` when they are not known when the flow is built, e.g. a file source that
infers its schema), which column holds the event time Wire's windows and joins use,
and the scope in which the query's column references are resolved to the stream's
physical columns (after a join the right side's columns carry a prefix).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

import wire
from wire.plan.nodes import (
    ExplodeNode,
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    LookupJoinNode,
    MapNode,
    ProcessNode,
    SelectNode,
    SourceNode,
    TemporalJoinNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
)

RESERVED_PREFIX = "_sql_"
"""Columns the compiler adds (keys, aggregates, the right side of a join) start with this."""
RIGHT_PREFIX = "right_"
"""Physical prefix of a join's right-hand columns: the Python API's default, so a join's
late table has the columns of ``Stream.join(...).late()`` (right events' as ``right_<c>``)."""


@dataclass(frozen=True)
class Side:
    """One table of a ``FROM`` clause: its qualifier, columns and their physical names."""

    name: str
    columns: tuple[str, ...] | None
    prefix: str = ""
    key: str | None = None
    """A join's key column: unprefixed on both sides."""
    key_column: str | None = None
    """The stream column holding ``key`` when it is another (a lookup table's key: the left's column)."""

    def physical(self, column: str) -> str:
        """The stream column holding ``column`` of this side (``column`` as named in SQL)."""
        real = self.real_name(column) or column
        if self.key is not None and real.lower() == self.key.lower():
            return self.key_column or self.key
        return self.prefix + real

    def repeats_key(self, column: str) -> bool:
        """Whether ``column`` is the join key held by the other side's column (not listed by ``*``)."""
        return (
            (bool(self.prefix) or self.key_column is not None)
            and self.key is not None
            and column.lower() == self.key.lower()
        )

    def real_name(self, column: str) -> str | None:
        """``column`` in this side's spelling (SQL names are case-insensitive); None if absent."""
        if self.columns is None:
            return None
        for c in self.columns:
            if c.lower() == column.lower():
                return c
        return None


@dataclass(frozen=True)
class Window:
    """A window table-valued function's window, to be applied by ``GROUP BY`` or a top-N."""

    window: wire.Tumbling | wire.Sliding | wire.Session
    slide_ms: int | None
    """For ranking the rows of its aggregation later: the window's slide (None: session)."""


@dataclass(frozen=True)
class Relation:
    """A compiled ``FROM`` item or query (see the module docstring)."""

    stream: wire.Stream
    sides: tuple[Side, ...]
    time: str | None
    """The SQL name of the column that equals the rows' event time (None: not a column)."""
    window: Window | None = None
    """Set by a window TVF: the window the next GROUP BY / ROW_NUMBER applies."""
    aggregated: Window | None = None
    """Set by a windowed GROUP BY: the window its rows came from (for a window top-N)."""
    window_columns: tuple[str, str] | None = None
    """With ``aggregated``: the SQL names of its window_start and window_end columns."""
    pseudo: dict[str, str] = field(default_factory=dict)
    """Unqualified names that are not a side's columns -> physical (``event_time`` after a join)."""
    late_steps: tuple[str, ...] = ()
    """The window and join steps whose late ports make up the query's late table."""

    @property
    def columns(self) -> tuple[str, ...] | None:
        """The SQL names of all columns, sides in order (None if a side's are unknown)."""
        out: list[str] = []
        for s in self.sides:
            if s.columns is None:
                return None
            out.extend(
                c for c in s.columns if not s.repeats_key(c)
            )
        return tuple(out)


def known_columns(stream: wire.Stream) -> tuple[str, ...] | None:
    """The columns of ``stream`` as far as the plan tells when the flow is built (else None)."""
    return _columns(stream.flow.plan(), stream.ref.step)


def _columns(plan: object, step: str) -> tuple[str, ...] | None:
    node = plan.node(step)  # type: ignore[attr-defined]
    if isinstance(node, SourceNode):
        try:
            schema = node.connector.resolve_schema()
        except Exception:
            return None
        return tuple(schema.names) if isinstance(schema, pa.Schema) else None
    if isinstance(node, FilterNode | KeyByNode | ThrottleNode | ExplodeNode):
        return _columns(plan, node.upstream)
    if isinstance(node, UnionNode):
        return _columns(plan, node.upstreams[0])
    if isinstance(node, MapNode):
        up = _columns(plan, node.upstream)
        if up is None:
            return None
        return up + tuple(n for n, _ in node.columns if n not in up)
    if isinstance(node, SelectNode):
        names: list[str] = []
        for c in node.columns:
            if isinstance(c, str):
                names.append(c.split(".")[-1])
            elif isinstance(c, tuple):
                names.append(c[0])
            else:
                return None
        return tuple(names)
    if isinstance(node, WindowAggregateNode):
        key = _key(plan, node.upstream)
        return (
            ((key,) if key else ())
            + ("window_start", "window_end")
            + tuple(n for n, _ in node.aggregations)
            + ("emit",)
        )
    if isinstance(node, IntervalJoinNode):
        left, right = _columns(plan, node.left), _columns(plan, node.right)
        key = _key(plan, node.left)
        if left is None or right is None or key is None:
            return None
        return (
            key,
            *tuple(c for c in left if c != key),
            *tuple(node.right_prefix + c for c in right if c != key),
            "left_event_time",
            "right_event_time",
            "event_time",
        )
    if isinstance(node, LookupJoinNode):
        up = _columns(plan, node.upstream)
        if up is None or node.table.columns is None:
            return None
        return up + node.table.columns
    if isinstance(node, TemporalJoinNode):
        stream, table = _columns(plan, node.stream), _columns(plan, node.table)
        if stream is None or table is None:
            return None
        return (
            node.on,
            *tuple(c for c in stream if c != node.on),
            *tuple(c for c in table if c not in (node.table_key, node.delete)),
            "version_time",
        )
    if isinstance(node, ProcessNode):
        return tuple(node.schema.names)
    return None


def _key(plan: object, step: str) -> str | None:
    from wire.plan.graph import key_of

    return key_of(plan, step)  # type: ignore[arg-type]


def event_time_column(stream: wire.Stream) -> str | None:
    """The column of ``stream`` that holds its rows' event time, if one does (else None)."""
    return _time(stream.flow.plan(), stream.ref.step)


def _time(plan: object, step: str) -> str | None:
    node = plan.node(step)  # type: ignore[attr-defined]
    if isinstance(node, SourceNode):
        return node.event_time
    if isinstance(node, FilterNode | KeyByNode | ThrottleNode | ExplodeNode | LookupJoinNode):
        return _time(plan, node.upstream)
    if isinstance(node, UnionNode):
        times = {_time(plan, u) for u in node.upstreams}
        return times.pop() if len(times) == 1 else None
    if isinstance(node, MapNode):
        t = _time(plan, node.upstream)
        return None if t in {n for n, _ in node.columns} else t
    if isinstance(node, SelectNode):
        t = _time(plan, node.upstream)
        for c in node.columns:
            if t is not None and c == t:
                return t
            if t is not None and isinstance(c, tuple) and isinstance(c[1], str) and c[1].strip("`") == t:
                return c[0]  # renamed: (name, "`t`")
        return None
    if isinstance(node, WindowAggregateNode):
        return "window_start"
    if isinstance(node, IntervalJoinNode):
        return "event_time"
    if isinstance(node, TemporalJoinNode):
        return _time(plan, node.stream)  # the events' time
    return None
