"""Shared machinery of Wire's keyed (stateful) operators on Spark.

A keyed operator (window, join, process) is a ``mapInArrow`` pre-stage on executors
that packs each key group's events into one Arrow IPC blob row
(:class:`KeyedPreStage`, :class:`PackEvents`; the key group is ``hash(key) mod
key_groups``, :func:`with_key_group`), then ``groupBy(key group)
.transformWithStateInPandas`` with one call per key group per epoch
(:func:`stateful_stage`, :class:`KeyedProcessor`). This module holds the parts every
such operator shares: blob packing, decoding the envelope-only rows Spark hands the
processor, watermark channels (SPEC §2: an operator's input watermark is the minimum
over its input channels, :mod:`wire.state.operator_watermarks`), and the output rows
(results, side rows, watermark rows to every downstream key group, metrics). An
operator's module brings only its pure kernel's call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, GroupedData
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from wire.compiler.deferred_processor import DeferredProcessor, StateDeclaration, declare
from wire.core.arrow_types import spark_schema
from wire.core.envelope import (
    BLOB,
    ENVELOPE_ARROW,
    ET,
    KG,
    KIND,
    KIND_DATA,
    KIND_SIDE,
    KIND_WATERMARK,
    METRICS_PORT,
    PORT,
    SEQ,
    WM,
    decode_table,
    encode_table,
    envelope_batch,
    metrics_table,
    side_batch,
)
from wire.core.time import NO_WATERMARK
from wire.plan.nodes import LATE, PortRef
from wire.state.kernels import runs
from wire.state.operator_watermarks import Mark, fold_marks, input_watermark
from wire.state.packed_chunks import PackedChunks

OPERATOR_STATE = StructType(
    [
        StructField("wm_in", LongType()),
        StructField("wm_out", LongType()),
        StructField("channels", StringType()),
        StructField("tables", BinaryType()),
    ]
)
"""One ValueState per key group: input/output watermark (ms), per-channel watermarks
(JSON), and the operator's state tables (Arrow IPC; a table with one row of binary
columns, one per named state table). Bucketed state keeps only its chunk index here
(table :data:`SEGMENT_INDEX`); the chunks are in :data:`SEGMENT_KEY` MapState."""

SEGMENT_INDEX = "__segments"
"""Name of the state table holding the chunk index (:data:`wire.state.segments.INDEX_SCHEMA`)."""

SEGMENT_KEY = StructType([StructField("bucket", LongType()), StructField("chunk", LongType())])
SEGMENT_VALUE = StructType([StructField("rows", BinaryType())])
"""MapState ``segments`` of each key group: ``(bucket, chunk) -> Arrow IPC of the chunk's rows``
(:mod:`wire.state.segments`)."""


SEED_OPERATOR, SEED_CHUNK = 0, 1
SEED_SCHEMA = pa.schema([
    pa.field(KG, pa.int32()), pa.field("seed_kind", pa.int32()), pa.field("wm_in", pa.int64()),
    pa.field("wm_out", pa.int64()), pa.field("channels", pa.string()), pa.field("tables", pa.binary()),
    pa.field("bucket", pa.int64()), pa.field("chunk", pa.int64()), pa.field("rows", pa.binary()),
])
"""Rows of a keyed operator's initial state after a rescale (:mod:`wire.runtime.rescale`):
per key group one row of kind :data:`SEED_OPERATOR` (its ``operator`` ValueState) and one
row of kind :data:`SEED_CHUNK` per ``segments`` chunk."""


def stage_name(step: str) -> str:
    """The name a keyed operator's pre-stage ``mapInArrow`` function shows in Spark's plan.

    ``wire_keyed_<step as hex>``: :func:`wire.runtime.rescale.operator_ids` finds each
    stateful step's Spark operator id by it.
    """
    return "wire_keyed_" + step.encode("utf-8").hex()


def seeded(df: DataFrame, seed: str | None) -> GroupedData | None:
    """The initial state of a keyed operator: the seed Parquet at ``seed`` grouped by key group."""
    if seed is None:
        return None
    return df.sparkSession.read.parquet(seed).groupBy(KG)


class MapStateChunks:
    """:class:`wire.state.segments.ChunkStore` over the key group's ``segments`` MapState.

    Every method is one Python↔JVM round trip; :attr:`calls` counts them (metric
    ``state_calls``).
    """

    def __init__(self, state: object) -> None:
        self.state = state
        self.calls = 0

    def get(self, bucket: int, chunk: int) -> pa.Table:
        """The chunk's rows."""
        self.calls += 1
        value = self.state.getValue((bucket, chunk))  # type: ignore[attr-defined]
        if value is None:
            raise KeyError(f"state chunk ({bucket}, {chunk}) is missing from the checkpoint")
        return decode_table(value[0])

    def put(self, bucket: int, chunk: int, table: pa.Table) -> None:
        """Write a chunk."""
        self.calls += 1
        self.state.updateValue((bucket, chunk), (encode_table(table),))  # type: ignore[attr-defined]

    def delete(self, bucket: int, chunk: int) -> None:
        """Remove a chunk."""
        self.calls += 1
        self.state.removeKey((bucket, chunk))  # type: ignore[attr-defined]


def conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
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


def pandas_safe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Fill nulls in the envelope's integer columns with 0 (rows Spark hands to pandas).

    An int64 column with nulls becomes float64 in pandas, which cannot hold
    watermarks near ±2**63 exactly; no reader looks at these values where they are null.
    """
    ints = [i for i, f in enumerate(ENVELOPE_ARROW) if pa.types.is_integer(f.type)]
    for b in batches:
        arrays = list(b.columns)
        for i in ints:
            if arrays[i].null_count:
                arrays[i] = arrays[i].fill_null(0)
        yield pa.RecordBatch.from_arrays(arrays, schema=b.schema)


def events_of(rows: pa.RecordBatch, payload: pa.Schema) -> pa.Table:
    """Data rows as pure operator functions take them: payload + ``__et`` + ``__seq``."""
    return pa.Table.from_batches([rows]).select([*payload.names, ET, SEQ])


def blob_row(port: str, kg: int, table: pa.Table) -> pa.RecordBatch:
    """One envelope-only data row addressed to key group ``kg`` carrying ``table``."""
    return envelope_batch(
        ENVELOPE_ARROW,
        {
            KIND: pa.array([KIND_DATA], pa.int32()),
            KG: pa.array([kg], pa.int32()),
            PORT: pa.array([port], pa.string()),
            BLOB: pa.array([encode_table(table)], pa.binary()),
        },
        1,
    )


def split_by_group(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """``(key group, rows)`` for each key group present in ``table`` (column ``__kg``).

    Groups come in ascending key-group order; within a group, rows keep their order in
    ``table`` (one stable sort and zero-copy slices, not one filter per group).
    """
    if not table.num_rows:
        return
    groups = table.column(KG)
    first, last = pc.min_max(groups).values()
    if first.as_py() == last.as_py():
        yield int(first.as_py()), table.drop_columns([KG])
        return
    ordered = table.take(pc.sort_indices(groups))  # Arrow's sort_indices is stable
    rest = ordered.drop_columns([KG])
    for kg, lo, hi in runs(ordered.column(KG).to_numpy()):
        yield kg, rest.slice(lo, hi - lo)


def pack_events(port: str, data: pa.RecordBatch, payload: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Pack a batch of data rows into one blob row per key group."""
    table = events_of(data, payload).append_column(KG, data.column(KG))
    for kg, part in split_by_group(table):
        yield blob_row(port, kg, part)


def passthrough(batch: pa.RecordBatch) -> pa.RecordBatch | None:
    """The batch's watermark and side rows as envelope-only rows (None if there are none)."""
    control = batch.filter(pc.not_equal(batch.column(KIND), KIND_DATA))
    return conform(control, ENVELOPE_ARROW) if control.num_rows else None


def with_key_group(df: DataFrame, key: str, key_groups: int) -> DataFrame:
    """``df`` with its data rows' key group (``__kg``): ``xxhash64(key) mod key_groups``.

    Watermark and side rows keep the key group they carry (0 when they carry none).
    """
    kg = F.pmod(F.xxhash64(F.col(f"`{key}`")), F.lit(key_groups)).cast("int")
    return df.withColumn(KG, F.when(F.col(KIND) == KIND_DATA, kg).otherwise(F.coalesce(F.col(KG), F.lit(0))))


