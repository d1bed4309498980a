"""The plan's graph: every query over a flow's steps and the edges between them (pure, no Spark).

A plan is a directed acyclic graph. Its nodes are the plan's steps (sources, operators,
sinks, drops) in plan order. An operator reads the ``out`` port of the steps
:meth:`~wire.plan.nodes.Node.inputs` names; a sink or a drop reads one port of one step
(its ``source``, a :class:`~wire.plan.nodes.PortRef`), also a side port (``late``,
``dead_letter``, ``overflow``: :meth:`~wire.plan.nodes.Node.side_ports`). The flow's
dead-letter output (``flow.dead_letters()``) is read from the pseudo-step ``*`` ("every
step"). A node knows its own edges; the queries over the whole graph are here:

* who reads what: :func:`sinks`, :func:`drops`, :func:`port_readers`, :func:`side_ports`,
  :func:`unsunk_ports`;
* the compiled query's shape: :func:`chain_of` (compile order, topology checks),
  :func:`outputs_of`, :func:`source_reads`, :func:`paused_admission`;
* what flows where: :func:`key_of`, :func:`sources_of`, :func:`origins`;
* the dashboard's drawing: :func:`graph_of`.
"""

from __future__ import annotations

from functools import singledispatch
from typing import Any

from wire.errors import PlanError
from wire.plan.nodes import (
    ALL_STEPS,
    DEAD_LETTER,
    OUT,
    DropNode,
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    LookupJoinNode,
    MapNode,
    Node,
    Plan,
    PortRef,
    ProcessNode,
    SelectNode,
    SinkNode,
    SourceNode,
    TemporalJoinNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
)


def sinks(plan: Plan) -> tuple[SinkNode, ...]:
    """The sink steps, in the order they were added."""
    return tuple(n for n in plan.nodes if isinstance(n, SinkNode))


def drops(plan: Plan) -> tuple[DropNode, ...]:
    """The side ports dropped on purpose (``Stream.drop()``), in the order they were added."""
    return tuple(n for n in plan.nodes if isinstance(n, DropNode))


def port_readers(plan: Plan) -> tuple[SinkNode | DropNode, ...]:
    """The steps that read one port of another step: the sinks, then the drops."""
    return (*sinks(plan), *drops(plan))


def operators(plan: Plan) -> list[Node]:
    """The steps that produce streams (sources and operators: not sinks or drops), in plan order."""
    return [n for n in plan.nodes if not isinstance(n, SinkNode | DropNode)]


def only_reader(plan: Plan, step: str) -> Node | None:
    """The one operator reading ``step``'s ``out`` port, a link of a chain a fusion may follow.

    None when a sink or drop reads that port, or when not exactly one operator does
    (:mod:`wire.compiler.fusion`, :mod:`wire.compiler.sink_fusion`).
    """
    if any(r.source.step == step and r.source.port == OUT for r in port_readers(plan)):
        return None
    readers = [n for n in operators(plan) if step in n.inputs()]
    return readers[0] if len(readers) == 1 else None


def source_steps(plan: Plan) -> tuple[str, ...]:
    """The source steps, in plan order."""
    return tuple(n.step for n in plan.nodes if isinstance(n, SourceNode))


def read_by_operators(nodes: list[Node]) -> set[str]:
    """The steps whose ``out`` port one of ``nodes`` reads."""
    return {up for n in nodes for up in n.inputs()}


def side_ports(plan: Plan) -> list[PortRef]:
    """Every side port the plan's steps produce, in plan order.

    The ``dead_letter`` port of every source, the ``late`` port of every window, join and
    process step, the ``overflow`` port of every ``throttle(..., mode="overflow")``.
    """
    return [PortRef(n.step, port) for n in plan.nodes for port in n.side_ports()]


def unsunk_ports(plan: Plan) -> list[PortRef]:
    """The side ports that no sink reads and no ``drop()`` names.

    A dead-letter port counts as read when a sink or drop reads the flow's whole
    dead-letter output (``flow.dead_letters()``).
    """
    read = {n.source for n in port_readers(plan)}
    all_dead_letters = PortRef(ALL_STEPS, DEAD_LETTER) in read
    return [
        ref for ref in side_ports(plan)
        if ref not in read and not (ref.port == DEAD_LETTER and all_dead_letters)
    ]


