"""The flow plan: immutable nodes recorded by the builder API (STYLE §1).

Nothing here touches Spark. The Spark compiler (:mod:`wire.compiler`), the runner
and the tests all read the same :class:`Plan`.

A node's ``step`` is its unique, stable id within the flow: it names the node's
state, metrics and output ports (STYLE §3). Ports are addressed as
``PortRef(step, port)`` with ``port`` one of :data:`PORTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeAlias

import pyarrow as pa

from wire.core.windowing import BoundedOutOfOrderness, Window

if TYPE_CHECKING:  # types only: the plan does not depend on connectors or kernels at run time
    from pyspark.sql import Column

    from wire.delivery.sink import Sink
    from wire.sources.base import Source
    from wire.state.aggregator import Aggregator
    from wire.state.spec import Callback, Emit

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


@dataclass(frozen=True, eq=False)
class FilterNode(Node):
    """Keep the events for which ``predicate`` is true (null counts as false)."""

    upstream: str
    predicate: Expr


@dataclass(frozen=True, eq=False)
class MapNode(Node):
    """Add or replace columns: ``columns`` is a tuple of (name, expression)."""

    upstream: str
    columns: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, eq=False)
class SelectNode(Node):
    """Keep (and compute) exactly ``columns``: names, expressions, or (name, expression)."""

    upstream: str
    columns: tuple[str | Column | tuple[str, Expr], ...]


@dataclass(frozen=True, eq=False)
class ExplodeNode(Node):
    """One row per element of the list column ``column``; the element replaces the list."""

    upstream: str
    column: str


@dataclass(frozen=True)
class ThrottleNode(Node):
    """Flow control (SPEC §5): at most ``max_events_per_epoch`` events pass per epoch.

    ``mode="pause"`` holds the excess at the sources (their admission per epoch is
    lowered to the limit, nothing is dropped); ``mode="overflow"`` diverts the excess
    to the ``overflow`` port.
    """

    upstream: str
    max_events_per_epoch: int
    mode: str


@dataclass(frozen=True)
class KeyByNode(Node):
    """Re-key the stream by the column ``key``."""

    upstream: str
    key: str


@dataclass(frozen=True)
class WindowAggregateNode(Node):
    """Keyed event-time window aggregation with allowed lateness and a late port.

    ``emit`` is ``"final"`` or ``"update"``; ``before_update`` / ``after_update`` are
    optional vectorized callbacks that emit a window early.
    """

    upstream: str
    window: Window
    allowed_lateness_ms: int
    aggregations: tuple[tuple[str, Aggregator], ...]
    emit: Emit = "final"
    before_update: Callback | None = None
    after_update: Callback | None = None


@dataclass(frozen=True, eq=False)
class ProcessNode(Node):
    """Keyed process function with per-key state and timers (``Stream.process``).

    ``on_events(ctx, events)`` / ``on_timer(ctx, fired)`` are the user's functions
    (:mod:`wire.state.process` has the contract); ``schema`` is the declared output
    (a ``pyarrow.Schema`` with an int64 ``event_time``); ``states`` the declared
    states as ``(name, wire.state.keyed_state.StateSpec)``, sorted by name.
    """

    upstream: str
    on_events: Callable[..., object]
    on_timer: Callable[..., object] | None
    schema: pa.Schema
    states: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class IntervalJoinNode(Node):
    """Event-time interval join of two keyed streams (Flink's interval join).

    ``left.t + lower_ms <= right.t <= left.t + upper_ms`` for equal keys.
    """

    left: str
    right: str
    lower_ms: int
    upper_ms: int
    allowed_lateness_ms: int
    right_prefix: str


@dataclass(frozen=True)
class UnionNode(Node):
    """Merge several streams with the same columns; watermark = minimum of the inputs."""

    upstreams: tuple[str, ...]


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

    source: PortRef


def upstreams(node: Node) -> tuple[str, ...]:
    """The steps whose ``out`` port ``node`` reads (a sink's or drop's port: ``node.source``)."""
    if isinstance(node, UnionNode):
        return node.upstreams
    if isinstance(node, IntervalJoinNode):
        return (node.left, node.right)
    up = getattr(node, "upstream", None)
    return () if up is None else (up,)


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

    def sinks(self) -> tuple[SinkNode, ...]:
        """The sink nodes, in the order they were added."""
        return tuple(n for n in self.nodes if isinstance(n, SinkNode))

    def drops(self) -> tuple[DropNode, ...]:
        """The side ports dropped on purpose (``Stream.drop()``)."""
        return tuple(n for n in self.nodes if isinstance(n, DropNode))

    def describe(self) -> str:
        """A multi-line, human-readable listing of the plan."""
        lines = [f"flow {self.flow_id!r}"]
        for n in self.nodes:
            detail = {k: v for k, v in vars(n).items() if k != "step"}
            lines.append(f"  {n.step}: {type(n).__name__} {detail}")
        return "\n".join(lines)
