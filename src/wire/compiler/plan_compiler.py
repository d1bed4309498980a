"""Compile a :class:`~wire.plan.nodes.Plan` into one Spark streaming DataFrame.

The result is a single chain source → stateless operators → (window) → ...,
in the envelope row format (:mod:`wire.core.envelope`). Its data rows are the
terminal step's ``out`` port; late events, dead letters and metrics travel as
side rows. The runner attaches one ``foreachBatch`` that splits an epoch's rows
by port and hands each port to its sinks, so a flow is one query with one
checkpoint (SPEC §6).

Column pruning: a flow is compiled once with complete sources; Spark's optimized plan
of the result tells which payload columns of each source the flow reads
(:mod:`wire.compiler.pruning`). When a source can produce fewer columns (it has the
``"columns"`` capability, :mod:`wire.sources.base`; the file source has) and the flow reads
fewer, the flow is compiled again with that source told its columns (always with its
event-time and key columns). Inside the compiled flow the unread columns are put back
as typed null literals, so every operator sees the same schema as before and Spark's
optimizer drops them again; the outputs do not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import singledispatch
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from wire.compiler.branches import pack_port, read_once
from wire.compiler.call_sites import without_call_sites
from wire.compiler.exprs import apply_explode, apply_filter, apply_map, apply_select
from wire.compiler.fusion import Fusion, find_fusions
from wire.compiler.join_stage import compile_join
from wire.compiler.lookup_join_stage import compile_lookup_join
from wire.compiler.process_stage import compile_process
from wire.compiler.pruning import SourceAttributes, read_columns, source_attributes
from wire.compiler.pushdown import source_predicate
from wire.compiler.sink_fusion import SinkFusion, find_sink_fusion
from wire.compiler.temporal_join_stage import compile_temporal_join
from wire.compiler.throttle import apply_overflow
from wire.compiler.window_stage import NO_KEY, compile_fused_window, compile_window
from wire.core.envelope import ENVELOPE_COLUMNS, KIND, KIND_SIDE, KIND_WATERMARK, PORT
from wire.core.predicate import Predicate
from wire.errors import ConfigError, PlanError
from wire.plan.graph import chain_of, outputs_of, paused_admission, sinks, source_reads, source_steps
from wire.plan.nodes import (
    LATE,
    ExplodeNode,
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    LookupJoinNode,
    MapNode,
    Node,
    Plan,
    ProcessNode,
    SelectNode,
    SourceNode,
    TemporalJoinNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
)
from wire.sources.base import ReadRequest, Source, can
from wire.sources.base.rows import spark_struct


@dataclass(frozen=True)
class CompiledFlow:
    """A plan compiled for Spark: the streaming DataFrame and how to read its ports."""

    plan: Plan
    dataframe: DataFrame
    terminal_step: str
    """The step whose ``out`` port the DataFrame's data rows are."""
    source_steps: tuple[str, ...]
    bounded: bool
    """True when every source ends (the flow then stops by itself)."""
    key_groups: int
    source_columns: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    """Per source step, the payload columns its source produces (None: all of them)."""
    state_keys: dict[str, str] = field(default_factory=dict)
    """Per keyed stateful step (window, join, process), the key column its state rows carry."""
    state_key_types: dict[str, str] = field(default_factory=dict)
    """Per keyed stateful step, its key column's Spark SQL type (``xxhash64`` of it picks the key group)."""
    source_requests: dict[str, tuple[Source, ReadRequest]] = field(default_factory=dict)
    """Per source step, its connector and the request this compilation read it with (for the
    runner's warm-up, :meth:`wire.sources.base.source.BindingSource.warm_up`)."""
    task_writer: bool = False
    """The source's tasks run the epoch's partition writer (:mod:`wire.compiler.sink_fusion`): the
    DataFrame's rows are the writer's result rows, and each epoch's job must carry its writer."""


@dataclass
class _Compiled:
    """A compiled stream: its DataFrame, key column, watermark channels, origin."""

    df: DataFrame
    key: str | None
    channels: tuple[str, ...]
    from_source: bool


