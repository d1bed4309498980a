"""``before_update`` / ``after_update`` callbacks: early emission from running aggregates.

Called by :func:`wire.state.windows.advance` when the spec has callbacks. The epoch's
accepted events that fall into *open* windows (not fired and ``window_end > wm_in``)
are sorted by (key, window, event time, arrival); every aggregator computes the
results just before and just after each event (:meth:`Aggregator.running`, segmented
cumulative operations seeded with the window's state); each callback is then called
**once** with all rows. Late events (into windows whose on-time moment passed) are
not shown to callbacks: they produce ``update`` rows instead.

Sessions: each event is attributed to the session it belongs to at the end of the
epoch (after all merges), and the running aggregate starts from the merged state of
the sessions that session absorbed. Windows and aggregates between merges are not
reconstructed event by event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.state.kernels import ARRIVAL, EVENT_TIME, WINDOW_END, WINDOW_START, Groups, changes
from wire.state.spec import WindowSpec

ORDER = "__order"
"""Result sort column: callback rows by processing order, epoch rows last."""


def locate(windows: pa.Table, events: pa.Table, key: str) -> np.ndarray:
    """Index of the window (row of ``windows``, sorted by key then start) holding each event.

    Every event's window must be in ``windows`` (same key, ``start <= __ws < end``).
    One sort of windows and events together, then a forward fill of window positions.
    """
    nw, ne = windows.num_rows, events.num_rows
    key_type = windows.schema.field(key).type
    both = pa.table(
        {
            key: pa.concat_arrays(
                [windows.column(key).combine_chunks(), events.column(key).combine_chunks().cast(key_type)]
            ),
            "ws": pa.concat_arrays(
                [windows.column(WINDOW_START).combine_chunks(), events.column(WINDOW_START).combine_chunks()]
            ),
            "is_event": np.concatenate([np.zeros(nw, np.int8), np.ones(ne, np.int8)]),
            "idx": np.concatenate([np.arange(nw), np.arange(ne)]).astype(np.int64),
        }
    )
    order = pc.sort_indices(
        both, sort_keys=[(key, "ascending"), ("ws", "ascending"), ("is_event", "ascending")]
    ).to_numpy()
    is_event = both.column("is_event").to_numpy()[order].astype(bool)
    idx = both.column("idx").to_numpy()[order]
    pos = np.where(is_event, -1, np.arange(len(order)))
    last_window = np.maximum.accumulate(pos) if len(pos) else pos
    out = np.empty(ne, dtype=np.int64)
    out[idx[is_event]] = idx[last_window[is_event]]
    return out


def _mask(value: Any, n: int, parameter: str) -> np.ndarray:
    if isinstance(value, pa.ChunkedArray | pa.Array):
        value = pc.fill_null(value.cast(pa.bool_()), False).to_numpy(zero_copy_only=False)
    mask = np.asarray(value, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"{parameter} returned {mask.shape} values for {n} rows; one bool per row")
    return mask


def callback_rows(
    spec: WindowSpec,
    windows: pa.Table,
    eligible: np.ndarray,
    initial: Callable[[np.ndarray], pa.Table],
    events: pa.Table,
) -> pa.Table:
    """Run the callbacks and return their ``early`` rows (results columns + :data:`ORDER`).

    Parameters
    ----------
    spec : WindowSpec
        Its ``before_update`` / ``after_update`` are called at most once each.
    windows : pyarrow.Table
        The epoch's merged windows (key, ``__ws``, ``__we``), sorted by (key, ``__ws``).
    eligible : numpy.ndarray
        bool per window: open to callbacks (not fired, end > ``wm_in``).
    initial : callable
        ``initial(window_indices)`` → partial rows of those windows before this
        epoch's events (null rows for new windows), all partial columns.
    events : pyarrow.Table
        The epoch's accepted events (payload, ``__et``, ``__seq``, ``__ws``, ``__we``).
    """
    key = spec.key
    win = locate(windows, events, key)
    keep = eligible[win]
    events, win = events.filter(pa.array(keep)), win[keep]
    et = events.column(EVENT_TIME).to_numpy()
    seq = events.column(ARRIVAL).to_numpy()
    order = np.lexsort((seq, et, win))
    events, win = events.take(pa.array(order)), win[order]
    groups = Groups.from_new(changes(pa.table({"w": win}), ["w"]))
    used = win[groups.starts] if groups.n else win[:0]
    init = initial(used)
    take = pa.array(win)
    base = {
        key: windows.column(key).take(take),
        "window_start": windows.column(WINDOW_START).take(take),
        "window_end": windows.column(WINDOW_END).take(take),
    }
    before: dict[str, pa.Array] = {}
    after: dict[str, pa.Array] = {}
    for name, agg in spec.aggregations:
        names = agg.partial_names(name)
        before[name], after[name] = agg.running(name, init.select(names), events, groups)
    event = events.drop_columns([WINDOW_START, WINDOW_END])
    pieces = []
    n = events.num_rows
    for offset, parameter, values in ((0, "before_update", before), (1, "after_update", after)):
        fn = getattr(spec, parameter)
        if fn is None or n == 0:
            continue
        aggregate = pa.table(base | values)
        mask = _mask(fn(aggregate, event), n, parameter)
        rows = aggregate.filter(pa.array(mask))
        pieces.append(
            rows.append_column(
                "emit", pa.array(np.full(rows.num_rows, "early", dtype=object), pa.string())
            ).append_column(ORDER, pa.array(2 * np.flatnonzero(mask) + offset, pa.int64()))
        )
    if not pieces:
        return (
            pa.table(base | after)
            .slice(0, 0)
            .append_column("emit", pa.array([], pa.string()))
            .append_column(ORDER, pa.array([], pa.int64()))
        )
    return pa.concat_tables(pieces)