class KeyedPreStage:
    """Base of a keyed operator's ``mapInArrow`` pre-stage (a function on executors).

    It is named after the step (:func:`stage_name`: :mod:`wire.runtime.rescale` finds the
    operator by it) and turns one partition's envelope batches into envelope-only rows
    (:meth:`rows`, with the partition's counters as its locals).
    """

    def __init__(self, step: str) -> None:
        self.step = step
        self.__name__ = stage_name(step)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Transform one partition's batches into envelope-only rows."""
        return pandas_safe(self.rows(batches))

    def rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One partition's envelope-only rows."""
        raise NotImplementedError


def each_batch(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[pa.RecordBatch | None, pa.RecordBatch]]:
    """Per batch: its watermark and side rows (:func:`passthrough`; None: none) and its data rows."""
    for batch in batches:
        yield passthrough(batch), batch.filter(pc.equal(batch.column(KIND), KIND_DATA))


class PackEvents(KeyedPreStage):
    """Pre-stage that packs the events into one blob row per key group on ``port``.

    Watermark and side rows pass through. ``payload``: the events' payload columns. With
    ``metric``, one metrics row per partition counts its events under that name (e.g.
    ``"events:left"``).
    """

    def __init__(self, step: str, port: str, payload: pa.Schema, metric: str | None = None) -> None:
        super().__init__(step)
        self.port, self.payload, self.metric = port, payload, metric

    def rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Control rows, then each batch's events per key group; the metrics row last."""
        n = 0
        for control, data in each_batch(batches):
            if control is not None:
                yield control
            if data.num_rows:
                n += data.num_rows
                yield from pack_events(self.port, data, self.payload)
        if n and self.metric is not None:
            stats = {self.metric: n}
            yield side_batch(ENVELOPE_ARROW, METRICS_PORT, metrics_table(self.step, stats), key_group=0)


def packed(df: DataFrame, key: str, key_groups: int, pre: KeyedPreStage) -> DataFrame:
    """``df`` by key group (:func:`with_key_group`) through the pre-stage ``pre``: envelope-only rows."""
    return with_key_group(df, key, key_groups).mapInArrow(pre, spark_schema(ENVELOPE_ARROW))


def stateful_stage(rows: DataFrame, processor: KeyedProcessor[Any], seed: str | None) -> DataFrame:
    """``rows`` (envelope-only, from :func:`packed`) through ``processor``, once per key group and epoch.

    ``groupBy(__kg).transformWithStateInPandas`` in append mode without Spark timers; the
    output rows have the schema of the processor's stage (``stage.out``). ``seed``: the
    operator's initial state after a rescale (:func:`seeded`).
    """
    return rows.groupBy(KG).transformWithStateInPandas(
        statefulProcessor=DeferredProcessor(processor),  # light on the driver's set-up
        outputStructType=spark_schema(processor.stage.out),
        outputMode="Append",
        timeMode="None",
        initialState=seeded(rows, seed),
    )


@dataclass
class GroupInput:
    """One key group's input of one epoch, decoded."""

    table: pa.Table
    """All rows (envelope-only schema)."""
    blobs: dict[str, list[pa.Table]]
    """Data blobs by port."""
    marks: list[Mark]
    """Watermark rows: (channel, watermark)."""


def read_group(rows: Iterator[pd.DataFrame]) -> GroupInput | None:
    """Decode the pandas frames Spark hands a processor (envelope-only rows)."""
    frames = [f for f in rows if len(f)]
    if not frames:
        return None
    frame = pd.concat(frames, ignore_index=True)
    # Spark hands columns over by position and renames some (e.g. '__kind' -> '_1').
    frame.columns = ENVELOPE_ARROW.names
    table = pa.Table.from_pandas(frame, schema=ENVELOPE_ARROW, preserve_index=False)
    kind = table.column(KIND)
    data = table.filter(pc.equal(kind, KIND_DATA))
    blobs: dict[str, list[pa.Table]] = {}
    for port, blob in zip(data.column(PORT).to_pylist(), data.column(BLOB).to_pylist(), strict=True):
        blobs.setdefault(port, []).append(decode_table(blob))
    wm = table.filter(pc.equal(kind, KIND_WATERMARK))
    marks = list(zip(wm.column(PORT).to_pylist(), wm.column(WM).to_pylist(), strict=True))
    return GroupInput(table, blobs, marks)