@without_call_sites()
def compile_plan(
    plan: Plan,
    spark: SparkSession,
    key_groups: int,
    control_file: str | None = None,
    *,
    prune_columns: bool = True,
    seeds: Mapping[str, str] | None = None,
    resume: Mapping[str, dict[str, Any]] | None = None,
    fuse: bool = True,
    task_writer: pa.Schema | None = None,
) -> CompiledFlow:
    """Compile ``plan`` to one streaming DataFrame (nothing runs yet).

    After a rescale (:mod:`wire.runtime.rescale`): ``seeds`` maps a stateful step to the
    Parquet of its initial state; ``resume`` maps a source step to ``{"start": offset,
    "end": offset or None}``, where its reads start (instead of the source's initial
    offset) and, when ``end`` is given, where their first epoch ends.

    With ``prune_columns`` (the default), sources that can produce fewer columns produce
    only those the flow reads (see the module docstring); the result's
    ``source_columns`` says which. ``prune_columns=False`` compiles once, with every
    column of every source.

    With ``fuse`` (the default), a window that reads a source through filters only runs
    its pre-stage in the source's tasks (:mod:`wire.compiler.fusion`); ``fuse=False``
    compiles every window as two Spark stages (the same results).

    ``task_writer``: the schema of the rows the epoch's partition writer returns
    (:data:`wire.runtime.dataplane.RESULT_SCHEMA`). With it and ``fuse``, a flow of filters
    and projections runs the writer in its source's tasks (:mod:`wire.compiler.sink_fusion`):
    the result's ``task_writer`` is then True and its DataFrame's rows are the writer's.

    Raises
    ------
    PlanError, ConfigError
        On an unsupported topology or an invalid operator configuration.

    PySpark's capture of each call's Python call site is off while it compiles
    (:mod:`wire.compiler.call_sites`).
    """
    order = chain_of(plan)
    extra = (dict(seeds or {}), dict(resume or {}))
    predicates: dict[str, Predicate | None] = {}  # the filters pushed into sources, found once
    sink_fusion = find_sink_fusion(spark, plan, task_writer) if fuse and task_writer is not None else None
    if sink_fusion is not None:  # the flow is one source task: nothing to prune or push down
        compiled, _ = _compile(plan, order, spark, key_groups, control_file, {}, *extra, predicates, {},
                               sink_fusion)
        return compiled
    fusions = find_fusions(spark, plan, key_groups) if fuse else {}
    if not prune_columns:  # every column of every source, fused ones too
        fusions = {step: replace(f, columns=None) for step, f in fusions.items()}
    compiled, opened = _compile(plan, order, spark, key_groups, control_file, {}, *extra, predicates, fusions)
    if not prune_columns:
        return compiled
    wanted = _pruned_columns(spark, compiled, opened)
    if not wanted:
        return compiled
    pruned, _ = _compile(plan, order, spark, key_groups, control_file, wanted, *extra, predicates, fusions)
    return pruned


@dataclass(frozen=True)
class _Opened:
    """What the first compilation learned about a source that can produce fewer columns."""

    node: SourceNode
    payload: pa.Schema
    struct: StructType
    """Spark schema of the source's DataFrame (payload + envelope), every column."""
    attributes: SourceAttributes


