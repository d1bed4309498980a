"""Tumbling event-time windows as pure Arrow functions (no Spark).

The Spark layer calls :func:`process_epoch` once per key group per epoch, with the
group's state table, the epoch's events of that group (many keys at once) and the
watermarks in force; everything here is vectorized (Arrow compute, group-by, numpy),
never a Python loop per event, key or window.

Time
    Event times, window bounds, watermarks and lateness are int64 milliseconds since
    the Unix epoch (UTC). Windows are aligned to the epoch and half-open
    ``[start, start + size_ms)`` (SPEC §4); negative times use floor division, so
    ``-1`` falls in ``[-size_ms, 0)``.

Watermarks (SPEC §2)
    ``wm_in`` is the watermark in force while the epoch's events arrived (the previous
    epoch's ``wm_out``), ``wm_out`` the watermark at the end of the epoch. Use
    ``-2**63`` for "no watermark yet" and :data:`~wire.runtime.envelope.MAX_WATERMARK`
    for the end of the stream (every window fires and is purged).

Late events (SPEC §3)
    An event whose window still has state (``window_end + allowed_lateness > wm_in``)
    is accepted, even if it is behind the watermark; it then re-emits its window as
    an ``update``. Otherwise it goes to the ``late`` table (:func:`late_schema`) with
    the reason and ``wm_in``. Every event ends up in exactly one of the two.

Emission (SPEC §4), at most one row per (key, window) per epoch
    * ``final``: the window never fired and the watermark crossed its end in this
      epoch (``wm_in < window_end <= wm_out``); this includes keys with no events in
      the epoch (a watermark advance closes windows of all keys);
    * ``update``: the window received events in this epoch and had already fired, or
      its on-time moment already passed (``window_end <= wm_in``);
    * nothing for windows still open.

State (SPEC §4)
    One row per (key, window) in :func:`state_schema`: the key, ``__ws`` (window
    start), the aggregations' partial columns and ``__fired``. A window's row is
    purged once ``window_end + allowed_lateness <= wm_out`` (or ``wm_out`` is
    ``MAX_WATERMARK``), after emitting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError
from wire.runtime.envelope import MAX_WATERMARK
from wire.state.aggregations import Aggregator, group_aggregate

WINDOW_START = "__ws"
"""Partial/state column: the window start, int64 ms."""
FIRED = "__fired"
"""State column: bool, True once the window has been emitted at least once."""

LATE_REASON = "window closed: window_end + allowed_lateness <= watermark"
"""The ``reason`` of every row of the late table."""

_TOUCHED = "__touched"
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_LATE_COLUMNS = ("event_time", "watermark", "reason")
_RESULT_COLUMNS = ("window_start", "window_end", "emit")


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class TumblingSpec:
    """Configuration of a tumbling window aggregation (an immutable value).

    Parameters
    ----------
    size_ms : int
        Window length in ms, > 0.
    allowed_lateness_ms : int
        How long after its end (in event time, ms) a window keeps its state and
        accepts late events, >= 0.
    key : str
        Key column name; state and results are per (key, window).
    aggregations : tuple of (str, Aggregator)
        Output column name and aggregator, non-empty, names unique. A list is
        accepted and stored as a tuple.

    Raises
    ------
    ConfigError
        If a parameter is out of range or names clash.
    """

    size_ms: int
    allowed_lateness_ms: int
    key: str
    aggregations: tuple[tuple[str, Aggregator], ...]

    def __post_init__(self) -> None:
        if not _is_int(self.size_ms) or self.size_ms <= 0:
            raise ConfigError("size_ms", self.size_ms, "an int > 0 (milliseconds)")
        if not _is_int(self.allowed_lateness_ms) or self.allowed_lateness_ms < 0:
            raise ConfigError(
                "allowed_lateness_ms", self.allowed_lateness_ms, "an int >= 0 (milliseconds)"
            )
        reserved_keys = (WINDOW_START, FIRED, *_RESULT_COLUMNS)
        if not isinstance(self.key, str) or not self.key or self.key in reserved_keys:
            raise ConfigError(
                "key", self.key, f"a non-empty column name, none of {list(reserved_keys)}"
            )
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
            raise ConfigError(
                "aggregations", given, "a non-empty tuple of (name, Aggregator) pairs"
            )
        names = [name for name, _ in aggs]
        reserved = {self.key, *_RESULT_COLUMNS}
        if len(set(names)) != len(names) or reserved & set(names):
            accepted = f"unique output names, none of {sorted(reserved)}"
            raise ConfigError("aggregations", names, accepted)


def _start_le(starts: np.ndarray, wm: int, offset: int) -> np.ndarray:
    """Vectorized ``starts <= wm - offset`` for int64 ``starts``, computed without overflow."""
    bound = int(wm) - int(offset)  # Python int: exact even for wm = -2**63 or 2**63 - 1
    if bound < _INT64_MIN:
        return np.zeros(len(starts), dtype=bool)
    if bound >= _INT64_MAX:
        return np.ones(len(starts), dtype=bool)
    return starts <= np.int64(bound)


def _closed(starts: np.ndarray, wm: int, spec: TumblingSpec) -> np.ndarray:
    """Windows without state at ``wm``: ``window_end + allowed_lateness <= wm``.

    At :data:`MAX_WATERMARK` (end of stream) every window is closed, whatever the lateness.
    """
    if wm >= MAX_WATERMARK:
        return np.ones(len(starts), dtype=bool)
    return _start_le(starts, wm, spec.size_ms + spec.allowed_lateness_ms)


def _to_numpy_int64(values: pa.Array | pa.ChunkedArray | np.ndarray) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray | pa.Array):
        if values.null_count:
            raise ValueError("event_time must not contain nulls")
        values = values.to_numpy()
    return np.asarray(values).astype(np.int64, copy=False)


def assign_tumbling(event_time: pa.Array | np.ndarray, size_ms: int) -> pa.Array:
    """Return the start of each event's tumbling window.

    Parameters
    ----------
    event_time : pyarrow.Array or numpy.ndarray
        Event times, int64 ms since the Unix epoch; no nulls.
    size_ms : int
        Window length in ms, > 0.

    Returns
    -------
    pyarrow.Array
        int64 window starts, ``floor(event_time / size_ms) * size_ms`` (aligned to the
        Unix epoch, floor semantics for negative times).

    Raises
    ------
    ValueError
        If ``event_time`` contains nulls.
    """
    et = _to_numpy_int64(event_time)
    return pa.array(et - np.mod(et, np.int64(size_ms)), type=pa.int64())


def late_schema(input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the late (dead-letter) table.

    The input columns followed by ``event_time``, ``watermark`` and ``reason``.

    ``event_time`` and ``watermark`` are int64 ms, ``reason`` a string.

    Raises
    ------
    ConfigError
        If the input already has a column named ``event_time``, ``watermark`` or
        ``reason``.
    """
    clash = [n for n in input_schema.names if n in _LATE_COLUMNS]
    if clash:
        raise ConfigError("columns", clash, f"input columns not named {', '.join(_LATE_COLUMNS)}")
    return pa.schema(
        [
            *input_schema,
            pa.field("event_time", pa.int64()),
            pa.field("watermark", pa.int64()),
            pa.field("reason", pa.string()),
        ]
    )


