"""Compile a :class:`~wire.plan.nodes.Plan` into one Spark streaming DataFrame.

The result is a single chain source → stateless operators → (window) → ...,
in the envelope row format (:mod:`wire.runtime.envelope`). Its data rows are the
terminal step's ``out`` port; late events, dead letters and metrics travel as
side rows. The runner attaches one ``foreachBatch`` that splits an epoch's rows
by port and hands each port to its sinks, so a flow is one query with one
checkpoint (SPEC §6).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from wire.compiler.exprs import apply_filter, apply_map, apply_select
from wire.compiler.window_stage import compile_window
from wire.connectors.files import FileSource, SourceBinding, read_stream, register
from wire.connectors.test_stream import TestStreamSource
from wire.errors import ConfigError, PlanError
from wire.plan.nodes import (
    ALL_STEPS,
    DEAD_LETTER,
    LATE,
    OUT,
    FilterNode,
    KeyByNode,
    MapNode,
    Node,
    Plan,
    SelectNode,
    SinkNode,
    SourceNode,
    WindowAggregateNode,
)


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


def chain_of(plan: Plan) -> list[Node]:
    """The plan's operator chain from its source, checking the supported topology.

    Raises
    ------
    PlanError
        No source, several sources, a stream consumed by two operators, or a sink
        on a port that the compiled chain does not produce.
    """
    ops = [n for n in plan.nodes if not isinstance(n, SinkNode)]
    sources = [n for n in ops if isinstance(n, SourceNode)]
    if len(sources) != 1:
        raise PlanError(
            f"flow {plan.flow_id!r} has {len(sources)} sources; this version of Wire "
            "compiles flows with exactly one source"
        )
    consumers: dict[str, list[str]] = {}
    for n in ops:
        up = getattr(n, "upstream", None)
        if up is not None:
            consumers.setdefault(up, []).append(n.step)
    chain: list[Node] = [sources[0]]
    while True:
        nxt = consumers.get(chain[-1].step, [])
        if len(nxt) > 1:
            raise PlanError(
                f"step {chain[-1].step!r} feeds several operators {nxt}; this version of "
                "Wire compiles a flow to one linear chain (branching is not supported yet)"
            )
        if not nxt:
            break
        chain.append(plan.node(nxt[0]))
    terminal = chain[-1].step
    steps = {n.step: n for n in chain}
    for sink in plan.sinks():
        ref = sink.source
        if ref.port == OUT and ref.step != terminal:
            raise PlanError(
                f"sink {sink.step!r} reads {ref.step!r}, which is not the end of the chain "
                f"({terminal!r}); sinks on intermediate streams are not supported yet"
            )
        if ref.port == LATE and not isinstance(steps.get(ref.step), WindowAggregateNode):
            raise PlanError(f"sink {sink.step!r}: {ref.step!r} has no late port")
        if ref.port == DEAD_LETTER and ref.step != ALL_STEPS and ref.step not in steps:
            raise PlanError(f"sink {sink.step!r}: unknown step {ref.step!r}")
    if not plan.sinks():
        raise PlanError(f"flow {plan.flow_id!r} has no sink: nothing would be written")
    return chain


def compile_plan(plan: Plan, spark: SparkSession, key_groups: int) -> CompiledFlow:
    """Compile ``plan`` to one streaming DataFrame (nothing runs yet).

    Raises
    ------
    PlanError, ConfigError
        On an unsupported topology or an invalid operator configuration.
    """
    chain = chain_of(plan)
    src = chain[0]
    assert isinstance(src, SourceNode)
    df, payload, bounded = _open_source(spark, src, key_groups)
    key = src.key
    if key is not None and key not in payload.names:
        raise ConfigError("key", key, f"a column of the source: {payload.names}", step=src.step)
    for node in chain[1:]:
        if isinstance(node, FilterNode):
            df = apply_filter(df, node.predicate, node.step)
        elif isinstance(node, MapNode):
            df = apply_map(df, node.columns, node.step)
        elif isinstance(node, SelectNode):
            df = apply_select(df, node.columns, node.step)
            if key is not None and key not in df.columns:
                key = None
        elif isinstance(node, KeyByNode):
            if node.key not in df.columns:
                raise ConfigError("key", node.key, f"a column: {df.columns}", step=node.step)
            key = node.key
        elif isinstance(node, WindowAggregateNode):
            df = compile_window(df, node, key, key_groups)
        else:  # pragma: no cover - the builder creates no other node types
            raise PlanError(f"cannot compile step {node.step!r} ({type(node).__name__})")
    return CompiledFlow(plan, df, chain[-1].step, (src.step,), bounded, key_groups)


def _open_source(
    spark: SparkSession, src: SourceNode, key_groups: int
) -> tuple[DataFrame, pa.Schema, bool]:
    """The source's envelope DataFrame, its payload schema and whether it ends."""
    connector = src.connector
    if not isinstance(connector, FileSource | TestStreamSource):
        raise ConfigError(
            "connector", connector, "a source connector, e.g. wire.sources.files(...)",
            step=src.step,
        )
    payload = connector.resolve_schema()
    if src.event_time not in payload.names:
        raise ConfigError(
            "event_time", src.event_time, f"a column of the source: {payload.names}", step=src.step
        )
    if isinstance(connector, TestStreamSource):
        df = connector.read_stream(spark, step=src.step, event_time=src.event_time,
                                   key_groups=key_groups)
        return df, payload, connector.bounded
    binding = SourceBinding(
        step=src.step,
        source=connector,
        payload_schema=payload,
        event_time=src.event_time,
        max_delay_ms=src.watermark.max_delay_ms,
        max_events_per_epoch=src.max_events_per_epoch,
        key_groups=key_groups,
    )
    register(spark)
    return read_stream(spark, binding), payload, connector.bounded
