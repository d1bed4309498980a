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
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from wire.compiler.branches import pack_port, read_once
from wire.compiler.exprs import apply_explode, apply_filter, apply_map, apply_select
from wire.compiler.join_stage import compile_join
from wire.compiler.process_stage import compile_process
from wire.compiler.pruning import SourceAttributes, read_columns, source_attributes
from wire.compiler.throttle import apply_overflow
from wire.compiler.window_stage import NO_KEY, compile_window
from wire.core.envelope import ENVELOPE_COLUMNS, KIND, KIND_SIDE, KIND_WATERMARK, PORT
from wire.errors import ConfigError, PlanError
from wire.plan.nodes import (
    ALL_STEPS,
    DEAD_LETTER,
    LATE,
    OUT,
    OVERFLOW,
    DropNode,
    ExplodeNode,
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    MapNode,
    Node,
    Plan,
    ProcessNode,
    SelectNode,
    SinkNode,
    SourceNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
    upstreams,
)
from wire.sources.base import ReadRequest, Source, can


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


def chain_of(plan: Plan) -> list[Node]:
    """The plan's operators in compile order (upstream first), checking the topology.

    A flow is a directed acyclic graph: sources, merged by ``union`` or joined; any
    stream may feed any number of operators and sinks (branches). The order is the
    plan's (a step is built after its upstreams). Late, dead-letter and overflow ports
    of any step may be sunk.

    Raises
    ------
    PlanError
        No source, no sink, a stream that ends without any sink reading one of its
        ports, a sink on a port that the compiled flow does not produce, or a source that
        acknowledges its input (``acknowledges = True``: Redis Streams, HTTP ingest) read
        by more than one branch (:func:`source_reads`).
    """
    ops = [n for n in plan.nodes if not isinstance(n, SinkNode | DropNode)]
    if not any(isinstance(n, SourceNode) for n in ops):
        raise PlanError(f"flow {plan.flow_id!r} has no source")
    steps = {n.step: n for n in ops}
    port_readers: tuple[SinkNode | DropNode, ...] = (*plan.sinks(), *plan.drops())
    for sink in port_readers:
        ref = sink.source
        if ref.port == OUT and ref.step not in steps:
            raise PlanError(f"sink {sink.step!r}: unknown step {ref.step!r}")
        if ref.port == LATE and not isinstance(
            steps.get(ref.step), WindowAggregateNode | IntervalJoinNode | ProcessNode
        ):
            raise PlanError(f"sink {sink.step!r}: {ref.step!r} has no late port")
        throttle = steps.get(ref.step)
        if ref.port == OVERFLOW and not (
            isinstance(throttle, ThrottleNode) and throttle.mode == "overflow"
        ):
            raise PlanError(f"sink {sink.step!r}: {ref.step!r} has no overflow port")
        if ref.port == DEAD_LETTER and ref.step != ALL_STEPS and ref.step not in steps:
            raise PlanError(f"sink {sink.step!r}: unknown step {ref.step!r}")
    if not plan.sinks():
        raise PlanError(f"flow {plan.flow_id!r} has no sink: nothing would be written")
    read_by_ops = {up for n in ops for up in upstreams(n)}
    read_by_sinks = {s.source.step for s in port_readers}
    dangling = [n.step for n in ops if n.step not in read_by_ops and n.step not in read_by_sinks]
    if dangling:
        raise PlanError(
            f"flow {plan.flow_id!r}: stream(s) {dangling} end without a sink; sink them "
            "(a branch may end in its own sink) or remove them"
        )
    return ops


def source_reads(plan: Plan, order: list[Node] | None = None) -> dict[str, int]:
    """Per source step, how many times the source appears in the compiled query's plan.

    Spark's plan is a tree: a stream read by several branches is repeated in each. Spark
    makes one stream of the repetitions (one admission and one commit per epoch) but
    records its offset once per repetition in the offset log; the scans are shared
    (:func:`wire.compiler.branches.read_once`), so the source is read once per epoch. The
    count is the number of paths from the query's outputs (:func:`outputs_of`) down to
    the source.
    """
    order = chain_of(plan) if order is None else order
    steps = {n.step: n for n in order}
    paths: dict[str, dict[str, int]] = {}

    def below(step: str) -> dict[str, int]:
        if step not in paths:
            node = steps[step]
            total: dict[str, int] = {step: 1} if isinstance(node, SourceNode) else {}
            for up in upstreams(node):
                for src, k in below(up).items():
                    total[src] = total.get(src, 0) + k
            paths[step] = total
        return paths[step]

    main, others = outputs_of(plan, order)
    reads: dict[str, int] = {}
    for step in [main, *(s for s, _ in others)]:
        for src, k in below(step).items():
            reads[src] = reads.get(src, 0) + k
    return reads


