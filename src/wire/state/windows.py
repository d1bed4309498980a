"""Event-time windows as pure Arrow functions (no Spark): tumbling, sliding, sessions.

The Spark layer runs :func:`split_late` and :func:`preaggregate` (or, by hashing,
:func:`wire.state.preaggregation.preaggregate_by`) per Arrow batch before the shuffle,
and :func:`advance` once per key group per epoch, with the group's state as one Arrow
table; :func:`process_epoch` is the reference composition. Everything is vectorized
(Arrow compute, numpy), never a Python loop per event, key or window, except user
aggregators (:mod:`wire.state.user`).

Time
    Event times, window bounds, watermarks and lateness are int64 ms since the Unix
    epoch (UTC); windows are half-open ``[start, end)`` (:mod:`wire.state.assigners`).
    ``wm_in`` is the watermark in force while the epoch's events arrived (the
    previous epoch's ``wm_out``), ``wm_out`` the watermark at the end of the epoch.
    ``-2**63`` means "no watermark yet",
    :data:`~wire.core.envelope.MAX_WATERMARK` the end of the stream (every window
    fires and is purged).

Events
    Payload columns plus ``__et`` (int64 event time, no nulls) and ``__seq`` (int64
    arrival sequence; null or missing = row order). Per key, events are processed in
    (event time, arrival) order (SPEC §1), which decides first / last / collect and
    the callbacks.

Late events (SPEC §3)
    Tumbling / sliding: an event is late when *all* its windows are closed
    (``window_end + allowed_lateness <= watermark``); a sliding event with some
    windows closed is counted in the others only. Sessions (Flink's rule, the merged
    window decides): an event with ``t + gap + allowed_lateness > watermark`` is
    accepted; otherwise it is a *candidate*, accepted only if it merges (possibly via
    other candidates) into a session still in state (:func:`resolve_candidates`).
    Late events go to the late table (:func:`late_schema`), one row per event.

Emission (SPEC §3, §4); per epoch at most one of final / update / early per window,
plus callback rows
    * ``final``: the window never fired and ``wm_in < window_end <= wm_out`` — also
      for keys without events this epoch (a watermark advance closes every key's
      windows);
    * ``update``: the window changed this epoch after its on-time moment (it fired
      before, or ``window_end <= wm_in``): late data within allowed lateness. A late
      event that bridges sessions emits the merged session as ``update``; the merged
      sessions disappear from state. A session grown out of a fired session never
      emits another ``final``: its later changes are updates;
    * ``early`` (``emit="update"``): the window changed this epoch, never fired and
      is still open (``window_end > wm_out``);
    * ``early`` from callbacks (:mod:`wire.state.emission`): one row per True
      returned, ordered by processing order before the window's epoch row. Callback
      rows never count as "fired".

State (SPEC §4)
    One row per (key, window) in :func:`state_schema`: key, ``__ws``, ``__we``, the
    partial columns and ``__fired``, sorted by (key, ``__ws``). A window is purged
    once ``window_end + allowed_lateness <= wm_out`` (or ``wm_out`` is
    ``MAX_WATERMARK``), after emitting.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from wire.core.time import INT64_MAX, INT64_MIN
from wire.state import operator_watermarks as OW
from wire.state.aggregator import Aggregator
from wire.state.assigners import Session, Sliding, Tumbling, earliest_start
from wire.state.emission import ORDER, callback_rows
from wire.state.kernels import (
    ARRIVAL,
    EVENT_TIME,
    FIRED,
    WINDOW_END,
    WINDOW_START,
    Groups,
    arrival,
    changes,
    le_bound,
    to_int64,
)
from wire.state.sessions import SESSION_LATE_REASON, candidates_alive, closed_by, session_groups
from wire.state.spec import (
    TumblingSpec,
    WindowSpec,
    late_columns,
    late_schema,
    partial_schema,
    result_schema,
    state_schema,
)

__all__ = [
    "ARRIVAL",
    "EVENT_TIME",
    "FIRED",
    "LATE_REASON",
    "SESSION_LATE_REASON",
    "WINDOW_END",
    "WINDOW_START",
    "Session",
    "Sliding",
    "Tumbling",
    "TumblingSpec",
    "WindowSpec",
    "advance",
    "compact",
    "late_schema",
    "output_watermark",
    "output_watermark_hold",
    "partial_schema",
    "preaggregate",
    "process_epoch",
    "resolve_candidates",
    "result_schema",
    "split_late",
    "state_schema",
    "watermark_with_hold",
]

LATE_REASON = "window closed: window_end + allowed_lateness <= watermark"
"""The ``reason`` of a late tumbling / sliding event."""

_TOUCHED = "__touched"


def prepare_events(events: pa.Table) -> pa.Table:
    """Check ``__et`` and set ``__seq`` (int64, nulls → row number)."""
    if EVENT_TIME not in events.column_names:
        raise ValueError(f"events need an int64 {EVENT_TIME} column (event time, ms)")
    et = to_int64(events.column(EVENT_TIME), EVENT_TIME)
    seq = pa.array(arrival(events), pa.int64())
    events = events.set_column(events.schema.get_field_index(EVENT_TIME), EVENT_TIME, pa.array(et))
    if ARRIVAL in events.column_names:
        return events.set_column(events.schema.get_field_index(ARRIVAL), ARRIVAL, seq)
    return events.append_column(ARRIVAL, seq)


def late_events(events: pa.Table, watermark: int, reason: str, spec: WindowSpec) -> pa.Table:
    """``events`` as rows of the late port (:func:`late_schema`): with ``watermark`` and ``reason``."""
    schema = late_schema(spec, events.schema)
    n = events.num_rows
    columns = [events.column(name) for name, _ in late_columns(events.schema)]
    columns += [
        events.column(EVENT_TIME),
        pa.repeat(pa.scalar(int(watermark), pa.int64()), n),
        pa.repeat(pa.scalar(reason, pa.string()), n),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _with_window(events: pa.Table, start: np.ndarray, end: np.ndarray) -> pa.Table:
    return events.append_column(WINDOW_START, pa.array(start, pa.int64())).append_column(
        WINDOW_END, pa.array(end, pa.int64())
    )


def split_late(
    events: pa.Table, watermark: int, spec: WindowSpec, columns: list[str] | None = None
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Split a batch of events into accepted, late and (sessions only) candidate events.

    Parameters
    ----------
    events : pyarrow.Table
        Payload columns (incl. ``spec.key``), ``__et`` and optionally ``__seq``.
    watermark : int
        The watermark in force while the events arrived (ms).
    spec : WindowSpec
        The window configuration.
    columns : list of str, optional
        Tumbling and sliding windows: the input columns ``accepted`` keeps (besides
        ``__et`` and ``__seq``), e.g. :func:`hash_columns` (None: all). Sliding windows
        copy each accepted column once per window of an event.

    Returns
    -------
    accepted : pyarrow.Table
        Input columns (``__seq`` filled; only ``columns`` if given) + ``__ws``, ``__we``:
        one row per (event, window still open) — several per event for sliding windows;
        sessions: ``[t, t + gap)``. Input row order.
    late : pyarrow.Table
        One row per event whose windows are all closed, in :func:`late_schema`, with
        ``watermark`` and :data:`LATE_REASON`. Input row order.
    candidates : pyarrow.Table
        Sessions only (else empty): raw events (input columns) with ``t + gap +
        allowed_lateness <= watermark``, for :func:`resolve_candidates`.

    Raises
    ------
    ValueError
        If ``__et`` is missing or has nulls.
    """
    events = prepare_events(events)
    et = events.column(EVENT_TIME).to_numpy()
    rows, start, end = spec.assigner.assign(et)
    open_ = ~closed_by(end, watermark, spec)
    if spec.sessions:  # one proto-session per event: a closed one may still merge into a live one
        accepted = _with_window(events.filter(pa.array(open_)), start[open_], end[open_])
        late = late_events(events.slice(0, 0), watermark, LATE_REASON, spec)
        return accepted, late, events.filter(pa.array(~open_))
    alive = np.zeros(events.num_rows, dtype=bool)
    alive[rows[open_]] = True
    kept = events if columns is None else events.select([*columns, EVENT_TIME, ARRIVAL])
    accepted = _with_window(kept.take(pa.array(rows[open_])), start[open_], end[open_])
    late = late_events(events.filter(pa.array(~alive)), watermark, LATE_REASON, spec)
    return accepted, late, events.slice(0, 0)


