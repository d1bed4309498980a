"""Tumbling and sliding window state bucketed by window end (issue 12, SPEC §3–§4).

The window operator's state lives in :class:`~wire.state.segments.Segments`, one
bucket per window end (all windows of a bucket end, and start, at the same time). An
epoch costs what it touches:

* partials for a window that stays open are **appended** to their bucket as one chunk
  (no read of the state), unless ``emit="update"`` asks for early rows;
* a bucket is **read** when the watermark passes its end (every window of it emits
  ``final``, then it is rewritten as one chunk, or dropped if also closed), when late
  data updates a fired window (``update``), or for early rows; only the rows of the
  keys the epoch touched are used for ``update`` and ``early``;
* a bucket is **dropped** whole once ``end + allowed_lateness <= watermark``.

The results equal :func:`wire.state.windows.advance` over the whole state (the
reference, checked by a randomized test over epoch splits and watermarks). Why the
per-row ``__fired`` flag is not needed here: for tumbling and sliding windows a window
has fired exactly when its end is at or before the input watermark of the epoch
(``final`` needs ``wm_in < end <= wm_out``, ``update`` needs ``end <= wm_in`` or a
fired window, ``early`` never marks a window fired). The operator's watermark hold
(Beam rule, SPEC §2) is therefore ``min(end) - size`` over the buckets still open,
read from the index alone.

Windows with callbacks and session windows keep their state whole, in bucket
:data:`WHOLE` (sessions merge across window ends; callbacks need every touched
window's state); they are rewritten each epoch, as measured in
``bench/results/state_growth.md``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.state.assigners import Session
from wire.state.kernels import FIRED, WINDOW_END, le_bound
from wire.state.segments import Segments
from wire.state.sessions import closed_by
from wire.state.spec import WindowSpec
from wire.state.windows import advance, compact, watermark_with_hold

WHOLE = 0
"""The one bucket of state kept whole (sessions, callbacks)."""

SLICE_ROWS = 500_000
"""Stored rows of a firing bucket merged at once (see :func:`advance_segments`)."""


def bucketed(spec: WindowSpec) -> bool:
    """True when ``spec``'s state is bucketed by window end (tumbling or sliding, no callbacks)."""
    return not isinstance(spec.assigner, Session) and not spec.needs_events


def _with_fired(table: pa.Table, fired: bool) -> pa.Table:
    values = pa.array(np.full(table.num_rows, fired))
    if FIRED in table.column_names:
        return table.set_column(table.schema.get_field_index(FIRED), FIRED, values)
    return table.append_column(FIRED, values)


def _by_end(partials: pa.Table) -> dict[int, pa.Table]:
    if not partials.num_rows:
        return {}
    ends = partials.column(WINDOW_END).to_numpy()
    return {int(e): partials.filter(pa.array(ends == e)) for e in np.unique(ends)}


def _state(chunks: list[pa.Table], fired: bool, spec: WindowSpec) -> pa.Table | None:
    chunks = [c for c in chunks if c.num_rows]
    return _with_fired(compact(chunks, spec), fired) if chunks else None


