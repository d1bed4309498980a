"""What a checkpoint's state depends on, as plain JSON: a plan's fingerprint and its diff.

A checkpoint holds the state of a flow's stateful steps (windows, joins), the offsets
of its sources and the epochs its sinks published. :func:`plan_fingerprint` records,
per step id, what that state and output mean: a dict ``{"kind": ..., <parameter>:
<readable value>}``. :func:`incompatible_changes` compares a recorded fingerprint with
the current plan's and lists the changes that make the checkpoint unusable; the rules
are in its docstring (and in :func:`wire.runtime.checkpoint.open_checkpoint`).

Pure: no Spark, no I/O (STYLE §6). Values are readable, e.g.
``{"kind": "window", "window": "Tumbling(size=10000 ms)", ...}``, so that an error can
say what changed, and stable across runs (no object addresses).
"""

from __future__ import annotations

import dataclasses
import os
import re
from functools import singledispatch
from typing import Any

from wire.core.windowing import Window
from wire.plan.graph import key_of, origins, sources_of
from wire.plan.nodes import (
    OUT,
    IntervalJoinNode,
    Node,
    Plan,
    PortRef,
    ProcessNode,
    SinkNode,
    SourceNode,
    TemporalJoinNode,
    WindowAggregateNode,
)

Fingerprint = dict[str, dict[str, Any]]
"""Per step id, ``{"kind": ..., <parameter>: <JSON value>}``."""

SOURCE, WINDOW, JOIN, PROCESS, SINK = "source", "window", "interval_join", "process", "sink"
TEMPORAL_JOIN = "temporal_join"


def readable(value: Any) -> Any:
    """``value`` as a stable, readable JSON value.

    Durations of windows in ms (``"Tumbling(size=10000 ms)"``), callables by their
    qualified name (``"module.fn"``), dataclasses (aggregators) as
    ``"Type(field=value, ...)"``, other objects by their type's qualified name.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Window):
        return value.describe()
    if isinstance(value, list | tuple):
        return [readable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): readable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [f"{f.name}={_inline(getattr(value, f.name))}"
                 for f in dataclasses.fields(value) if f.init and f.compare]
        return f"{type(value).__qualname__}({', '.join(parts)})"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', None) or '?'}.{value.__qualname__}"
    if type(value).__module__.startswith("pyarrow"):
        return str(value)  # a pyarrow DataType, e.g. "int64"
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _function(fn: Any) -> Any:
    """A user function, readable; a method of a dataclass instance with its fields.

    ``Dedupe(within_ms=10000, ...).on_events``: a changed parameter changes the fingerprint.
    """
    owner = getattr(fn, "__self__", None)
    if owner is not None and dataclasses.is_dataclass(owner) and not isinstance(owner, type):
        return f"{readable(owner)}.{fn.__name__}"
    return readable(fn)


def _inline(value: Any) -> str:
    """A field value inside ``"Type(field=value)"``: strings quoted, the rest readable."""
    return repr(value) if isinstance(value, str) else str(readable(value))


def _reads(plan: Plan, ref: PortRef) -> str:
    """What a sink reads, e.g. ``"hourly.out"`` or ``"hourly.late"``.

    A side port as ``"<step>.<port>"``; the ``out`` port of a chain as the ``out`` of the
    recorded steps before it, so a stateless step added before the sink changes nothing.
    """
    if ref.port != OUT:
        return ref.port_id()
    return "+".join(origins(plan, ref.step)) + "." + OUT


def _sink_path(value: Any, checkpoint: str | None) -> Any:
    """A local path made absolute; inside the checkpoint, relative to ``<checkpoint>``."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or "://" in value:
        return value
    path = os.path.abspath(value)
    if checkpoint is not None:
        root = os.path.abspath(checkpoint)
        if path == root or path.startswith(root + os.sep):
            return "<checkpoint>" + path[len(root):]
    return path


def _sink_fingerprint(sink: Any, checkpoint: str | None) -> dict[str, Any]:
    """``sink.fingerprint()`` (kind and guarantee when it has none), paths localized."""
    fp = sink.fingerprint() if callable(getattr(sink, "fingerprint", None)) else {
        "kind": type(sink).__qualname__, "guarantee": getattr(sink, "guarantee", None)}
    return _localize(fp, checkpoint)


