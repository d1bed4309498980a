"""A flow's operator graph for the dashboard, read from its plan (pure, no HTTP, no Spark).

Nodes are the plan's steps (sources, operators, sinks, drops) in plan order; an edge
goes from the step whose port is read to the step that reads it, labelled with the
port (``out``, ``late``, ``dead_letter``, ``overflow``). The flow's dead-letter output
(``flow.dead_letters()``) is read from the pseudo-step ``*`` ("every step").
"""

from __future__ import annotations

from typing import Any

from wire.plan.nodes import (
    ALL_STEPS,
    OUT,
    DropNode,
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    MapNode,
    Plan,
    ProcessNode,
    SelectNode,
    SinkNode,
    SourceNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
    upstreams,
)

KINDS: dict[type, str] = {
    SourceNode: "source",
    FilterNode: "filter",
    MapNode: "map",
    SelectNode: "select",
    ThrottleNode: "throttle",
    KeyByNode: "key_by",
    WindowAggregateNode: "window",
    IntervalJoinNode: "join",
    ProcessNode: "process",
    UnionNode: "union",
    SinkNode: "sink",
    DropNode: "drop",
}


def _name(obj: Any) -> str:
    return type(obj).__name__ if obj is not None else "-"


def _fn(fn: Any) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


def _detail(node: Any) -> str:
    """A one-line description of a step (its connector, window, key or throttle)."""
    if isinstance(node, SourceNode):
        return f"{_name(node.connector)}, key {node.key or '-'}"
    if isinstance(node, WindowAggregateNode):
        aggs = ", ".join(name for name, _ in node.aggregations)
        return f"{node.window!r} emit={node.emit} -> {aggs}"
    if isinstance(node, IntervalJoinNode):
        return f"{node.left} x {node.right} [{node.lower_ms}, {node.upper_ms}] ms"
    if isinstance(node, ProcessNode):
        timer = f", {_fn(node.on_timer)}" if node.on_timer is not None else ""
        return f"{_fn(node.on_events)}{timer}; state {', '.join(n for n, _ in node.states) or '-'}"
    if isinstance(node, KeyByNode):
        return f"key {node.key}"
    if isinstance(node, ThrottleNode):
        return f"{node.max_events_per_epoch}/epoch, {node.mode}"
    if isinstance(node, SinkNode):
        return f"{_name(node.sink)}{' (kept)' if node.kept else ''}"
    if isinstance(node, DropNode):
        return f"drops {node.source.port_id()}"
    return ""


def graph_of(plan: Plan) -> dict[str, list[dict[str, str]]]:
    """``{"nodes": [{step, kind, detail}], "edges": [{source, target, port}]}`` of ``plan``."""
    nodes = [{"step": n.step, "kind": KINDS.get(type(n), type(n).__name__), "detail": _detail(n)}
             for n in plan.nodes]
    edges: list[dict[str, str]] = []
    for n in plan.nodes:
        if isinstance(n, SinkNode | DropNode):
            edges.append({"source": n.source.step, "target": n.step, "port": n.source.port})
        else:
            edges.extend({"source": up, "target": n.step, "port": OUT} for up in upstreams(n))
    if any(e["source"] == ALL_STEPS for e in edges):
        nodes.insert(0, {"step": ALL_STEPS, "kind": "all", "detail": "every step"})
    return {"nodes": nodes, "edges": edges}
