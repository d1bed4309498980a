"""The hashing pre-aggregation of tumbling and sliding windows (pure Arrow, no Spark).

Before the shuffle, the window stage folds each batch's accepted events into one partial
row per (key group, key, window) present. :func:`wire.state.windows.preaggregate` does it
for one key group's rows, by sorting them; :func:`preaggregate_by` does it for every key
group at once, with one Arrow hash aggregation, when the window kind and every
aggregation allow it (:func:`hash_preaggregable`: tumbling or sliding windows, order-free
aggregations). Sliding windows whose size is a whole number of slides go further
(:func:`preaggregate_panes_by`): each event is folded once into its pane (slide) and each
pane's partial merged into its windows, instead of each event being copied into each of its
``size / slide`` windows. The results are equal (``tests/unit/state/test_preaggregation.py``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from wire.core.time import INT64_MAX, INT64_MIN
from wire.state.aggregator import aggregate_by
from wire.state.assigners import Sliding
from wire.state.kernels import ARRIVAL, EVENT_TIME, WINDOW_END, WINDOW_START, runs
from wire.state.sessions import closed_by
from wire.state.spec import WindowSpec, partial_schema
from wire.state.windows import LATE_REASON, late_events, prepare_events

__all__ = ["PANE", "hash_columns", "hash_preaggregable", "pane_preaggregable", "preaggregate_by",
           "preaggregate_panes_by", "split_late_panes"]


def hash_preaggregable(spec: WindowSpec) -> bool:
    """True when :func:`preaggregate_by` applies.

    That is: tumbling or sliding windows, and every aggregation's partial is an Arrow
    hash aggregation (:meth:`Aggregator.hash_partial`).
    """
    return not spec.sessions and all(agg.hash_partial(name) is not None for name, agg in spec.aggregations)


def hash_columns(spec: WindowSpec) -> list[str]:
    """The input columns :func:`preaggregate_by` reads: the key and the aggregated columns, in that order.

    Only for a spec :func:`hash_preaggregable` accepts.
    """
    read = [a[0] for name, agg in spec.aggregations for a in agg.hash_partial(name) or []]
    return [spec.key, *sorted({c for c in read if c is not None} - {spec.key})]


def preaggregate_by(accepted: pa.Table, spec: WindowSpec, by: str) -> list[tuple[int, pa.Table]]:
    """:func:`~wire.state.windows.preaggregate` for each value of the int column ``by`` (a key group).

    One Arrow hash aggregation of all the rows on (``by``, key, ``__ws``, ``__we``)
    instead of a sort of the rows per value of ``by``; equal to ``preaggregate`` of each
    value's rows (unit-tested), for the specs :func:`hash_preaggregable` accepts.

    Parameters
    ----------
    accepted : pyarrow.Table
        Accepted events of :func:`~wire.state.windows.split_late`, plus the int column ``by``.
    spec : WindowSpec
        A configuration :func:`hash_preaggregable` accepts.
    by : str
        The column to split by.

    Returns
    -------
    list of (int, pyarrow.Table)
        Per value of ``by`` present, ascending: its rows' partials in
        :func:`partial_schema`, sorted by (key, ``__ws``, ``__we``).

    Raises
    ------
    ValueError
        If ``spec`` is not :func:`hash_preaggregable`.
    """
    if not hash_preaggregable(spec):
        raise ValueError("preaggregate_by needs tumbling or sliding windows and hash aggregations")
    if accepted.num_rows == 0:
        return []
    input_schema = pa.schema([f for f in accepted.schema if f.name not in (WINDOW_START, WINDOW_END, by)])
    schema = partial_schema(spec, input_schema)
    aggs = [a for name, agg in spec.aggregations for a in agg.hash_partial(name) or []]
    keys = {name: accepted.column(name) for name in (by, spec.key, WINDOW_START, WINDOW_END)}
    grouped, values = aggregate_by(keys, accepted, aggs, [f.type for f in schema][3:])
    bounds = [grouped.column(i).combine_chunks() for i in (1, 2, 3)]
    table = pa.Table.from_arrays(bounds + values, schema=schema)
    return [(group, table.slice(lo, hi - lo)) for group, lo, hi in runs(grouped.column(0).to_numpy())]


PANE = "__pane"
"""Column of :func:`split_late_panes`' accepted rows: the start of the event's last window."""


def split_late_panes(
    events: pa.Table, watermark: int, spec: WindowSpec, columns: list[str] | None = None
) -> tuple[pa.Table, pa.Table] | None:
    """:func:`~wire.state.windows.split_late` for sliding windows of whole slides, one row per event.

    An event of such a window lies in exactly ``n = size / slide`` windows, those starting at
    its *pane* (``t - t mod slide``, the start of its last window) and the ``n - 1`` slides
    before it; the windows still open at ``watermark`` are the last ones of those (window ends
    ascend with the start). So instead of one row per (event, window), each accepted event
    keeps one row: ``__pane`` and, as ``__ws``, the start of its first open window
    (:func:`preaggregate_panes_by` expands a pane's partial aggregate to those windows;
    "No pane, no gain", Li et al., SIGMOD Record 2005).

    Returns ``(accepted, late)``: ``accepted`` holds the input columns (``columns`` if
    given, plus ``__et`` and ``__seq``), ``__ws`` and ``__pane``, in input row order; ``late``
    is ``split_late``'s late table, equal to it. None when the spec is not such a window
    or an event time lies within two window sizes of the int64 range's ends (where
    :meth:`Sliding.assign` drops unrepresentable windows): use
    :func:`~wire.state.windows.split_late` then.
    """
    assigner = spec.assigner
    if not isinstance(assigner, Sliding) or assigner.size_ms % assigner.slide_ms:
        return None
    events = prepare_events(events)
    et = events.column(EVENT_TIME).to_numpy()
    size, slide = assigner.size_ms, assigner.slide_ms
    n = size // slide
    if len(et) and (int(et.min()) < INT64_MIN + 2 * size or int(et.max()) > INT64_MAX - 2 * size):
        return None
    pane = et - np.mod(et, np.int64(slide))
    ends = pane[:, None] + (np.int64(size) - np.arange(n - 1, -1, -1, dtype=np.int64) * np.int64(slide))
    first = closed_by(ends.ravel(), watermark, spec).reshape(-1, n).sum(axis=1)  # closed windows: a prefix
    alive = first < n
    kept = events if columns is None else events.select([*columns, EVENT_TIME, ARRIVAL])
    mask = pa.array(alive)
    accepted = kept.filter(mask).append_column(
        WINDOW_START, pa.array((pane - (n - 1 - first) * np.int64(slide))[alive], pa.int64())
    ).append_column(PANE, pa.array(pane[alive], pa.int64()))
    late = late_events(events.filter(pa.array(~alive)), watermark, LATE_REASON, spec)
    return accepted, late


def pane_preaggregable(spec: WindowSpec) -> bool:
    """True when :func:`preaggregate_panes_by` applies.

    That is: sliding windows whose size is a multiple of their slide (more than one slide),
    and :func:`hash_preaggregable` aggregations whose merge is a hash aggregation too
    (:meth:`Aggregator.hash_merge`).
    """
    a = spec.assigner
    return (isinstance(a, Sliding) and a.size_ms % a.slide_ms == 0 and a.size_ms > a.slide_ms
            and hash_preaggregable(spec)
            and all(agg.hash_merge(name) is not None for name, agg in spec.aggregations))


def preaggregate_panes_by(accepted: pa.Table, spec: WindowSpec, by: str) -> list[tuple[int, pa.Table]]:
    """:func:`preaggregate_by` of sliding windows, from one row per event.

    ``accepted``: the accepted events of :func:`split_late_panes`, plus
    the int column ``by``.

    The events are first folded per (``by``, key, pane, first open window) with
    :meth:`Aggregator.hash_partial`; each pane's partial then goes to each of its open
    windows, and those are merged per (``by``, key, window) with :meth:`Aggregator.hash_merge`.
    Each event is so assigned and copied once instead of once per window. The result has
    :func:`preaggregate_by`'s form and values (floating point sums up to the order of
    additions; ``tests/unit/state/test_preaggregation.py``).

    Raises
    ------
    ValueError
        If ``spec`` is not :func:`pane_preaggregable`.
    """
    if not pane_preaggregable(spec):
        raise ValueError("preaggregate_panes_by needs sliding windows of a whole number of slides "
                         "and hash aggregations")
    if accepted.num_rows == 0:
        return []
    assigner = spec.assigner
    assert isinstance(assigner, Sliding)
    size, slide = assigner.size_ms, assigner.slide_ms
    input_schema = pa.schema([f for f in accepted.schema if f.name not in (WINDOW_START, PANE, by)])
    schema = partial_schema(spec, input_schema)
    types = [f.type for f in schema][3:]
    aggs = [a for name, agg in spec.aggregations for a in agg.hash_partial(name) or []]
    keys = {name: accepted.column(name) for name in (by, spec.key, PANE, WINDOW_START)}
    panes, values = aggregate_by(keys, accepted, aggs, types)
    pane, first = panes.column(PANE).to_numpy(), panes.column(WINDOW_START).to_numpy()
    count = (pane - first) // slide + 1  # the pane's open windows, from its first open one to its last
    rows = np.repeat(np.arange(len(pane)), count)
    within = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
    starts = np.repeat(first, count) + within * np.int64(slide)
    take = pa.array(rows)
    partials = pa.Table.from_arrays([v.take(take) for v in values], names=schema.names[3:])
    merges = [m for name, agg in spec.aggregations for m in agg.hash_merge(name) or []]
    window_keys = {by: panes.column(by).take(take), spec.key: panes.column(spec.key).take(take),
                   WINDOW_START: starts, WINDOW_END: starts + np.int64(size)}
    grouped, merged = aggregate_by(window_keys, partials, merges, types)
    bounds = [grouped.column(i).combine_chunks() for i in (1, 2, 3)]
    table = pa.Table.from_arrays(bounds + merged, schema=schema)
    return [(group, table.slice(lo, hi - lo)) for group, lo, hi in runs(grouped.column(0).to_numpy())]
