"""The window aggregation's configuration (:class:`WindowSpec`) and the Arrow schemas it implies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from wire.errors import ConfigError
from wire.state.aggregator import Aggregator
from wire.state.assigners import Assigner, Tumbling
from wire.state.kernels import ARRIVAL, EVENT_TIME, FIRED, WINDOW_END, WINDOW_START, is_int

RESULT_COLUMNS = ("window_start", "window_end", "emit")
LATE_COLUMNS = ("event_time", "watermark", "reason")
RESERVED_INPUT = (WINDOW_START, WINDOW_END, FIRED)
EMIT_MODES = ("final", "update")
Emit = Literal["final", "update"]
"""A window's emission mode (SPEC §3): ``"final"`` or ``"update"``."""

BoolMask: TypeAlias = pa.Array | pa.ChunkedArray | npt.NDArray[np.bool_] | Sequence[bool]
"""One bool per row: a pyarrow boolean array (a null counts as False), a numpy bool array
or a sequence of bools."""

Callback: TypeAlias = Callable[[pa.Table, pa.Table], BoolMask]
"""``callback(aggregate, event) -> BoolMask``: see :class:`WindowSpec`."""


@dataclass(frozen=True)
class WindowSpec:
    """Configuration of a keyed window aggregation (an immutable value).

    Parameters
    ----------
    assigner : Tumbling, Sliding or Session
        How events are assigned to windows.
    allowed_lateness_ms : int
        How long after its end (in event time, ms) a window keeps its state and
        accepts late events, >= 0.
    key : str
        Key column name; state and results are per (key, window).
    aggregations : tuple of (str, Aggregator)
        Output column name and aggregator, non-empty, names unique. A list is
        accepted and stored as a tuple.
    emit : {"final", "update"}
        ``"final"``: a window emits once when the watermark passes its end, then an
        ``update`` per later change until purged. ``"update"``: additionally one
        ``early`` row per epoch for every open window that changed.
    before_update, after_update : callable, optional
        ``f(aggregate: pa.Table, event: pa.Table) -> bool array``, called at most once
        per :func:`~wire.state.windows.advance` with one row per (event, open window):
        ``aggregate`` row ``i`` holds the window's result columns just before
        (``before_update``) or just after (``after_update``) event ``i`` is added;
        True emits that row as ``early``.

    Raises
    ------
    ConfigError
        If a parameter is out of range or names clash.
    """

    assigner: Assigner
    allowed_lateness_ms: int
    key: str
    aggregations: tuple[tuple[str, Aggregator], ...]
    emit: str = "final"
    before_update: Callback | None = None
    after_update: Callback | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.assigner, Assigner):
            accepted = "Tumbling(size_ms), Sliding(size_ms, slide_ms) or Session(gap_ms)"
            raise ConfigError("assigner", self.assigner, accepted)
        if not is_int(self.allowed_lateness_ms) or self.allowed_lateness_ms < 0:
            raise ConfigError("allowed_lateness_ms", self.allowed_lateness_ms, "an int >= 0 (milliseconds)")
        reserved_keys = (*RESERVED_INPUT, EVENT_TIME, ARRIVAL, *RESULT_COLUMNS)
        if not isinstance(self.key, str) or not self.key or self.key in reserved_keys:
            raise ConfigError("key", self.key, f"a non-empty column name, none of {list(reserved_keys)}")
        given = self.aggregations
        aggs = tuple(given) if isinstance(given, list | tuple) else ()
        object.__setattr__(self, "aggregations", aggs)
        ok = all(
            isinstance(a, tuple)
            and len(a) == 2
            and isinstance(a[0], str)
            and a[0]
            and isinstance(a[1], Aggregator)
            for a in aggs
        )
        if not aggs or not ok:
            raise ConfigError("aggregations", given, "a non-empty tuple of (name, Aggregator) pairs")
        names = [name for name, _ in aggs]
        reserved = {self.key, *RESULT_COLUMNS}
        if len(set(names)) != len(names) or reserved & set(names) or any(n.startswith("__") for n in names):
            accepted = f"unique output names, not starting with '__', none of {sorted(reserved)}"
            raise ConfigError("aggregations", names, accepted)
        if self.emit not in EMIT_MODES:
            raise ConfigError("emit", self.emit, "'final' or 'update'")
        for parameter in ("before_update", "after_update"):
            fn = getattr(self, parameter)
            if fn is not None and not callable(fn):
                raise ConfigError(parameter, fn, "a callable (aggregate, event) -> bools, or None")

    @property
    def needs_events(self) -> bool:
        """True when callbacks are set: the processor needs raw events, no pre-aggregation."""
        return self.before_update is not None or self.after_update is not None

    @property
    def sessions(self) -> bool:
        """True for session windows, the kind whose windows merge (late candidates)."""
        return self.assigner.merges