@dataclass
class OperatorState:
    """A key group's operator state, as kept in the ``OPERATOR_STATE`` ValueState."""

    wm_in: int = NO_WATERMARK
    wm_out: int = NO_WATERMARK
    channels: dict[str, int] | None = None
    tables: dict[str, pa.Table] | None = None

    @classmethod
    def load(cls, value: tuple[Any, ...] | None) -> OperatorState:
        """Decode the ValueState's value (None: first epoch)."""
        if value is None:
            return cls(channels={}, tables={})
        packed = decode_table(value[3])
        tables = {name: decode_table(packed.column(name)[0].as_py()) for name in packed.column_names}
        return cls(int(value[0]), int(value[1]), json.loads(value[2]), tables)

    def dump(self) -> tuple[int, int, str, bytes]:
        """Encode for ``ValueState.update``."""
        tables = self.tables or {}
        packed = pa.table({n: pa.array([encode_table(t)], pa.binary()) for n, t in tables.items()})
        return (self.wm_in, self.wm_out, json.dumps(self.channels or {}), encode_table(packed))

    def advance_input(self, marks: list[Mark], expected: tuple[str, ...]) -> int:
        """Fold watermark rows into the channels; return the new input watermark.

        ``in' = max(in, min over expected channels)`` (Beam rule, SPEC §2:
        :mod:`wire.state.operator_watermarks`). ``wm_in`` is left as it is: the epoch's
        processing still needs the input watermark in force while its events arrived.
        """
        self.channels = fold_marks(self.channels or {}, marks, expected)
        return input_watermark(self.wm_in, self.channels, expected)


def output_frame(
    out: pa.Schema,
    *,
    step: str,
    kg: int,
    key_groups: int,
    results: pa.Table,
    event_time: pa.Array,
    watermark: int,
    side_in: pa.Table,
    late: pa.Table | None,
    late_port: str,
    new_out: int,
    stats: dict[str, int],
) -> pd.DataFrame:
    """The processor's output for one key group and epoch, as a pandas frame.

    Result rows carry ``event_time`` and ``watermark`` (the output watermark in force
    during the epoch); upstream side rows pass through; late rows leave on
    ``late_port``; one watermark row per downstream key group carries ``new_out`` on
    channel ``<step>/<kg>``; metrics leave on the metrics port.
    """
    n = results.num_rows
    batches = [
        conform(
            results.append_column(KIND, pa.array([KIND_DATA] * n, pa.int32()))
            .append_column(ET, event_time)
            .append_column(WM, pa.array([watermark] * n, pa.int64())),
            out,
        )
    ]
    if late is not None and late.num_rows:
        batches.append(side_batch(out, late_port, late, key_group=0))
    side = side_in.filter(pc.equal(side_in.column(KIND), KIND_SIDE))
    if side.num_rows:
        batches.append(conform(side.select([KIND, PORT, BLOB, KG]), out))
    g = key_groups
    batches.append(
        envelope_batch(
            out,
            {
                KIND: pa.array([KIND_WATERMARK] * g, pa.int32()),
                WM: pa.array([new_out] * g, pa.int64()),
                KG: pa.array(range(g), pa.int32()),
                PORT: pa.array([f"{step}/{kg}"] * g, pa.string()),
            },
            g,
        )
    )
    batches.append(side_batch(out, METRICS_PORT, metrics_table(step, stats)))
    return pa.Table.from_batches(batches, schema=out).to_pandas(types_mapper=_nullable_ints)


_NULLABLE_INTS = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                  pa.int64(): pd.Int64Dtype()}


def _nullable_ints(t: pa.DataType) -> pd.api.extensions.ExtensionDtype | None:
    """Integer columns become pandas' nullable integers (``Int64``): exact with nulls.

    A numpy column would be float64 (inexact near ±2**63) or, with ``integer_object_nulls``,
    one Python object per value that PySpark converted back one by one. A nullable column
    is two numpy arrays, and PySpark hands it to Arrow through ``__arrow_array__``.
    """
    return _NULLABLE_INTS.get(t)


class Stage(Protocol):
    """What a :class:`KeyedProcessor` needs of its operator's compiled stage."""

    @property
    def step(self) -> str:
        """The operator's step id."""
        ...

    @property
    def out(self) -> pa.Schema:
        """Output rows: result columns + envelope."""
        ...

    @property
    def channels(self) -> tuple[str, ...]:
        """The operator's input watermark channels."""
        ...

    @property
    def key_groups(self) -> int:
        """Key groups downstream: one watermark row to each."""
        ...


StageT = TypeVar("StageT", bound=Stage)


