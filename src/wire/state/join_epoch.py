"""One interval-join operator's epoch in one key group, as one pure function (SPEC §2, §3).

:func:`on_epoch` is ``(state, inputs, watermarks) -> (state, outputs, late, watermarks)``
for an event-time interval join: the Spark processor
(:class:`wire.compiler.join_stage.JoinProcessor`) only unpacks the epoch's blobs of a
key group, calls it on the group's chunk store and key-index store (two ``MapState``),
and packs what it returns; the unit tests call it on a
:class:`~wire.state.segments.MemoryChunkStore` and a
:class:`~wire.state.segments.MemoryHashStore`, so the composition the engine runs —
lateness, the bucketed buffers with their key index, purging, and the output watermark
with its hold — is the one they test.

Inputs of an epoch (:class:`JoinInputs`): each side's new events as the pre-stage ships
them, one table per Spark task (payload + int64 ``__et`` + int64 ``__seq``).

Watermarks (Beam watermark-hold rule, SPEC §2): ``wm_in`` is the input watermark in
force while the epoch's events arrived (the minimum over both sides' channels),
``new_in`` the one after the epoch, ``wm_out`` the output watermark before it. A new
event is accepted when ``t + allowed_lateness_ms >= wm_in``; a joined row's event time
is the later of its two events, one of which is new, so the output watermark is held at
``max(wm_out, new_in - allowed_lateness_ms)`` (:func:`wire.state.join.output_watermark`):
no row the join emits later is behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from wire.core.envelope import ET, SEQ
from wire.state import join as J
from wire.state import join_segments as JS
from wire.state.segments import FANOUT, ChunkStore, HashStore, KeyIndex, Segments


@dataclass(frozen=True)
class JoinInputs:
    """One key group's new events of one epoch, per side; either list may be empty."""

    left: Sequence[pa.Table] = ()
    right: Sequence[pa.Table] = ()


@dataclass(frozen=True)
class JoinEpoch:
    """What :func:`on_epoch` returns.

    ``joined``: the new pairs in :func:`wire.state.join.output_schema` (``event_time`` is
    the later of the two events, ms); ``late``: the new events rejected as late, in
    :func:`wire.state.join.late_schema`; ``wm_out``: the new output watermark (ms);
    ``index``: the chunk index to keep for the next epoch; ``stats``: ``joined``,
    ``late``, and the gauges ``input_watermark``, ``output_watermark``, ``buffered``.
    """

    joined: pa.Table
    late: pa.Table
    wm_out: int
    index: pa.Table
    stats: dict[str, int]


def side_schema(payload: pa.Schema) -> pa.Schema:
    """A side's events as the kernel takes them: ``payload`` + int64 ``__et`` and ``__seq``."""
    return pa.schema([*payload, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])


def _side(parts: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [t.select(schema.names).cast(schema) for t in parts]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def on_epoch(
    store: ChunkStore,
    index: pa.Table | None,
    inputs: JoinInputs,
    *,
    wm_in: int,
    new_in: int,
    wm_out: int,
    spec: J.IntervalJoinSpec,
    left_payload: pa.Schema,
    right_payload: pa.Schema,
    hashes: HashStore | None = None,
    legacy_left: pa.Table | None = None,
    legacy_right: pa.Table | None = None,
    fanout: int = FANOUT,
) -> JoinEpoch:
    """Join one epoch's new events of a key group with both buffers; move the watermarks.

    Parameters
    ----------
    store, index : ChunkStore, pyarrow.Table or None
        The key group's buffer chunks and their index as the previous epoch left them
        (``index`` None: empty buffers).
    inputs : JoinInputs
        The epoch's new events per side (module docstring).
    wm_in, new_in, wm_out : int
        Input watermark while the events arrived, input watermark after the epoch
        (``>= wm_in``), output watermark before the epoch; all ms.
    spec : IntervalJoinSpec
        The join configuration.
    left_payload, right_payload : pyarrow.Schema
        Each side's payload columns (with the key).
    hashes : HashStore or None
        Where the buffers' key index lives (issue 12); None, or a key type without an
        index (:func:`wire.state.join_segments.indexable`): every candidate chunk is read.
    legacy_left, legacy_right : pyarrow.Table or None
        Whole-table buffers of a checkpoint written before the bucketed layout; moved
        into the buckets first.
    fanout : int
        Compaction fan-in of the buffers (:class:`~wire.state.segments.Segments`).

    Returns
    -------
    JoinEpoch
        Pairs, late events, the new output watermark (Beam hold rule, SPEC §2), the chunk
        index and counters.

    Raises
    ------
    ConfigError
        If the sides' key types differ or a column is missing.
    ValueError
        If ``new_in < wm_in``, or an ``__et`` is null.
    """
    if new_in < wm_in:
        raise ValueError(f"new_in={new_in} is below wm_in={wm_in}; watermarks never decrease")
    indexed = hashes is not None and JS.indexable(left_payload.field(spec.key).type)
    keys = KeyIndex(spec.key, JS.key_hashes, hashes) if indexed and hashes is not None else None
    segments = Segments(index, store, pa.concat_tables, fanout=fanout, keys=keys)
    if legacy_left is not None or legacy_right is not None:
        JS.migrate(segments, legacy_left, legacy_right, spec)
    left = _side(inputs.left, side_schema(left_payload))
    right = _side(inputs.right, side_schema(right_payload))
    joined, late = JS.join_segments(segments, left, right, wm_in, new_in, spec)
    new_out = J.output_watermark(wm_out, new_in, spec)
    stats = {
        "joined": joined.num_rows,
        "late": late.num_rows,
        "gauge:input_watermark": new_in,
        "gauge:output_watermark": new_out,
        "gauge:buffered": segments.rows(),
    }
    return JoinEpoch(joined, late, new_out, segments.index(), stats)
