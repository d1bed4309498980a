"""Fusion: a window's pre-stage run inside its source's own Python task.

A window reading a source compiles to two Spark stages (:mod:`wire.compiler.window_stage`):
the source's Python task hands every event to the JVM, which evaluates the flow's filters
and hands the events to a second Python worker, the window's pre-stage (``mapInArrow``),
which drops late events and pre-aggregates per (key, window) before the shuffle. Every
event so crosses between the JVM and Python twice, as Arrow, where Flink's chained
operators share one process (issue 25: tumbling and sliding windows over 5M events were
1.57-1.73x Flink's wall time).

When the window reads the source through filters only, the source's task can run the
pre-stage itself (:class:`~wire.compiler.window_stage.SourcePreStage`): it applies the
filters as a predicate (:mod:`wire.core.predicate`), computes each event's key group as
Spark would (:mod:`wire.core.key_groups`) and yields the pre-stage's envelope-only rows
(partial aggregates, late events, control rows). Only those reach the JVM, and go straight
to the shuffle and the state stage.

A source step is fused with a window (:func:`find_fusions`) when all of these hold:

* the source has the ``"pre_stage"`` capability (the file, Kafka, Redis Streams, HTTP ingest
  and Nexmark generator sources), and ``"predicate"`` when there are filters;
* the source's ``out`` port is read by exactly one step and no sink, and so is each
  filter's, ``key_by``'s and ``map``'s, down to a window step: ``source → (filter | key_by |
  map)* → window`` (the window's key is the last ``key_by``'s column, else the source's key);
  no filter follows a map, and each map's columns are integer or floating point arithmetic,
  or ``CASE WHEN`` / ``IF`` of it, that Spark's analysis resolves
  (:func:`wire.compiler.sink_fusion.operation_of`), computed on the
  data rows in the source's task;
* each filter translates **exactly** into a predicate (:func:`~wire.compiler.pushdown.filters_predicate`:
  comparisons, ``IN``, ``IS NULL``, ``AND`` / ``OR`` / ``NOT`` over integer, floating point,
  string and boolean columns) that Arrow evaluates on the source's columns;
* the window pre-aggregates before the shuffle (it reads one source, no callback sees
  whole events) and its key column is an integer, boolean or string column, or there is
  none (:func:`wire.core.key_groups.supported`).

Otherwise the flow compiles as before. Semantics are unchanged: the source computes the
watermark, its ``events`` metric and its dead letters before the predicate (as with a
pushed-down filter); the pre-stage and the state stage are the same code with the same
inputs; the state is the same (same key groups), so a checkpoint runs on fused or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from wire.compiler.pushdown import empty_frame, filters_predicate
from wire.compiler.sink_fusion import Operation, operation_of
from wire.compiler.window_stage import NO_KEY, SourcePreStage, WindowStage, window_stage
from wire.core.envelope import ENVELOPE_COLUMNS
from wire.core.key_groups import supported
from wire.core.predicate import NotEvaluable, Predicate, columns_of, keep
from wire.plan.graph import only_reader, sinks
from wire.plan.nodes import (
    LATE,
    FilterNode,
    KeyByNode,
    MapNode,
    Plan,
    SourceNode,
    WindowAggregateNode,
)
from wire.sources.base.source import Source, can, pickle_b64, spark_row_schema, spark_struct


@dataclass(frozen=True)
class Fusion:
    """A source step fused with the window it feeds (module docstring)."""

    source: str
    filters: tuple[str, ...]
    """The filter steps between them, which the source's predicate replaces."""
    window: str
    predicate: Predicate | None
    """The filters as one exact predicate (None: no filter)."""
    stage: WindowStage
    key: str | None
    """The window's key column (None: unkeyed)."""
    key_type: str
    """The key column's Spark SQL type (``"int"`` when unkeyed, as the compiler records it)."""
    columns: tuple[str, ...] | None
    """The payload columns the source produces (None: all)."""
    key_bys: tuple[str, ...] = ()
    """The ``key_by`` steps between them (the last one's column is the window's key)."""
    maps: tuple[str, ...] = ()
    """The ``map`` steps between them, which the source's task computes (``operations``)."""
    operations: tuple[Operation, ...] = ()
    """The maps as value expressions (:func:`wire.compiler.sink_fusion.operation_of`)."""

    def pre_stage(self) -> str:
        """The source's ``ReadRequest.pre_stage``: the pickled ``SourcePreStage``, in base64."""
        return pickle_b64(SourcePreStage(self.stage, self.key, self.operations))