def _slices(
    chunks: list[pa.Table], partials: pa.Table, key: str, slice_rows: int
) -> Iterator[tuple[list[pa.Table], pa.Table]]:
    """Split a bucket's chunks and partials into key ranges of about ``slice_rows`` stored rows.

    Every row of one key lands in the same slice (ranges of the key's sort order; null
    keys in the first), so each slice is a complete set of windows.
    """
    total = sum(c.num_rows for c in chunks)
    if total <= slice_rows:
        yield chunks, partials
        return
    columns = [c.column(key) for c in [*chunks, partials]]
    keys = pc.unique(pa.chunked_array([a for col in columns for a in col.chunks], type=columns[0].type))
    keys = keys.filter(pc.is_valid(keys))
    keys = keys.take(pc.array_sort_indices(keys))
    n = min(-(-total // slice_rows), len(keys))
    if n < 2:
        yield chunks, partials
        return
    cuts = [keys[i * len(keys) // n] for i in range(1, n)]
    for i in range(n):
        def part(t: pa.Table, i: int = i) -> pa.Table:
            k = t.column(key)
            if i == 0:
                mask = pc.or_(pc.is_null(k), pc.less(k, cuts[0]))
            elif i == n - 1:
                mask = pc.greater_equal(k, cuts[-1])
            else:
                mask = pc.and_(pc.greater_equal(k, cuts[i - 1]), pc.less(k, cuts[i]))
            return t.filter(pc.fill_null(mask, False))
        yield [part(c) for c in chunks], part(partials)


def advance_segments(
    segments: Segments, partials: pa.Table, wm_in: int, wm_out: int, spec: WindowSpec,
    *, slice_rows: int = SLICE_ROWS,
) -> pa.Table:
    """One epoch of one key group over bucketed state; the results of :func:`~wire.state.windows.advance`.

    Parameters
    ----------
    segments : Segments
        The key group's buckets (updated in place: appends, rewrites, drops).
    partials : pyarrow.Table
        The epoch's partial aggregates (:func:`~wire.state.windows.preaggregate`), in
        :func:`~wire.state.spec.partial_schema`; several rows per window allowed.
    wm_in, wm_out : int
        Watermarks (ms) in force while the events arrived and after the epoch.
    spec : WindowSpec
        Tumbling or sliding windows without callbacks (:func:`bucketed`).
    slice_rows : int
        A firing bucket with more stored rows is merged and emitted in key ranges of
        about this many rows (:data:`SLICE_ROWS`), and written back as one chunk per
        range: the working set of sorting and merging is one slice, never the whole
        bucket. The results do not depend on it.

    Returns
    -------
    pyarrow.Table
        In :func:`~wire.state.spec.result_schema`, sorted by (key, window_start,
        window_end): the rows :func:`~wire.state.windows.advance` would emit with the
        whole state.

    Raises
    ------
    ValueError
        If ``wm_out < wm_in`` or ``spec`` is not :func:`bucketed`.
    """
    if wm_out < wm_in:
        raise ValueError(f"wm_out={wm_out} is below wm_in={wm_in}; watermarks never decrease")
    if not bucketed(spec):
        raise ValueError("advance_segments() takes tumbling or sliding windows without callbacks")
    new = _by_end(partials)
    stored = np.asarray(segments.buckets(), dtype=np.int64)
    firing = stored[le_bound(stored, wm_out) & ~le_bound(stored, wm_in)]
    results: list[pa.Table] = []
    for end in sorted(set(new) | {int(b) for b in firing}):
        p = new.get(end, partials.slice(0, 0))
        ended_in = bool(le_bound(np.asarray([end], np.int64), wm_in)[0])
        ended_out = bool(le_bound(np.asarray([end], np.int64), wm_out)[0])
        if ended_out and not ended_in:  # every window of the bucket emits final, slice by slice
            kept_parts = []
            for chunks, part in _slices(list(segments.read(end)), p, spec.key, slice_rows):
                kept, out = advance(_state(chunks, False, spec), part, wm_in, wm_out, spec)
                kept_parts.append(kept)
                results.append(out)
            segments.replace(end, kept_parts)
            continue
        if ended_in or spec.emit == "update":  # update / early rows of the touched windows
            keys = pc.unique(p.column(spec.key))
            touched = [c.filter(pc.is_in(c.column(spec.key), value_set=keys)) for c in segments.read(end)]
            results.append(advance(_state(touched, ended_in, spec), p, wm_in, wm_out, spec)[1])
        segments.append(end, compact([p], spec))
    for end in segments.buckets():
        if closed_by(np.asarray([end], np.int64), wm_out, spec)[0]:
            segments.drop(end)
    if not results:
        return advance(None, partials.slice(0, 0), wm_in, wm_out, spec)[1]
    order = [(c, "ascending") for c in (spec.key, "window_start", "window_end")]
    return pa.concat_tables(results).sort_by(order)


def hold(segments: Segments, wm_out: int, spec: WindowSpec) -> int | None:
    """Earliest start (ms) of a window in state that has not fired at ``wm_out`` (None: none)."""
    stored = np.asarray(segments.buckets(), dtype=np.int64)
    open_ = stored[~le_bound(stored, wm_out)]
    return int(open_.min()) - spec.assigner.size_ms if len(open_) else None  # type: ignore[union-attr]


def output_watermark(old_out: int, new_in: int, segments: Segments, spec: WindowSpec) -> int:
    """The operator's new output watermark (ms), never behind ``old_out``.

    :func:`~wire.state.windows.output_watermark` with the hold read from the bucket
    index (Beam watermark-hold rule, SPEC §2).
    """
    return watermark_with_hold(old_out, new_in, hold(segments, new_in, spec), spec)


def load_whole(segments: Segments) -> pa.Table | None:
    """The state kept whole (bucket :data:`WHOLE`) as one table (None: empty)."""
    chunks = list(segments.read(WHOLE))
    if not chunks:
        return None
    return chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks)


def migrate(segments: Segments, state: pa.Table, spec: WindowSpec) -> None:
    """Move a whole-table window state (checkpoints written before issue 12) into buckets."""
    if not state.num_rows:
        return
    if not bucketed(spec):
        segments.replace(WHOLE, state)
        return
    for end, rows in _by_end(state).items():
        segments.replace(end, rows)