def split_late(
    events: pa.Table, event_time: pa.Array | np.ndarray, watermark: int, spec: TumblingSpec
) -> tuple[pa.Table, pa.Table]:
    """Split an epoch's events into accepted ones and late ones (SPEC §3).

    Parameters
    ----------
    events : pyarrow.Table
        Payload columns, including ``spec.key``.
    event_time : pyarrow.Array or numpy.ndarray
        int64 ms, one per row of ``events``, no nulls.
    watermark : int
        The watermark in force while the events arrived (ms).
    spec : TumblingSpec
        The window configuration.

    Returns
    -------
    accepted : pyarrow.Table
        Events whose window still has state (``window_end + allowed_lateness >
        watermark``): the columns of ``events`` followed by ``__ws`` (int64 window
        start). Row order preserved.
    late : pyarrow.Table
        The other events in :func:`late_schema`, with ``watermark`` and
        ``reason`` = :data:`LATE_REASON`. Row order preserved.
    """
    if len(event_time) != events.num_rows:
        raise ValueError(
            f"event_time has {len(event_time)} values for {events.num_rows} event rows"
        )
    schema = late_schema(events.schema)
    et = _to_numpy_int64(event_time)
    starts = assign_tumbling(et, spec.size_ms).to_numpy()
    closed = _closed(starts, watermark, spec)
    keep = pa.array(~closed)
    accepted = events.filter(keep).append_column(
        pa.field(WINDOW_START, pa.int64()), pa.array(starts[~closed], pa.int64())
    )
    n_late = int(closed.sum())
    late_columns = [
        *events.filter(pa.array(closed)).columns,
        pa.array(et[closed], pa.int64()),
        pa.repeat(pa.scalar(int(watermark), pa.int64()), n_late),
        pa.repeat(pa.scalar(LATE_REASON, pa.string()), n_late),
    ]
    return accepted, pa.Table.from_arrays(late_columns, schema=schema)


