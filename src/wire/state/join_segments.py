"""Join buffers bucketed by event time (issue 12): probe and append, never rewrite.

Each side's buffer lives in :class:`~wire.state.segments.Segments`, one bucket per
event-time range of :func:`bucket_width` ms and side (bucket id ``2 * index + side``,
``side`` 0 = left, 1 = right). An epoch of one key group:

1. reads the buckets of the other side whose time range can hold a partner of a new
   event (``l.t + lower <= r.t <= l.t + upper``; all of them for an unbounded join);
2. joins with :func:`wire.state.join.join_epoch` over those buckets only (pairs outside
   them cannot satisfy the bounds, so the pairs are exactly the whole-buffer ones);
3. appends the epoch's accepted (not late) events to their buckets as new chunks
   (size-tiered compaction concatenates small chunks; nothing is merged or dropped);
4. drops a bucket once every event it can hold is past the purge rule of
   :func:`~wire.state.join.join_epoch` (left: ``t + upper + lateness < wm``, right:
   ``t - lower + lateness < wm``). Events kept a little longer than the row-level
   rule cannot meet an accepted partner any more (the rule's proof), so the pairs do
   not change.

Key index (issue 12: the probe of the unbounded join)
    Given a :class:`~wire.state.segments.KeyIndex` (the Spark processor gives one when
    :func:`indexable` accepts the key type), step 1 reads, of each bucket, only the chunks
    whose index entry (the sorted distinct 64-bit hashes of the chunk's keys,
    :func:`key_hashes`: 8 bytes per distinct key per chunk) meets the hashes of the other
    side's new keys, and keeps only the rows whose key is one of them (an exact match:
    a hash collision only reads one chunk more). Buffered rows of other keys cannot pair
    with this epoch's new events, and the rows kept are in buffer order, so the pairs
    (and their order) are those of the whole buffer. The index entries are written and
    deleted with their chunks (compaction rebuilds the merged chunk's entry) and rebuilt
    from a chunk when missing (:meth:`~wire.state.segments.Segments.read_matching`).

The unbounded join (``within=None``) writes only the epoch's new events. Without a key
index it reads its whole other-side buffer to probe: O(buffer) reads per epoch. With
one, it reads the index entries of the other side's chunks (8 bytes per buffered key,
against the whole rows) and the chunks that hold a probed key.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.envelope import ET, MAX_WATERMARK
from wire.state import join as J
from wire.state.segments import Segments

LEFT, RIGHT = 0, 1
MIN_BUCKET_MS = 1_000
MAX_BUCKET_MS = 3_600_000


def bucket_width(spec: J.IntervalJoinSpec) -> int:
    """Event-time width (ms) of a buffer bucket: ``upper - lower`` within [1 s, 1 h]."""
    return min(MAX_BUCKET_MS, max(MIN_BUCKET_MS, spec.upper_ms - spec.lower_ms))


def indexable(key_type: pa.DataType) -> bool:
    """Whether :func:`key_hashes` hashes keys of ``key_type`` (equal keys, equal hashes).

    Integers, booleans, strings, binaries, dates, times, timestamps and durations; not
    floats (``-0.0 == 0.0``, NaNs) nor nested or decimal types (those joins read every
    chunk, as without an index).
    """
    t = pa.types
    return bool(t.is_integer(key_type) or t.is_boolean(key_type) or t.is_string(key_type)
                or t.is_large_string(key_type) or t.is_binary(key_type) or t.is_large_binary(key_type)
                or t.is_temporal(key_type))


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Sorted distinct uint64 hashes of the non-null ``keys`` (a type :func:`indexable` accepts).

    ``pandas.util.hash_array`` (SipHash with a fixed key: the same in every process) of
    the keys as int64 (integers, booleans, temporal types) or as Python str / bytes.
    """
    keys = pc.drop_null(keys)
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    typ = keys.type
    if pa.types.is_boolean(typ):
        keys = keys.cast(pa.int8())
    elif pa.types.is_temporal(typ):
        keys = keys.view(pa.int32() if typ.bit_width == 32 else pa.int64())
    if pa.types.is_integer(keys.type) and not pa.types.is_uint64(keys.type):
        keys = keys.cast(pa.int64())
    arr = keys.to_numpy(zero_copy_only=False)
    return np.unique(pd.util.hash_array(arr, categorize=False))


