"""The flow plan: immutable nodes recorded by the builder API (STYLE §1).

Nothing here touches Spark. The Spark compiler (:mod:`wire.compiler`), the runner
and the tests all read the same :class:`Plan`.

A node's ``step`` is its unique, stable id within the flow: it names the node's
state, metrics and output ports (STYLE §3). Ports are addressed as
``PortRef(step, port)`` with ``port`` one of :data:`PORTS`.

A node knows only its own edges and ports (:meth:`Node.inputs`, :meth:`Node.side_ports`,
:meth:`Node.output_key`); every query over the whole graph is in :mod:`wire.plan.graph`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Final, TypeAlias

import pyarrow as pa

from wire.core.windowing import BoundedOutOfOrderness, Window

if TYPE_CHECKING:  # types only: the plan does not depend on connectors or kernels at run time
    from pyspark.sql import Column

    from wire.delivery.sink import Sink
    from wire.sources.base import Source
    from wire.state.aggregator import Aggregator
    from wire.state.spec import Callback, Emit
    from wire.tables.base import LookupTable

OUT: Final = "out"
LATE: Final = "late"
DEAD_LETTER: Final = "dead_letter"
OVERFLOW: Final = "overflow"
PORTS = (OUT, LATE, DEAD_LETTER, OVERFLOW)
ALL_STEPS = "*"
"""A ``PortRef`` step meaning "every step": used by ``Flow.dead_letters()``."""

Expr: TypeAlias = "Column | str"
"""A Spark ``Column`` or a Spark SQL expression string, e.g. ``"dep_delay IS NOT NULL"``."""


@dataclass(frozen=True)
class PortRef:
    """One output port of one step, e.g. ``PortRef("hourly", "late")``."""

    step: str
    port: str = OUT

    def port_id(self) -> str:
        """The port's id inside a compiled flow: ``"<step>.<port>"``."""
        return f"{self.step}.{self.port}"


@dataclass(frozen=True)
class Node:
    """Base of every plan node."""

    step: str

    stateless: ClassVar[bool] = False
    """True for a step without state (its definition may change between runs of one
    checkpoint); a node type that does not say so is taken as stateful."""

    def inputs(self) -> tuple[str, ...]:
        """The steps whose ``out`` port this step reads (a sink's or drop's port: ``source``)."""
        return ()

    def side_ports(self) -> tuple[str, ...]:
        """The side ports (``late``, ``dead_letter``, ``overflow``) this step produces."""
        return ()

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """The key column of this step's ``out`` stream, given its inputs' key columns.

        None: unkeyed. Best effort where a ``select`` computes columns; the compiler
        derives the key again from the compiled columns. Default: the first input's key.
        """
        return input_keys[0] if input_keys else None


@dataclass(frozen=True, eq=False)
class UnaryNode(Node):
    """A step that reads the ``out`` port of one ``upstream`` step."""

    upstream: str

    def inputs(self) -> tuple[str, ...]:
        """``(upstream,)``."""
        return (self.upstream,)


@dataclass(frozen=True)
class SourceNode(Node):
    """Read a connector; assign event time, key and the source's watermark policy."""

    connector: Source
    event_time: str
    key: str | None
    watermark: BoundedOutOfOrderness
    max_events_per_epoch: int
    target_epoch_ms: int | None = None
    """Epoch sizing from a target duration (ms; :mod:`wire.sources.epoch_sizing`); None: off."""

    def side_ports(self) -> tuple[str, ...]:
        """Malformed records leave on ``dead_letter``."""
        return (DEAD_LETTER,)

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """The source's ``key`` column."""
        return self.key


@dataclass(frozen=True, eq=False)
class FilterNode(UnaryNode):
    """Keep the events for which ``predicate`` is true (null counts as false)."""

    stateless = True
    predicate: Expr


@dataclass(frozen=True, eq=False)
class MapNode(UnaryNode):
    """Add or replace columns: ``columns`` is a tuple of (name, expression)."""

    stateless = True
    columns: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, eq=False)
class SelectNode(UnaryNode):
    """Keep (and compute) exactly ``columns``: names, expressions, or (name, expression)."""

    stateless = True
    columns: tuple[str | Column | tuple[str, Expr], ...]

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """The input's key, unless no column can be the key.

        That is when every column is a plain name or ``(name, expression)`` and none is
        the key; a computed ``Column`` may keep it (the compiler decides).
        """
        key = input_keys[0]
        if key is None:
            return None
        names = {c if isinstance(c, str) else c[0] for c in self.columns
                 if isinstance(c, str) or (isinstance(c, tuple) and len(c) == 2)}
        return None if key not in names and len(names) == len(self.columns) else key


@dataclass(frozen=True, eq=False)
class ExplodeNode(UnaryNode):
    """One row per element of the list column ``column``; the element replaces the list."""

    stateless = True
    column: str


@dataclass(frozen=True)
class ThrottleNode(UnaryNode):
    """Flow control (SPEC §5): at most ``max_events_per_epoch`` events pass per epoch.

    ``mode="pause"`` holds the excess at the sources (their admission per epoch is
    lowered to the limit, nothing is dropped); ``mode="overflow"`` diverts the excess
    to the ``overflow`` port.
    """

    stateless = True
    max_events_per_epoch: int
    mode: str

    def side_ports(self) -> tuple[str, ...]:
        """``overflow`` in mode ``"overflow"``."""
        return (OVERFLOW,) if self.mode == "overflow" else ()


@dataclass(frozen=True)
class KeyByNode(UnaryNode):
    """Re-key the stream by the column ``key``."""

    stateless = True
    key: str

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """``key``."""
        return self.key


