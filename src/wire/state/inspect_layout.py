"""Rebuild what decoding a step's state needs from a checkpoint's records (issue 29; pure).

Offline, with no flow object at hand, :mod:`wire.runtime.state_reader` knows a stateful
step only from ``wire.json`` (the plan's fingerprint, :mod:`wire.plan.fingerprint`: the
window kind and sizes in ms, the aggregations as ``"Type(field=value, ...)"``, the declared
process states as ``"value_state(int64)"``) and from ``state_layout.json`` (the key column
the compiled state rows carry). The functions here turn those records back into a
:class:`~wire.state.spec.WindowSpec` or a :class:`~wire.state.inspect.ProcessLayout`.

Built-in aggregators only: their recorded text is parsed as a call of a known class with
literal arguments (never evaluated, nothing imported). A user aggregator
(``wire.aggregate``) is recorded by its functions' names, which are not imported from a
checkpoint's text: reading such a window needs the flow (``read_state(..., flow=flow)``).
"""

from __future__ import annotations

import ast
import re
from typing import Any

import pyarrow as pa

from wire.core.windowing import Session, Sliding, Tumbling
from wire.errors import CheckpointError
from wire.state.aggregations import Count, Mean, Sum
from wire.state.aggregations import Max as MaxAgg
from wire.state.aggregations import Min as MinAgg
from wire.state.aggregator import Aggregator
from wire.state.inspect import ProcessLayout
from wire.state.keyed_state import StateSpec
from wire.state.ordered import Collect, First, Last
from wire.state.spec import WindowSpec
from wire.state.top import ByRow, TopK

BUILT_INS: dict[str, type[Aggregator]] = {
    "Count": Count, "Sum": Sum, "Min": MinAgg, "Max": MaxAgg, "Mean": Mean, "First": First,
    "Last": Last, "Collect": Collect, "TopK": TopK, "ByRow": ByRow,
}
"""The aggregator classes a recorded aggregation may name (``wire.count()`` ... ``wire.top_k()``)."""

_TUMBLING = re.compile(r"Tumbling\(size=(-?\d+) ms\)")
_SLIDING = re.compile(r"Sliding\(size=(-?\d+) ms, slide=(-?\d+) ms\)")
_SESSION = re.compile(r"Session\(gap=(-?\d+) ms\)")


def _bad(step: str, what: str) -> CheckpointError:
    return CheckpointError(f"step {step!r}: {what}; pass the flow (read_state(..., flow=flow)) to read it")


def window_of(text: str, step: str) -> Tumbling | Sliding | Session:
    """The window a fingerprint's ``window`` text names (``"Tumbling(size=10000 ms)"``)."""
    if (m := _TUMBLING.fullmatch(text)) is not None:
        return Tumbling(int(m[1]))
    if (m := _SLIDING.fullmatch(text)) is not None:
        return Sliding(int(m[1]), int(m[2]))
    if (m := _SESSION.fullmatch(text)) is not None:
        return Session(int(m[1]))
    raise _bad(step, f"unknown window {text!r}")


def aggregator_of(text: str, step: str) -> Aggregator:
    """A built-in aggregator from its recorded text, e.g. ``"Mean(column='dep_delay')"``.

    Raises
    ------
    CheckpointError
        If the text is not a call of a :data:`BUILT_INS` class with literal keyword arguments
        (a user aggregator, or a Wire version that records another class).
    """
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise _bad(step, f"aggregation {text!r} is not a built-in aggregator") from None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args \
            or call.func.id not in BUILT_INS:
        raise _bad(step, f"aggregation {text!r} is not a built-in aggregator (a user aggregator's "
                   "functions are not imported from a checkpoint)")
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            raise _bad(step, f"aggregation {text!r}: argument {kw.arg} is not a literal") from None
        kwargs[str(kw.arg)] = tuple(value) if isinstance(value, list) else value
    return BUILT_INS[call.func.id](**kwargs)


def window_spec_of(fp: dict[str, Any], key: str, step: str) -> WindowSpec:
    """The :class:`WindowSpec` of a recorded window step (``key``: the state rows' key column)."""
    recorded = dict(fp.get("aggregations", {}))
    aggs = tuple((name, aggregator_of(str(text), step)) for name, text in recorded.items())
    window = window_of(str(fp.get("window")), step)
    lateness, emit = int(fp.get("allowed_lateness_ms", 0)), str(fp.get("emit", "final"))
    spec = WindowSpec(window, lateness, key, aggs, emit=emit)
    if fp.get("before_update") is not None or fp.get("after_update") is not None:
        # the state of a window with callbacks is kept whole, with its own fired flag
        spec = WindowSpec(spec.assigner, spec.allowed_lateness_ms, key, aggs, emit=spec.emit,
                          before_update=_callback, after_update=None)
    return spec


def _callback(aggregate: pa.Table, event: pa.Table) -> list[bool]:
    """Stands for a recorded callback: never called while decoding (it only marks the layout)."""
    return [False] * event.num_rows


_STATE = re.compile(r"(value|list)_state\((.+)\)|map_state\(([^,]+), (.+)\)")


def _type(text: str) -> pa.DataType:
    """An Arrow type from its name (``int64``, ``string``, ...); ``null`` for a type it cannot name."""
    try:
        return pa.type_for_alias(text.strip())
    except (ValueError, KeyError):
        return pa.null()  # the stored tables carry their own types; this one is only for absent states


def process_layout_of(fp: dict[str, Any], key: str, step: str) -> ProcessLayout:
    """The :class:`ProcessLayout` of a recorded process step (declared states by name)."""
    states = []
    for name, text in sorted(dict(fp.get("state", {})).items()):
        m = _STATE.fullmatch(str(text))
        if m is None:
            raise _bad(step, f"state {name!r} is recorded as {text!r}, not a value, list or map state")
        if m[1] is not None:
            states.append((name, StateSpec(m[1], _type(m[2]))))  # type: ignore[arg-type]
        else:
            states.append((name, StateSpec("map", _type(m[4]), _type(m[3]))))
    return ProcessLayout(key, tuple(states))