def outputs_of(plan: Plan, order: list[Node]) -> tuple[str, list[tuple[str, bool]]]:
    """The compiled query's outputs: the main step, and the other streams that reach it.

    The main step is the first terminal stream (no operator reads it) whose ``out``
    port a sink reads, else the first terminal; its data rows are the query's data
    rows. Every other terminal, and every other step whose ``out`` port a sink reads,
    is returned as ``(step, pack)``: its side rows reach the query's result, and with
    ``pack`` its data rows too, as side rows of port ``"<step>.out"``.
    """
    read_by_ops = {up for n in order for up in upstreams(n)}
    terminals = [n.step for n in order if n.step not in read_by_ops]
    sunk = {s.source.step for s in plan.sinks() if s.source.port == OUT}
    main = next((t for t in terminals if t in sunk), terminals[0])
    others = [n.step for n in order if n.step != main and (n.step in sunk or n.step not in read_by_ops)]
    return main, [(step, step in sunk) for step in others]


@dataclass
class _Compiled:
    """A compiled stream: its DataFrame, key column, watermark channels, origin."""

    df: DataFrame
    key: str | None
    channels: tuple[str, ...]
    from_source: bool


def compile_plan(
    plan: Plan,
    spark: SparkSession,
    key_groups: int,
    control_file: str | None = None,
    *,
    prune_columns: bool = True,
    seeds: Mapping[str, str] | None = None,
    resume: Mapping[str, dict[str, Any]] | None = None,
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

    Raises
    ------
    PlanError, ConfigError
        On an unsupported topology or an invalid operator configuration.
    """
    order = chain_of(plan)
    extra = (dict(seeds or {}), dict(resume or {}))
    compiled, opened = _compile(plan, order, spark, key_groups, control_file, {}, *extra)
    if not prune_columns:
        return compiled
    wanted = _pruned_columns(spark, compiled, opened)
    if not wanted:
        return compiled
    pruned, _ = _compile(plan, order, spark, key_groups, control_file, wanted, *extra)
    return pruned


@dataclass(frozen=True)
class _Opened:
    """What the first compilation learned about a source that can produce fewer columns."""

    node: SourceNode
    payload: pa.Schema
    struct: StructType
    """Spark schema of the source's DataFrame (payload + envelope), every column."""
    attributes: SourceAttributes


def _compile(
    plan: Plan,
    order: list[Node],
    spark: SparkSession,
    key_groups: int,
    control_file: str | None,
    columns: dict[str, tuple[tuple[str, ...], StructType]],
    seeds: dict[str, str],
    resume: dict[str, dict[str, Any]],
) -> tuple[CompiledFlow, list[_Opened]]:
    """Compile ``order`` (from :func:`chain_of`); also return the sources that can prune.

    ``columns``: per source step, the payload columns its source produces and its
    complete Spark schema (from the first compilation); other sources produce every
    column, and only these are returned (with what pruning needs to know of them).
    """
    admission = _paused_admission(plan)
    reads = source_reads(plan, order)
    late_read = {s.source.step for s in plan.sinks() if s.source.port == LATE and not s.kept}
    done: dict[str, _Compiled] = {}
    taken: set[str] = set()
    state_keys: dict[str, str] = {}
    key_types: dict[str, str] = {}

    def take(step: str) -> _Compiled:
        """A step's stream for one more reader (a branch).

        The first reader gets every row; later readers get the data and watermark rows
        only, so that side rows (late events, dead letters, metrics) reach the result once.
        """
        cur = done[step]
        if step not in taken:
            taken.add(step)
            return cur
        return replace(cur, df=cur.df.where(F.col(KIND) != F.lit(KIND_SIDE)))

    opened: list[_Opened] = []  # sources that can prune (first compilation only)
    bounded = True
    for node in order:
        if isinstance(node, SourceNode):
            if node.step in admission:
                node = replace(node, max_events_per_epoch=min(node.max_events_per_epoch,
                                                              admission[node.step]))
            subset, struct = columns.get(node.step, (None, None))
            df, payload, ends = _open_source(spark, node, key_groups, control_file, subset,
                                             resume.get(node.step))
            if node.key is not None and node.key not in payload.names:
                raise ConfigError("key", node.key, f"a column of the source: {payload.names}",
                                  step=node.step)
            if subset is None and _prunable(node.connector):
                attributes = source_attributes(node.step, df)
                if attributes is not None:
                    opened.append(_Opened(node, payload, df.schema, attributes))
            elif subset is not None:
                assert struct is not None  # columns holds both or neither
                df = _restore_columns(df, struct, subset)
            # watermark rows travel on the source's channel
            df = df.withColumn(PORT, F.when(F.col(KIND) == KIND_WATERMARK, F.lit(node.step))
                               .otherwise(F.col(PORT)))
            if reads[node.step] > 1 and not can(node.connector, "replay"):
                df = read_once(df, node.step)  # several branches, one scan (branches.read_once)
            done[node.step] = _Compiled(df, node.key, (node.step,), True)
            bounded = bounded and ends
            continue
        if isinstance(node, IntervalJoinNode):
            left, right = take(node.left), take(node.right)
            df = compile_join(left.df, right.df, node, left_key=left.key, right_key=right.key,
                              key_groups=key_groups, channels=left.channels + right.channels,
                              seed=seeds.get(node.step))
            state_keys[node.step] = str(left.key)
            key_types[node.step] = left.df.schema[str(left.key)].dataType.simpleString()
            done[node.step] = _Compiled(df, left.key, tuple(f"{node.step}/{g}" for g in range(key_groups)),
                                        False)
            continue
        if isinstance(node, UnionNode):
            ins = [take(u) for u in node.upstreams]
            df = ins[0].df
            for other in ins[1:]:
                if sorted(other.df.columns) != sorted(df.columns):
                    raise ConfigError("others", node.upstreams,
                                      f"streams with the same columns: {df.columns} vs "
                                      f"{other.df.columns}", step=node.step)
                df = df.unionByName(other.df)
            keys = {c.key for c in ins}
            channels = tuple(ch for c in ins for ch in c.channels)
            done[node.step] = _Compiled(df, keys.pop() if len(keys) == 1 else None, channels,
                                        all(c.from_source for c in ins))
            continue
        cur = take(upstreams(node)[0])
        df, key, channels, from_source = cur.df, cur.key, cur.channels, cur.from_source
        if isinstance(node, FilterNode):
            df = apply_filter(df, node.predicate, node.step)
        elif isinstance(node, MapNode):
            df = apply_map(df, node.columns, node.step)
        elif isinstance(node, SelectNode):
            df = apply_select(df, node.columns, node.step)
            if key is not None and key not in df.columns:
                key = None
        elif isinstance(node, ExplodeNode):
            df = apply_explode(df, node.column, node.step)
        elif isinstance(node, ThrottleNode):
            if node.mode == "overflow":
                df = apply_overflow(df, node)
        elif isinstance(node, KeyByNode):
            if node.key not in df.columns:
                raise ConfigError("key", node.key, f"a column: {df.columns}", step=node.step)
            key = node.key
        elif isinstance(node, WindowAggregateNode):
            key_types[node.step] = df.schema[key].dataType.simpleString() if key in df.columns else "int"
            df = compile_window(df, node, key, key_groups=key_groups, channels=channels,
                                from_source=from_source, late_read=node.step in late_read,
                                seed=seeds.get(node.step))
            state_keys[node.step] = key if key is not None else NO_KEY
            channels = tuple(f"{node.step}/{g}" for g in range(key_groups))
            from_source = False
        elif isinstance(node, ProcessNode):
            if key is not None and key in df.columns:
                key_types[node.step] = df.schema[key].dataType.simpleString()
            df = compile_process(df, node, key, key_groups=key_groups, channels=channels,
                                 seed=seeds.get(node.step))
            state_keys[node.step] = str(key)
            key = key if key in node.schema.names else None
            channels, from_source = tuple(f"{node.step}/{g}" for g in range(key_groups)), False
        else:  # pragma: no cover - the builder creates no other node types
            raise PlanError(f"cannot compile step {node.step!r} ({type(node).__name__})")
        done[node.step] = _Compiled(df, key, channels, from_source)
    terminal, others = outputs_of(plan, order)
    result = take(terminal).df
    for step, pack in others:
        result = result.unionByName(pack_port(take(step).df, result.schema, step, pack=pack))
    sources = tuple(n.step for n in order if isinstance(n, SourceNode))
    produced = {step: columns[step][0] if step in columns else None for step in sources}
    compiled = CompiledFlow(plan, result, terminal, sources, bounded, key_groups, produced, state_keys,
                            key_types)
    return compiled, opened



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


def _paused_admission(plan: Plan) -> dict[str, int]:
    """Per source step, the lowest ``throttle(..., mode="pause")`` limit downstream of it."""
    limits: dict[str, int] = {}
    for node in plan.nodes:
        if not (isinstance(node, ThrottleNode) and node.mode == "pause"):
            continue
        stack = [node.upstream]
        while stack:
            up = plan.node(stack.pop())
            if isinstance(up, SourceNode):
                limits[up.step] = min(limits.get(up.step, node.max_events_per_epoch),
                                      node.max_events_per_epoch)
            else:
                stack.extend(upstreams(up))
    return limits


def _open_source(
    spark: SparkSession,
    src: SourceNode,
    key_groups: int,
    control_file: str | None,
    columns: tuple[str, ...] | None = None,
    resume: dict[str, Any] | None = None,
) -> tuple[DataFrame, pa.Schema, bool]:
    """The source's envelope DataFrame, its payload schema and whether it ends.

    Every source gets one :class:`~wire.sources.base.ReadRequest`. ``columns``: the payload
    columns the source produces (None: all); set only for a source that can prune
    (:func:`_prunable`). ``resume``: see :func:`compile_plan`; set for a source with the
    ``"resume"`` capability, refused for others, as ``target_epoch_ms`` is for a source
    without ``"target_epoch_ms"``.
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
    request = ReadRequest(
        step=src.step, schema=payload, event_time=src.event_time, key_groups=key_groups,
        max_delay_ms=src.watermark.max_delay_ms, max_events_per_epoch=src.max_events_per_epoch,
        control_file=control_file, columns=columns if _prunable(connector) else None,
        max_future_ms=src.watermark.max_future_ms, target_epoch_ms=src.target_epoch_ms, resume=resume,
    )
    return connector.read_stream(spark, request), payload, connector.bounded