def _localize(fp: dict[str, Any], checkpoint: str | None) -> dict[str, Any]:
    """Readable values; ``path`` via :func:`_sink_path`, also in wrapped sinks' fingerprints."""
    out = {}
    for name, value in fp.items():
        if name == "path":
            value = _sink_path(value, checkpoint)
        elif isinstance(value, dict):
            value = _localize(value, checkpoint)
        elif isinstance(value, list | tuple):
            value = [_localize(v, checkpoint) if isinstance(v, dict) else v for v in value]
        out[name] = readable(value)
    return out


def node_fingerprint(plan: Plan, node: Node, *, checkpoint: str | None = None) -> dict[str, Any] | None:
    """The fingerprint of one step, or None for a stateless step (not recorded).

    ``checkpoint``: sink paths inside it are recorded relative to it (the kept ports).
    A node type this module does not know is taken as stateful: every field, callables
    by their qualified name (a user state operator: its function).
    """
    if node.stateless:
        return None
    return _fingerprint(node, plan, checkpoint)


@singledispatch
def _fingerprint(node: Node, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    fp: dict[str, Any] = {"kind": type(node).__qualname__}
    for f in dataclasses.fields(node):
        if f.name != "step":
            fp[f.name] = readable(getattr(node, f.name))
    return fp


@_fingerprint.register
def _source(node: SourceNode, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    return {"kind": SOURCE, "connector": type(node.connector).__qualname__}


@_fingerprint.register
def _window(node: WindowAggregateNode, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    return {
        "kind": WINDOW,
        "key": key_of(plan, node.upstream),
        "window": readable(node.window),
        "allowed_lateness_ms": node.allowed_lateness_ms,
        "emit": node.emit,
        "aggregations": {name: readable(agg) for name, agg in node.aggregations},
        "before_update": readable(node.before_update),
        "after_update": readable(node.after_update),
    }


@_fingerprint.register
def _join(node: IntervalJoinNode, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    return {
        "kind": JOIN,
        "left_key": key_of(plan, node.left),
        "right_key": key_of(plan, node.right),
        "left_sources": sources_of(plan, node.left),
        "right_sources": sources_of(plan, node.right),
        "lower_ms": node.lower_ms,
        "upper_ms": node.upper_ms,
        "allowed_lateness_ms": node.allowed_lateness_ms,
    }


@_fingerprint.register
def _temporal_join(node: TemporalJoinNode, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    return {
        "kind": TEMPORAL_JOIN,
        "on": node.on,
        "table_key": node.table_key,
        "delete": node.delete,
        "how": node.how,
        "stream_sources": sources_of(plan, node.stream),
        "table_sources": sources_of(plan, node.table),
    }


@_fingerprint.register
def _process(node: ProcessNode, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    return {
        "kind": PROCESS,
        "key": key_of(plan, node.upstream),
        "on_events": _function(node.on_events),
        "on_timer": _function(node.on_timer),
        "schema": [f"{f.name}: {f.type}" for f in node.schema],
        "state": {name: repr(spec) for name, spec in node.states},
    }


@_fingerprint.register
def _sink(node: SinkNode, plan: Plan, checkpoint: str | None) -> dict[str, Any]:
    return {"kind": SINK, "reads": _reads(plan, node.source),
            "sink": _sink_fingerprint(node.sink, checkpoint)}


def plan_fingerprint(plan: Plan, *, checkpoint: str | os.PathLike[str] | None = None) -> Fingerprint:
    """Per step id, the fingerprint of every source, stateful step and sink of ``plan``.

    Recorded: sources (connector type); windows (effective key column, window kind and
    sizes in ms, allowed lateness in ms, emission mode, aggregations by output name with
    their function and input column, callbacks by qualified name); interval joins (keys,
    the sources feeding each side, bounds and allowed lateness in ms); process steps (key,
    functions by qualified name, output columns and types, declared states and their
    types); sinks (the port
    they read, and :meth:`wire.sinks.Sink.fingerprint`: kind, guarantee, target), local
    sink paths absolute (inside ``checkpoint``: relative to it). Stateless steps
    (filter, map, select, throttle, key_by, union) are not recorded; a key_by or select
    shows in the key of the stateful steps after it.
    """
    ck = None if checkpoint is None else os.fspath(checkpoint)
    out: Fingerprint = {}
    for node in plan.nodes:
        fp = node_fingerprint(plan, node, checkpoint=ck)
        if fp is not None:
            out[node.step] = fp
    return out


def _show(value: Any) -> str:
    return value if isinstance(value, str) else str(value) if not isinstance(value, dict) else (
        "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}")


def _param_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"<parameter> <old> -> <new>"`` for each parameter that differs (dicts per entry)."""
    changes = []
    for name in [*old, *(n for n in new if n not in old)]:
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict) and "kind" not in a:
            for k in [*a, *(k for k in b if k not in a)]:
                if k not in b:
                    changes.append(f"{name} {k!r} {_show(a[k])} removed")
                elif k not in a:
                    changes.append(f"{name} {k!r} {_show(b[k])} added")
                elif a[k] != b[k]:
                    changes.append(f"{name} {k!r} {_show(a[k])} -> {_show(b[k])}")
        elif isinstance(a, dict) and isinstance(b, dict):  # a nested sink
            changes += [f"{name} {c}" for c in _param_changes(a, b)]
        else:
            changes.append(f"{name} {_show(a)} -> {_show(b)}")
    return changes


def _what(fp: dict[str, Any]) -> str:
    if fp.get("kind") == SINK:
        return f"sink {fp['sink'].get('kind')}"
    return str(fp.get("kind"))


def incompatible_changes(recorded: Fingerprint, current: Fingerprint) -> list[str]:
    """The changes from ``recorded`` to ``current`` that a checkpoint cannot survive.

    Refused (each listed as ``"step 'x' ..."``):

    * a source added, removed or renamed, or its connector type changed: Spark's offset
      log holds one offset per source;
    * a stateful step (window, join, any unknown operator) added, removed or renamed,
      or any recorded parameter changed: its state (keyed by Spark's operator order)
      was built under the old definition, and a new operator has no state to restore;
    * a sink's kind, guarantee, target (path, table, key columns, url, ...) or the
      port it reads changed under the same step id: its earlier epochs are in the old
      target and an exactly-once sink would skip them on the new one;
    * a step id that changed kind (e.g. a sink became a window).

    Allowed: any change to stateless steps (filter, map, select, throttle, key_by,
    union — unless it changes a stateful step's key); a sink added under a new step id
    (it receives the epochs from the next one on) or removed; a sink's tuning
    (batch size, timeouts, breaker settings).
    """
    changes: list[tuple[str, str]] = []
    for step, old in recorded.items():
        new = current.get(step)
        if new is None:
            if old.get("kind") != SINK:
                changes.append((step, f"step {step!r} ({_what(old)}) was removed or renamed"))
        elif new.get("kind") != old.get("kind"):
            changes.append((step, f"step {step!r} changed: {_what(old)} -> {_what(new)}"))
        elif new != old:
            changes.append((step, f"step {step!r} changed: " + "; ".join(_param_changes(old, new))))
    for step, new in current.items():
        if step not in recorded and new.get("kind") != SINK:
            changes.append((step, f"step {step!r} ({_what(new)}) is new"))
    return [text + (AUTOMATIC_ID_HINT if _AUTOMATIC_ID.fullmatch(step) else "") for step, text in changes]


_AUTOMATIC_ID = re.compile(r"[a-z]+(_[a-z]+)*_\d+")
AUTOMATIC_ID_HINT = (
    " (an automatic step id, numbered in the order the flow's code adds steps: name the step,"
    " e.g. sink(..., name='orders_out'), so that adding a step before it cannot renumber it)"
)
"""Appended to a change whose step id looks automatic (``sink_2``, ``window_1``): a step
added earlier in the code renumbers the later ones, which then look changed."""