class KeyedProcessor(StatefulProcessor, Generic[StageT]):
    """Base of Wire's transformWithStateInPandas processors: one call per key group per epoch.

    It loads the key group's :class:`OperatorState`, folds the epoch's watermark rows
    into the input watermark, calls :meth:`process` and stores the state back.
    """

    def __init__(self, stage: StageT) -> None:
        self.stage = stage
        self.channels = stage.channels
        """The operator's input watermark channels."""
        self.calls_before = 0
        """:meth:`state_calls` when the key group's epoch started."""

    STATES: ClassVar[tuple[StateDeclaration, ...]] = (
        StateDeclaration("value", "operator", OPERATOR_STATE),
        StateDeclaration("map", "segments", SEGMENT_VALUE, SEGMENT_KEY),
    )
    """The state variables: ValueState ``operator``, MapState ``segments``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare :attr:`STATES` and :meth:`bind` them (Spark calls the DeferredProcessor's instead)."""
        self.bind(declare(handle, self.STATES))

    def bind(self, states: dict[str, Any]) -> None:
        """Take the declared state variables (by name, :attr:`STATES`)."""
        self.state = states["operator"]
        self.raw_chunks = MapStateChunks(states["segments"])
        self.chunks = PackedChunks(self.raw_chunks)

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: object
    ) -> Iterator[pd.DataFrame]:
        """Process key group ``key[0]``'s rows of one epoch."""
        group = read_group(rows)
        if group is None:
            return
        op = OperatorState.load(self.state.get())
        wm_in = op.wm_in
        new_in = op.advance_input(group.marks, self.channels)
        self.calls_before = self.state_calls()
        frame = self.process(int(key[0]), group, op, wm_in, new_in)
        self.chunks.flush()
        self.state.update(op.dump())
        yield frame

    def handleInitialState(
        self, key: tuple[Any, ...], initialState: pd.DataFrame, timerValues: object
    ) -> None:
        """Write key group ``key[0]``'s seeded state (a rescaled restart, :data:`SEED_SCHEMA`).

        Spark calls it only in the first epoch of a query started with an initial state
        (:mod:`wire.runtime.rescale`): rows of kind 0 are the ``operator`` ValueState, rows
        of kind 1 one chunk of the ``segments`` MapState each, written as they are.
        """
        for row in initialState.itertuples(index=False):
            if int(row.seed_kind) == SEED_OPERATOR:
                self.state.update((int(row.wm_in), int(row.wm_out), str(row.channels), bytes(row.tables)))
            else:
                self.raw_chunks.state.updateValue(  # type: ignore[attr-defined]
                    (int(row.bucket), int(row.chunk)), (bytes(row.rows),))

    def process(
        self, kg: int, group: GroupInput, op: OperatorState, wm_in: int, new_in: int
    ) -> pd.DataFrame:
        """One epoch of key group ``kg``: update ``op`` (watermarks, tables), return output.

        ``wm_in`` is the input watermark in force while the epoch's events arrived,
        ``new_in`` the input watermark after the epoch. An operator runs its pure kernel
        and ends with :meth:`finish`.
        """
        raise NotImplementedError

    def state_calls(self) -> int:
        """Python↔JVM state calls so far (metric ``state_calls``: the epoch's difference)."""
        return self.chunks.calls

    def finish(
        self, kg: int, group: GroupInput, op: OperatorState, *, new_in: int, new_out: int,
        tables: dict[str, pa.Table], results: pa.Table, event_time: pa.Array,
        late: pa.Table | None, stats: dict[str, int],
    ) -> pd.DataFrame:
        """End key group ``kg``'s epoch: keep its watermarks and state tables; its output frame.

        ``op`` takes ``new_in``, ``new_out`` and ``tables``. Results leave with the output
        watermark in force during the epoch (``op.wm_out`` before it), late events on the
        step's ``late`` port, the watermark rows with ``new_out``; ``stats`` gets the
        epoch's ``state_calls`` (:func:`output_frame`).
        """
        old_out = op.wm_out
        op.wm_in, op.wm_out, op.tables = new_in, new_out, tables
        st = self.stage
        return output_frame(
            st.out, step=st.step, kg=kg, key_groups=st.key_groups, results=results,
            event_time=event_time, watermark=old_out, side_in=group.table, late=late,
            late_port=PortRef(st.step, LATE).port_id(), new_out=new_out,
            stats={**stats, "state_calls": self.state_calls() - self.calls_before},
        )

    def close(self) -> None:
        """Nothing to release."""