@dataclass
class _Build:
    """One compilation of a plan: its settings, and the streams compiled so far."""

    plan: Plan
    spark: SparkSession
    key_groups: int
    control_file: str | None
    columns: dict[str, tuple[tuple[str, ...], StructType]]
    """Per source step, the payload columns it produces and its complete Spark schema."""
    seeds: dict[str, str]
    resume: dict[str, dict[str, Any]]
    admission: dict[str, int]
    """Per source step, its admission per epoch lowered by a ``throttle(..., mode="pause")``."""
    reads: dict[str, int]
    """Per source step, :func:`~wire.plan.graph.source_reads`."""
    late_read: set[str]
    """The steps whose late port a user sink reads."""
    done: dict[str, _Compiled] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    state_keys: dict[str, str] = field(default_factory=dict)
    key_types: dict[str, str] = field(default_factory=dict)
    """Per keyed stateful step, its key column's Spark SQL type (:attr:`CompiledFlow.state_key_types`)."""
    opened: list[_Opened] = field(default_factory=list)
    """The sources that can prune (first compilation only)."""
    predicates: dict[str, Predicate | None] = field(default_factory=dict)
    """Per source step with the ``"predicate"`` capability, the filter pushed into it
    (:mod:`wire.compiler.pushdown`): found in the first compilation, reused by the second."""
    fusions: dict[str, Fusion] = field(default_factory=dict)
    """Per source step fused with a window, the fusion (:mod:`wire.compiler.fusion`)."""
    sink_fusion: SinkFusion | None = None
    """The flow's source writes its sinks (:mod:`wire.compiler.sink_fusion`)."""
    requests: dict[str, tuple[Source, ReadRequest]] = field(default_factory=dict)
    """Per source step, its connector and read request (:attr:`CompiledFlow.source_requests`)."""
    bounded: bool = True

    def fused(self, step: str) -> Fusion | None:
        """The fusion a filter or window step belongs to (None: not fused)."""
        for f in self.fusions.values():
            if step == f.window or step in f.filters or step in f.key_bys or step in f.maps:
                return f
        return None

    def take(self, step: str) -> _Compiled:
        """A step's stream for one more reader (a branch).

        The first reader gets every row; later readers get the data and watermark rows
        only, so that side rows (late events, dead letters, metrics) reach the result once.
        """
        cur = self.done[step]
        if step not in self.taken:
            self.taken.add(step)
            return cur
        return replace(cur, df=cur.df.where(F.col(KIND) != F.lit(KIND_SIDE)))

    def keyed_channels(self, step: str) -> tuple[str, ...]:
        """The watermark channels a keyed step's output carries: ``<step>/<key group>``."""
        return tuple(f"{step}/{g}" for g in range(self.key_groups))


def _compile(
    plan: Plan,
    order: list[Node],
    spark: SparkSession,
    key_groups: int,
    control_file: str | None,
    columns: dict[str, tuple[tuple[str, ...], StructType]],
    seeds: dict[str, str],
    resume: dict[str, dict[str, Any]],
    predicates: dict[str, Predicate | None] | None = None,
    fusions: dict[str, Fusion] | None = None,
    sink_fusion: SinkFusion | None = None,
) -> tuple[CompiledFlow, list[_Opened]]:
    """Compile ``order`` (from :func:`~wire.plan.graph.chain_of`); also return the sources that can prune.

    ``columns``: per source step, the payload columns its source produces and its
    complete Spark schema (from the first compilation); other sources produce every
    column, and only these are returned (with what pruning needs to know of them).
    Each step is compiled by the :func:`_step` of its node kind.
    """
    late_read = {s.source.step for s in sinks(plan) if s.source.port == LATE and not s.kept}
    b = _Build(plan, spark, key_groups, control_file, columns, seeds, resume,
               paused_admission(plan), source_reads(plan, order), late_read,
               predicates=predicates if predicates is not None else {}, fusions=dict(fusions or {}),
               sink_fusion=sink_fusion)
    for node in order:
        b.done[node.step] = _step(node, b)
    terminal, others = outputs_of(plan, order)
    result = b.take(terminal).df
    for step, pack in others:
        result = result.unionByName(pack_port(b.take(step).df, result.schema, step, pack=pack))
    sources = source_steps(plan)
    produced = {step: columns[step][0] if step in columns else None for step in sources}
    produced |= {step: f.columns for step, f in b.fusions.items()}
    if sink_fusion is not None:
        produced[sink_fusion.source] = sink_fusion.produced
    compiled = CompiledFlow(plan, result, terminal, sources, b.bounded, key_groups, produced, b.state_keys,
                            b.key_types, b.requests, task_writer=sink_fusion is not None)
    return compiled, b.opened


@singledispatch
def _step(node: Node, b: _Build) -> _Compiled:
    """Compile one step of the plan onto the streams it reads (registered per node kind)."""
    raise PlanError(f"cannot compile step {node.step!r} ({type(node).__name__})")


