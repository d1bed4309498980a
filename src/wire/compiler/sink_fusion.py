"""Sink fusion: a stateless flow's sinks written in its source's own Python tasks.

A flow of filters and projections (``source → filter / select* → sinks``) compiles to one
Spark job per epoch in which every event crosses between the JVM and Python twice, as
Arrow: the source's Python task hands the events to the JVM, which evaluates the filters and
the projection and hands the rows to the epoch's partition writer, a second Python worker
(``mapInArrow``, :mod:`wire.runtime.dataplane`) that splits them by port and stages each
executor sink's files. Plain PySpark reading and writing Parquet keeps its rows in the JVM;
Wire's two conversions made its Nexmark q0 0.87x and its filter-and-projection jobs slower
than they need be (issue 25).

When the flow qualifies (:func:`find_sink_fusion`), the source's task runs the partition
writer itself (:class:`SourceTaskWriter`): it applies the filters as the source's exact
predicate (:mod:`wire.core.predicate`), keeps the projected columns, casts them to the Arrow
types Spark would have handed the writer, and gives the rows to the epoch's writer. The
source's rows in Spark are then the writer's result records (receipts, metrics, previews,
driver sinks' rows: ``task_writer`` of :func:`wire.compiler.plan_compiler.compile_plan`), and
the driver collects them as before. No event crosses into the JVM.

The writer belongs to an epoch (its id, each executor sink's stager for that epoch), which is
known only when the epoch runs. The driver's ``foreachBatch`` handler sets it as the Spark
local property :data:`TASK_WRITER` (base64 of the pickled writer) on the thread that runs the
epoch's job; Spark hands a job's local properties to every task of it, retries included, and
the source's task reads it (:func:`epoch_writer`). The delivery protocol is unchanged: the
tasks stage, the driver commits with their receipts (:mod:`wire.delivery.sink`), and a
replayed epoch stages again under the same epoch id.

A flow is fused when all of these hold:

* it has one source, with the ``"pre_stage"`` capability (the file, Kafka, Redis Streams, HTTP
  ingest and Nexmark generator sources), and ``"predicate"`` when there are filters;
* its operators are filters, maps and selects, one chain: each step's ``out`` port is read by
  the next step only, and by sinks only at the chain's end; a map's or select's columns are
  plain names or integer and floating point arithmetic Spark's analysis resolves, also under
  ``CASE WHEN`` / ``IF`` (:func:`~wire.compiler.pushdown.translate_value`), and no filter
  follows a computed column;
* every filter translates **exactly** into a predicate on the source's columns
  (:func:`~wire.compiler.pushdown.filters_predicate`), as in window fusion
  (:mod:`wire.compiler.fusion`).

Semantics are unchanged: the source computes the watermark, its ``events`` metric and its
dead letters before the predicate; the writer and the sinks are the same code with the same
rows, of the same Arrow types.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from wire.compiler.exprs import apply_map, apply_select, to_column
from wire.compiler.pushdown import empty_frame, filters_predicate, translate_value
from wire.core.envelope import BLOB, ENVELOPE_COLUMNS, KIND, KIND_DATA, PORT
from wire.core.predicate import NotEvaluable, Predicate, columns_of, keep, value
from wire.errors import WireError
from wire.plan.graph import only_reader, operators
from wire.plan.nodes import FilterNode, MapNode, Node, Plan, SelectNode, SourceNode
from wire.sources.base.source import (
    Source,
    can,
    pickle_b64,
    schema_to_b64,
    spark_row_schema,
    spark_struct,
    unpickle_b64,
)

TASK_WRITER = "wire.epoch.task_writer"
"""The Spark local property that carries an epoch's partition writer to its source's tasks."""

WRITER_ENVELOPE = (KIND, PORT, BLOB)
"""The envelope columns the partition writer reads (:func:`wire.runtime.ports.split_ports`)."""


Computed: TypeAlias = tuple[tuple[str, Predicate | None, pa.DataType], ...]
"""The columns of a ``map`` or ``select``: (name, value expression or None for a column kept as it
is, Arrow type of the result as Spark types it)."""
Operation: TypeAlias = tuple[str, Computed]
"""One step the task runs after the predicate: ``("map", columns)`` adds or replaces columns,
``("select", columns)`` keeps exactly these (module docstring)."""


@dataclass(frozen=True)
class SinkFusion:
    """A flow whose source's tasks write its sinks (module docstring)."""

    source: str
    steps: tuple[str, ...]
    """The filter and select steps the source's task replaces, in order."""
    terminal: str
    """The last step (the source's when there is none): its ``out`` port is the writer's main port."""
    predicate: Predicate | None
    """The filters as one exact predicate (None: no filter)."""
    columns: tuple[str, ...]
    """The payload columns the sinks receive, in order."""
    produced: tuple[str, ...] | None
    """The payload columns the source produces (None: all)."""
    writer_input: pa.Schema
    """The rows the writer receives: ``columns`` then :data:`WRITER_ENVELOPE`, typed as Spark's
    ``mapInArrow`` would hand them over (session time zone, large string types or not)."""
    result: pa.Schema
    """The writer's result rows (``task_writer`` of ``compile_plan``)."""
    operations: tuple[Operation, ...] = ()
    """The maps and projections the task runs after the predicate, in order."""

    def pre_stage(self) -> str:
        """The source's ``ReadRequest.pre_stage``: the pickled :class:`SourceTaskWriter`, in base64."""
        return pickle_b64(SourceTaskWriter(self.writer_input, self.operations))

    def pre_stage_schema(self) -> str:
        """The source's ``ReadRequest.pre_stage_schema``: the writer's result rows."""
        return schema_to_b64(self.result)