def chain_of(plan: Plan) -> list[Node]:
    """The plan's sources and operators in compile order (upstream first), checking the topology.

    A flow is a directed acyclic graph: sources, merged by ``union`` or joined; any
    stream may feed any number of operators and sinks (branches). The order is the
    plan's (a step is built after its upstreams). Late, dead-letter and overflow ports
    of any step may be sunk.

    Raises
    ------
    PlanError
        No source, no sink, a stream that ends without any sink reading one of its
        ports, or a sink on a port that the compiled flow does not produce.
    """
    ops = operators(plan)
    if not source_steps(plan):
        raise PlanError(f"flow {plan.flow_id!r} has no source")
    steps = {n.step: n for n in ops}
    readers = port_readers(plan)
    for sink in readers:
        ref = sink.source
        if ref.port == OUT or (ref.port == DEAD_LETTER and ref.step != ALL_STEPS):
            if ref.step not in steps:
                raise PlanError(f"sink {sink.step!r}: unknown step {ref.step!r}")
        elif ref.port != DEAD_LETTER:
            node = steps.get(ref.step)
            if node is None or ref.port not in node.side_ports():
                raise PlanError(f"sink {sink.step!r}: {ref.step!r} has no {ref.port} port")
    if not sinks(plan):
        raise PlanError(f"flow {plan.flow_id!r} has no sink: nothing would be written")
    read_by_ops = read_by_operators(ops)
    read_by_sinks = {s.source.step for s in readers}
    dangling = [n.step for n in ops if n.step not in read_by_ops and n.step not in read_by_sinks]
    if dangling:
        raise PlanError(
            f"flow {plan.flow_id!r}: stream(s) {dangling} end without a sink; sink them "
            "(a branch may end in its own sink) or remove them"
        )
    return ops


def outputs_of(plan: Plan, order: list[Node]) -> tuple[str, list[tuple[str, bool]]]:
    """The compiled query's outputs: the main step, and the other streams that reach it.

    ``order``: :func:`chain_of` of ``plan``. The main step is the first terminal stream
    (no operator reads it) whose ``out`` port a sink reads, else the first terminal; its
    data rows are the query's data rows. Every other terminal, and every other step whose
    ``out`` port a sink reads, is returned as ``(step, pack)``: its side rows reach the
    query's result, and with ``pack`` its data rows too, as side rows of port
    ``"<step>.out"``.
    """
    read_by_ops = read_by_operators(order)
    terminals = [n.step for n in order if n.step not in read_by_ops]
    sunk = {s.source.step for s in sinks(plan) if s.source.port == OUT}
    main = next((t for t in terminals if t in sunk), terminals[0])
    others = [n.step for n in order if n.step != main and (n.step in sunk or n.step not in read_by_ops)]
    return main, [(step, step in sunk) for step in others]


def source_reads(plan: Plan, order: list[Node] | None = None) -> dict[str, int]:
    """Per source step, how many times the source appears in the compiled query's plan.

    Spark's plan is a tree: a stream read by several branches is repeated in each. Spark
    makes one stream of the repetitions (one admission and one commit per epoch) but
    records its offset once per repetition in the offset log; the scans are shared
    (:func:`wire.compiler.branches.read_once`), so the source is read once per epoch. The
    count is the number of paths from the query's outputs (:func:`outputs_of`) down to
    the source. ``order``: :func:`chain_of` of ``plan`` (computed when None).
    """
    order = chain_of(plan) if order is None else order
    steps = {n.step: n for n in order}
    paths: dict[str, dict[str, int]] = {}

    def below(step: str) -> dict[str, int]:
        if step not in paths:
            node = steps[step]
            total: dict[str, int] = {step: 1} if isinstance(node, SourceNode) else {}
            for up in node.inputs():
                for src, k in below(up).items():
                    total[src] = total.get(src, 0) + k
            paths[step] = total
        return paths[step]

    main, others = outputs_of(plan, order)
    reads: dict[str, int] = {}
    for step in [main, *(s for s, _ in others)]:
        for src, k in below(step).items():
            reads[src] = reads.get(src, 0) + k
    return reads


def paused_admission(plan: Plan) -> dict[str, int]:
    """Per source step, the lowest ``throttle(..., mode="pause")`` limit downstream of it."""
    limits: dict[str, int] = {}
    for node in plan.nodes:
        if not (isinstance(node, ThrottleNode) and node.mode == "pause"):
            continue
        for step in sources_of(plan, node.upstream):
            limits[step] = min(limits.get(step, node.max_events_per_epoch), node.max_events_per_epoch)
    return limits


