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

* it has one source, with the ``"pre_stage"`` capability (the file, Kafka, Redis Streams and
  HTTP ingest sources), and ``"predicate"`` when there are filters;
* its operators are filters and selects of plain column names, one chain: each step's ``out``
  port is read by the next step only, and by sinks only at the chain's end;
* every filter translates **exactly** into a predicate on the source's columns
  (:func:`~wire.compiler.pushdown.filters_predicate`), as in window fusion
  (:mod:`wire.compiler.fusion`).

Semantics are unchanged: the source computes the watermark, its ``events`` metric and its
dead letters before the predicate; the writer and the sinks are the same code with the same
rows, of the same Arrow types.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from wire.compiler.pushdown import filters_predicate
from wire.core.envelope import BLOB, KIND, PORT
from wire.core.predicate import NotEvaluable, Predicate, columns_of, keep
from wire.errors import WireError
from wire.plan.graph import port_readers
from wire.plan.nodes import OUT, DropNode, FilterNode, Node, Plan, SelectNode, SinkNode, SourceNode
from wire.sources.base.source import Source, can, schema_to_b64, spark_row_schema, spark_struct, unpickle_b64

TASK_WRITER = "wire.epoch.task_writer"
"""The Spark local property that carries an epoch's partition writer to its source's tasks."""

WRITER_ENVELOPE = (KIND, PORT, BLOB)
"""The envelope columns the partition writer reads (:func:`wire.runtime.ports.split_ports`)."""


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

    def pre_stage(self) -> str:
        """The source's ``ReadRequest.pre_stage``: the pickled :class:`SourceTaskWriter`, in base64."""
        pickled: bytes = cloudpickle.dumps(SourceTaskWriter(self.writer_input))  # type: ignore[no-untyped-call]
        return base64.b64encode(pickled).decode("ascii")

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
    pickled: bytes = cloudpickle.dumps(writer)  # type: ignore[no-untyped-call]
    return base64.b64encode(pickled).decode("ascii")


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
    predicate applied): it keeps the writer's columns, casts them to ``writer_input`` (the
    types Spark's ``mapInArrow`` gives the writer) and yields what the epoch's writer
    (:func:`epoch_writer`) yields for them.
    """

    def __init__(self, writer_input: pa.Schema) -> None:
        self.writer_input = writer_input

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One task's writer result rows."""
        names = self.writer_input.names
        rows = [b.select(names) for b in batches]
        if not rows:
            return iter(())
        table = pa.Table.from_batches(rows).cast(self.writer_input)
        writer = epoch_writer()
        assert callable(writer)
        out: Iterator[pa.RecordBatch] = writer(iter(table.to_batches()))
        return out


def _sink_fusion(spark: SparkSession, plan: Plan, result: pa.Schema) -> SinkFusion | None:
    sources = [n for n in plan.nodes if isinstance(n, SourceNode)]
    if len(sources) != 1:
        return None
    source = sources[0]
    connector = source.connector
    if not isinstance(connector, Source) or not can(connector, "pre_stage"):
        return None
    payload = connector.resolve_schema()
    columns = tuple(payload.names)
    chain: list[Node] = []
    step: str = source.step
    while (node := _next(plan, step)) is not None:
        if isinstance(node, SelectNode):
            names = [c for c in node.columns if isinstance(c, str) and c in columns]
            if len(names) != len(node.columns) or len(set(names)) != len(names):
                return None
            columns = tuple(names)
        elif not isinstance(node, FilterNode):
            return None
        chain.append(node)
        step = node.step
    if any(r.source.port == OUT and r.source.step != step for r in port_readers(plan)):
        return None  # a sink reads a step before the chain's end
    operators = [n for n in plan.nodes if not isinstance(n, SourceNode | SinkNode | DropNode)]
    if len(operators) != len(chain):
        return None  # another operator, not on the chain (a branch)
    filters = [n for n in chain if isinstance(n, FilterNode)]
    predicate = None
    struct = spark_struct(payload)
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
    needed = set(columns) | {source.event_time} | columns_of(predicate or [])
    if source.key is not None:
        needed.add(source.key)
    produced = None
    if can(connector, "columns") and len(needed) < len(payload):
        produced = tuple(n for n in payload.names if n in needed)
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    zone = spark.conf.get("spark.sql.session.timeZone")
    sent = to_arrow_schema(struct, timezone=zone, prefers_large_types=large)
    writer_input = pa.schema([sent.field(c) for c in (*columns, *WRITER_ENVELOPE)])
    return SinkFusion(source.step, tuple(n.step for n in chain), step, predicate, columns, produced,
                      writer_input, result)


def _next(plan: Plan, step: str) -> Node | None:
    """The one operator reading ``step`` (None: none, or several)."""
    readers = [n for n in plan.nodes if not isinstance(n, SinkNode | DropNode) and step in n.inputs()]
    return readers[0] if len(readers) == 1 else None