def resolve_candidates(
    state: pa.Table | None, candidates: pa.Table, watermark: int, spec: WindowSpec
) -> tuple[pa.Table, pa.Table]:
    """Sessions: accept the candidates that merge into a session still in state.

    Parameters
    ----------
    state : pyarrow.Table or None
        Live sessions: any table with ``spec.key``, ``__ws``, ``__we`` — the window
        state, best concatenated with the epoch's partials so that a candidate bridging
        to an on-time event of the same epoch is accepted too (Flink's rule: the merged
        window decides). Sessions closed at ``watermark`` are ignored.
    candidates : pyarrow.Table
        The ``candidates`` of :func:`split_late`.
    watermark : int
        The watermark used by :func:`split_late` (ms).
    spec : WindowSpec
        The window configuration (any other kind: every candidate is late).

    Returns
    -------
    accepted : pyarrow.Table
        Candidates whose ``[t, t + gap)`` overlaps, directly or through other
        candidates, a live session of their key; with ``__ws``, ``__we`` as in
        :func:`split_late`.
    late : pyarrow.Table
        The others, in :func:`late_schema`, reason :data:`SESSION_LATE_REASON`.
    """
    candidates = prepare_events(candidates)
    et = candidates.column(EVENT_TIME).to_numpy()
    if spec.sessions and state is not None:
        alive = candidates_alive(state, candidates, watermark, spec)
        end = spec.assigner.assign(et)[2]
    else:
        alive, end = np.zeros(candidates.num_rows, dtype=bool), et
    accepted = _with_window(candidates.filter(pa.array(alive)), et[alive], end[alive])
    late = late_events(candidates.filter(pa.array(~alive)), watermark, SESSION_LATE_REASON, spec)
    return accepted, late