@_step.register
def _source(node: SourceNode, b: _Build) -> _Compiled:
    if node.step in b.admission:
        node = replace(node, max_events_per_epoch=min(node.max_events_per_epoch, b.admission[node.step]))
    subset, struct = b.columns.get(node.step, (None, None))
    fusion = b.fusions.get(node.step)
    scans = b.reads[node.step] if can(node.connector, "replay") else 1  # else read once (below)
    df, payload, ends, request = _open_source(b.spark, node, b.key_groups, b.control_file, subset,
                                              b.resume.get(node.step), (b.plan, b.predicates), fusion,
                                              b.sink_fusion, scans)
    b.requests[node.step] = (node.connector, request)
    if node.key is not None and node.key not in payload.names:
        raise ConfigError("key", node.key, f"a column of the source: {payload.names}", step=node.step)
    if b.sink_fusion is not None:  # its rows are the epoch writer's (wire.compiler.sink_fusion)
        b.bounded = b.bounded and ends
        return _Compiled(df, node.key, (node.step,), True)
    if fusion is None and subset is None and _prunable(node.connector):
        attributes = source_attributes(node.step, df)
        if attributes is not None:
            b.opened.append(_Opened(node, payload, df.schema, attributes))
    elif subset is not None:  # (never fused: a fused source is not in b.opened, so has no subset)
        assert struct is not None  # columns holds both or neither
        df = _restore_columns(df, struct, subset)
    # watermark rows travel on the source's channel
    df = df.withColumn(PORT, F.when(F.col(KIND) == KIND_WATERMARK, F.lit(node.step)).otherwise(F.col(PORT)))
    if b.reads[node.step] > 1 and not can(node.connector, "replay"):
        df = read_once(df, node.step)  # several branches, one scan (branches.read_once)
    b.bounded = b.bounded and ends
    return _Compiled(df, node.key, (node.step,), True)


@_step.register
def _join(node: IntervalJoinNode, b: _Build) -> _Compiled:
    left, right = b.take(node.left), b.take(node.right)
    df = compile_join(left.df, right.df, node, left_key=left.key, right_key=right.key,
                      key_groups=b.key_groups, channels=left.channels + right.channels,
                      seed=b.seeds.get(node.step))
    b.state_keys[node.step] = str(left.key)
    b.key_types[node.step] = left.df.schema[str(left.key)].dataType.simpleString()
    return _Compiled(df, left.key, b.keyed_channels(node.step), False)


@_step.register
def _temporal_join(node: TemporalJoinNode, b: _Build) -> _Compiled:
    stream, table = b.take(node.stream), b.take(node.table)
    df = compile_temporal_join(stream.df, table.df, node, key_groups=b.key_groups,
                               stream_channels=stream.channels, table_channels=table.channels,
                               seed=b.seeds.get(node.step))
    b.state_keys[node.step] = node.on
    b.key_types[node.step] = stream.df.schema[node.on].dataType.simpleString()
    return _Compiled(df, node.on, b.keyed_channels(node.step), False)


@_step.register
def _union(node: UnionNode, b: _Build) -> _Compiled:
    ins = [b.take(u) for u in node.upstreams]
    df = ins[0].df
    for other in ins[1:]:
        if sorted(other.df.columns) != sorted(df.columns):
            raise ConfigError("others", node.upstreams,
                              f"streams with the same columns: {df.columns} vs {other.df.columns}",
                              step=node.step)
        df = df.unionByName(other.df)
    keys = {c.key for c in ins}
    channels = tuple(ch for c in ins for ch in c.channels)
    return _Compiled(df, keys.pop() if len(keys) == 1 else None, channels, all(c.from_source for c in ins))


