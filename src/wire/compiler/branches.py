"""Branches: one read of each source, and the streams other than the main one as side rows.

A flow compiles to one Spark query whose result has one row schema: the main stream's
payload and envelope columns (:mod:`wire.core.envelope`). A flow may branch: a stream
feeds several operators, or a sink reads a stream that also feeds an operator. Every
other stream that a sink reads is unioned into the result after :func:`pack_port`
turned each task's data rows into one side row of port ``"<step>.out"`` (Arrow IPC,
as late events and dead letters travel), which the driver unpacks like any side port.

Spark's plan is a tree, so a source read by several branches appears once per branch.
Spark makes one stream of it (one admission, one commit; the offset log still has a line
per appearance), but would scan it once per appearance. :func:`read_once` puts one
shuffle above such a source that every appearance shares, and Spark's exchange reuse
runs it once: the source is scanned once per epoch, and the other branches read the
shuffle's output (``ReusedExchange`` in the plan; :func:`source_scans` counts the scans).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from wire.core.arrow_types import spark_round_trip, spark_schema
from wire.core.envelope import ENVELOPE_COLUMNS, KIND, KIND_DATA, KIND_SIDE, envelope_batch, side_batch
from wire.plan.nodes import OUT, PortRef


class PackPort:
    """``mapInArrow`` function: a branch's rows in the main stream's row schema.

    Per task: side rows pass (payload columns null); with ``pack`` the data rows become
    one side row of ``port`` carrying their payload columns, else they are dropped;
    watermark rows are dropped (they never reach a sink, SPEC §2).
    """

    def __init__(self, port: str, payload: list[str], schema: pa.Schema, *, pack: bool) -> None:
        self.port = port
        self.payload = payload
        self.schema = schema
        self.pack = pack

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Transform one task's batches."""
        data: list[pa.RecordBatch] = []
        for batch in batches:
            kind = batch.column(KIND)
            side = batch.filter(pc.equal(kind, KIND_SIDE))
            if side.num_rows:
                envelope = {c: side.column(c).cast(self.schema.field(c).type) for c in ENVELOPE_COLUMNS}
                yield envelope_batch(self.schema, envelope, side.num_rows)
            if self.pack:
                rows = batch.filter(pc.equal(kind, KIND_DATA)).select(self.payload)
                if rows.num_rows:
                    data.append(rows)
        if data:
            yield side_batch(self.schema, self.port, pa.Table.from_batches(data))


def pack_port(df: DataFrame, main: StructType, step: str, *, pack: bool) -> DataFrame:
    """The stream ``df`` of ``step`` in the ``main`` row schema, to be unioned with it.

    With ``pack`` its data rows reach the driver under port ``"<step>.out"``.
    """
    schema = spark_round_trip(to_arrow_schema(main, timezone="UTC"))
    payload = [c for c in df.columns if c not in ENVELOPE_COLUMNS]
    port = PortRef(step, OUT).port_id()
    return df.mapInArrow(PackPort(port, payload, schema, pack=pack), spark_schema(schema))


def read_once(df: DataFrame, step: str) -> DataFrame:
    """``df`` (source ``step``'s stream, read by several branches) behind one shared shuffle.

    The rows are hash-partitioned by all their columns: because the partitioning reads
    every column, Spark's column pruning cannot push a branch's narrower projection below
    the shuffle, and the ``observe`` above it (a no-op count, ``wire_read_<step>``) stops
    its filter pushdown. Every branch therefore plans the identical shuffle, which Spark
    runs once (``spark.sql.exchange.reuse``, on by default). Rows keep their order within
    a source partition; a partition's rows may now be spread over several tasks, which
    nothing downstream depends on (operators group by key group, watermarks fold by max).
    """
    columns = [F.col(f"`{c}`") for c in df.columns]
    return df.repartition(F.hash(*columns)).observe(f"wire_read_{step}", F.count(F.lit(1)).alias("rows"))


def source_scans(query: StreamingQuery) -> int | None:
    """How many times an epoch of ``query`` scans its sources (None before its first epoch).

    Counted on the physical plan of the query's last epoch: the nodes that scan a stream
    (``MicroBatchScan``); a reused shuffle is not a scan. It equals the number of distinct
    sources when every branched source is read once (:func:`read_once`).
    """
    plan = query._jsq.explainInternal(False)
    if "No physical plan" in plan:
        return None
    return sum("MicroBatchScan" in line for line in plan.splitlines())
