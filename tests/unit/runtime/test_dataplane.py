"""The epoch data plane without Spark: one task's split/stage/summary, and the driver's grouping."""

import pickle

import pyarrow as pa
import pytest

from wire.core.envelope import (
    KIND,
    KIND_DATA,
    METRICS_PORT,
    envelope_batch,
    metrics_table,
    side_batch,
    watermark_batch,
    with_envelope,
)
from wire.delivery.sink import EpochStager, StagedPart
from wire.plan.nodes import ALL_STEPS, DEAD_LETTER, LATE, PortRef
from wire.runtime.dataplane import RESULT_SCHEMA, EpochResult, PartitionWriter, Route, StagingFailed
from wire.runtime.dispatcher import _staging_cause

PAYLOAD = pa.schema([("k", pa.string()), ("n", pa.int64()), ("emit", pa.string())])
SCHEMA = with_envelope(PAYLOAD)
MAIN = "totals.out"


class Recording(EpochStager):
    """A stager that keeps what it was given (a real one writes files or COPYs rows)."""

    def __init__(self) -> None:
        self.staged: list[tuple[int, pa.Table]] = []

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        self.staged.append((partition, table))
        return StagedPart(partition, table.num_rows, 10 * table.num_rows, {"file": f"p{partition}"})


def partition_rows(data: list[dict], late: pa.Table | None = None, dead: pa.Table | None = None,
                   metrics: dict[str, int] | None = None) -> pa.Table:
    batches = [envelope_batch(SCHEMA, {
        "k": pa.array([d["k"] for d in data], pa.string()),
        "n": pa.array([d["n"] for d in data], pa.int64()),
        "emit": pa.array([d["emit"] for d in data], pa.string()),
        KIND: pa.array([KIND_DATA] * len(data), pa.int32()),
    }, len(data))]
    batches.append(watermark_batch(SCHEMA, 1000, [0, 1]))
    if late is not None:
        batches.append(side_batch(SCHEMA, f"totals.{LATE}", late))
    if dead is not None:
        batches.append(side_batch(SCHEMA, f"src.{DEAD_LETTER}", dead))
    if metrics is not None:
        batches.append(side_batch(SCHEMA, METRICS_PORT, metrics_table("totals", metrics)))
    return pa.Table.from_batches(batches)


LATE_ROWS = pa.table({"event_time": pa.array([5], pa.int64()), "reason": ["window closed"]})
DEAD_ROWS = pa.table({"location": ["f.csv:3"], "reason": ["bad int"]})


def test_executor_sinks_get_their_ports_rows_with_the_epoch_and_only_receipts_return():
    main_stager, late_stager, dead_stager = Recording(), Recording(), Recording()
    writer = PartitionWriter(7, MAIN, [
        Route("out", PortRef("totals"), main_stager),
        Route("late", PortRef("totals", LATE), late_stager),
        Route("dlq", PortRef(ALL_STEPS, DEAD_LETTER), dead_stager),
    ])
    data = [{"k": "a", "n": 1, "emit": "final"}, {"k": "b", "n": 2, "emit": "final"},
            {"k": "a", "n": 3, "emit": "update"}]
    records = writer.process(3, partition_rows(data, LATE_ROWS, DEAD_ROWS, {"late": 1, "events": 9}))

    [(p, main)] = main_stager.staged
    assert p == 3
    assert main.column_names == ["k", "n", "emit", "epoch"]  # envelope columns never reach a sink
    assert main.to_pylist() == [dict(d, epoch=7) for d in data]
    assert late_stager.staged[0][1].to_pylist() == [{"event_time": 5, "reason": "window closed", "epoch": 7}]
    assert dead_stager.staged[0][1].to_pylist() == [{"location": "f.csv:3", "reason": "bad int", "epoch": 7}]

    result = EpochResult.from_table(pa.Table.from_pylist(records, schema=RESULT_SCHEMA))
    assert {s: [(p.partition, p.rows, p.receipt) for p in parts] for s, parts in result.staged.items()} == {
        "out": [(3, 3, {"file": "p3"})], "late": [(3, 1, {"file": "p3"})], "dlq": [(3, 1, {"file": "p3"})]}
    assert result.driver_rows == {}
    assert result.received_rows == 0  # no data row reached the driver
    assert result.emitted == {"final": 2, "update": 1}
    assert sorted(result.metrics.to_pylist(), key=lambda r: r["name"]) == [
        {"step": "totals", "name": "events", "value": 9}, {"step": "totals", "name": "late", "value": 1}]


def test_driver_sinks_get_their_rows_back_once_per_port_in_partition_order():
    writer = PartitionWriter(2, MAIN, [Route("mem", PortRef("totals"), None),
                                       Route("console", PortRef("totals"), None)])
    first = writer.process(1, partition_rows([{"k": "b", "n": 2, "emit": "final"}]))
    second = writer.process(0, partition_rows([{"k": "a", "n": 1, "emit": "final"}]))
    assert [r["kind"] for r in first + second].count("rows") == 2  # one blob per port and task
    result = EpochResult.from_table(pa.Table.from_pylist(first + second, schema=RESULT_SCHEMA))
    assert result.driver_rows[MAIN].column("k").to_pylist() == ["a", "b"]
    assert result.received_rows == 2
    assert result.received_bytes > 0


def test_a_task_without_rows_for_a_sink_stages_nothing():
    stager = Recording()
    writer = PartitionWriter(0, MAIN, [Route("late", PortRef("totals", LATE), stager)])
    records = writer.process(0, partition_rows([{"k": "a", "n": 1, "emit": "final"}]))
    assert stager.staged == []
    assert [r["kind"] for r in records] == ["emitted"]


def test_the_writer_pickles_with_its_stagers():
    writer = PartitionWriter(4, MAIN, [Route("out", PortRef("totals"), Recording())])
    copy = pickle.loads(pickle.dumps(writer))
    assert copy.epoch == 4 and copy.routes[0].port == PortRef("totals")


@pytest.mark.parametrize("n_tasks", [1, 2, 5])
def test_receipts_of_all_tasks_are_grouped_by_sink_and_sorted_by_partition(n_tasks):
    stager = Recording()
    writer = PartitionWriter(1, MAIN, [Route("out", PortRef("totals"), stager)])
    records = []
    for partition in reversed(range(n_tasks)):
        records += writer.process(partition, partition_rows([{"k": "x", "n": partition, "emit": "early"}]))
    result = EpochResult.from_table(pa.Table.from_pylist(records, schema=RESULT_SCHEMA))
    assert [p.partition for p in result.staged["out"]] == list(range(n_tasks))
    assert result.emitted == {"early": n_tasks}


class Broken(EpochStager):
    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        raise ValueError("column 'n' does not fit the table")


def test_a_failing_stager_names_its_sink_epoch_and_partition():
    writer = PartitionWriter(9, MAIN, [Route("pg_out", PortRef("totals"), Broken())])
    with pytest.raises(StagingFailed) as info:
        writer.process(2, partition_rows([{"k": "a", "n": 1, "emit": "final"}]))
    assert str(info.value).startswith("sink 'pg_out': staging epoch 9, partition 2 failed: ValueError(")
    # what the driver shows when the task's error comes back wrapped by Spark
    wrapped = RuntimeError(f"[PYTHON_EXCEPTION] Traceback ...\nwire.runtime.dataplane.StagingFailed: "
                           f"{info.value}\n\tat org.apache.spark...")
    assert _staging_cause(wrapped) == str(info.value)
    assert _staging_cause(RuntimeError("boom\nmore")) == "the epoch's Spark job failed: boom"
