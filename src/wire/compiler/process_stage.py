"""Compile ``Stream.process`` (a keyed process function with state and timers) for Spark.

Two stages, as for windows and joins (:mod:`wire.compiler.keyed`):

1. ``mapInArrow`` (:class:`PackEvents`): each partition's events are packed into one
   Arrow IPC blob row per key group (``hash(key) mod key_groups``); watermark and side
   rows pass through.
2. ``groupBy(key group).transformWithStateInPandas`` (:class:`ProcessProcessor`): one
   call per key group per epoch, which runs the pure kernel
   :func:`wire.state.process.on_epoch` (late split, the user's ``on_events`` once,
   due timers in rounds, the Beam watermark hold) on the key group's state, kept in the
   ``segments`` MapState of chunks (:class:`~wire.compiler.keyed.MapStateChunks`).
   It only moves bytes: decodes the blobs, passes the watermarks and the wall clock,
   and encodes the outputs, the late events (port ``<step>.late``), one watermark row
   per downstream key group (channel ``<step>/<key group>``) and the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from wire.compiler.keyed import (
    SEGMENT_INDEX,
    GroupInput,
    KeyedProcessor,
    OperatorState,
    output_frame,
    pack_events,
    pandas_safe,
    passthrough,
    seeded,
    stage_name,
)
from wire.core.arrow_types import arrow_payload_schema, spark_schema
from wire.core.envelope import (
    ENVELOPE_ARROW,
    ET,
    KG,
    KIND,
    KIND_DATA,
    SEQ,
    with_envelope,
)
from wire.errors import ConfigError
from wire.plan.nodes import LATE, PortRef, ProcessNode
from wire.state.keyed_state import StateSpec
from wire.state.process import EVENT_TIME, ProcessSpec, on_epoch
from wire.state.segments import Segments

EVENTS = "events"


@dataclass(frozen=True)
class ProcessStage:
    """What both stages need, fixed when the flow is compiled."""

    spec: ProcessSpec
    out: pa.Schema
    """Output rows: the declared columns + envelope."""
    channels: tuple[str, ...]
    key_groups: int

    def inputs(self) -> pa.Schema:
        """Events as the kernel takes them: payload + ``__et`` + ``__seq``."""
        return pa.schema([*self.spec.payload, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])


class PackEvents:
    """``mapInArrow`` function on executors: one blob row per key group."""

    def __init__(self, stage: ProcessStage) -> None:
        self.stage = stage
        self.__name__ = stage_name(stage.spec.step)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Pack one partition's batches."""
        return pandas_safe(self._rows(batches))

    def _rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            control = passthrough(batch)
            if control is not None:
                yield control
            data = batch.filter(pc.equal(batch.column(KIND), KIND_DATA))
            if data.num_rows:
                yield from pack_events(EVENTS, data, self.stage.spec.payload)


class ProcessProcessor(KeyedProcessor[ProcessStage]):
    """transformWithStateInPandas processor: one key group's process function, once per epoch."""

    def process(
        self, kg: int, group: GroupInput, op: OperatorState, wm_in: int, new_in: int
    ) -> pd.DataFrame:
        """Run :func:`wire.state.process.on_epoch` on the key group's events and state."""
        st = self.stage
        schema = st.inputs()
        parts = [t.select(schema.names).cast(schema) for t in group.blobs.get(EVENTS, [])]
        events = pa.concat_tables(parts) if parts else schema.empty_table()
        tables = op.tables or {}
        calls0 = self.chunks.calls
        segments = Segments(tables.get(SEGMENT_INDEX), self.chunks, pa.concat_tables)
        old_out = op.wm_out
        r = on_epoch(segments, events, wm_in, new_in, old_out, int(time.time() * 1000), st.spec)
        op.wm_in, op.wm_out = new_in, r.output_watermark
        op.tables = {**tables, SEGMENT_INDEX: segments.index()}
        stats = {k: v for k, v in r.stats.items() if k != "pending_timers"}
        stats.update({
            "gauge:pending_timers": r.stats["pending_timers"],
            "gauge:input_watermark": new_in,
            "gauge:output_watermark": r.output_watermark,
            "state_calls": self.chunks.calls - calls0,
        })
        return output_frame(
            st.out, step=st.spec.step, kg=kg, key_groups=st.key_groups, results=r.outputs,
            event_time=r.outputs.column(EVENT_TIME), watermark=old_out, side_in=group.table,
            late=r.late, late_port=PortRef(st.spec.step, LATE).port_id(),
            new_out=r.output_watermark, stats=stats,
        )


def compile_process(
    df: DataFrame,
    node: ProcessNode,
    key: str | None,
    *,
    key_groups: int,
    channels: tuple[str, ...],
    seed: str | None = None,
) -> DataFrame:
    """Append the process function ``node`` to the keyed envelope DataFrame ``df``.

    ``seed``: the operator's initial state after a rescale (:func:`wire.compiler.keyed.seeded`).

    Output payload columns: ``node.schema`` (the declared output). Late events leave as
    side rows of port ``<step>.late``.

    Raises
    ------
    ConfigError
        If the stream has no key, or the key column is missing.
    """
    if key is None:
        raise ConfigError("key", None, "a keyed stream: the source's key= or key_by(column) before "
                          "process()", step=node.step)
    if key not in df.columns:
        raise ConfigError("key", key, f"a column of the stream: {df.columns}", step=node.step)
    payload = arrow_payload_schema(df)
    states = tuple((name, s) for name, s in node.states if isinstance(s, StateSpec))
    spec = ProcessSpec(
        step=node.step, key=key, key_type=payload.field(key).type, payload=payload,
        output=node.schema, states=states, on_events=node.on_events,
        on_timer=node.on_timer,
    )
    stage = ProcessStage(spec, with_envelope(node.schema), channels, key_groups)
    kg = F.pmod(F.xxhash64(F.col(f"`{key}`")), F.lit(key_groups)).cast("int")
    df = df.withColumn(
        KG, F.when(F.col(KIND) == KIND_DATA, kg).otherwise(F.coalesce(F.col(KG), F.lit(0)))
    )
    packed = df.mapInArrow(PackEvents(stage), spark_schema(ENVELOPE_ARROW))
    return packed.groupBy(KG).transformWithStateInPandas(
        statefulProcessor=ProcessProcessor(stage),
        outputStructType=spark_schema(stage.out),
        outputMode="Append",
        timeMode="None",
        initialState=seeded(packed, seed),
    )
