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
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame

from wire.compiler.keyed import (
    SEGMENT_INDEX,
    GroupInput,
    KeyedProcessor,
    OperatorState,
    PackEvents,
    packed,
    stateful_stage,
)
from wire.core.arrow_types import arrow_payload_schema
from wire.core.envelope import (
    ET,
    SEQ,
    with_envelope,
)
from wire.errors import ConfigError
from wire.plan.nodes import ProcessNode
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

    @property
    def step(self) -> str:
        """The process step's id."""
        return self.spec.step

    def inputs(self) -> pa.Schema:
        """Events as the kernel takes them: payload + ``__et`` + ``__seq``."""
        return pa.schema([*self.spec.payload, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])



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
        segments = Segments(tables.get(SEGMENT_INDEX), self.chunks, pa.concat_tables)
        r = on_epoch(segments, events, wm_in, new_in, op.wm_out, int(time.time() * 1000), st.spec)
        stats = {k: v for k, v in r.stats.items() if k != "pending_timers"}
        stats.update({
            "gauge:pending_timers": r.stats["pending_timers"],
            "gauge:input_watermark": new_in,
            "gauge:output_watermark": r.output_watermark,
        })
        return self.finish(
            kg, group, op, new_in=new_in, new_out=r.output_watermark,
            tables={**tables, SEGMENT_INDEX: segments.index()}, results=r.outputs,
            event_time=r.outputs.column(EVENT_TIME), late=r.late, stats=stats,
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
    pre = PackEvents(node.step, EVENTS, payload)
    return stateful_stage(packed(df, key, key_groups, pre), ProcessProcessor(stage), seed)
