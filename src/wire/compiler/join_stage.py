"""Compile an event-time interval join of two keyed streams (SPEC §2, §3).

Each side gets a ``mapInArrow`` pre-stage that packs its events into one Arrow IPC
blob row per key group (port ``left`` / ``right``); the two envelope-only streams
are unioned and grouped by key group into one transformWithStateInPandas
processor (:class:`JoinProcessor`) that runs the pure kernel
:func:`wire.state.join_epoch.on_epoch` once per key group per epoch and only moves
bytes in and out of it: both sides' buffers are bucketed by event time in a
MapState of chunks; the epoch reads the buckets that can hold partners (of them, only
the chunks whose key index may hold one of the other side's new keys: MapState
``keyindex``, :data:`KEY_INDEX_VALUE`), appends its accepted events, and drops expired
buckets (issue 12). The input watermark is the
minimum over both sides' channels; the output watermark is
:func:`wire.state.join.output_watermark` (Beam watermark-hold rule, SPEC §2):
``in - allowed_lateness`` (a joined row's event time is the later of its two events,
and an accepted event is at most ``allowed_lateness`` behind the input watermark),
and the end of input once the input ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import BinaryType, StructField, StructType

from wire.compiler.deferred_processor import StateDeclaration
from wire.compiler.keyed import (
    SEGMENT_INDEX,
    SEGMENT_KEY,
    GroupInput,
    KeyedProcessor,
    OperatorState,
    PackEvents,
    packed,
    stateful_stage,
)
from wire.core.arrow_types import arrow_payload_schema
from wire.core.envelope import (
    with_envelope,
)
from wire.errors import ConfigError
from wire.plan.nodes import IntervalJoinNode
from wire.state import join as J
from wire.state import join_epoch as JE

LEFT, RIGHT = "left", "right"

KEY_INDEX_VALUE = StructType([StructField("hashes", BinaryType())])
"""MapState ``keyindex`` of each key group: ``(bucket, chunk) -> the chunk's sorted distinct
key hashes`` (uint64 little-endian bytes, :func:`wire.state.join_segments.key_hashes`), one
entry per chunk of ``segments``. A rescale does not carry it: missing entries are rebuilt
from their chunks when first probed."""


class MapStateHashes:
    """:class:`wire.state.segments.HashStore` over the ``keyindex`` MapState.

    Each method is one Python↔JVM round trip, counted in :attr:`calls`.
    """

    def __init__(self, state: object) -> None:
        self.state = state
        self.calls = 0

    def get(self, bucket: int, chunk: int) -> np.ndarray | None:
        """The chunk's key hashes (None: no entry)."""
        self.calls += 1
        value = self.state.getValue((bucket, chunk))  # type: ignore[attr-defined]
        return None if value is None else np.frombuffer(value[0], dtype="<u8")

    def put(self, bucket: int, chunk: int, hashes: np.ndarray) -> None:
        """Write a chunk's key hashes."""
        self.calls += 1
        self.state.updateValue((bucket, chunk), (hashes.astype("<u8").tobytes(),))  # type: ignore[attr-defined]

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk's entry."""
        self.calls += 1
        self.state.removeKey((bucket, chunk))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class JoinStage:
    """What the join's stages need, fixed when the flow is compiled."""

    step: str
    spec: J.IntervalJoinSpec
    left: pa.Schema
    right: pa.Schema
    out: pa.Schema
    channels: tuple[str, ...]
    key_groups: int

def pack_side(stage: JoinStage, side: str) -> PackEvents:
    """The pre-stage of one side: its events, one blob row per key group on port ``side``."""
    payload = stage.left if side == LEFT else stage.right
    return PackEvents(stage.step, side, payload, metric=f"events:{side}")


class JoinProcessor(KeyedProcessor[JoinStage]):
    """transformWithStateInPandas processor: one key group's join buffers, once per epoch."""

    STATES = (*KeyedProcessor.STATES, StateDeclaration("map", "keyindex", KEY_INDEX_VALUE, SEGMENT_KEY))
    """The base's state variables, and the key index (MapState ``keyindex``)."""

    def bind(self, states: dict[str, Any]) -> None:
        """Take the base's state variables and the key index."""
        super().bind(states)
        self.hashes = MapStateHashes(states["keyindex"])

    def state_calls(self) -> int:
        """The base's state calls and the key index's."""
        return self.chunks.calls + self.hashes.calls

    def process(
        self, kg: int, group: GroupInput, op: OperatorState, wm_in: int, new_in: int
    ) -> pd.DataFrame:
        """Run :func:`wire.state.join_epoch.on_epoch` on the key group's state; pack its outputs."""
        st = self.stage
        tables = dict(op.tables or {})
        out = JE.on_epoch(
            self.chunks, tables.get(SEGMENT_INDEX),
            JE.JoinInputs(left=group.blobs.get(LEFT, []), right=group.blobs.get(RIGHT, [])),
            wm_in=wm_in, new_in=new_in, wm_out=op.wm_out, spec=st.spec,
            left_payload=st.left, right_payload=st.right, hashes=self.hashes,
            # a checkpoint written before the bucketed layout
            legacy_left=tables.pop(LEFT, None), legacy_right=tables.pop(RIGHT, None),
        )
        return self.finish(
            kg, group, op, new_in=new_in, new_out=out.wm_out, tables={**tables, SEGMENT_INDEX: out.index},
            results=out.joined, event_time=out.joined.column("event_time"), late=out.late, stats=out.stats,
        )


def compile_join(
    left: DataFrame,
    right: DataFrame,
    node: IntervalJoinNode,
    *,
    left_key: str | None,
    right_key: str | None,
    key_groups: int,
    channels: tuple[str, ...],
    seed: str | None = None,
) -> DataFrame:
    """The envelope DataFrame of ``left`` interval-joined with ``right``.

    ``seed``: the operator's initial state after a rescale (:func:`wire.compiler.keyed.seeded`).

    Raises
    ------
    ConfigError
        If the sides are not keyed by a column of the same name, or columns clash.
    """
    if left_key is None or left_key != right_key:
        raise ConfigError("key", (left_key, right_key),
                          "both streams keyed by a column of the same name (use key_by)",
                          step=node.step)
    lp, rp = arrow_payload_schema(left), arrow_payload_schema(right)
    try:
        spec = J.IntervalJoinSpec(
            key=left_key, lower_ms=node.lower_ms, upper_ms=node.upper_ms,
            left_columns=tuple(n for n in lp.names if n != left_key),
            right_columns=tuple(n for n in rp.names if n != left_key),
            right_prefix=node.right_prefix, allowed_lateness_ms=node.allowed_lateness_ms,
        )
        out = J.output_schema(spec, JE.side_schema(lp), JE.side_schema(rp))
    except ConfigError as e:
        raise ConfigError(e.parameter, e.value, e.accepted, step=node.step) from None
    stage = JoinStage(node.step, spec, lp, rp, with_envelope(out), channels, key_groups)
    sides = packed(left, left_key, key_groups, pack_side(stage, LEFT)).unionByName(
        packed(right, left_key, key_groups, pack_side(stage, RIGHT)))
    return stateful_stage(sides, JoinProcessor(stage), seed)
