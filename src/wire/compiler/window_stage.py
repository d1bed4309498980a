"""Compile a window aggregation into two Spark stages (SPEC §3, §4, §10).

1. ``mapInArrow`` before the shuffle (:class:`PreAggregate`): per Arrow batch,
   events whose window state is already purged go to the late port; the others
   are pre-aggregated per (key, window) into partial aggregates. Watermark and
   side rows pass through.
2. ``groupBy(key group).transformWithStateInPandas`` (:class:`WindowProcessor`):
   one call per key group (``hash(key) mod key_groups``) per epoch, never per key:
   it merges the partials into the group's window state (one Arrow table in one
   ValueState), advances the watermark and emits results by
   :func:`wire.state.windows.advance`.

Every key group receives a watermark row every epoch (the source broadcasts one
per group), so windows of keys without new events close too. The number of
Python↔JVM state calls per epoch is ``2 × key_groups``, independent of the
number of keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from wire.compiler.arrow_types import arrow_payload_schema, spark_schema
from wire.errors import ConfigError
from wire.plan.nodes import LATE, PortRef, WindowAggregateNode
from wire.runtime.envelope import (
    BLOB,
    ET,
    KG,
    KIND,
    KIND_DATA,
    KIND_SIDE,
    KIND_WATERMARK,
    METRICS_PORT,
    PORT,
    WM,
    decode_table,
    encode_table,
    metrics_table,
    side_batch,
    watermark_batch,
    with_envelope,
)
from wire.state import windows as W

NO_WATERMARK = -(2**63)
NO_KEY = "__key"
"""Synthetic constant key column used when a stream has no key."""


def _conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Project/cast ``table`` onto ``schema``; missing columns become nulls."""
    n = table.num_rows
    names = set(table.schema.names)
    arrays = []
    for f in schema:
        if f.name in names:
            arr = table.column(f.name)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            arrays.append(arr if arr.type == f.type else arr.cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class WindowStageSchemas:
    """The Arrow schemas of the two stages, fixed when the flow is compiled."""

    payload: pa.Schema
    pre: pa.Schema
    state: pa.Schema
    out: pa.Schema


class PreAggregate:
    """``mapInArrow`` function: route late events, pre-aggregate the rest (runs on executors)."""

    def __init__(self, spec: W.TumblingSpec, schemas: WindowStageSchemas, step: str) -> None:
        self.spec = spec
        self.schemas = schemas
        self.step = step

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Transform one partition's batches."""
        pre = self.schemas.pre
        payload_names = self.schemas.payload.names
        events = late_count = 0
        for batch in batches:
            kind = batch.column(KIND)
            control = batch.filter(pc.not_equal(kind, KIND_DATA))
            if control.num_rows:
                yield _conform(control, pre)
            data = batch.filter(pc.equal(kind, KIND_DATA))
            if not data.num_rows:
                continue
            events += data.num_rows
            for wm in pc.unique(data.column(WM)).to_pylist():
                rows = data if wm is None else data.filter(pc.equal(data.column(WM), wm))
                watermark = NO_WATERMARK if wm is None else wm
                payload = pa.Table.from_batches([rows.select([*payload_names, KG])])
                accepted, late = W.split_late(payload, rows.column(ET), watermark, self.spec)
                if late.num_rows:
                    late_count += late.num_rows
                    late = late.drop_columns([KG])
                    yield side_batch(pre, PortRef(self.step, LATE).port_id(), late, key_group=0)
                if not accepted.num_rows:
                    continue
                groups = accepted.column(KG)
                for kg in pc.unique(groups).to_pylist():
                    part = W.preaggregate(accepted.filter(pc.equal(groups, kg)), self.spec)
                    part = part.append_column(KG, pa.array([kg] * part.num_rows, pa.int32()))
                    part = part.append_column(
                        KIND, pa.array([KIND_DATA] * part.num_rows, pa.int32())
                    )
                    for b in part.to_batches():
                        yield _conform(b, pre)
        if events:
            stats = {"events": events, "late": late_count}
            yield side_batch(pre, METRICS_PORT, metrics_table(self.step, stats), key_group=0)


class WindowProcessor(StatefulProcessor):
    """transformWithStateInPandas processor: one key group's windows, once per epoch.

    State: ValueState ``windows`` = (watermark int64 ms, Arrow IPC bytes of the
    window state table, schema :func:`wire.state.windows.state_schema`). The stored
    watermark is the operator's input watermark for the next epoch.
    """

    def __init__(self, spec: W.TumblingSpec, schemas: WindowStageSchemas, step: str) -> None:
        self.spec = spec
        self.schemas = schemas
        self.step = step

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variable (called by Spark once per task)."""
        self.windows = handle.getValueState(
            "windows",
            StructType([StructField("watermark", LongType()), StructField("ipc", BinaryType())]),
        )

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: object
    ) -> Iterator[pd.DataFrame]:
        """Merge one epoch's partials and watermark rows of key group ``key[0]``."""
        schemas = self.schemas
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        frame = pd.concat(frames, ignore_index=True)
        # Spark hands the columns over by position and renames some (e.g. '__ws' -> '_1').
        frame.columns = schemas.pre.names
        table = pa.Table.from_pandas(frame, schema=schemas.pre, preserve_index=False)
        kind = table.column(KIND)
        prev = self.windows.get()
        if prev is None:
            wm_in, state = NO_WATERMARK, schemas.state.empty_table()
        else:
            wm_in, state = int(prev[0]), decode_table(prev[1])
        wms = table.filter(pc.equal(kind, KIND_WATERMARK)).column(WM)
        wm_out = wm_in
        if len(wms):
            wm_out = max(wm_in, int(pc.max(wms).as_py()))
        partials = table.filter(pc.equal(kind, KIND_DATA)).select(schemas.state.names[:-1])
        new_state, results = W.advance(state, partials, wm_in, wm_out, self.spec)
        self.windows.update((wm_out, encode_table(new_state)))

        out = schemas.out
        batches = [_conform(results.append_column(KIND, pa.array(
            [KIND_DATA] * results.num_rows, pa.int32())), out)]
        side = table.filter(pc.equal(kind, KIND_SIDE))
        if side.num_rows:
            batches.append(_conform(side.select([KIND, PORT, BLOB, KG]), out))
        kg = int(key[0])
        batches.append(watermark_batch(out, wm_out, [kg]))
        emits = results.column("emit")
        stats = {
            "final": int(pc.sum(pc.equal(emits, "final")).as_py() or 0),
            "update": int(pc.sum(pc.equal(emits, "update")).as_py() or 0),
            "open_windows": new_state.num_rows,
        }
        batches.append(side_batch(out, METRICS_PORT, metrics_table(self.step, stats)))
        yield pa.Table.from_batches(batches, schema=out).to_pandas(integer_object_nulls=True)

    def close(self) -> None:
        """Nothing to release."""


def compile_window(
    df: DataFrame, node: WindowAggregateNode, key: str | None, key_groups: int
) -> DataFrame:
    """Append the window aggregation ``node`` to the envelope DataFrame ``df``.

    Output payload columns: the key column (absent for an unkeyed stream),
    ``window_start``, ``window_end`` (timestamps, UTC), the aggregations, ``emit``.
    Late events leave as side rows of port ``<step>.late``.

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
    spec = W.TumblingSpec(
        size_ms=node.window.size_ms,
        allowed_lateness_ms=node.allowed_lateness_ms,
        key=key,
        aggregations=node.aggregations,
    )
    try:
        W.late_schema(payload)
        partial = W.partial_schema(spec, payload)
        state = W.state_schema(spec, payload)
        result = W.result_schema(spec, payload)
    except ConfigError as e:
        raise ConfigError(e.parameter, e.value, e.accepted, step=node.step) from None
    schemas = WindowStageSchemas(
        payload=payload,
        pre=with_envelope(partial),
        state=state,
        out=with_envelope(result),
    )
    kg = F.pmod(F.xxhash64(F.col(f"`{key}`")), F.lit(key_groups)).cast("int")
    df = df.withColumn(
        KG, F.when(F.col(KIND) == KIND_DATA, kg).otherwise(F.coalesce(F.col(KG), F.lit(0)))
    )
    pre = df.mapInArrow(PreAggregate(spec, schemas, node.step), spark_schema(schemas.pre))
    out = pre.groupBy(KG).transformWithStateInPandas(
        statefulProcessor=WindowProcessor(spec, schemas, node.step),
        outputStructType=spark_schema(schemas.out),
        outputMode="Append",
        timeMode="None",
    )
    cols = [
        F.timestamp_millis(F.col(c)).alias(c) if c in ("window_start", "window_end") else F.col(c)
        for c in out.columns
        if c != NO_KEY
    ]
    return out.select(*cols)

