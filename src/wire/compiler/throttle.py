"""Flow control: the overflow mode of ``Stream.throttle`` (SPEC §5).

A ``mapInArrow`` stage passes the first ``max_events_per_epoch`` data rows of each
task (one Spark partition of one epoch) and moves the rest into one side row of port
``<step>.overflow`` (their columns unchanged), so nothing is dropped silently.
Watermark and side rows pass through.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from wire.core.arrow_types import spark_round_trip, spark_schema
from wire.core.envelope import ENVELOPE_COLUMNS, KIND, KIND_DATA, METRICS_PORT, metrics_table, side_batch
from wire.plan.nodes import OVERFLOW, PortRef, ThrottleNode


class Overflow:
    """``mapInArrow`` function: pass up to ``limit`` data rows per task, divert the rest."""

    def __init__(self, step: str, limit: int, schema: pa.Schema) -> None:
        self.step = step
        self.limit = limit
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Transform one task's batches."""
        passed = 0
        excess: list[pa.RecordBatch] = []
        payload = [n for n in self.schema.names if n not in ENVELOPE_COLUMNS]
        for batch in batches:
            data_mask = pc.equal(batch.column(KIND), KIND_DATA)
            control = batch.filter(pc.invert(data_mask))
            data = batch.filter(data_mask)
            room = max(self.limit - passed, 0)
            if data.num_rows > room:
                excess.append(data.slice(room).select(payload))
                data = data.slice(0, room)
            passed += data.num_rows
            if data.num_rows:
                yield data
            if control.num_rows:
                yield control
        if excess:
            table = pa.Table.from_batches(excess)
            yield side_batch(self.schema, PortRef(self.step, OVERFLOW).port_id(), table)
            yield side_batch(self.schema, METRICS_PORT,
                             metrics_table(self.step, {"overflow": table.num_rows}))


def apply_overflow(df: DataFrame, node: ThrottleNode) -> DataFrame:
    """Append the overflow stage of ``node`` to the envelope DataFrame ``df``."""
    schema = spark_round_trip(to_arrow_schema(df.schema, timezone="UTC"))
    return df.mapInArrow(Overflow(node.step, node.max_events_per_epoch, schema), spark_schema(schema))
