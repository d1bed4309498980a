"""The self-correcting sink's executor side: each task's rows by partition, and one task per partition.

:class:`_InputStager` writes a task's rows of the epoch split by partition (shard)
of the key; :class:`_PartTask` is the Spark task of one partition that folds them
into its desired collection, saves it, and computes and stages its part of the
correction; :func:`_run_parts` runs it for every partition. Protocol and costs:
:mod:`wire.sinks.self_correcting_sink.sink`.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from wire.delivery.sink import EpochStager, StagedPart
from wire.errors import WireError
from wire.sinks.self_correcting_sink.desired import DesiredCollection, ShardedDesiredStore
from wire.sinks.self_correcting_sink.rows import Key, shard_columns, shard_of
from wire.sinks.self_correcting_sink.tables import _DeltaTable, _PgTable
from wire.sinks.self_correcting_sink.writer import PartRequest, PartResult, correct_part


def _exact_key_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_boolean(t) or pa.types.is_date(t) or pa.types.is_timestamp(t))


# --- the executors' side -----------------------------------------------------------------


@dataclass(frozen=True)
class _InputStager(EpochStager):
    """Executors, in the epoch's job: a task's rows, split by partition (shard) of the key.

    Written as ``<state>/input/<epoch>/shard-<n>/p<task>-<uuid>.parquet``.
    """

    directory: str
    key: tuple[str, ...]
    shard_on: tuple[str, ...]
    partitions: int
    drop: tuple[str, ...]
    where: str

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Write the task's rows (without the ``drop`` columns), one file per partition of the key."""
        drop = [c for c in self.drop if c in table.column_names and c not in self.key]
        rows = table.drop_columns(drop) if drop else table
        missing = [k for k in self.key if k not in rows.column_names]
        if missing:
            raise WireError(f"{self.where}: key column(s) {missing} not among the rows' {rows.column_names}")
        bad = [f"{k}: {rows.schema.field(k).type}" for k in self.key
               if not _exact_key_type(rows.schema.field(k).type)]
        if bad:
            raise WireError(f"{self.where}: key columns need an exactly comparable type "
                            f"(integer, string, bool, date, timestamp), got {bad}")
        shards = pa.array([shard_of(r, self.shard_on, self.partitions)
                           for r in rows.select(list(self.shard_on)).to_pylist()]
                          if self.shard_on else [0] * rows.num_rows, pa.int32())
        files: dict[str, str] = {}
        token = uuid.uuid4().hex
        for n in sorted(set(shards.to_pylist())):
            part = rows.filter(pc.equal(shards, n))
            directory = Path(self.directory) / f"shard-{n}"
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"p{partition}-{token}.parquet"
            pq.write_table(part, path)
            files[str(n)] = str(path)
        return StagedPart(partition, rows.num_rows, rows.nbytes, {"files": files})


@dataclass(frozen=True)
class _PartTask:
    """Executors, one Spark task per partition of the key: fold, save, correct, stage.

    Folds the epoch's rows into the partition's desired collection, saves it, and
    computes and stages the partition's part of the correction.
    """

    backend: str
    target: str
    table: str | None
    schema_name: str
    key: tuple[str, ...]
    retract_column: str | None
    covers: tuple[str, str] | None
    state_dir: str
    partitions: int
    epoch: int
    inputs: dict[int, list[str]]
    schema: pa.Schema
    writer: str

    def __call__(self, req: PartRequest, shard: int) -> PartResult:
        """Run :func:`~wire.sinks.self_correcting_sink.writer.correct_part` for partition ``shard``.

        A partition without rows in the epoch folds and saves nothing, and in a
        touched-keys request has nothing to compare. The task's Python worker keeps
        the partition's collection in memory after saving it (:data:`_DESIRED`) and
        reuses it at the next epoch when it is still the newest saved, instead of
        reading the Parquet file.
        """
        inputs = self.inputs.get(shard, [])
        if not inputs and not req.full:
            return PartResult(shard, 0, 0, 0)
        store = ShardedDesiredStore(self.state_dir, self.partitions)
        cache_key = (self.state_dir, shard)
        cached = _DESIRED.pop(cache_key, None)
        prev = store.shard(shard).newest_before(self.epoch)
        if cached is not None and prev is not None and cached[0] == prev:
            desired = cached[1]
        else:
            desired = DesiredCollection(self.key, retract_column=self.retract_column, covers=self.covers,
                                        schema=self.schema)
            before = store.load_before(shard, self.epoch, shard_columns(self.key, self.covers))
            if before is not None and before.num_columns:
                desired.load(before)
        desired.schema = self.schema
        touched: set[Key] = set()
        for path in inputs:
            touched |= desired.apply(pq.read_table(path))
        if inputs:
            store.shard(shard).save(self.epoch, desired.to_arrow())
            _DESIRED[cache_key] = (self.epoch, desired)
        elif prev is not None:
            _DESIRED[cache_key] = (prev, desired)
        conn = None
        try:
            if self.backend == "postgres":
                from wire.sinks.postgres_sink.target import _connect

                conn = _connect(self.target, f"wire {self.writer} part {shard}")
                table: Any = _PgTable(conn, self.schema_name, str(self.table), self.key, self.schema.names,
                                      self.writer, setup=False)
            else:
                table = _DeltaTable(self.target, self.key, self.schema, self.writer,
                                    str(Path(self.state_dir) / "parts"), setup=False)
            return correct_part(table, desired, touched, req, shard=shard, shards=self.partitions)
        finally:
            if conn is not None:
                conn.close()


_DESIRED: dict[tuple[str, int], tuple[int, DesiredCollection]] = {}
"""Per Python worker: (state directory, partition) -> (epoch saved, its desired collection)."""


def _run_parts(task: _PartTask, req: PartRequest, job: str) -> list[PartResult]:
    """Run ``task`` for every partition: one Spark task each when Spark runs, else in this process.

    No job when no partition has rows and the request compares only touched keys.
    """
    from pyspark import SparkContext

    if not req.full and not any(task.inputs.values()):
        return [PartResult(n, 0, 0, 0) for n in range(task.partitions)]
    sc = SparkContext._active_spark_context
    if sc is None:
        return [task(req, n) for n in range(task.partitions)]
    sc.setJobDescription(job)
    try:
        return list(sc.parallelize(range(task.partitions), task.partitions)
                    .map(functools.partial(task, req)).collect())
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]
