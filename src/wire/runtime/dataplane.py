"""One epoch's data plane: executors split rows by port and stage the sinks' data (SPEC §6).

The runner's ``foreachBatch`` handler runs one Spark job per epoch over the epoch's
envelope rows, ``mapInArrow(PartitionWriter)``. In every task (one Spark partition)
the writer

1. splits the partition's rows by port (:func:`wire.runtime.ports.split_ports`);
2. for each **executor sink** (:class:`~wire.delivery.sink.ExecutorSink`), appends
   the ``epoch`` column to the rows of its port and calls the epoch's stager, which
   writes them to the sink's staging location and returns a receipt;
3. for each **driver sink**, returns the rows of its port as an Arrow IPC blob;
4. returns the partition's metric records and the count of each ``emit`` value;
5. returns previews of the last rows of each dead-letter and late port
   (:mod:`wire.runtime.samples`, at most ``SAMPLE_SIZE`` per port and task).

What reaches the driver is one small Arrow table (:data:`RESULT_SCHEMA`): receipts,
metrics, emit counts, the previews, and only the rows of driver sinks. The driver then commits
each executor sink with its receipts and writes the driver sinks.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from wire.core.arrow_types import spark_schema
from wire.core.envelope import decode_table, encode_table
from wire.delivery.sink import EpochStager, StagedPart
from wire.errors import StagingFailed
from wire.plan.nodes import ALL_STEPS, PortRef
from wire.runtime.ports import split_ports
from wire.runtime.samples import SAMPLE_SIZE, preview_rows

STAGED = "staged"
ROWS = "rows"
METRICS = "metrics"
EMITTED = "emitted"
SAMPLE = "sample"

RESULT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string()),
        pa.field("target", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("rows", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("receipt", pa.string()),
        pa.field("blob", pa.binary()),
    ]
)
"""What each task returns to the driver, one record per item:

``kind`` ``"staged"`` (``target`` = sink step, ``receipt`` = the stager's JSON receipt),
``"rows"`` (``target`` = port id, ``blob`` = the port's rows for a driver sink, Arrow
IPC), ``"metrics"`` (``blob`` = metric records), ``"emitted"`` (``receipt`` = JSON
``{emit value: count}`` of the main port) or ``"sample"`` (``target`` = a dead-letter or
late port id, ``rows`` = the port's rows in the task, ``receipt`` = JSON list of
previews of its last rows, :func:`wire.runtime.samples.preview_rows`)."""

RESULT_TYPE = spark_schema(RESULT_SCHEMA)
""":data:`RESULT_SCHEMA` as the Spark type ``mapInArrow`` is given (a StructType, not a DDL
string: Spark would parse a DDL string in the JVM at every epoch)."""


@dataclass(frozen=True)
class Route:
    """One sink's input for an epoch: its step, its port, and its stager (None: driver sink)."""

    sink: str
    port: PortRef
    stager: EpochStager | None


def select_port(ports: dict[str, pa.Table], ref: PortRef) -> pa.Table | None:
    """The rows of port ``ref`` among one epoch's (or partition's) split ports.

    ``ref.step == ALL_STEPS`` (e.g. ``flow.dead_letters()``) concatenates that port of
    every step (schemas promoted). None when the port has no rows here.
    """
    if ref.step == ALL_STEPS:
        parts = [t for p, t in ports.items() if p.endswith("." + ref.port)]
        return pa.concat_tables(parts, promote_options="permissive") if parts else None
    return ports.get(ref.port_id())


def with_epoch(rows: pa.Table, epoch: int) -> pa.Table:
    """Append the ``epoch`` column (int64) that every sink row carries."""
    return rows.append_column("epoch", pa.array([epoch] * rows.num_rows, pa.int64()))


class PartitionWriter:
    """The ``mapInArrow`` function of an epoch's job (module docstring); picklable.

    Parameters
    ----------
    epoch:
        The epoch (Spark batch) id.
    main_port:
        The port id of the terminal step's data rows.
    routes:
        One route per sink.
    sample_size:
        Previews returned per dead-letter or late port (its last rows; 0: none).
    """

    def __init__(self, epoch: int, main_port: str, routes: list[Route], *,
                 sample_size: int = SAMPLE_SIZE) -> None:
        self.epoch = epoch
        self.main_port = main_port
        self.routes = routes
        self.sample_size = sample_size

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Process one task's rows; yield at most one result batch (:data:`RESULT_SCHEMA`)."""
        from pyspark import TaskContext

        got = list(batches)
        if not got:
            return
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        records = self.process(partition, pa.Table.from_batches(got))
        if records:
            yield pa.RecordBatch.from_pylist(records, schema=RESULT_SCHEMA)

    def process(self, partition: int, table: pa.Table) -> list[dict[str, object]]:
        """Split, stage and summarise one partition's envelope rows (pure but for staging)."""
        ports, metrics = split_ports(table, self.main_port)
        records: list[dict[str, object]] = []
        returned: set[str] = set()
        for route in self.routes:
            rows = select_port(ports, route.port)
            if rows is None or rows.num_rows == 0:
                continue
            if route.stager is not None:
                try:
                    part = route.stager.stage(partition, with_epoch(rows, self.epoch))
                except Exception as e:
                    raise StagingFailed(
                        f"sink {route.sink!r}: staging epoch {self.epoch}, partition {partition} "
                        f"failed: {e!r}"
                    ) from e
                records.append(_record(STAGED, route.sink, partition, part.rows, part.bytes,
                                       receipt=json.dumps(part.receipt)))
            elif route.port.port_id() not in returned:
                returned.add(route.port.port_id())
                blob = encode_table(rows)
                records.append(_record(ROWS, route.port.port_id(), partition, rows.num_rows, len(blob),
                                       blob=blob))
        if metrics is not None and metrics.num_rows:
            blob = encode_table(metrics)
            records.append(_record(METRICS, "", partition, metrics.num_rows, len(blob), blob=blob))
        for port_id, rows in ports.items():  # window results of the main stream and of branches
            if (port_id == self.main_port or port_id.endswith(".out")) and "emit" in rows.column_names \
                    and rows.num_rows:
                counts = pc.value_counts(rows.column("emit")).to_pylist()
                emitted = {str(c["values"]): int(c["counts"]) for c in counts}
                records.append(_record(EMITTED, "", partition, rows.num_rows, 0, receipt=json.dumps(emitted)))
        for port_id, rows in ports.items():
            previews = preview_rows(port_id, rows, limit=self.sample_size) if rows.num_rows else []
            if previews:
                receipt = json.dumps(previews, default=str)
                records.append(_record(SAMPLE, port_id, partition, rows.num_rows, len(receipt),
                                       receipt=receipt))
        return records


def _record(kind: str, target: str, partition: int, rows: int, nbytes: int, *,
            receipt: str | None = None, blob: bytes | None = None) -> dict[str, object]:
    return {"kind": kind, "target": target, "partition": partition, "rows": rows, "bytes": nbytes,
            "receipt": receipt, "blob": blob}


@dataclass
class EpochResult:
    """What the driver received from one epoch's job, grouped for the commit."""

    staged: dict[str, list[StagedPart]]
    """Per executor sink step, the receipts of its tasks in partition order."""
    driver_rows: dict[str, pa.Table]
    """Per port id, the rows that driver sinks receive."""
    metrics: pa.Table | None
    emitted: Counter[str]
    received_rows: int
    """Data rows that reached the driver (those of driver sinks)."""
    received_bytes: int
    """Bytes of the job's result that reached the driver (receipts, metrics, rows)."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    """Previews of dead letters and late events (:mod:`wire.runtime.samples`), by partition."""

    @staticmethod
    def from_table(result: pa.Table) -> EpochResult:
        """Group a job's result table (:data:`RESULT_SCHEMA`) by kind."""
        result = result.sort_by([("partition", "ascending")])
        staged: dict[str, list[StagedPart]] = {}
        row_parts: dict[str, list[pa.Table]] = {}
        metric_parts: list[pa.Table] = []
        emitted: Counter[str] = Counter()
        samples: list[dict[str, Any]] = []
        received_rows = 0
        for rec in result.to_pylist():
            kind = rec["kind"]
            if kind == STAGED:
                staged.setdefault(rec["target"], []).append(
                    StagedPart(rec["partition"], rec["rows"], rec["bytes"], json.loads(rec["receipt"])))
            elif kind == ROWS:
                row_parts.setdefault(rec["target"], []).append(decode_table(rec["blob"]))
                received_rows += rec["rows"]
            elif kind == METRICS:
                metric_parts.append(decode_table(rec["blob"]))
            elif kind == EMITTED:
                emitted.update(json.loads(rec["receipt"]))
            elif kind == SAMPLE:
                samples.extend(json.loads(rec["receipt"]))
        return EpochResult(
            staged=staged,
            driver_rows={
                p: pa.concat_tables(ts, promote_options="permissive") for p, ts in row_parts.items()
            },
            metrics=pa.concat_tables(metric_parts) if metric_parts else None,
            emitted=emitted,
            received_rows=received_rows,
            received_bytes=result.nbytes,
            samples=samples,
        )