def _buckets(segments: Segments, side: int, lo: int, hi: int, width: int) -> list[int]:
    """Stored buckets of ``side`` whose time range meets ``[lo, hi]`` (Python ints: no overflow)."""
    return [b for b in segments.buckets()
            if b % 2 == side and (b // 2) * width <= hi and (b // 2 + 1) * width - 1 >= lo]


def _read(segments: Segments, buckets: list[int], schema: pa.Schema, probe: pa.Table, key: str) -> pa.Table:
    """The buffered rows of ``buckets`` that may pair with ``probe`` (the other side's new events).

    With a key index: only chunks that may hold a probe key, and of them only the rows
    whose key is a probe key. Without: every row of the buckets.
    """
    if not buckets:
        return schema.empty_table()
    if segments.keys is None:
        chunks = [c for b in buckets for c in segments.read(b)]
        return pa.concat_tables(chunks) if chunks else schema.empty_table()
    keys = pc.unique(pc.drop_null(probe.column(key)).combine_chunks())
    if not len(keys):
        return schema.empty_table()
    hashes = segments.keys.hasher(keys)
    chunks = [c for b in buckets for c in segments.read_matching(b, hashes)]
    if not chunks:
        return schema.empty_table()
    rows = pa.concat_tables(chunks)
    return rows.filter(pc.is_in(rows.column(key), value_set=keys.cast(rows.schema.field(key).type)))


def _append(segments: Segments, rows: pa.Table, side: int, width: int) -> None:
    if not rows.num_rows:
        return
    ids = (rows.column(ET).to_numpy() // width) * 2 + side  # floor division: negative times too
    for b in sorted(set(ids.tolist())):
        segments.append(int(b), rows.filter(pa.array(ids == b)))


def join_segments(
    segments: Segments, left: pa.Table, right: pa.Table, wm_in: int, wm_out: int, spec: J.IntervalJoinSpec
) -> tuple[pa.Table, pa.Table]:
    """One epoch of one key group; the pairs and late events of :func:`~wire.state.join.join_epoch`.

    Parameters
    ----------
    segments : Segments
        Both sides' buffers (updated in place); chunks in
        :func:`~wire.state.join.state_schema` of their side.
    left, right : pyarrow.Table
        The epoch's new events, as for :func:`~wire.state.join.join_epoch`.
    wm_in, wm_out : int
        Watermarks (ms) while the events arrived and after the epoch.
    spec : IntervalJoinSpec
        The join configuration.

    Returns
    -------
    joined, late : pyarrow.Table
        As :func:`~wire.state.join.join_epoch` (pairs in its order up to ties of key,
        event times and arrival).
    """
    width = bucket_width(spec)
    J.output_schema(spec, left.schema, right.schema)  # the key types agree (ConfigError if not)
    lschema = J.state_schema(spec, left.schema, "left")
    rschema = J.state_schema(spec, right.schema, "right")
    lt, rt = pc.min_max(left.column(ET)), pc.min_max(right.column(ET))
    rb = lb = []
    if lt["min"].is_valid:
        rb = _buckets(segments, RIGHT, lt["min"].as_py() + spec.lower_ms, lt["max"].as_py() + spec.upper_ms,
                      width)
    if rt["min"].is_valid:
        lb = _buckets(segments, LEFT, rt["min"].as_py() - spec.upper_ms, rt["max"].as_py() - spec.lower_ms,
                      width)
    _, _, joined, late = J.join_epoch(
        _read(segments, lb, lschema, right, spec.key), _read(segments, rb, rschema, left, spec.key),
        left, right, wm_in, wm_out, spec)
    _append(segments, J.accepted(left, lschema, wm_in, spec), LEFT, width)
    _append(segments, J.accepted(right, rschema, wm_in, spec), RIGHT, width)
    lateness = spec.allowed_lateness_ms
    for b in segments.buckets():
        last = (b // 2 + 1) * width - 1  # the latest event time the bucket can hold
        reach = last + (spec.upper_ms if b % 2 == LEFT else -spec.lower_ms) + lateness
        if wm_out >= MAX_WATERMARK or reach < wm_out:
            segments.drop(b)
    return joined, late


def migrate(
    segments: Segments, left: pa.Table | None, right: pa.Table | None, spec: J.IntervalJoinSpec
) -> None:
    """Move whole-table buffers (checkpoints written before issue 12) into buckets."""
    width = bucket_width(spec)
    for rows, side in ((left, LEFT), (right, RIGHT)):
        if rows is not None:
            _append(segments, rows, side, width)


def buffered(segments: Segments, side: int) -> pa.Table | None:
    """One side's whole buffer (for tests and inspection; None: empty)."""
    chunks = [c for b in segments.buckets() if b % 2 == side for c in segments.read(b)]
    return pa.concat_tables(chunks) if chunks else None
