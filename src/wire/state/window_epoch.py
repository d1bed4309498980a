"""One window operator's epoch in one key group, as one pure function (SPEC §2–§4).

:func:`on_epoch` is ``(state, inputs, watermarks) -> (state, outputs, late,
watermarks)`` for a window aggregation: the Spark processor
(:class:`wire.compiler.window_stage.WindowProcessor`) only unpacks the epoch's blobs
of a key group, calls it on the group's chunk store (a ``MapState``), and packs what
it returns; the unit tests call it on a :class:`~wire.state.segments.MemoryChunkStore`,
so the composition the engine runs — lateness, session candidates, the bucketed or
whole-state advance, and the output watermark with its hold — is the one they test.

Inputs of an epoch (:class:`WindowInputs`), as the pre-stage ships them:

* ``partials`` — partial aggregates per (key, window) of events the pre-stage already
  classified on time (:func:`wire.state.windows.preaggregate`);
* ``candidates`` — session events the pre-stage could not classify alone;
* ``events`` — raw events (payload + ``__et`` + ``__seq``), classified here against the
  operator's own input watermark ``wm_in`` (windows of windows, callbacks).

Watermarks (Beam rule, SPEC §2): ``wm_in`` is the input watermark in force while the
epoch's events arrived, ``new_in`` the one after the epoch, ``wm_out`` the output
watermark before it; the new output watermark is ``max(wm_out, min(new_in, hold))``
where ``hold`` is the earliest start of a window not yet fired, or of a window an
on-time event could still open (:func:`wire.state.window_segments.output_watermark`,
:func:`wire.state.windows.output_watermark`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from wire.state import window_segments as WS
from wire.state import windows as W
from wire.state.segments import ChunkStore, Segments

EMIT_KINDS = ("early", "final", "update")


@dataclass(frozen=True)
class WindowInputs:
    """One key group's inputs of one epoch (module docstring); every list may be empty."""

    partials: Sequence[pa.Table] = ()
    candidates: Sequence[pa.Table] = ()
    events: Sequence[pa.Table] = ()


@dataclass(frozen=True)
class WindowEpoch:
    """What :func:`on_epoch` returns.

    ``results``: the result rows (key, ``window_start``, ``window_end``, aggregations,
    ``emit``); ``late``: events and candidates rejected as late (None: none);
    ``wm_out``: the new output watermark (ms); ``index``: the chunk index to keep for
    the next epoch; ``stats``: ``emit:<kind>`` counts, ``late``, and the gauges
    ``input_watermark``, ``output_watermark``, ``open_windows``.
    """

    results: pa.Table
    late: pa.Table | None
    wm_out: int
    index: pa.Table
    stats: dict[str, int] = field(default_factory=dict)


def on_epoch(
    store: ChunkStore,
    index: pa.Table | None,
    inputs: WindowInputs,
    *,
    wm_in: int,
    new_in: int,
    wm_out: int,
    spec: W.WindowSpec,
    partial_schema: pa.Schema,
    events_schema: pa.Schema,
    legacy_state: pa.Table | None = None,
) -> WindowEpoch:
    """Merge one epoch's inputs into a key group's windows and emit results by the watermark.

    ``store`` and ``index``: the key group's chunks and their index as the previous
    epoch left them (``index`` None: no state). ``legacy_state``: a whole-state table of
    a checkpoint written before the bucketed layout, migrated into the buckets first.
    ``partial_schema`` / ``events_schema``: the schemas of partials and of raw events
    (an empty table of either stands for "no new data"). Watermarks in ms.
    """
    segments = Segments(index, store, partial(W.compact, spec=spec))
    if legacy_state is not None:
        WS.migrate(segments, legacy_state, spec)
    bucketed = WS.bucketed(spec)
    windows = None if bucketed else WS.load_whole(segments)
    late_parts: list[pa.Table] = []
    partials = list(inputs.partials)
    candidates = list(inputs.candidates)
    accepted_events: list[pa.Table] = []
    if inputs.events:
        accepted, late, cands = W.split_late(pa.concat_tables(inputs.events), wm_in, spec)
        late_parts.append(late)
        candidates.append(cands)
        accepted_events.append(accepted)
    if not spec.needs_events:
        partials += [W.preaggregate(a, spec) for a in accepted_events]
    candidates = [c for c in candidates if c.num_rows]
    if candidates:
        # live sessions: the state and this epoch's sessions (a candidate may bridge to them)
        live = [t.select([spec.key, W.WINDOW_START, W.WINDOW_END])
                for t in ([windows] if windows is not None else []) + partials + accepted_events]
        live_table = pa.concat_tables(live) if live else None
        accepted, late = W.resolve_candidates(live_table, pa.concat_tables(candidates), wm_in, spec)
        late_parts.append(late)
        if spec.needs_events:
            accepted_events.append(accepted)
        else:
            partials.append(W.preaggregate(accepted, spec))
    if spec.needs_events:
        events = [e for e in accepted_events if e.num_rows] or [
            W.split_late(events_schema.empty_table(), wm_in, spec)[0]]
        new_windows, results = W.advance(windows, None, wm_in, new_in, spec, events=pa.concat_tables(events))
    else:
        merged = pa.concat_tables(partials) if partials else partial_schema.empty_table()
        if bucketed:
            results = WS.advance_segments(segments, merged, wm_in, new_in, spec)
        else:
            new_windows, results = W.advance(windows, merged, wm_in, new_in, spec)
    if bucketed:
        new_out = WS.output_watermark(wm_out, new_in, segments, spec)
    else:
        segments.replace(WS.WHOLE, new_windows)
        new_out = W.output_watermark(wm_out, new_in, new_windows, spec)
    late_parts = [t for t in late_parts if t.num_rows]
    late_rows = pa.concat_tables(late_parts) if late_parts else None
    emits = results.column("emit")
    stats = {f"emit:{kind}": int(pc.sum(pc.equal(emits, kind)).as_py() or 0) for kind in EMIT_KINDS}
    stats["late"] = 0 if late_rows is None else late_rows.num_rows
    stats["gauge:input_watermark"] = new_in
    stats["gauge:output_watermark"] = new_out
    stats["gauge:open_windows"] = segments.rows()
    return WindowEpoch(results, late_rows, new_out, segments.index(), stats)