def partial_schema(spec: TumblingSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of pre-aggregated rows.

    The key field, ``__ws`` int64 (window start, ms), then each aggregation's
    partial fields in order.

    Raises
    ------
    ConfigError
        If the key is not an input column, the input uses a reserved column name
        (``__ws``, ``__fired``), an aggregation rejects its column, or partial
        column names collide with the key.
    """
    if spec.key not in input_schema.names:
        raise ConfigError("key", spec.key, f"one of the input columns {input_schema.names}")
    reserved = [n for n in input_schema.names if n in (WINDOW_START, FIRED)]
    if reserved:
        raise ConfigError("columns", reserved, f"input columns not named {WINDOW_START}, {FIRED}")
    fields = [input_schema.field(spec.key), pa.field(WINDOW_START, pa.int64())]
    for name, agg in spec.aggregations:
        fields.extend(agg.partial_fields(name, input_schema))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ConfigError("aggregations", names, "partial column names distinct from the key")
    return pa.schema(fields)


def state_schema(spec: TumblingSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the window state: :func:`partial_schema` + ``__fired`` bool."""
    return partial_schema(spec, input_schema).append(pa.field(FIRED, pa.bool_()))


def result_schema(spec: TumblingSpec, input_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the results.

    key, ``window_start`` int64 ms, ``window_end`` int64 ms (exclusive), each
    aggregation's result field in order, ``emit`` string (``"final"`` | ``"update"``).
    """
    partial_schema(spec, input_schema)
    return pa.schema(
        [
            input_schema.field(spec.key),
            pa.field("window_start", pa.int64()),
            pa.field("window_end", pa.int64()),
            *(agg.result_field(name, input_schema) for name, agg in spec.aggregations),
            pa.field("emit", pa.string()),
        ]
    )


def _sort(table: pa.Table, key: str, start: str = WINDOW_START) -> pa.Table:
    return table.sort_by([(key, "ascending"), (start, "ascending")])


def preaggregate(accepted: pa.Table, spec: TumblingSpec) -> pa.Table:
    """Fold accepted events into one partial row per (key, ``__ws``) present.

    Parameters
    ----------
    accepted : pyarrow.Table
        The ``accepted`` table of :func:`split_late` (payload columns + ``__ws``).
    spec : TumblingSpec
        The window configuration.

    Returns
    -------
    pyarrow.Table
        In :func:`partial_schema`, sorted by (key, ``__ws``); empty if no rows.
    """
    payload = accepted.schema.remove(accepted.schema.get_field_index(WINDOW_START))
    schema = partial_schema(spec, payload)
    aggs = [a for name, agg in spec.aggregations for a in agg.partial_aggs(name)]
    return _sort(group_aggregate(accepted, [spec.key, WINDOW_START], aggs, schema), spec.key)


def _merge(state: pa.Table, partials: pa.Table, spec: TumblingSpec) -> pa.Table:
    """State rows + partial rows → one row per (key, window) with __fired and __touched."""
    n_state, n_new = state.num_rows, partials.num_rows
    names = partials.schema.names
    base = state.select(names).append_column(_TOUCHED, pa.array(np.zeros(n_state, bool)))
    if n_new == 0:
        return base.append_column(FIRED, state.column(FIRED))
    new = partials.append_column(_TOUCHED, pa.array(np.ones(n_new, bool)))
    fired = pa.chunked_array([*state.column(FIRED).chunks, pa.array(np.zeros(n_new, bool))])
    both = pa.concat_tables([base, new]).append_column(FIRED, fired)
    aggs = [a for name, agg in spec.aggregations for a in agg.merge_aggs(name)]
    aggs += [(_TOUCHED, "any", None, _TOUCHED), (FIRED, "any", None, FIRED)]
    schema = pa.schema([*partials.schema, both.schema.field(_TOUCHED), both.schema.field(FIRED)])
    return _sort(group_aggregate(both, [spec.key, WINDOW_START], aggs, schema), spec.key)


def advance(
    state: pa.Table | None, partials: pa.Table, wm_in: int, wm_out: int, spec: TumblingSpec
) -> tuple[pa.Table, pa.Table]:
    """Merge an epoch's partials into the state, emit results, purge closed windows.

    Parameters
    ----------
    state : pyarrow.Table or None
        Current state in :func:`state_schema` (None = empty), one row per (key, window).
    partials : pyarrow.Table
        The epoch's pre-aggregated rows (:func:`preaggregate`), in :func:`partial_schema`.
    wm_in : int
        Watermark (ms) in force while the epoch's events arrived.
    wm_out : int
        Watermark (ms) at the end of the epoch, ``>= wm_in``.
    spec : TumblingSpec
        The window configuration.

    Returns
    -------
    new_state : pyarrow.Table
        In :func:`state_schema`, sorted by (key, ``__ws``), without purged windows.
    results : pyarrow.Table
        In :func:`result_schema`, sorted by (key, window_start); emission rules in
        the module docstring (``final`` / ``update``, at most one row per window).

    Raises
    ------
    ValueError
        If ``wm_out < wm_in``.
    """
    if wm_out < wm_in:
        raise ValueError(f"wm_out={wm_out} is below wm_in={wm_in}; watermarks never decrease")
    if state is None:
        state = partials.schema.append(pa.field(FIRED, pa.bool_())).empty_table()
    merged = _merge(state, partials, spec)
    size = spec.size_ms
    starts = merged.column(WINDOW_START).to_numpy()
    fired = merged.column(FIRED).to_numpy(zero_copy_only=False).astype(bool)
    touched = merged.column(_TOUCHED).to_numpy(zero_copy_only=False).astype(bool)
    # window_end <= wm  <=>  start <= wm - size (Python ints: no overflow)
    ended_in = _start_le(starts, wm_in, size)
    ended_out = _start_le(starts, wm_out, size)
    final = ~fired & ended_out & ~ended_in
    update = touched & (fired | ended_in)
    emit = final | update
    purge = _closed(starts, wm_out, spec)

    emitted = merged.filter(pa.array(emit))
    kinds = np.where(final[emit], "final", "update").astype(object)
    ws = emitted.column(WINDOW_START).combine_chunks()
    results = pa.table(
        {
            spec.key: emitted.column(spec.key),
            "window_start": ws,
            "window_end": pc.add_checked(ws, pa.scalar(size, pa.int64())),
            **{name: agg.result(name, emitted) for name, agg in spec.aggregations},
            "emit": pa.array(kinds, pa.string()),
        }
    )
    results = results.cast(results.schema.set(0, merged.schema.field(spec.key)))

    keep = pa.array(~purge)
    new_fired = pa.array((fired | emit)[~purge], pa.bool_())
    new_state = merged.filter(keep).select(partials.schema.names).append_column(FIRED, new_fired)
    return new_state, results


def process_epoch(
    state: pa.Table | None,
    events: pa.Table,
    event_time: pa.Array | np.ndarray,
    wm_in: int,
    wm_out: int,
    spec: TumblingSpec,
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Run one epoch of one key group: :func:`split_late` at ``wm_in``, pre-aggregate, advance.

    Parameters
    ----------
    state : pyarrow.Table or None
        State in :func:`state_schema` (None before the first epoch).
    events : pyarrow.Table
        The epoch's events (payload columns incl. ``spec.key``), any number of keys.
    event_time : pyarrow.Array or numpy.ndarray
        int64 ms per row of ``events``.
    wm_in, wm_out : int
        Watermarks (ms) at the start and at the end of the epoch.
    spec : TumblingSpec
        The window configuration.

    Returns
    -------
    new_state, results, late : pyarrow.Table
        As :func:`advance` (state, results) and :func:`split_late` (late).
    """
    accepted, late = split_late(events, event_time, wm_in, spec)
    partials = preaggregate(accepted, spec)
    new_state, results = advance(state, partials, wm_in, wm_out, spec)
    return new_state, results, late
