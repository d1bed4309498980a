"""Compile an event-time temporal join of a stream with a versioned table (SPEC §2, §3).

Each input gets a ``mapInArrow`` pre-stage that packs its rows into one Arrow IPC blob
row per key group (port ``stream`` / ``table``; the key group is ``hash(key) mod
key_groups`` of the stream's ``on`` column and of the table's key column, which have one
type, so a key meets its versions in one key group). The two envelope-only streams are
unioned and grouped by key group into one transformWithStateInPandas processor
(:class:`TemporalJoinProcessor`) that runs the pure kernel
:func:`wire.state.temporal_join.on_epoch` once per key group per epoch and only moves
bytes in and out of it.

State per key group: the stream events waiting for the table's watermark in the
``segments`` MapState of chunks, bucketed by event time (the chunk index in the
``operator`` ValueState's table ``__segments``); the stored versions (table
``versions``) and the holds of the pending events (table ``holds``: earliest event
time per key and bucket), see :mod:`wire.state.temporal_join`. Every chunk and table
carries the ``on`` column (so a rescale splits them by key like every keyed state,
:mod:`wire.state.rekey`). A table ``pending`` (the whole pending buffer, as the first
layout kept it) is moved into the buckets on the first epoch. Each input's watermark in force is kept next to
the channel watermarks (entries :data:`STREAM_WM`, :data:`TABLE_WM`: a rescale takes the
minimum over the old key groups, as for channels). Each input's watermark is the minimum
over that input's channels; the operator's input watermark the minimum over both (SPEC §2).
"""

from __future__ import annotations

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
from wire.core.envelope import with_envelope
from wire.core.time import NO_WATERMARK
from wire.errors import ConfigError
from wire.plan.nodes import TemporalJoinNode
from wire.state import temporal_join as TJ
from wire.state import temporal_join_spec as TJS
from wire.state.operator_watermarks import input_watermark

STREAM, TABLE = "stream", "table"
VERSIONS, HOLDS, PENDING = "versions", "holds", "pending"
STREAM_WM, TABLE_WM = "__stream", "__table"
"""Entries of the operator's channel watermarks holding each input's watermark in force (ms)."""


@dataclass(frozen=True)
class TemporalJoinStage:
    """What the temporal join's stages need, fixed when the flow is compiled."""

    step: str
    spec: TJS.TemporalJoinSpec
    stream: pa.Schema
    table: pa.Schema
    out: pa.Schema
    channels: tuple[str, ...]
    stream_channels: tuple[str, ...]
    table_channels: tuple[str, ...]
    key_groups: int


class TemporalJoinProcessor(KeyedProcessor[TemporalJoinStage]):
    """transformWithStateInPandas processor: one key group's versions and pending buckets per epoch."""

    def process(
        self, kg: int, group: GroupInput, op: OperatorState, wm_in: int, new_in: int
    ) -> pd.DataFrame:
        """Run :func:`wire.state.temporal_join.on_epoch` on the key group's state; pack its outputs."""
        st = self.stage
        tables = dict(op.tables or {})
        channels = dict(op.channels or {})
        old_s = channels.get(STREAM_WM, NO_WATERMARK)
        old_t = channels.get(TABLE_WM, NO_WATERMARK)
        new_s = input_watermark(old_s, channels, st.stream_channels)
        new_t = input_watermark(old_t, channels, st.table_channels)
        op.channels = {**channels, STREAM_WM: new_s, TABLE_WM: new_t}
        out = TJ.on_epoch(
            self.chunks, tables.get(SEGMENT_INDEX), tables.get(VERSIONS), tables.get(HOLDS),
            group.blobs.get(STREAM, []), group.blobs.get(TABLE, []),
            stream_wm=old_s, new_stream_wm=new_s, table_wm=old_t, new_table_wm=new_t, wm_out=op.wm_out,
            spec=st.spec, stream_payload=st.stream, table_payload=st.table,
            legacy_pending=tables.get(PENDING),  # a state written by the first, whole-table layout
        )
        return self.finish(
            kg, group, op, new_in=new_in, new_out=out.wm_out,
            tables={VERSIONS: out.versions, HOLDS: out.holds, SEGMENT_INDEX: out.index},
            results=out.joined, event_time=out.event_time, late=out.late, stats=out.stats,
        )


def compile_temporal_join(
    stream: DataFrame,
    table: DataFrame,
    node: TemporalJoinNode,
    *,
    key_groups: int,
    stream_channels: tuple[str, ...],
    table_channels: tuple[str, ...],
    seed: str | None = None,
) -> DataFrame:
    """The envelope DataFrame of ``stream`` temporally joined with the table built from ``table``.

    ``seed``: the operator's initial state after a rescale (:func:`wire.compiler.keyed.seeded`).

    Raises
    ------
    ConfigError
        If ``on`` is not a column of the stream, the key or delete column not one of the
        table (or the delete column not bool), the key types differ, or columns clash.
    """
    sp, tp = arrow_payload_schema(stream), arrow_payload_schema(table)
    try:
        if node.on not in sp.names:
            raise ConfigError("on", node.on, f"a column of the stream: {sp.names}")
        if node.table_key not in tp.names:
            raise ConfigError("key", node.table_key, f"a column of the table's stream: {tp.names}")
        if node.delete is not None and node.delete not in tp.names:
            raise ConfigError("delete", node.delete,
                              f"None or a bool column of the table's stream: {tp.names}")
        spec = TJS.TemporalJoinSpec(
            key=node.on, table_key=node.table_key,
            stream_columns=tuple(n for n in sp.names if n != node.on),
            table_columns=tuple(n for n in tp.names if n not in (node.table_key, node.delete)),
            delete=node.delete, how=node.how,  # type: ignore[arg-type]
        )
        out = TJS.output_schema(spec, sp, tp)
        TJS.late_schema(spec, sp, tp)
    except ConfigError as e:
        raise ConfigError(e.parameter, e.value, e.accepted, step=node.step) from None
    channels = tuple(dict.fromkeys((*stream_channels, *table_channels)))
    stage = TemporalJoinStage(node.step, spec, sp, tp, with_envelope(out), channels, stream_channels,
                              table_channels, key_groups)
    rows = packed(stream, node.on, key_groups, PackEvents(node.step, STREAM, sp, metric="events:stream"))
    rows = rows.unionByName(
        packed(table, node.table_key, key_groups, PackEvents(node.step, TABLE, tp, metric="events:table")))
    return stateful_stage(rows, TemporalJoinProcessor(stage), seed)