def _windows(table: pa.Table, spec: WindowSpec) -> Groups:
    """Groups of rows sorted by (key, ``__ws``, ...) that form one window (sessions: merged)."""
    if spec.sessions:
        return session_groups(table, spec.key)
    return Groups.from_new(changes(table, [spec.key, WINDOW_START, WINDOW_END]))


def _bounds(table: pa.Table, groups: Groups, spec: WindowSpec) -> list[pa.Array]:
    """Key, window start (min) and end (max) of each group of rows sorted by start."""
    idx = pa.array(groups.starts)
    we = table.column(WINDOW_END).to_numpy()
    end = np.maximum.reduceat(we, groups.starts) if groups.n else we[:0]
    return [
        table.column(spec.key).take(idx).combine_chunks(),
        table.column(WINDOW_START).take(idx).combine_chunks(),
        pa.array(end, pa.int64()),
    ]


def preaggregate(accepted: pa.Table, spec: WindowSpec) -> pa.Table:
    """Fold accepted events into one partial row per (key, window) present.

    Sessions: events of a key whose proto-sessions overlap within this batch are
    merged into one sub-session first (one row per sub-session).

    Parameters
    ----------
    accepted : pyarrow.Table
        Accepted events of :func:`split_late` / :func:`resolve_candidates`.
    spec : WindowSpec
        The window configuration.

    Returns
    -------
    pyarrow.Table
        In :func:`partial_schema`, sorted by (key, ``__ws``, ``__we``); empty if no rows.
    """
    input_schema = pa.schema([f for f in accepted.schema if f.name not in (WINDOW_START, WINDOW_END)])
    schema = partial_schema(spec, input_schema)
    if accepted.num_rows == 0:
        return schema.empty_table()
    accepted = prepare_events(accepted).sort_by(
        [(c, "ascending") for c in (spec.key, WINDOW_START, WINDOW_END, EVENT_TIME, ARRIVAL)]
    )
    groups = _windows(accepted, spec)
    columns = _bounds(accepted, groups, spec)
    for name, agg in spec.aggregations:
        columns += agg.partial(name, accepted, groups)
    return pa.Table.from_arrays(columns, schema=schema)


def _partials(
    aggregations: tuple[tuple[str, Aggregator], ...], rows: pa.Table, groups: Groups
) -> list[pa.Array]:
    """Merged partial columns per group (the rows themselves when groups are single rows)."""
    out: list[pa.Array] = []
    for name, agg in aggregations:
        names = agg.partial_names(name)
        if groups.n == rows.num_rows:
            out += [rows.column(c).combine_chunks() for c in names]
        else:
            out += agg.merge(name, rows, groups)
    return out


