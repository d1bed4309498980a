"""Branches: the streams other than the main one reach the query's result as side rows.

A flow compiles to one Spark query whose result has one row schema: the main stream's
payload and envelope columns (:mod:`wire.core.envelope`). A flow may branch: a stream
feeds several operators, or a sink reads a stream that also feeds an operator. Every
other stream that a sink reads is unioned into the result after :func:`pack_port`
turned each task's data rows into one side row of port ``"<step>.out"`` (Arrow IPC,
as late events and dead letters travel), which the driver unpacks like any side port.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
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
