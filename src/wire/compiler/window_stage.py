"""Compile a window aggregation into two Spark stages (SPEC §2–§4, §10).

1. ``mapInArrow`` before the shuffle (:class:`PreStage`). With a single
   watermark channel (the window reads a source directly) and no callbacks,
   events whose window state is already purged go to the late port here and
   the rest are pre-aggregated per (key, window) into partial aggregates
   ("partials"); session events that might be late travel raw ("candidates").
   Otherwise raw events are shipped ("events") and classified downstream,
   against the operator's own input watermark. Everything travels as one Arrow
   IPC blob per key group, so no payload goes through pandas.
2. ``groupBy(key group).transformWithStateInPandas`` (:class:`WindowProcessor`):
   one call per key group (``hash(key) mod key_groups``) per epoch, never per key.
   It tracks the operator's watermarks (Beam rule, SPEC §2)::

       in'  = max(in,  min over input channels of their watermark)
       out' = max(out, min(in', hold))      hold = earliest start of an unfired window,
                                            or of a window an on-time event could open

   and emits results by :func:`wire.state.windows.advance`. Results leave with
   event time = ``window_start`` and the operator's output watermark; watermark
   rows leave on channel ``<step>/<key group>`` to every downstream key group, so
   a second keyed operator (a window of windows) takes the minimum over them.

State (issue 12): tumbling and sliding windows keep their state in a ``segments``
MapState bucketed by window end (:mod:`wire.state.window_segments`): an epoch appends
new partials to the open buckets' chunks without reading them and reads a bucket only
when it fires or late/early rows need it. Python↔JVM state calls per epoch and key
group: 2 for the ValueState, plus one per chunk written, read or deleted (metric
``state_calls``), independent of the number of keys; sessions and windows with
callbacks keep one chunk per key group, read and rewritten each epoch.

Before the pre-stage, the input is projected to the payload columns the window reads
(:func:`window_input_columns`): ``mapInArrow`` is opaque to Spark's optimizer, so
without the projection every upstream column would travel into Python, and no source
column could be pruned (:mod:`wire.compiler.pruning`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from wire.compiler.keyed import (
    SEGMENT_INDEX,
    GroupInput,
    KeyedPreStage,
    KeyedProcessor,
    OperatorState,
    blob_row,
    each_batch,
    events_of,
    pack_events,
    packed,
    split_by_group,
    stage_name,
    stateful_stage,
)
from wire.compiler.sink_fusion import Operation, apply_operations
from wire.core.arrow_types import arrow_payload_schema
from wire.core.envelope import (
    BLOB,
    ENVELOPE_ARROW,
    ENVELOPE_COLUMNS,
    ET,
    KG,
    KIND,
    KIND_DATA,
    METRICS_PORT,
    SEQ,
    WM,
    metrics_table,
    side_batch,
    with_envelope,
)
from wire.core.key_groups import key_groups_of
from wire.core.time import NO_WATERMARK
from wire.errors import ConfigError
from wire.plan.nodes import LATE, PortRef, WindowAggregateNode
from wire.state import preaggregation as P
from wire.state import window_epoch as WE
from wire.state import windows as W
from wire.state.aggregations import Collect, Count, First, Last, Max, Mean, Min, Sum, TopK, UserAggregator

NO_KEY = "__key"
"""Synthetic constant key column used when a stream has no key."""

PARTIALS, CANDIDATES, EVENTS = "partials", "candidates", "events"

PREAGGREGATE_ROWS = 1 << 20
"""Accepted (event, window) rows a pre-stage task gathers before it pre-aggregates them.

