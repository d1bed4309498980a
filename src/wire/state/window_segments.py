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

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    return not spec.sessions and not spec.needs_events


def _with_fired(table: pa.Table, fired: bool) -> pa.Table:
    values = pa.array(np.full(table.num_rows, fired))
    if FIRED in table.column_names:
        return table.set_column(table.schema.get_field_index(FIRED), FIRED, values)
    return table.append_column(FIRED, values)


def _by_end(table: pa.Table) -> dict[int, pa.Table]:
    """The rows of ``table`` per window end: one stable sort, then zero-copy slices."""
    if not table.num_rows:
        return {}
    ends = table.column(WINDOW_END).to_numpy()
    order = np.argsort(ends, kind="stable")
    if (np.diff(order) != 1).any():
        table, ends = table.take(pa.array(order)), ends[order]
    unique, starts = np.unique(ends, return_index=True)
    stops = np.append(starts[1:], len(ends))
    return {int(e): table.slice(int(a), int(b - a)) for e, a, b in zip(unique, starts, stops, strict=True)}


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
    empty = partials.slice(0, 0)
    new_ends = partials.column(WINDOW_END).to_numpy() if partials.num_rows else np.empty(0, np.int64)

    def partials_of(ends: np.ndarray) -> pa.Table:
        """The epoch's partials of windows ending at ``ends`` (one vectorized filter)."""
        return partials.filter(pa.array(np.isin(new_ends, ends))) if len(ends) else empty

    stored = np.asarray(segments.buckets(), dtype=np.int64)
    ends = np.union1d(np.unique(new_ends), stored[le_bound(stored, wm_out) & ~le_bound(stored, wm_in)])
    ended_in, ended_out = le_bound(ends, wm_in), le_bound(ends, wm_out)
    firing = ended_out & ~ended_in  # every window of the bucket emits final
    touched = firing | ended_in | (spec.emit == "update")  # buckets advance() must see
    results: list[pa.Table] = []
    batch: list[tuple[int, bool]] = []
    batch_rows = 0
    for end, fires in zip(ends[touched].tolist(), firing[touched].tolist(), strict=True):
        rows = segments.rows(end)
        if fires and rows > slice_rows:  # a big bucket alone, slice by slice
            kept_parts = []
            part_of_end = partials_of(np.asarray([end], np.int64))
            for chunks, part in _slices(list(segments.read(end)), part_of_end, spec.key, slice_rows):
                kept, out = advance(_state(chunks, False, spec), part, wm_in, wm_out, spec)
                kept_parts.append(kept)
                results.append(out)
            segments.replace(end, kept_parts)
            continue
        if batch and batch_rows + rows > slice_rows:
            results.append(_advance_batch(segments, batch, partials_of, wm_in, wm_out, spec))
            batch, batch_rows = [], 0
        batch.append((end, fires))
        batch_rows += rows
    if batch:
        results.append(_advance_batch(segments, batch, partials_of, wm_in, wm_out, spec))
    staying = partials_of(ends[~firing])  # partials of buckets that stay open
    if staying.num_rows:
        for end, chunk in _by_end(compact([staying], spec)).items():
            segments.append(end, chunk)
    buckets = np.asarray(segments.buckets(), dtype=np.int64)
    for end in buckets[closed_by(buckets, wm_out, spec)].tolist():
        segments.drop(end)
    if not results:
        return advance(None, empty, wm_in, wm_out, spec)[1]
    order = [(c, "ascending") for c in (spec.key, "window_start", "window_end")]
    return pa.concat_tables(results).sort_by(order)


def _advance_batch(
    segments: Segments, batch: list[tuple[int, bool]], partials_of: Callable[[np.ndarray], pa.Table],
    wm_in: int, wm_out: int, spec: WindowSpec,
) -> pa.Table:
    """One :func:`advance` over several buckets; the results. Firing buckets are rewritten.

    A firing bucket brings all its stored rows; another (late ``update`` rows, or ``early``
    rows) only the rows of the keys its new partials touch. A window has fired exactly when
    its end is at or before ``wm_in`` (module docstring), so ``__fired`` follows from the end.
    """
    chunks: list[pa.Table] = []
    for end, fires in batch:
        if fires:
            chunks.extend(segments.read(end))
        else:
            keys = pc.unique(partials_of(np.asarray([end], np.int64)).column(spec.key))
            chunks.extend(c.filter(pc.is_in(c.column(spec.key), value_set=keys)) for c in segments.read(end))
    chunks = [c for c in chunks if c.num_rows]
    state = None
    if chunks:
        state = compact(chunks, spec)
        fired = le_bound(state.column(WINDOW_END).to_numpy(), wm_in)
        state = state.set_column(state.schema.get_field_index(FIRED), FIRED, pa.array(fired))
    kept, out = advance(state, partials_of(np.asarray([e for e, _ in batch], np.int64)), wm_in, wm_out, spec)
    kept_by_end = _by_end(kept)
    for end, fires in batch:
        if fires:
            segments.replace(end, kept_by_end.get(end))
    return out


def hold(segments: Segments, wm_out: int, spec: WindowSpec) -> int | None:
    """Earliest start (ms) of a window in state that has not fired at ``wm_out`` (None: none)."""
    stored = np.asarray(segments.buckets(), dtype=np.int64)
    open_ = stored[~le_bound(stored, wm_out)]
    return spec.assigner.start_of(int(open_.min())) if len(open_) else None


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