@dataclass(frozen=True)
class WindowAggregateNode(UnaryNode):
    """Keyed event-time window aggregation with allowed lateness and a late port.

    ``emit`` is ``"final"`` or ``"update"``; ``before_update`` / ``after_update`` are
    optional vectorized callbacks that emit a window early. Results keep the input's key.
    """

    window: Window
    allowed_lateness_ms: int
    aggregations: tuple[tuple[str, Aggregator], ...]
    emit: Emit = "final"
    before_update: Callback | None = None
    after_update: Callback | None = None

    def side_ports(self) -> tuple[str, ...]:
        """Late events leave on ``late``."""
        return (LATE,)


@dataclass(frozen=True, eq=False)
class ProcessNode(UnaryNode):
    """Keyed process function with per-key state and timers (``Stream.process``).

    ``on_events(ctx, events)`` / ``on_timer(ctx, fired)`` are the user's functions
    (:mod:`wire.state.process` has the contract); ``schema`` is the declared output
    (a ``pyarrow.Schema`` with an int64 ``event_time``); ``states`` the declared
    states as ``(name, wire.state.keyed_state.StateSpec)``, sorted by name.
    """

    on_events: Callable[..., object]
    on_timer: Callable[..., object] | None
    schema: pa.Schema
    states: tuple[tuple[str, object], ...]

    def side_ports(self) -> tuple[str, ...]:
        """Late events leave on ``late``."""
        return (LATE,)

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """The input's key when the declared output has that column, else None."""
        key = input_keys[0]
        return key if key in self.schema.names else None


@dataclass(frozen=True)
class IntervalJoinNode(Node):
    """Event-time interval join of two keyed streams (Flink's interval join).

    ``left.t + lower_ms <= right.t <= left.t + upper_ms`` for equal keys. The output
    keeps the left stream's key.
    """

    left: str
    right: str
    lower_ms: int
    upper_ms: int
    allowed_lateness_ms: int
    right_prefix: str

    def inputs(self) -> tuple[str, ...]:
        """``(left, right)``."""
        return (self.left, self.right)

    def side_ports(self) -> tuple[str, ...]:
        """Late events leave on ``late``."""
        return (LATE,)


@dataclass(frozen=True, eq=False)
class LookupJoinNode(UnaryNode):
    """Enrich each event with the row of an external ``table`` whose key equals its ``on`` column.

    Stateless (``Stream.lookup_join``): the table is read when the event's epoch runs
    (processing time). ``how`` is ``"inner"`` or ``"left"``; ``cache_ttl_ms`` /
    ``cache_size`` bound each worker's cache of a database table's rows (0: no cache).
    The output keeps the input's key.
    """

    stateless = True
    table: LookupTable
    on: str
    how: str
    cache_ttl_ms: int
    cache_size: int


@dataclass(frozen=True)
class TemporalJoinNode(Node):
    """Event-time temporal join of a stream with a versioned table (``Stream.temporal_join``).

    Each event of ``stream`` meets the version of its key (column ``on``) in the table
    built from ``table`` (keyed by ``table_key``; a true ``delete`` column marks a
    delete) with the largest version time ``<=`` the event's time
    (:mod:`wire.state.temporal_join`). ``how`` is ``"inner"`` or ``"left"``. The output
    is keyed by ``on``.
    """

    stream: str
    table: str
    on: str
    table_key: str
    delete: str | None
    how: str

    def inputs(self) -> tuple[str, ...]:
        """``(stream, table)``."""
        return (self.stream, self.table)

    def side_ports(self) -> tuple[str, ...]:
        """Late events and late table updates leave on ``late``."""
        return (LATE,)

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """``on``."""
        return self.on


@dataclass(frozen=True)
class UnionNode(Node):
    """Merge several streams with the same columns; watermark = minimum of the inputs."""

    stateless = True
    upstreams: tuple[str, ...]

    def inputs(self) -> tuple[str, ...]:
        """``upstreams``."""
        return self.upstreams

    def output_key(self, input_keys: tuple[str | None, ...]) -> str | None:
        """The inputs' key when they all have the same one, else None."""
        keys = set(input_keys)
        return keys.pop() if len(keys) == 1 else None


@dataclass(frozen=True)
class SinkNode(Node):
    """Write one port of a step to a sink connector.

    ``kept``: added by the runner to keep a side port no user sink reads
    (:mod:`wire.runtime.kept_ports`); a kept late port does not stop column pruning,
    so its late events carry only the columns the window reads.
    """

    source: PortRef
    sink: Sink
    kept: bool = False


@dataclass(frozen=True)
class DropNode(Node):
    """Discard one side port (late, dead-letter or overflow) on purpose.

    A side port that no sink reads and no ``DropNode`` names is kept by the runner
    (see :mod:`wire.runtime.kept_ports`); this node is how a flow says "drop it".
    """

    stateless = True
    source: PortRef


@dataclass(frozen=True)
class Plan:
    """An immutable flow plan: its id and its nodes in the order they were added."""

    flow_id: str
    nodes: tuple[Node, ...] = field(default_factory=tuple)

    def node(self, step: str) -> Node:
        """Return the node with id ``step`` (KeyError if absent)."""
        for n in self.nodes:
            if n.step == step:
                return n
        raise KeyError(step)

    def describe(self) -> str:
        """A multi-line, human-readable listing of the plan."""
        lines = [f"flow {self.flow_id!r}"]
        for n in self.nodes:
            detail = {k: v for k, v in vars(n).items() if k != "step"}
            lines.append(f"  {n.step}: {type(n).__name__} {detail}")
        return "\n".join(lines)