A task pre-aggregates what it gathered once per key group, when this many rows are pending
and at the end of its input, instead of once per Arrow batch (10,000 rows) and key group:
one sort and one hash aggregation per key group over the epoch's rows rather than hundreds
of small ones. Pending rows hold a few columns (key, aggregated columns, times), so the
bound keeps them to tens of MB."""

_ONE_COLUMN = (Collect, Count, First, Last, Max, Mean, Min, Sum)
"""Built-in aggregators that read nothing but their ``column`` (``count()``: no column)."""


@dataclass(frozen=True)
class WindowStage:
    """What both stages of one window operator need, fixed when the flow is compiled."""

    step: str
    spec: W.WindowSpec
    payload: pa.Schema
    """Payload columns of the input events (the window's input stream)."""
    out: pa.Schema
    """Output rows: result columns + envelope."""
    channels: tuple[str, ...]
    """Watermark channels feeding the operator; its input watermark is their minimum."""
    key_groups: int
    preaggregate: bool
    """True: late routing and partial aggregation happen before the shuffle."""
    partial: pa.Schema
    """Schema of partial aggregates (an empty table of it stands for "no new data")."""
    inputs: pa.Schema
    """Schema of input events: payload + __et + __seq."""


class PreStage(KeyedPreStage):
    """``mapInArrow`` function on executors: route, pre-aggregate, pack per key group."""

    def __init__(self, stage: WindowStage) -> None:
        super().__init__(stage.step)
        self.stage = stage

    def rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Control rows; per key group the partials, candidates or events; late rows; metrics."""
        st = self.stage
        events_n = late_n = 0
        pending: list[pa.Table] = []  # accepted (event, window) rows not yet pre-aggregated
        panes: list[pa.Table] = []  # accepted events of pane_preaggregable windows, one row each
        pending_rows = 0
        hashed = st.preaggregate and P.hash_preaggregable(st.spec)
        paned = hashed and P.pane_preaggregable(st.spec)
        kept = [*P.hash_columns(st.spec), KG] if hashed else None  # what the pre-aggregation reads
        for control, data in each_batch(batches):
            if control is not None:
                yield control
            if not data.num_rows:
                continue
            events_n += data.num_rows
            if not st.preaggregate:
                yield from pack_events(EVENTS, data, st.payload)
                continue
            for wm in pc.unique(data.column(WM)).to_pylist():
                rows = data if wm is None else data.filter(pc.equal(data.column(WM), wm))
                watermark = NO_WATERMARK if wm is None else int(wm)
                events = events_of(rows, st.payload).append_column(KG, rows.column(KG))
                split = P.split_late_panes(events, watermark, st.spec, kept) if paned else None
                if split is not None:  # one row per event, not per (event, window)
                    (accepted, late), candidates, into = split, events.slice(0, 0), panes
                else:
                    accepted, late, candidates = W.split_late(events, watermark, st.spec, kept)
                    into = pending
                if late.num_rows:
                    late_n += late.num_rows
                    port = PortRef(st.step, LATE).port_id()
                    yield side_batch(ENVELOPE_ARROW, port, late.drop_columns([KG]), key_group=0)
                if accepted.num_rows:
                    into.append(accepted)
                    pending_rows += accepted.num_rows
                for kg, part in split_by_group(candidates):
                    yield blob_row(CANDIDATES, kg, part)
            if pending_rows >= PREAGGREGATE_ROWS:
                yield from self._partials(pending, hashed)
                yield from self._pane_partials(panes)
                pending, panes, pending_rows = [], [], 0
        yield from self._partials(pending, hashed)
        yield from self._pane_partials(panes)
        if events_n:
            stats = {"events": events_n, "late": late_n}
            yield side_batch(ENVELOPE_ARROW, METRICS_PORT, metrics_table(st.step, stats), key_group=0)

    def _pane_partials(self, panes: list[pa.Table]) -> Iterator[pa.RecordBatch]:
        """One blob row of partial aggregates per key group for ``panes``' accepted events.

        (:func:`~wire.state.preaggregation.preaggregate_panes_by`.)
        """
        if panes:
            accepted = pa.concat_tables(panes) if len(panes) > 1 else panes[0]
            for kg, partials in P.preaggregate_panes_by(accepted, self.stage.spec, KG):
                yield blob_row(PARTIALS, kg, partials)

    def _partials(self, pending: list[pa.Table], hashed: bool) -> Iterator[pa.RecordBatch]:
        """One blob row of partial aggregates per key group for the ``pending`` accepted rows.

        ``hashed``: :func:`~wire.state.preaggregation.preaggregate_by` (the rows hold
        :func:`~wire.state.preaggregation.hash_columns` only), else a sort per key group.
        """
        if not pending:
            return
        accepted = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
        if hashed:
            for kg, partials in P.preaggregate_by(accepted, self.stage.spec, KG):
                yield blob_row(PARTIALS, kg, partials)
            return
        for kg, part in split_by_group(accepted):
            yield blob_row(PARTIALS, kg, W.preaggregate(part, self.stage.spec))


class WindowProcessor(KeyedProcessor[WindowStage]):
    """transformWithStateInPandas processor: one key group's windows, once per epoch.

    State: :data:`~wire.compiler.keyed.OPERATOR_STATE` with one table, ``windows``
    (schema :func:`wire.state.windows.state_schema`).
    """

    def process(
        self, kg: int, group: GroupInput, op: OperatorState, wm_in: int, new_in: int
    ) -> pd.DataFrame:
        """Run :func:`wire.state.window_epoch.on_epoch` on the key group's state; pack its outputs."""
        st = self.stage
        tables = dict(op.tables or {})
        out = WE.on_epoch(
            self.chunks, tables.get(SEGMENT_INDEX),
            WE.WindowInputs(partials=group.blobs.get(PARTIALS, []),
                            candidates=group.blobs.get(CANDIDATES, []), events=group.blobs.get(EVENTS, [])),
            wm_in=wm_in, new_in=new_in, wm_out=op.wm_out, spec=st.spec, partial_schema=st.partial,
            events_schema=st.inputs,
            legacy_state=tables.pop("windows", None),  # a checkpoint written before the bucketed layout
        )
        return self.finish(
            kg, group, op, new_in=new_in, new_out=out.wm_out, tables={**tables, SEGMENT_INDEX: out.index},
            results=out.results, event_time=out.results.column("window_start"), late=out.late,
            stats=out.stats,
        )


def window_spec(node: WindowAggregateNode, key: str) -> W.WindowSpec:
    """The pure-logic spec of a plan node (the kernels assign the plan's window object itself)."""
    return W.WindowSpec(
        assigner=node.window,
        allowed_lateness_ms=node.allowed_lateness_ms,
        key=key,
        aggregations=node.aggregations,
        emit=node.emit,
        before_update=node.before_update,
        after_update=node.after_update,
    )


def window_input_columns(spec: W.WindowSpec, payload: list[str], *, late_read: bool) -> list[str]:
    """The payload columns (of ``payload``, in its order) a window with ``spec`` reads.

    Every column when the late port is read (``late_read``: a late event keeps all its
    columns), when callbacks see whole events (``spec.needs_events``), or when an
    aggregation takes whole events (a user aggregator without ``column``, ``max_by`` /
    ``min_by`` / ``top_k`` without ``columns``) or is not a known built-in. Otherwise
    the key and the aggregations' input columns.
    """
    if late_read or spec.needs_events:
        return list(payload)
    read = {spec.key}
    for _, agg in spec.aggregations:
        if type(agg) in _ONE_COLUMN or (type(agg) is UserAggregator and agg.column is not None):
            if agg.column is not None:
                read.add(agg.column)
        elif isinstance(agg, TopK) and agg.columns is not None:
            read.update((agg.column, *agg.columns))
        else:
            return list(payload)
    return [c for c in payload if c in read]


def window_stage(
    node: WindowAggregateNode,
    key: str,
    payload: pa.Schema,
    *,
    key_groups: int,
    channels: tuple[str, ...],
    from_source: bool,
    late_read: bool = True,
) -> WindowStage:
    """The stages' settings of the window ``node`` over input events with ``payload`` columns.

    ``payload``: the input's payload columns as Spark hands them to Python (Arrow, UTC
    timestamps), the key column ``key`` among them. The stage's payload is the columns the
    window reads (:func:`window_input_columns`).

    Raises
    ------
    ConfigError
        If the key column or an aggregated column is missing or of the wrong type.
    """
    if key not in payload.names:
        raise ConfigError("key", key, f"a column of the stream: {payload.names}", step=node.step)
    spec = window_spec(node, key)
    with_times = pa.schema([*payload, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])
    try:
        W.late_schema(spec, with_times)
        result = W.result_schema(spec, with_times)
    except ConfigError as e:
        raise ConfigError(e.parameter, e.value, e.accepted, step=node.step) from None
    read = window_input_columns(spec, payload.names, late_read=late_read)
    payload = pa.schema([payload.field(c) for c in read])
    with_times = pa.schema([*payload, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])
    return WindowStage(
        step=node.step,
        spec=spec,
        payload=payload,
        out=with_envelope(result),
        channels=channels,
        key_groups=key_groups,
        preaggregate=from_source and len(channels) == 1 and not spec.needs_events,
        partial=W.partial_schema(spec, with_times),
        inputs=with_times,
    )


def compile_window(
    df: DataFrame,
    node: WindowAggregateNode,
    key: str | None,
    *,
    key_groups: int,
    channels: tuple[str, ...],
    from_source: bool,
    late_read: bool = True,
    seed: str | None = None,
) -> DataFrame:
    """Append the window aggregation ``node`` to the envelope DataFrame ``df``.

    ``seed``: the operator's initial state after a rescale (:func:`wire.compiler.keyed.seeded`).

    Output payload columns: the key column (absent for an unkeyed stream),
    ``window_start``, ``window_end`` (timestamps, UTC), the aggregations, ``emit``.
    Late events leave as side rows of port ``<step>.late``, with every payload column
    of ``df`` when ``late_read`` (a sink reads the late port); otherwise the window's
    input is first projected to the columns it reads (:func:`window_input_columns`)
    and late events, which nobody reads, carry only those.

    Raises
    ------
    ConfigError
        If the key column or an aggregated column is missing or of the wrong type.
    """
    if key is None:
        df = df.withColumn(NO_KEY, F.lit(0))
        key = NO_KEY
    if key not in df.columns:
        raise ConfigError("key", key, f"a column of the stream: {df.columns}", step=node.step)
    payload = arrow_payload_schema(df)
    stage = window_stage(node, key, payload, key_groups=key_groups, channels=channels,
                         from_source=from_source, late_read=late_read)
    if len(stage.payload) < len(payload):
        envelope = [F.col(c) for c in df.columns if c in ENVELOPE_COLUMNS]
        df = df.select(*[F.col(f"`{c}`") for c in stage.payload.names], *envelope)
    rows = packed(df, key, key_groups, PreStage(stage))
    return _results(stateful_stage(rows, WindowProcessor(stage), seed))


def compile_fused_window(rows: DataFrame, stage: WindowStage, seed: str | None = None) -> DataFrame:
    """The window's state stage over ``rows``, a source's DataFrame that ran the pre-stage.

    The source ran :class:`SourcePreStage` (:mod:`wire.compiler.fusion`); the output is as
    :func:`compile_window`'s. ``rows`` are envelope-only. Their blob column is renamed
    :func:`~wire.compiler.keyed.stage_name` of the step, so that the state stage's line in
    Spark's plan names the step (:func:`wire.runtime.rescale.operator_ids`); the processor
    takes the columns by position.
    """
    rows = rows.withColumnRenamed(BLOB, stage_name(stage.step))
    return _results(stateful_stage(rows, WindowProcessor(stage), seed))


def _results(out: DataFrame) -> DataFrame:
    """The state stage's output with ``window_start`` / ``window_end`` as timestamps, without ``NO_KEY``."""
    cols = [
        F.timestamp_millis(F.col(c)).alias(c) if c in ("window_start", "window_end") else F.col(c)
        for c in out.columns
        if c != NO_KEY
    ]
    return out.select(*cols)


class SourcePreStage:
    """A window's :class:`PreStage` run in its source's own Python task (fusion, :mod:`wire.compiler.fusion`).

    A callable on one task's source rows (payload + envelope batches, as the source decoded
    them, its pushed predicate applied exactly): it gives each data row its key group,
    ``pmod(xxhash64(key), key_groups)`` computed as Spark does (:mod:`wire.core.key_groups`),
    keeps the key group other rows carry (0 when none), and runs the pre-stage, whose
    envelope-only rows (:data:`~wire.core.envelope.ENVELOPE_ARROW`) the source yields. So the
    events never cross into the JVM: only the partial aggregates, late events and control
    rows do. ``key``: the window's key column; None: unkeyed (the constant key ``NO_KEY`` = 0,
    as :func:`compile_window` adds it). ``operations``: the flow's maps between the source and
    the window, computed on the data rows first (:func:`wire.compiler.sink_fusion.apply_operations`).
    """

    def __init__(self, stage: WindowStage, key: str | None, operations: tuple[Operation, ...] = ()) -> None:
        self.stage, self.key, self.operations = stage, key, operations

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One task's envelope-only rows."""
        return PreStage(self.stage)(self._keyed(batches))

    def _keyed(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        groups = self.stage.key_groups
        for batch in batches:
            if self.operations:
                if not batch.num_rows:
                    continue  # nothing to compute, nothing to key
                table = apply_operations(pa.Table.from_batches([batch]), self.operations)
                batch = table.combine_chunks().to_batches()[0]
            if self.key is None:
                batch = batch.append_column(pa.field(NO_KEY, pa.int32(), nullable=False),
                                            pa.array(np.zeros(batch.num_rows, np.int32)))
            data, carried = pc.equal(batch.column(KIND), KIND_DATA), pc.fill_null(batch.column(KG), 0)
            if pc.any(data).as_py():
                carried = pc.if_else(data, key_groups_of(batch.column(self.key or NO_KEY), groups), carried)
            yield batch.set_column(batch.schema.get_field_index(KG), KG, carried)