def TumblingSpec(
    size_ms: int,
    allowed_lateness_ms: int,
    key: str,
    aggregations: tuple[tuple[str, Aggregator], ...],
) -> WindowSpec:
    """A :class:`WindowSpec` of :class:`Tumbling` (the former ``TumblingSpec``)."""
    return WindowSpec(Tumbling(size_ms), allowed_lateness_ms, key, aggregations)


def event_schema(input_schema: pa.Schema) -> pa.Schema:
    """``input_schema`` with ``__et`` and ``__seq`` (int64) appended when missing.

    Raises
    ------
    ConfigError
        If a payload column uses a reserved name (``__ws``, ``__we``, ``__fired``).
    """
    reserved = [n for n in input_schema.names if n in RESERVED_INPUT]
    if reserved:
        raise ConfigError("columns", reserved, f"input columns not named {', '.join(RESERVED_INPUT)}")
    for name in (EVENT_TIME, ARRIVAL):
        if name not in input_schema.names:
            input_schema = input_schema.append(pa.field(name, pa.int64()))
    return input_schema


def payload_schema(input_schema: pa.Schema) -> pa.Schema:
    """``input_schema`` without ``__et``, ``__seq``, ``__ws`` and ``__we``."""
    drop = (EVENT_TIME, ARRIVAL, WINDOW_START, WINDOW_END)
    return pa.schema([f for f in input_schema if f.name not in drop])


LATE_INPUT_PREFIX = "input_"
"""Prefix of an input column renamed in the late table because it clashes with :data:`LATE_COLUMNS`."""


def late_columns(input_schema: pa.Schema) -> list[tuple[str, str]]:
    """``(input name, late-table name)`` of each payload column of the late table.

    A payload column named like one of :data:`LATE_COLUMNS` is renamed
    ``input_<name>`` (an interval join's output has an ``event_time`` column, and a
    window may follow a join); the others keep their names.

    Raises
    ------
    ConfigError
        If a renamed column clashes with another input column.
    """
    names = payload_schema(input_schema).names
    pairs = [(n, LATE_INPUT_PREFIX + n if n in LATE_COLUMNS else n) for n in names]
    clash = [late for name, late in pairs if late != name and late in names]
    if clash:
        accepted = f"no input column named both X and {LATE_INPUT_PREFIX}X for X in {list(LATE_COLUMNS)}"
        raise ConfigError("columns", clash, accepted)
    return pairs


def late_schema(spec: WindowSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the late (dead-letter) table.

    The payload columns (input without ``__et`` / ``__seq``; a column named
    ``event_time``, ``watermark`` or ``reason`` is renamed ``input_<name>``, see
    :func:`late_columns`), then ``event_time`` (the event's event time) and
    ``watermark`` (int64 ms) and ``reason`` (string).

    Raises
    ------
    ConfigError
        If the input has both a column named ``event_time``, ``watermark`` or
        ``reason`` and one named ``input_`` + that name.
    """
    payload = payload_schema(input_schema)
    return pa.schema(
        [
            *(payload.field(name).with_name(late) for name, late in late_columns(input_schema)),
            pa.field("event_time", pa.int64()),
            pa.field("watermark", pa.int64()),
            pa.field("reason", pa.string()),
        ]
    )


def partial_schema(spec: WindowSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of pre-aggregated rows.

    The key field, ``__ws`` and ``__we`` (int64 window bounds, ms), then each
    aggregation's partial fields in order.

    Raises
    ------
    ConfigError
        If the key is not an input column, the input uses a reserved column name
        (``__ws``, ``__we``, ``__fired``), an aggregation rejects its column, or
        partial column names collide.
    """
    schema = event_schema(input_schema)
    if spec.key not in schema.names:
        raise ConfigError("key", spec.key, f"one of the input columns {input_schema.names}")
    fields = [
        schema.field(spec.key),
        pa.field(WINDOW_START, pa.int64()),
        pa.field(WINDOW_END, pa.int64()),
    ]
    for name, agg in spec.aggregations:
        fields.extend(agg.partial_fields(name, schema))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ConfigError("aggregations", names, "partial column names distinct from the key")
    return pa.schema(fields)


def state_schema(spec: WindowSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the window state: :func:`partial_schema` + ``__fired`` bool."""
    return partial_schema(spec, input_schema).append(pa.field(FIRED, pa.bool_()))


def result_schema(spec: WindowSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the results.

    key, ``window_start`` int64 ms, ``window_end`` int64 ms (exclusive), each
    aggregation's result field in order, ``emit`` string (``"early"`` | ``"final"`` |
    ``"update"``).
    """
    partial_schema(spec, input_schema)
    schema = event_schema(input_schema)
    return pa.schema(
        [
            schema.field(spec.key),
            pa.field("window_start", pa.int64()),
            pa.field("window_end", pa.int64()),
            *(agg.result_field(name, schema) for name, agg in spec.aggregations),
            pa.field("emit", pa.string()),
        ]
    )