@_step.register
def _filter(node: FilterNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    if b.fused(node.step) is not None or b.sink_fusion is not None:  # the source applies it
        return cur
    return replace(cur, df=apply_filter(cur.df, node.predicate, node.step))


@_step.register
def _map(node: MapNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    if b.sink_fusion is not None or b.fused(node.step) is not None:  # the source's task computes it
        return cur
    return replace(cur, df=apply_map(cur.df, node.columns, node.step))


@_step.register
def _select(node: SelectNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    if b.sink_fusion is not None:  # the source's task projects (wire.compiler.sink_fusion)
        return cur
    df = apply_select(cur.df, node.columns, node.step)
    return replace(cur, df=df, key=cur.key if cur.key in df.columns else None)


@_step.register
def _explode(node: ExplodeNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    return replace(cur, df=apply_explode(cur.df, node.column, node.step))


@_step.register
def _throttle(node: ThrottleNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    return replace(cur, df=apply_overflow(cur.df, node)) if node.mode == "overflow" else cur


@_step.register
def _key_by(node: KeyByNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    if b.fused(node.step) is not None:  # the source's task keys its events (wire.compiler.fusion)
        return replace(cur, key=node.key)
    if node.key not in cur.df.columns:
        raise ConfigError("key", node.key, f"a column: {cur.df.columns}", step=node.step)
    return replace(cur, key=node.key)


@_step.register
def _window(node: WindowAggregateNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    fusion = b.fused(node.step)
    if fusion is not None:  # its pre-stage ran in the source's tasks (wire.compiler.fusion)
        b.key_types[node.step] = fusion.key_type
        b.state_keys[node.step] = fusion.key if fusion.key is not None else NO_KEY
        df = compile_fused_window(cur.df, fusion.stage, b.seeds.get(node.step))
        return _Compiled(df, cur.key, b.keyed_channels(node.step), False)
    b.key_types[node.step] = (cur.df.schema[cur.key].dataType.simpleString() if cur.key in cur.df.columns
                              else "int")
    df = compile_window(cur.df, node, cur.key, key_groups=b.key_groups, channels=cur.channels,
                        from_source=cur.from_source, late_read=node.step in b.late_read,
                        seed=b.seeds.get(node.step))
    b.state_keys[node.step] = cur.key if cur.key is not None else NO_KEY
    return _Compiled(df, cur.key, b.keyed_channels(node.step), False)


@_step.register
def _process(node: ProcessNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    if cur.key is not None and cur.key in cur.df.columns:
        b.key_types[node.step] = cur.df.schema[cur.key].dataType.simpleString()
    df = compile_process(cur.df, node, cur.key, key_groups=b.key_groups, channels=cur.channels,
                         seed=b.seeds.get(node.step))
    b.state_keys[node.step] = str(cur.key)
    key = cur.key if cur.key in node.schema.names else None
    return _Compiled(df, key, b.keyed_channels(node.step), False)


@_step.register
def _lookup_join(node: LookupJoinNode, b: _Build) -> _Compiled:
    cur = b.take(node.upstream)
    return replace(cur, df=compile_lookup_join(cur.df, node, key_groups=b.key_groups))


def _prunable(connector: object) -> bool:
    """True when the source can produce a subset of its columns (capability ``"columns"``)."""
    return can(connector, "columns")


def _pruned_columns(
    spark: SparkSession, compiled: CompiledFlow, opened: list[_Opened]
) -> dict[str, tuple[tuple[str, ...], StructType]]:
    """Per prunable source that the flow reads only partly: the columns it must produce.

    Those are the payload columns Spark's optimized plan reads, plus the event-time
    column and the key column; in payload order. Sources read completely are left out.
    """
    if not opened:
        return {}
    reads = read_columns(spark, compiled.dataframe, [o.attributes for o in opened])
    wanted: dict[str, tuple[tuple[str, ...], StructType]] = {}
    for o in opened:
        read = reads.get(o.node.step)
        if read is None:
            continue
        keep = read | {o.node.event_time} | ({o.node.key} if o.node.key is not None else set())
        subset = tuple(n for n in o.payload.names if n in keep)
        if len(subset) < len(o.payload.names):
            wanted[o.node.step] = (subset, o.struct)
    return wanted


def _restore_columns(df: DataFrame, struct: StructType, columns: tuple[str, ...]) -> DataFrame:
    """``df`` (a source producing only ``columns``) with the other columns of ``struct`` as nulls.

    The result has exactly the columns of ``struct``, in its order; a column not produced
    is a null literal of its type (nothing downstream reads it).
    """
    produced = set(columns) | set(ENVELOPE_COLUMNS)
    return df.select(*[
        F.col(f"`{f.name}`") if f.name in produced else F.lit(None).cast(f.dataType).alias(f.name)
        for f in struct.fields
    ])


def _pushed(spark: SparkSession, step: str, payload: pa.Schema,
            pushdown: tuple[Plan, dict[str, Predicate | None]] | None) -> Predicate | None:
    """The filter pushed into source ``step`` (:func:`~wire.compiler.pushdown.source_predicate`), memoized."""
    if pushdown is None:
        return None
    plan, found = pushdown
    if step not in found:
        found[step] = source_predicate(spark, plan, step, spark_struct(payload))
    return found[step]


def _open_source(
    spark: SparkSession,
    src: SourceNode,
    key_groups: int,
    control_file: str | None,
    columns: tuple[str, ...] | None = None,
    resume: dict[str, Any] | None = None,
    pushdown: tuple[Plan, dict[str, Predicate | None]] | None = None,
    fusion: Fusion | None = None,
    sink_fusion: SinkFusion | None = None,
    scans: int = 1,
) -> tuple[DataFrame, pa.Schema, bool, ReadRequest]:
    """The source's envelope DataFrame, its payload schema, whether it ends, and the request it was read with.

    Every source gets one :class:`~wire.sources.base.ReadRequest`. ``columns``: the payload
    columns the source produces (None: all); set only for a source that can prune
    (:func:`_prunable`). ``resume``: see :func:`compile_plan`; set for a source with the
    ``"resume"`` capability, refused for others, as ``target_epoch_ms`` is for a source
    without ``"target_epoch_ms"``. ``pushdown``: the flow and the predicates found so far per
    source step; a source with the ``"predicate"`` capability gets the flow's filters on it
    (:mod:`wire.compiler.pushdown`, found once per step); None: none. ``fusion``: the
    source runs a window's pre-stage (:mod:`wire.compiler.fusion`), with the fusion's exact
    predicate and columns. ``sink_fusion``: the source runs the epoch's writer
    (:mod:`wire.compiler.sink_fusion`), with its exact predicate and columns. ``scans``: the
    scans of the source in the plan (:attr:`~wire.sources.base.ReadRequest.scans`).
    """
    connector = src.connector
    if not isinstance(connector, Source):
        raise ConfigError(
            "connector", connector, "a source connector, e.g. wire.sources.files(...)",
            step=src.step,
        )
    payload = connector.resolve_schema()
    if src.event_time not in payload.names:
        raise ConfigError(
            "event_time", src.event_time, f"a column of the source: {payload.names}", step=src.step
        )
    if src.target_epoch_ms is not None and not can(connector, "target_epoch_ms"):
        raise ConfigError(
            "target_epoch_duration", src.target_epoch_ms,
            f"None: the {type(connector).__name__} source does not size its epochs (the file, Kafka, "
            "HTTP ingest, Redis Streams and Nexmark sources do)", step=src.step,
        )
    if resume is not None and not can(connector, "resume"):
        raise ConfigError(
            "key_groups", "a rescale", f"the checkpoint's key groups: the "
            f"{type(connector).__name__} source cannot resume on a new Spark checkpoint "
            "(no 'resume' capability)", step=src.step,
        )
    pre_stage_schema = None
    if sink_fusion is not None:
        predicate, produced, pre_stage = sink_fusion.predicate, sink_fusion.produced, sink_fusion.pre_stage()
        pre_stage_schema = sink_fusion.pre_stage_schema()
    elif fusion is not None:  # the fusion's exact predicate and columns
        predicate, produced, pre_stage = fusion.predicate, fusion.columns, fusion.pre_stage()
    else:
        predicate = _pushed(spark, src.step, payload, pushdown) if can(connector, "predicate") else None
        produced, pre_stage = columns if _prunable(connector) else None, None
    request = ReadRequest(
        step=src.step, schema=payload, event_time=src.event_time, key_groups=key_groups,
        watermark=src.watermark, max_events_per_epoch=src.max_events_per_epoch,
        control_file=control_file, columns=produced, target_epoch_ms=src.target_epoch_ms, resume=resume,
        predicate=predicate, pre_stage=pre_stage, pre_stage_schema=pre_stage_schema, scans=scans,
    )
    return connector.read_stream(spark, request), payload, connector.bounded, request