def key_of(plan: Plan, step: str) -> str | None:
    """The key column of ``step``'s output stream (None: unkeyed), as the compiler derives it.

    Each step derives it from its inputs' keys (:meth:`~wire.plan.nodes.Node.output_key`).
    Best effort when a ``select`` computes columns; the compiler checks again.
    """
    node = plan.node(step)
    return node.output_key(tuple(key_of(plan, up) for up in node.inputs()))


def sources_of(plan: Plan, step: str) -> list[str]:
    """The source steps that feed ``step``, sorted by step id."""
    node = plan.node(step)
    if isinstance(node, SourceNode):
        return [node.step]
    return sorted({s for up in node.inputs() for s in sources_of(plan, up)})


def origins(plan: Plan, step: str) -> list[str]:
    """The stateful steps and sources that feed ``step`` through stateless steps, sorted.

    ``step`` itself when it is not stateless (:attr:`~wire.plan.nodes.Node.stateless`).
    """
    node = plan.node(step)
    if not node.stateless:
        return [step]
    return sorted({o for up in node.inputs() for o in origins(plan, up)})


KINDS: dict[type, str] = {
    SourceNode: "source",
    FilterNode: "filter",
    MapNode: "map",
    SelectNode: "select",
    ThrottleNode: "throttle",
    KeyByNode: "key_by",
    WindowAggregateNode: "window",
    IntervalJoinNode: "join",
    TemporalJoinNode: "temporal_join",
    ProcessNode: "process",
    UnionNode: "union",
    SinkNode: "sink",
    DropNode: "drop",
}
"""The dashboard's name of each node kind (another kind shows its class name)."""


def _name(obj: Any) -> str:
    return type(obj).__name__ if obj is not None else "-"


def _fn(fn: Any) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


@singledispatch
def detail(node: Node) -> str:
    """A one-line description of a step for the dashboard (its connector, window, key, ...)."""
    return ""


@detail.register
def _source_detail(node: SourceNode) -> str:
    return f"{_name(node.connector)}, key {node.key or '-'}"


@detail.register
def _window_detail(node: WindowAggregateNode) -> str:
    aggs = ", ".join(name for name, _ in node.aggregations)
    return f"{node.window!r} emit={node.emit} -> {aggs}"


@detail.register
def _join_detail(node: IntervalJoinNode) -> str:
    return f"{node.left} x {node.right} [{node.lower_ms}, {node.upper_ms}] ms"


@detail.register
def _temporal_join_detail(node: TemporalJoinNode) -> str:
    return f"{node.stream} x table {node.table} on {node.on}, {node.how}"


@detail.register
def _process_detail(node: ProcessNode) -> str:
    timer = f", {_fn(node.on_timer)}" if node.on_timer is not None else ""
    return f"{_fn(node.on_events)}{timer}; state {', '.join(n for n, _ in node.states) or '-'}"


@detail.register
def _key_by_detail(node: KeyByNode) -> str:
    return f"key {node.key}"


@detail.register
def _throttle_detail(node: ThrottleNode) -> str:
    return f"{node.max_events_per_epoch}/epoch, {node.mode}"


@detail.register
def _sink_detail(node: SinkNode) -> str:
    return f"{_name(node.sink)}{' (kept)' if node.kept else ''}"


@detail.register
def _drop_detail(node: DropNode) -> str:
    return f"drops {node.source.port_id()}"


KINDS[LookupJoinNode] = "lookup_join"


@detail.register
def _lookup_join_detail(node: LookupJoinNode) -> str:
    return f"{node.table.describe()} on {node.on} ({node.how})"


def graph_of(plan: Plan) -> dict[str, list[dict[str, str]]]:
    """The dashboard's drawing of ``plan``: its steps and the edges between them.

    ``{"nodes": [{step, kind, detail}], "edges": [{source, target, port}]}``: an edge goes
    from the step whose port is read to the step that reads it, labelled with the port
    (``out``, ``late``, ``dead_letter``, ``overflow``).
    """
    nodes = [{"step": n.step, "kind": KINDS.get(type(n), type(n).__name__), "detail": detail(n)}
             for n in plan.nodes]
    edges: list[dict[str, str]] = []
    for n in plan.nodes:
        if isinstance(n, SinkNode | DropNode):
            edges.append({"source": n.source.step, "target": n.step, "port": n.source.port})
        else:
            edges.extend({"source": up, "target": n.step, "port": OUT} for up in n.inputs())
    if any(e["source"] == ALL_STEPS for e in edges):
        nodes.insert(0, {"step": ALL_STEPS, "kind": "all", "detail": "every step"})
    return {"nodes": nodes, "edges": edges}