def advance(
    state: pa.Table | None,
    partials: pa.Table | None,
    wm_in: int,
    wm_out: int,
    spec: WindowSpec,
    *,
    events: pa.Table | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Merge an epoch's partials into the state, emit results, purge closed windows.

    Parameters
    ----------
    state : pyarrow.Table or None
        Current state in :func:`state_schema` (None = empty).
    partials : pyarrow.Table or None
        The epoch's pre-aggregated rows (:func:`preaggregate`), in
        :func:`partial_schema`, several rows per window allowed (e.g. one per Spark
        partition); sessions may overlap. Must be None or empty when ``events`` is given.
    wm_in : int
        Watermark (ms) in force while the epoch's events arrived.
    wm_out : int
        Watermark (ms) at the end of the epoch, ``>= wm_in``.
    spec : WindowSpec
        The window configuration.
    events : pyarrow.Table, optional
        The epoch's accepted raw events (required when ``spec.needs_events``);
        pre-aggregated here, and shown to the callbacks.

    Returns
    -------
    new_state : pyarrow.Table
        In :func:`state_schema`, sorted by (key, ``__ws``), without purged windows.
    results : pyarrow.Table
        In :func:`result_schema`, sorted by (key, window_start, window_end), callback
        rows first in processing order; emission rules in the module docstring.

    Raises
    ------
    ValueError
        If ``wm_out < wm_in``, or ``events`` / ``partials`` are missing or both given.
    """
    if wm_out < wm_in:
        raise ValueError(f"wm_out={wm_out} is below wm_in={wm_in}; watermarks never decrease")
    if events is not None:
        if partials is not None and partials.num_rows:
            raise ValueError("give either partials or events to advance(), not both")
        events = prepare_events(events)
        partials = preaggregate(events, spec)
    elif spec.needs_events:
        raise ValueError("spec has callbacks: advance() needs the epoch's accepted events")
    if partials is None:
        raise ValueError("advance() needs partials (or events)")
    if state is None:
        state = partials.schema.append(pa.field(FIRED, pa.bool_())).empty_table()
    rows, groups, merged = _merge(state, partials, spec)
    fired = _any(rows, FIRED, groups)
    touched = _any(rows, _TOUCHED, groups)
    end = merged.column(WINDOW_END).to_numpy()
    ended_in, ended_out = le_bound(end, int(wm_in)), le_bound(end, int(wm_out))
    final = ~fired & ended_out & ~ended_in
    update = touched & (fired | ended_in)
    early = touched & ~fired & ~ended_out & (spec.emit == "update")
    emit = final | update | early
    kinds = np.where(final, "final", np.where(update, "update", "early"))[emit].astype(object)

    emitted = merged.filter(pa.array(emit))
    pieces = [
        pa.table(
            {
                spec.key: emitted.column(spec.key),
                "window_start": emitted.column(WINDOW_START),
                "window_end": emitted.column(WINDOW_END),
                **{name: agg.result(name, emitted) for name, agg in spec.aggregations},
                "emit": pa.array(kinds, pa.string()),
                ORDER: pa.array(np.full(emitted.num_rows, INT64_MAX), pa.int64()),
            }
        )
    ]
    if spec.needs_events and events is not None and events.num_rows:
        open_ = ~fired & ~ended_in

        def initial(windows: np.ndarray) -> pa.Table:
            return _state_partials(rows, groups, merged.schema, spec).take(_lookup(rows, groups, windows))

        pieces.insert(0, callback_rows(spec, merged, open_, initial, events))
    order = [(c, "ascending") for c in (spec.key, "window_start", "window_end", ORDER)]
    results = pa.concat_tables(pieces).sort_by(order).drop_columns([ORDER])

    keep = ~closed_by(end, wm_out, spec)
    new_fired = pa.array((fired | final | update)[keep], pa.bool_())
    return merged.filter(pa.array(keep)).append_column(FIRED, new_fired), results


def _merge(state: pa.Table, partials: pa.Table, spec: WindowSpec) -> tuple[pa.Table, Groups, pa.Table]:
    """State + partials → (rows sorted by window with ``__touched``/``__fired``, groups, merged).

    ``merged`` has one row per window (sessions: after merging overlaps) in
    :func:`partial_schema`, sorted by (key, ``__ws``).
    """
    partial = state.schema.remove(state.schema.get_field_index(FIRED))
    n_state, n_new = state.num_rows, partials.num_rows
    fired = state.column(FIRED).to_numpy(zero_copy_only=False).astype(bool)
    rows = pa.concat_tables(
        [
            state.select(partial.names).append_column(_TOUCHED, pa.array(np.zeros(n_state, bool))),
            partials.select(partial.names)
            .cast(partial)
            .append_column(_TOUCHED, pa.array(np.ones(n_new, bool))),
        ]
    ).append_column(FIRED, pa.array(np.concatenate([fired, np.zeros(n_new, bool)])))
    if n_new:  # state is kept sorted; the stable sort keeps state rows before new ones
        rows = rows.sort_by([(c, "ascending") for c in (spec.key, WINDOW_START, WINDOW_END)])
    groups = _windows(rows, spec)
    columns = _bounds(rows, groups, spec) + _partials(spec.aggregations, rows, groups)
    return rows, groups, pa.Table.from_arrays(columns, schema=partial)


def compact(chunks: list[pa.Table], spec: WindowSpec) -> pa.Table:
    """Merge state rows (or partials) of the same window into one row.

    Parameters
    ----------
    chunks : list of pyarrow.Table
        Tables in :func:`state_schema` (``__fired`` may be missing: False), several
        rows per window allowed, in any order.
    spec : WindowSpec
        The window configuration (sessions: overlapping sessions of a key merge).

    Returns
    -------
    pyarrow.Table
        In :func:`state_schema`: one row per window, sorted by (key, ``__ws``);
        ``__fired`` is True when any merged row had it.
    """
    first = chunks[0].schema
    if FIRED in first.names and all(c.schema.equals(first) for c in chunks[1:]):
        rows = pa.concat_tables(chunks)  # stored chunks: one schema, concatenated as they are
        schema = first
    else:
        tables = [c if FIRED in c.column_names else
                  c.append_column(FIRED, pa.array(np.zeros(c.num_rows, bool))) for c in chunks]
        schema = tables[0].schema
        rows = pa.concat_tables([t.select(schema.names).cast(schema) for t in tables])
    # Always sorted here: one table may be several tasks' partials concatenated (unsorted as
    # a whole); a window's rows must be adjacent for _windows to merge them.
    rows = rows.sort_by([(c, "ascending") for c in (spec.key, WINDOW_START, WINDOW_END)])
    groups = _windows(rows, spec)
    if groups.n == rows.num_rows:
        return rows
    columns = _bounds(rows, groups, spec) + _partials(spec.aggregations, rows, groups)
    columns.append(pa.array(_any(rows, FIRED, groups), pa.bool_()))
    return pa.Table.from_arrays(columns, schema=schema)


def _any(rows: pa.Table, name: str, groups: Groups) -> np.ndarray:
    values = rows.column(name).to_numpy(zero_copy_only=False).astype(bool)
    return np.logical_or.reduceat(values, groups.starts) if groups.n else values[:0]


def _state_partials(rows: pa.Table, groups: Groups, schema: pa.Schema, spec: WindowSpec) -> pa.Table:
    """Per window that had state rows: the merge of those rows (its value before the epoch)."""
    state_rows = ~rows.column(_TOUCHED).to_numpy(zero_copy_only=False).astype(bool)
    sub = rows.filter(pa.array(state_rows))
    ids = groups.ids[state_rows]
    sub_groups = Groups.from_new(np.diff(ids, prepend=-1) != 0)
    names = schema.names[3:]  # after key, __ws, __we
    return pa.Table.from_arrays(
        _partials(spec.aggregations, sub, sub_groups), schema=pa.schema([schema.field(n) for n in names])
    )


def _lookup(rows: pa.Table, groups: Groups, windows: np.ndarray) -> pa.Array:
    """Row of :func:`_state_partials` for each window index (null for windows without state)."""
    state_rows = ~rows.column(_TOUCHED).to_numpy(zero_copy_only=False).astype(bool)
    with_state = np.unique(groups.ids[state_rows])
    at = np.full(groups.n, -1, dtype=np.int64)
    at[with_state] = np.arange(len(with_state), dtype=np.int64)
    idx = at[windows]
    return pa.array(idx, pa.int64(), mask=idx < 0)


def process_epoch(
    state: pa.Table | None, events: pa.Table, wm_in: int, wm_out: int, spec: WindowSpec
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """Run one epoch of one key group: the reference composition of the functions above.

    :func:`split_late` at ``wm_in``; for sessions :func:`resolve_candidates` against
    the state plus the epoch's own partials; then :func:`preaggregate` and
    :func:`advance` (or ``advance(events=...)`` when the spec has callbacks).

    Returns
    -------
    new_state, results, late : pyarrow.Table
        As :func:`advance` (state, results) and :func:`split_late` (late: split_late's
        rows, then the rejected candidates).
    """
    accepted, late, candidates = split_late(events, wm_in, spec)
    partials = preaggregate(accepted, spec)
    if candidates.num_rows:
        live = [partials.select([spec.key, WINDOW_START, WINDOW_END])]
        if state is not None:
            live.insert(0, state.select([spec.key, WINDOW_START, WINDOW_END]))
        more, late_candidates = resolve_candidates(pa.concat_tables(live), candidates, wm_in, spec)
        late = pa.concat_tables([late, late_candidates])
        if more.num_rows:
            accepted = pa.concat_tables([accepted, more])
            partials = pa.concat_tables([partials, preaggregate(more, spec)])
    if spec.needs_events:
        new_state, results = advance(state, None, wm_in, wm_out, spec, events=accepted)
    else:
        new_state, results = advance(state, partials, wm_in, wm_out, spec)
    return new_state, results, late


def output_watermark_hold(state: pa.Table, spec: WindowSpec) -> int | None:
    """The operator's watermark hold (SPEC §2, Beam): min start of windows not yet fired.

    The operator's output watermark becomes ``max(out, min(in, hold))``, so a
    downstream window over these results (whose event time is the window start) sees
    no result behind its watermark. None when every window in state has fired.
    """
    if state is None or state.num_rows == 0:
        return None
    fired = state.column(FIRED).to_numpy(zero_copy_only=False).astype(bool)
    starts = state.column(WINDOW_START).to_numpy()[~fired]
    return int(starts.min()) if len(starts) else None


def output_watermark(old_out: int, new_in: int, state: pa.Table | None, spec: WindowSpec) -> int:
    """The window operator's new output watermark (ms), never behind ``old_out``.

    Beam's watermark-hold rule (SPEC §2): ``max(old_out, min(new_in, hold))`` where the
    hold is the earliest of

    * the start of every window in ``state`` that has not fired yet
      (:func:`output_watermark_hold`), and
    * the earliest window start that an on-time input event (event time ≥
      ``new_in``) could still create (:func:`wire.state.assigners.earliest_start`),
      whether or not any window is open: a tumbling window rounds ``new_in`` down to
      its start, a sliding window reaches back ``size - slide`` further, a session
      starts at its first event.

    Results carry their window start as event time, so downstream (a window of
    windows) no on-time result is ever behind this watermark. At the end of input
    (``new_in`` = int64 max) no new window can open and only open windows hold.

    What the hold covers: every ``final`` row of input that was on time (event time
    ``>= `` the input watermark, SPEC §3), for all window kinds; for tumbling and sliding
    windows also late input, which only enters a window whose end is past the input
    watermark (so its start is at or after the possible-window bound) or updates a
    fired one (an ``update`` row, late by nature). Not covered: a late session event
    (``t < watermark`` but ``t + gap + allowed_lateness > watermark``, accepted by
    Flink's rule) may open a session, or merge, through other late events of the same
    epoch, into an open one, that starts before the output watermark; no finite hold
    bounds how far back such a chain reaches, so its result may be late downstream.
    Checked by ``tests/unit/state/test_pipeline_metamorphic.py``.
    """
    return watermark_with_hold(old_out, new_in, output_watermark_hold(state, spec), spec)


def watermark_with_hold(old_out: int, new_in: int, hold: int | None, spec: WindowSpec) -> int:
    """:func:`output_watermark` given the hold of the windows in state (None: no hold)."""
    # no watermark yet / end of input: no window an on-time event could open to add
    possible = earliest_start(new_in, spec.assigner) if INT64_MIN < new_in < INT64_MAX else None
    return OW.output_watermark(old_out, new_in, hold, possible)