def find_fusions(spark: SparkSession, plan: Plan, key_groups: int) -> dict[str, Fusion]:
    """Per source step that can be fused with its window (module docstring), the fusion.

    Never raises: any doubt (or an invalid flow, which fails in its compilation with its
    own error) leaves a source unfused.
    """
    late_read = {s.source.step for s in sinks(plan) if s.source.port == LATE and not s.kept}
    found: dict[str, Fusion] = {}
    for node in plan.nodes:
        if isinstance(node, SourceNode):
            try:
                fusion = _fusion(spark, plan, node, key_groups, late_read)
            except Exception:
                fusion = None
            if fusion is not None:
                found[node.step] = fusion
    return found


def _fusion(
    spark: SparkSession, plan: Plan, source: SourceNode, key_groups: int, late_read: set[str]
) -> Fusion | None:
    connector = source.connector
    if not isinstance(connector, Source) or not can(connector, "pre_stage"):
        return None
    payload = connector.resolve_schema()
    filters: list[FilterNode] = []
    key_bys: list[KeyByNode] = []
    maps: list[MapNode] = []
    operations: list[Operation] = []
    frame = None
    node = only_reader(plan, source.step)
    while isinstance(node, FilterNode | KeyByNode | MapNode):
        if isinstance(node, FilterNode):
            if maps:
                return None  # a filter after a computed column: not the source's predicate
            filters.append(node)
        elif isinstance(node, KeyByNode):
            key_bys.append(node)
        else:
            found = operation_of(empty_frame(spark, spark_struct(payload)) if frame is None else frame, node)
            if found is None:
                return None
            frame, operation = found
            operations.append(operation)
            maps.append(node)
        node = only_reader(plan, node.step)
    if not isinstance(node, WindowAggregateNode):
        return None
    window = node
    columns = pa.schema([f for f in spark_row_schema(payload) if f.name not in ENVELOPE_COLUMNS])
    read: set[str] = set()
    for _, mapped in operations:  # the maps' columns, typed as Spark types them
        for name, expression, type_ in mapped:
            read |= columns_of(expression or [])
            i = columns.get_field_index(name)
            field = pa.field(name, type_)
            columns = columns.append(field) if i < 0 else columns.set(i, field)
    key = key_bys[-1].key if key_bys else source.key
    if key is None:
        key_type = "int"
        stage_payload = columns.append(pa.field(NO_KEY, pa.int32(), nullable=False))
    else:
        if key not in columns.names or not supported(columns.field(key).type):
            return None
        struct = frame.schema if frame is not None else spark_struct(payload)
        key_type = struct[key].dataType.simpleString()
        stage_payload = columns
    stage = window_stage(window, key or NO_KEY, stage_payload, key_groups=key_groups,
                         channels=(source.step,), from_source=True, late_read=window.step in late_read)
    if not stage.preaggregate:
        return None
    predicate = None
    if filters:
        if not can(connector, "predicate"):
            return None
        predicate = filters_predicate(spark, filters, spark_struct(payload), exact=True, join="and")
        if predicate is None:
            return None
        try:
            keep(columns.empty_table(), predicate)  # evaluable on the source's columns
        except NotEvaluable:
            return None
    computed = {name for _, cols in operations for name, _, _ in cols}
    needed = (set(stage.payload.names) - {NO_KEY} - computed) | {source.event_time} | read
    needed |= columns_of(predicate or [])
    produced = None
    if can(connector, "columns") and len(needed & set(payload.names)) < len(payload.names):
        produced = tuple(n for n in payload.names if n in needed)
    return Fusion(source.step, tuple(f.step for f in filters), window.step, predicate, stage, key, key_type,
                  produced, tuple(k.step for k in key_bys), tuple(m.step for m in maps), tuple(operations))