def find_sink_fusion(spark: SparkSession, plan: Plan, result: pa.Schema) -> SinkFusion | None:
    """The flow's sink fusion (module docstring), or None.

    ``result``: the schema of the epoch writer's rows. Never raises: any doubt (or an invalid
    flow, which fails in its compilation with its own error) leaves the flow unfused.
    """
    try:
        return _sink_fusion(spark, plan, result)
    except Exception:
        return None


def epoch_writer_text(writer: object) -> str:
    """The value of :data:`TASK_WRITER` for an epoch's ``writer`` (a picklable callable)."""
    return pickle_b64(writer)


def epoch_writer() -> object:
    """The epoch's writer, from the running task's :data:`TASK_WRITER` (unpickled once per epoch).

    Raises
    ------
    WireError
        When the task has none (its job was not started by Wire's epoch handler).
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    text = None if context is None else context.getLocalProperty(TASK_WRITER)
    if not text:
        raise WireError(
            f"a fused source task found no epoch writer (Spark local property {TASK_WRITER!r}): "
            "the epoch's job was not started by Wire's foreachBatch handler"
        )
    return unpickle_b64(text)


class SourceTaskWriter:
    """The epoch's partition writer run in a source's own task (sink fusion, module docstring).

    A callable on one task's source rows (payload + envelope batches, the source's exact
    predicate applied): it runs the flow's maps and projections on the data rows
    (``operations``, value expressions of :mod:`wire.core.predicate`), keeps the writer's
    columns, casts them to ``writer_input`` (the types Spark's ``mapInArrow`` gives the writer)
    and yields what the epoch's writer (:func:`epoch_writer`) yields for them.

    Raises
    ------
    pyarrow.ArrowInvalid
        When a map's checked arithmetic overflows or divides by zero: the task fails, as
        Spark's ANSI mode fails it.
    """

    def __init__(self, writer_input: pa.Schema, operations: tuple[Operation, ...] = ()) -> None:
        self.writer_input = writer_input
        self.operations = operations

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One task's writer result rows."""
        rows = list(batches)
        if not rows:
            return iter(())
        table = apply_operations(pa.Table.from_batches(rows), self.operations)
        table = table.select(self.writer_input.names).cast(self.writer_input)
        writer = epoch_writer()
        assert callable(writer)
        out: Iterator[pa.RecordBatch] = writer(iter(table.to_batches()))
        return out


def apply_operations(table: pa.Table, operations: tuple[Operation, ...]) -> pa.Table:
    """A task's maps and projections (``operations``) on its data rows (payload + envelope columns).

    Spark computes a step's columns on data rows only (:mod:`wire.compiler.exprs`): the other rows
    (watermarks, side rows) keep their envelope columns and get nulls in the payload's. The data
    rows come first, then the others, each in their order.

    Raises
    ------
    pyarrow.ArrowInvalid
        When checked arithmetic overflows or divides by zero on a data row (Spark's ANSI mode).
    """
    if not operations:
        return table
    is_data = pc.equal(table.column(KIND), KIND_DATA)
    data, other = table.filter(is_data), table.filter(pc.invert(is_data))
    for kind, columns in operations:
        values = {name: (data.column(name) if expression is None else value(data, expression)).cast(type_)
                  for name, expression, type_ in columns}
        if kind == "select":
            envelope = [c for c in data.column_names if c in ENVELOPE_COLUMNS]
            data = pa.table({**values, **{c: data.column(c) for c in envelope}})
        else:
            for name, array in values.items():
                i = data.schema.get_field_index(name)
                data = data.append_column(name, array) if i < 0 else data.set_column(i, name, array)
    nulls = {f.name: pa.nulls(other.num_rows, f.type) for f in data.schema}
    kept = {c: other.column(c) for c in data.column_names if c in ENVELOPE_COLUMNS}
    other = pa.table({**nulls, **kept}).select(data.column_names)
    return pa.concat_tables([data, other.cast(data.schema)])


def _sink_fusion(spark: SparkSession, plan: Plan, result: pa.Schema) -> SinkFusion | None:
    sources = [n for n in plan.nodes if isinstance(n, SourceNode)]
    if len(sources) != 1:
        return None
    source = sources[0]
    connector = source.connector
    if not isinstance(connector, Source) or not can(connector, "pre_stage"):
        return None
    payload = connector.resolve_schema()
    struct = spark_struct(payload)
    frame = empty_frame(spark, struct)  # each step's columns, resolved by Spark (nothing runs)
    chain: list[Node] = []
    filters: list[FilterNode] = []
    operations: list[Operation] = []
    read: set[str] = set()
    step: str = source.step
    while (node := only_reader(plan, step)) is not None:
        if isinstance(node, FilterNode):
            if any(kind == "map" or any(e is not None for _, e, _ in cols) for kind, cols in operations):
                return None  # a filter after a computed column: not the source's predicate
            filters.append(node)
        elif isinstance(node, MapNode | SelectNode):
            found = operation_of(frame, node)
            if found is None:
                return None
            frame, operation = found
            operations.append(operation)
            read |= {c for _, e, _ in operation[1] for c in columns_of(e or [])}
            read |= {n for n, e, _ in operation[1] if e is None}
        else:
            return None
        chain.append(node)
        step = node.step
    if len(operators(plan)) != len(chain) + 1:
        return None  # an operator off the chain: a branch, or the chain read by a sink before its end
    predicate = None
    if filters:
        if not can(connector, "predicate"):
            return None
        predicate = filters_predicate(spark, filters, struct, exact=True, join="and")
        if predicate is None:
            return None
        try:
            keep(spark_row_schema(payload).empty_table(), predicate)  # evaluable on the source's rows
        except NotEvaluable:
            return None
    columns = tuple(c for c in frame.columns if c not in ENVELOPE_COLUMNS)
    needed = {source.event_time} | columns_of(predicate or []) | read
    if not any(kind == "select" for kind, _ in operations):
        needed |= set(columns)
    if source.key is not None:
        needed.add(source.key)
    produced = None
    if can(connector, "columns") and len(needed & set(payload.names)) < len(payload):
        produced = tuple(n for n in payload.names if n in needed)
    writer_input = pa.schema([_arrow(spark, frame.schema).field(c) for c in (*columns, *WRITER_ENVELOPE)])
    return SinkFusion(source.step, tuple(n.step for n in chain), step, predicate, columns, produced,
                      writer_input, result, tuple(operations))


def operation_of(frame: DataFrame, node: MapNode | SelectNode) -> tuple[DataFrame, Operation] | None:
    """The step applied to an empty frame (its columns resolved by Spark), and as a task's operation.

    None when a column is not a plain name or a value expression (:func:`translate_value`).
    """
    pairs: list[tuple[str, Any]] = []
    for c in node.columns:
        if isinstance(node, SelectNode) and isinstance(c, str) and c in frame.columns:
            pairs.append((c, None))
        elif isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], str) and c[0] not in ENVELOPE_COLUMNS:
            pairs.append(c)
        else:
            return None
    computed: list[tuple[str, Predicate | None]] = []
    for name, expr in pairs:
        tree = None
        if expr is not None:
            column = to_column(expr, parameter=name, step=node.step).alias(name)
            analyzed = frame.select(column)._jdf.queryExecution().analyzed().projectList().apply(0)
            tree = translate_value(analyzed)
            if tree is None:
                return None
        computed.append((name, tree))
    after = (apply_select(frame, node.columns, node.step) if isinstance(node, SelectNode)
             else apply_map(frame, node.columns, node.step))
    types = _arrow(frame.sparkSession, after.schema)
    typed = tuple((name, tree, types.field(name).type) for name, tree in computed)
    return after, ("select" if isinstance(node, SelectNode) else "map", typed)


def _arrow(spark: SparkSession, struct: StructType) -> pa.Schema:
    """``struct`` as Spark hands it to a Python worker (session time zone, large string types or not)."""
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    zone = spark.conf.get("spark.sql.session.timeZone")
    return to_arrow_schema(struct, timezone=zone, prefers_large_types=large)
