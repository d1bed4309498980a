"""The self-correcting sink (SPEC §8): a PostgreSQL or Delta table kept equal to the flow's results.

Built by :func:`self_correcting`. The logic (desired collection, correction, batch
descriptions, the compare-and-set loop) is :mod:`wire.delivery.self_correcting`;
this module binds it to two kinds of table and to the runtime.

Where the work happens — executors write, the driver commits (SPEC §8)
    The sink is an executor sink. The keys are split into ``partitions``
    (:func:`~wire.delivery.self_correcting.shard_of` over the key columns, without
    the ``covers`` columns so a merged session meets the sessions it covers; fixed
    for the state directory's life). Each partition's **desired collection** (one
    row per key) is kept as Parquet under the flow's checkpoint,
    ``<checkpoint>/self_correcting/<sink step>/shard-<n>/desired-<epoch>.parquet``
    (the two newest epochs; a replayed epoch recomputes from the one before). Each
    replica has its own checkpoint, hence its own desired collections: nothing is
    shared between replicas but the table.

Per epoch
    1. **executors**, in the epoch's job: each task writes its rows for the sink,
       split by partition of the key, to ``input/<epoch>/shard-<n>/`` (no row
       reaches the driver);
    2. **driver**: read the table's upper and whether it *drifted* (PostgreSQL: its
       row count and the sum of ``hashtextextended(row::text, 0)`` differ from those
       the last append recorded; Delta: the newest commit is not one of the
       sink's); compare every key instead of the touched ones when it drifted,
       when another writer appended since this one, or every ``full_check_every``
       epochs; mint the batch description ``(lower, upper) = (table upper, epoch +
       1)`` once (none if the table is already there: another replica, or a
       replay);
    3. **executors**, one Spark task per partition: fold the partition's rows of the
       epoch into its desired collection and save it; read the persisted rows of its
       touched keys (in a full check: every row, keeping its partition's); compute
       the correction (desired − persisted) and stage its part for exactly that
       description — PostgreSQL: ``COPY`` into the unlogged table
       ``<schema>."<table>__wire_sc"`` tagged with the attempt and partition;
       Delta: a Parquet file ``parts/<attempt>/shard-<n>.parquet``;
    4. **driver**: commit the parts with compare-and-set. PostgreSQL: one
       transaction ``LOCK TABLE ... IN EXCLUSIVE MODE`` (hand edits wait),
       ``UPDATE wire_sc_frontiers SET upper = <upper> WHERE upper = <lower>``, check
       the table's fingerprint is the one read, delete the staged keys and insert
       the staged rows (``INSERT ... SELECT`` inside the server), record the new
       fingerprint. Delta: one ``MERGE`` of the staged parts, committed on the
       version read with no commit retries, so any commit in between (another
       replica's, a hand edit) fails it; delta-rs rewrites the touched files in the
       driver process. A failed compare-and-set is counted, the parts are
       discarded, and steps 2-4 run again with a full check: never a blind append.

    In **read-only** mode every key is compared, nothing is staged, and the
    distance (keys differing) is reported. The mode is the ``read_only`` argument
    at build time, switched while running by ``PATCH
    /v1/flows/{id}/sinks/{sink} {"mode": "write" | "read_only"}`` or ``wire
    sink-mode``, through the flow's control file (a restart goes back to the
    build-time mode).

Cost per epoch: one file per (task, partition) with rows; one Spark job of
``partitions`` tasks (per attempt); the reads of the table (touched keys, or the
whole table per partition in a full check); one transaction / commit.
State directory: on a cluster it must be on storage every executor reaches.

Metrics per sink step (in the run summary, REST status and ``/metrics``):
counters ``sc_corrections`` (rows written: keys deleted + rows inserted),
``sc_drift_rows`` (keys found differing that the epoch did not touch),
``sc_cas_conflicts``, ``sc_epochs_behind``, ``sc_parts`` (partitions that staged a
part of an appended correction); gauges ``sc_read_only`` (1 / 0),
``sc_distance`` (keys differing before the epoch's append), ``sc_corrections_last_epoch``,
``sc_table_upper``.

Replicas and frontiers
    The frontier is the epoch id, so replicas of one flow agree on what a frontier
    means when their epochs cut the input at the same places (sources with a fixed
    ``max_events_per_epoch`` over the same files or offsets). Whatever the cuts,
    every append leaves the table equal to the appending replica's desired
    collection (a full check whenever someone else wrote), and the replica with the
    highest final epoch writes last, so replicas that both run to the end leave
    the table equal to the result of the whole input.

Limits: key columns must be of a type that compares exactly (integers, strings,
booleans, dates, timestamps); values must be scalars
(PostgreSQL types as in :mod:`wire.sinks.postgres_sink`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import uuid
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from wire.core.control_file import control_path, sink_mode
from wire.delivery.self_correcting import (
    BatchDescription,
    EpochOutcome,
    PartRequest,
    PartResult,
    SelfCorrectingWriter,
    Snapshot,
    correct_part,
)
from wire.delivery.self_correcting_desired import DesiredCollection, ShardedDesiredStore
from wire.delivery.self_correcting_rows import Correction, Key, Row, norm, shard_columns, shard_of
from wire.delivery.sink import EpochStager, ExecutorSink, Sink, StagedPart
from wire.errors import ConfigError, WireError, needs_extra

__all__ = ["FRONTIER_TABLE", "SelfCorrectingSink", "self_correcting"]

FRONTIER_TABLE = "wire_sc_frontiers"
"""PostgreSQL: the table (in the sink's ``schema``) recording each target table's upper."""
DELTA_APP_ID = "wire.self_correcting"
"""Delta: the application transaction whose version is the table's upper."""
DELTA_MARK = "wire.sc.upper"
"""Delta: the commit-info key of the sink's commits."""
MODES = ("write", "read_only")
_OP = "__wire_op"


class _Conflict(Exception):
    """Raised inside a compare-and-set transaction to roll it back."""


def _exact_key_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_boolean(t) or pa.types.is_date(t) or pa.types.is_timestamp(t))


# --- PostgreSQL -----------------------------------------------------------------------


class _PgTable:
    """A PostgreSQL table as a :class:`~wire.delivery.self_correcting.CasTable`.

    Parts are staged in ``<schema>."<table>__wire_sc"`` (unlogged; the table's
    columns plus ``__wire_writer``, ``__wire_attempt``, ``__wire_shard`` and
    ``__wire_op``: ``d`` rows name a key to delete, ``i`` rows a row to insert).
    ``setup`` (the driver, once per run) creates the frontier and staging tables.
    """

    def __init__(self, conn: Any, schema: str, table: str, key: tuple[str, ...], columns: list[str],
                 writer: str, *, setup: bool = True) -> None:
        from psycopg import sql

        self.conn = conn
        self.sql = sql
        self.schema, self.table, self.key, self.columns, self.writer = schema, table, key, columns, writer
        self.ident = sql.Identifier(schema, table)
        self.frontier = sql.Identifier(schema, FRONTIER_TABLE)
        self.staging = sql.Identifier(schema, f"{table}__wire_sc"[:63])
        types = dict(conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (schema, table)).fetchall())
        self.key_types = [types[k] for k in key]
        if not setup:
            return
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (schema_name text NOT NULL, table_name text NOT NULL, "
            "upper bigint NOT NULL, nrows bigint NOT NULL, digest text NOT NULL, writer text, "
            "updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (schema_name, table_name))"
        ).format(self.frontier))
        conn.execute(sql.SQL(
            "INSERT INTO {} (schema_name, table_name, upper, nrows, digest) VALUES (%s, %s, 0, 0, '0') "
            "ON CONFLICT DO NOTHING").format(self.frontier), (schema, table))
        conn.execute(sql.SQL(
            "CREATE UNLOGGED TABLE IF NOT EXISTS {} AS SELECT NULL::text AS __wire_writer, "
            "NULL::text AS __wire_attempt, NULL::int AS __wire_shard, NULL::text AS __wire_op, t.* "
            "FROM {} AS t WITH NO DATA").format(self.staging, self.ident))

    def _fingerprint(self) -> tuple[int, str]:
        row = self.conn.execute(self.sql.SQL(
            "SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)), 0)::text FROM {} AS t"
        ).format(self.ident)).fetchone()
        return int(row[0]), str(row[1])

    def _keys_clause(self, keys: Collection[Key]) -> tuple[Any, list[list[Any]]]:
        sql = self.sql
        cols = sql.SQL(", ").join(map(sql.Identifier, self.key))
        arrays = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in self.key_types)
        clause = sql.SQL("({}) IN (SELECT * FROM unnest({}))").format(cols, arrays)
        values = [[k[i] for k in keys] for i in range(len(self.key))]
        return clause, values

    def read_meta(self) -> Snapshot:
        """Upper and drift (recorded vs current count and hash sum); token = the fingerprint."""
        sql = self.sql
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            upper, nrows, digest = self.conn.execute(sql.SQL(
                "SELECT upper, nrows, digest FROM {} WHERE schema_name = %s AND table_name = %s"
            ).format(self.frontier), (self.schema, self.table)).fetchone()
            now = self._fingerprint()
        return Snapshot(int(upper), now != (int(nrows), digest), now)

    def read(self, keys: Collection[Key] | None, token: Any) -> list[Row]:
        """The rows of ``keys`` (None: all); a change since ``token`` fails the commit later."""
        sql = self.sql
        if keys is not None and not keys:
            return []
        select = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, self.columns)),
                                                     self.ident)
        if keys is None:
            cur = self.conn.execute(select)
        else:
            clause, values = self._keys_clause(keys)
            cur = self.conn.execute(sql.SQL("{} WHERE {}").format(select, clause), values)
        return [dict(zip(self.columns, r, strict=True)) for r in cur.fetchall()]

    def stage(self, attempt: str, shard: int, desc: BatchDescription, corr: Correction) -> None:
        """One transaction: replace this ``(attempt, shard)``'s staged rows by ``corr``'s (COPY)."""
        sql = self.sql
        meta = ["__wire_writer", "__wire_attempt", "__wire_shard", "__wire_op"]
        with self.conn.transaction():
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE __wire_attempt = %s AND __wire_shard = %s")
                              .format(self.staging), (attempt, shard))
            cols = sql.SQL(", ").join(map(sql.Identifier, [*meta, *self.columns]))
            copy = sql.SQL("COPY {} ({}) FROM STDIN").format(self.staging, cols)
            head = [self.writer, attempt, shard]
            with self.conn.cursor().copy(copy) as cp:
                for k in corr.deletes:
                    named = dict(zip(self.key, k, strict=True))
                    cp.write_row([*head, "d", *(named.get(c) for c in self.columns)])
                for row in corr.inserts:
                    cp.write_row([*head, "i", *(row.get(c) for c in self.columns)])

    def commit(self, desc: BatchDescription, attempt: str, token: Any) -> bool:
        """One transaction: lock, CAS the upper, check the fingerprint, apply the staged parts, record."""
        sql = self.sql
        keys = sql.SQL(", ").join(map(sql.Identifier, self.key))
        cols = sql.SQL(", ").join(map(sql.Identifier, self.columns))
        try:
            with self.conn.transaction():
                self.conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self.ident))
                moved = self.conn.execute(sql.SQL(
                    "UPDATE {} SET upper = %s, writer = %s, updated_at = now() "
                    "WHERE schema_name = %s AND table_name = %s AND upper = %s RETURNING 1"
                ).format(self.frontier),
                    (desc.upper, self.writer, self.schema, self.table, desc.lower)).fetchone()
                if moved is None or self._fingerprint() != token:
                    raise _Conflict
                self.conn.execute(sql.SQL(
                    "DELETE FROM {} WHERE ({}) IN (SELECT {} FROM {} WHERE __wire_attempt = %s "
                    "AND __wire_op = 'd')").format(self.ident, keys, keys, self.staging), (attempt,))
                self.conn.execute(sql.SQL(
                    "INSERT INTO {} ({}) SELECT {} FROM {} WHERE __wire_attempt = %s AND __wire_op = 'i'"
                ).format(self.ident, cols, cols, self.staging), (attempt,))
                nrows, digest = self._fingerprint()
                self.conn.execute(sql.SQL(
                    "UPDATE {} SET nrows = %s, digest = %s WHERE schema_name = %s AND table_name = %s"
                ).format(self.frontier), (nrows, digest, self.schema, self.table))
                # this writer's parts: the attempt's, and leftovers of crashed attempts
                self.conn.execute(sql.SQL("DELETE FROM {} WHERE __wire_writer = %s").format(self.staging),
                                  (self.writer,))
        except _Conflict:
            self._discard(attempt)
            return False
        return True

    def _discard(self, attempt: str) -> None:
        """Delete the staged rows of ``attempt``."""
        self.conn.execute(self.sql.SQL("DELETE FROM {} WHERE __wire_attempt = %s").format(self.staging),
                          (attempt,))


# --- Delta ------------------------------------------------------------------------------


class _DeltaTable:
    """A Delta table as a :class:`~wire.delivery.self_correcting.CasTable` (deltalake, no JVM).

    Parts are staged as Parquet files ``<parts>/<attempt>/shard-<n>.parquet`` (the
    table's columns plus ``__wire_op``: ``d`` a key to delete, ``u`` a row to insert),
    under the replica's state directory.
    """

    def __init__(self, path: str, key: tuple[str, ...], schema: pa.Schema, writer: str, parts: str,
                 *, setup: bool = True) -> None:
        from deltalake import CommitProperties, DeltaTable

        self.path, self.key, self.writer, self.parts = path, key, writer, Path(parts)
        self.columns = schema.names
        self.schema = schema
        if setup and not DeltaTable.is_deltatable(path):
            with contextlib.suppress(Exception):  # another replica may create it at the same moment
                DeltaTable.create(path, schema, mode="ignore",
                                  commit_properties=CommitProperties(custom_metadata={DELTA_MARK: "0"}))
            if not DeltaTable.is_deltatable(path):
                raise WireError(f"self-correcting sink: cannot create the Delta table at {path}")

    def read_meta(self) -> Snapshot:
        """Upper (txn version), drift (newest commit not the sink's); token = the version read."""
        from deltalake import DeltaTable

        dt = DeltaTable(self.path)
        upper = dt.transaction_version(DELTA_APP_ID) or 0
        newest = dt.history(1)
        return Snapshot(int(upper), bool(newest) and DELTA_MARK not in newest[0], dt.version())

    def read(self, keys: Collection[Key] | None, token: Any) -> list[Row]:
        """The rows of ``keys`` (None: all) at version ``token``."""
        from deltalake import DeltaTable

        if keys is not None and not keys:
            return []
        data = DeltaTable(self.path, version=token).to_pyarrow_table(columns=self.columns)
        if keys is not None:
            first = pa.array(sorted({k[0] for k in keys}), data.schema.field(self.key[0]).type)
            data = data.filter(pc.is_in(data.column(self.key[0]), value_set=first))
        rows: list[dict[str, Any]] = data.to_pylist()
        if keys is not None and len(self.key) > 1:
            rows = [r for r in rows if tuple(norm(r[k]) for k in self.key) in keys]
        return rows

    def stage(self, attempt: str, shard: int, desc: BatchDescription, corr: Correction) -> None:
        """Write ``corr`` as ``<parts>/<attempt>/shard-<shard>.parquet`` (atomic rename)."""
        rows: list[Row] = [{**r, _OP: "u"} for r in corr.inserts]
        rows += [{**dict(zip(self.key, k, strict=True)), _OP: "d"} for k in corr.deletes]
        table = pa.Table.from_pylist(rows, schema=self.schema.append(pa.field(_OP, pa.string())))
        directory = self.parts / attempt
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"shard-{shard}.parquet"
        tmp = directory / f".shard-{shard}-{uuid.uuid4().hex}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)

    def commit(self, desc: BatchDescription, attempt: str, token: Any) -> bool:
        """One ``MERGE`` commit of the staged parts on the version read, no retries."""
        from deltalake import CommitProperties, DeltaTable, Transaction
        from deltalake.exceptions import CommitFailedError

        try:
            dt = DeltaTable(self.path, version=token)
            if (dt.transaction_version(DELTA_APP_ID) or 0) != desc.lower:
                return False
            files = sorted((self.parts / attempt).glob("shard-*.parquet"))
            source = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
            if source is None:
                return False
            on = " AND ".join(f't."{k}" = s."{k}"' for k in self.key)
            props = CommitProperties(max_commit_retries=0,
                                     app_transactions=[Transaction(DELTA_APP_ID, desc.upper)],
                                     custom_metadata={DELTA_MARK: str(desc.upper),
                                                      "wire.sc.writer": self.writer})
            (dt.merge(source, predicate=f"{on} AND s.\"{_OP}\" = 'd'", source_alias="s", target_alias="t",
                      commit_properties=props)
             .when_matched_delete()
             .when_not_matched_insert(updates={c: f's."{c}"' for c in self.columns},
                                      predicate=f"s.\"{_OP}\" = 'u'")
             .execute())
        except CommitFailedError:
            return False
        finally:
            self._discard(attempt)
        return True

    def _discard(self, attempt: str) -> None:
        """Remove ``<parts>/<attempt>``."""
        shutil.rmtree(self.parts / attempt, ignore_errors=True)


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
        """Run :func:`~wire.delivery.self_correcting.correct_part` for partition ``shard``.

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
                from wire.sinks.postgres_target import _connect

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


# --- the sink -------------------------------------------------------------------------


@dataclass
class _Run:
    """What the sink holds while a flow runs (between ``open`` and ``close``)."""

    flow: str
    sink: str
    state_dir: Path
    control: str | None
    writer: SelfCorrectingWriter
    store: ShardedDesiredStore
    schema: pa.Schema | None = None
    table: Any = None
    conn: Any = None
    last: EpochOutcome | None = None
    counters: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class SelfCorrectingSink(ExecutorSink):
    """Keeps a PostgreSQL or Delta table equal to the flow's results; see :func:`self_correcting`."""

    guarantee: ClassVar[str] = "idempotent"

    backend: str
    key: tuple[str, ...]
    dsn: str | None = field(default=None, repr=False)
    path: str | None = None
    table: str | None = None
    schema: str = "public"
    drop: tuple[str, ...] = ("epoch", "emit")
    retract_column: str | None = None
    covers: tuple[str, str] | None = None
    read_only: bool = False
    full_check_every: int = 0
    state_dir: str | None = None
    partitions: int | None = None
    _run: _Run | None = field(default=None, init=False, repr=False, compare=False)
    _checkpoint: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    def describe(self) -> str:
        """E.g. ``"self_correcting postgres public.hourly key=(origin, window_start) (idempotent)"``."""
        where = f"{self.schema}.{self.table}" if self.backend == "postgres" else str(self.path)
        return f"self_correcting {self.backend} {where} key=({', '.join(self.key)}) ({self.guarantee})"

    def bind_checkpoint(self, checkpoint: str) -> None:
        """Runner, before :meth:`open`: the flow's checkpoint directory (desired collection, control file)."""
        self._checkpoint[:] = [str(checkpoint)]

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Driver, run start: find the state directory and its partitions, connect (PostgreSQL).

        Raises
        ------
        WireError
            When neither ``state_dir`` nor the flow's checkpoint is known, or the
            database cannot be reached.
        """
        self.close()
        checkpoint = self._checkpoint[0] if self._checkpoint else None
        if self.state_dir is not None:
            state = Path(self.state_dir)
        elif checkpoint is not None:
            state = Path(checkpoint) / "self_correcting" / sink_id
        else:
            raise WireError(f"{self.describe()}: no state_dir and no checkpoint to keep the desired "
                            "collection in")
        run = _Run(
            flow=flow_id, sink=sink_id, state_dir=state,
            control=control_path(checkpoint) if checkpoint is not None else None,
            writer=SelfCorrectingWriter(self.key, full_check_every=self.full_check_every),
            store=ShardedDesiredStore.open(state, self.partitions or _default_partitions()),
        )
        schema_file = state / "schema.parquet"
        if schema_file.is_file():
            run.schema = pq.read_schema(schema_file)
        if self.backend == "postgres":
            from wire.sinks.postgres_target import _connect

            try:
                run.conn = _connect(str(self.dsn), f"wire {flow_id}/{sink_id} self-correcting")
            except Exception as e:
                raise WireError(f"{self.describe()}: cannot open: {e}") from e
        object.__setattr__(self, "_run", run)

    def close(self) -> None:
        """Driver, run end: disconnect."""
        run = self._run
        object.__setattr__(self, "_run", None)
        if run is not None and run.conn is not None:
            run.conn.close()

    def mode(self) -> str:
        """``"read_only"`` or ``"write"``: the control file's switch, else the build-time mode."""
        run = self._run
        switched = sink_mode(run.control, run.sink) if run is not None else None
        if switched in MODES:
            return str(switched)
        return "read_only" if self.read_only else "write"

    def last_outcome(self) -> EpochOutcome | None:
        """What the last epoch did (None before the first)."""
        return self._run.last if self._run is not None else None

    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver, before the epoch's job: the stager that writes the epoch's rows by partition of the key.

        Raises
        ------
        WireError
            Before :meth:`open`.
        """
        run = self._require_run(epoch)
        return _InputStager(str(run.state_dir / "input" / str(epoch)), self.key,
                            shard_columns(self.key, self.covers), run.store.shards, self.drop,
                            self.describe())

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver, after the epoch's job: correct the table for epoch ``epoch`` (also with no rows).

        Runs :meth:`SelfCorrectingWriter.write_parts
        <wire.delivery.self_correcting.SelfCorrectingWriter.write_parts>`: reads the
        table's upper, mints the batch description, and runs one Spark task per
        partition of the key (:class:`_PartTask`), which folds the partition's rows
        of the epoch into its desired collection, saves it, and stages its part of
        the correction for that description; then commits the parts with the
        compare-and-set, or on a conflict discards them and retries. A replay
        recomputes the epoch from the collections saved before it and finds the
        table already at its upper (nothing written).

        Raises
        ------
        WireError
            Before :meth:`open`; when the table does not fit the rows or the
            database fails; after too many compare-and-set conflicts in one epoch.
            The epoch then fails and is replayed.
        """
        run = self._require_run(epoch)
        run.last = None
        inputs: dict[int, list[str]] = {}
        for part in sorted(parts, key=lambda p: p.partition):
            for shard, path in part.receipt["files"].items():
                inputs.setdefault(int(shard), []).append(path)
        if run.schema is None and inputs:
            first = pq.read_schema(next(iter(inputs.values()))[0])
            if self.retract_column is not None and self.retract_column in first.names:
                first = first.remove(first.get_field_index(self.retract_column))
            run.state_dir.mkdir(parents=True, exist_ok=True)
            pq.write_table(first.empty_table(), run.state_dir / "schema.parquet")
            run.schema = first
        if run.schema is None:
            return  # no row ever: no table to create, nothing to compare
        task = _PartTask(
            backend=self.backend, target=str(self.dsn if self.backend == "postgres" else self.path),
            table=self.table, schema_name=self.schema, key=self.key, retract_column=self.retract_column,
            covers=self.covers, state_dir=str(run.state_dir), partitions=run.store.shards, epoch=epoch,
            inputs=inputs, schema=run.schema, writer=self._writer(run))
        job = f"wire {run.flow}/{run.sink}: self-correcting parts of epoch {epoch}"
        try:
            target = self._table(run)
            out = run.writer.write_parts(target, lambda req: _run_parts(task, req, job), epoch + 1,
                                         read_only=self.mode() == "read_only")
        except WireError:
            raise
        except Exception as e:
            if run.conn is not None:
                with contextlib.suppress(Exception):
                    run.conn.close()
                run.conn, run.table = None, None
            raise WireError(f"{self.describe()}: epoch {epoch} not written: {e}") from e
        for old in (run.state_dir / "input").glob("*"):
            if old.name.isdigit() and int(old.name) <= epoch:
                shutil.rmtree(old, ignore_errors=True)
        run.last = out
        run.counters["sc_corrections"] += out.corrections
        run.counters["sc_drift_rows"] += out.drift
        run.counters["sc_cas_conflicts"] += out.conflicts
        run.counters["sc_epochs_behind"] += out.status == "behind"

    def _require_run(self, epoch: int) -> _Run:
        run = self._run
        if run is None:
            raise WireError(f"{self.describe()}: epoch {epoch} written before open")
        return run

    def epoch_metrics(self) -> dict[str, int]:
        """Runner, after :meth:`commit_epoch`: this epoch's counters and the gauges (``gauge:`` names)."""
        run = self._run
        if run is None or run.last is None:
            return {}
        run_last = run.last
        return {
            "sc_corrections": run_last.corrections,
            "sc_drift_rows": run_last.drift,
            "sc_cas_conflicts": run_last.conflicts,
            "sc_epochs_behind": int(run_last.status == "behind"),
            "sc_parts": run_last.parts,
            "gauge:sc_read_only": int(run_last.status == "read_only"),
            "gauge:sc_distance": run_last.distance,
            "gauge:sc_corrections_last_epoch": run_last.corrections,
            "gauge:sc_table_upper": run_last.table_upper,
        }

    def totals(self) -> dict[str, int]:
        """Counters summed over this run (corrections, drift rows, conflicts, epochs behind)."""
        return dict(self._run.counters) if self._run is not None else {}

    @staticmethod
    def _writer(run: _Run) -> str:
        return f"{run.flow}/{run.sink}@{run.state_dir}"

    def _table(self, run: _Run) -> Any:
        if run.table is not None:
            return run.table
        assert run.schema is not None
        schema = run.schema
        columns = schema.names
        writer = self._writer(run)
        if self.backend == "postgres":
            from wire.sinks.postgres_target import _connect, _Target

            if run.conn is None or run.conn.closed or run.conn.broken:
                run.conn = _connect(str(self.dsn), f"wire {run.flow}/{run.sink} self-correcting")
            from psycopg import sql

            lock = "wire self-correcting setup"  # replicas starting together: one sets up at a time
            run.conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock,))
            try:
                create = sql.SQL("CREATE SCHEMA IF NOT EXISTS {}")
                run.conn.execute(create.format(sql.Identifier(self.schema)))
                _Target(self.schema, str(self.table), self.key, self.describe()).ensure(run.conn, schema)
                run.table = _PgTable(run.conn, self.schema, str(self.table), self.key, columns, writer)
            finally:
                run.conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock,))
        else:
            run.table = _DeltaTable(str(self.path), self.key, schema, writer, str(run.state_dir / "parts"))
        return run.table


def _default_partitions() -> int:
    """Spark's default parallelism when Spark runs (at least 2), else 2."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return max(2, int(sc.defaultParallelism)) if sc is not None else 2


def _check_key(key: object) -> tuple[str, ...]:
    accepted = "a column name or a non-empty sequence of distinct column names"
    names = (key,) if isinstance(key, str) else key
    if not isinstance(names, tuple | list) or not names:
        raise ConfigError("key", key, accepted)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ConfigError("key", key, accepted)
    return tuple(names)


def _is_dsn(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://")) or any(
        f"{k}=" in target for k in ("dbname", "host", "user", "port"))


def self_correcting(
    target: str | os.PathLike[str],
    *,
    key: str | Sequence[str],
    table: str | None = None,
    schema: str = "public",
    drop: Sequence[str] = ("epoch", "emit"),
    retract_column: str | None = None,
    covers: tuple[str, str] | None = None,
    read_only: bool = False,
    full_check_every: int = 0,
    state_dir: str | os.PathLike[str] | None = None,
    partitions: int | None = None,
) -> Sink:
    """Keep a table equal to the flow's current results, writing only the difference (SPEC §8).

    ``target`` is a PostgreSQL connection string or URL (then ``table`` is required)
    or a Delta table path. The table holds one row per ``key``: an epoch's row
    replaces the earlier row of its key (a window's ``update`` replaces its
    ``final``); a row with True in ``retract_column`` deletes its key; with
    ``covers=("window_start", "window_end")`` a row also deletes the rows of the
    same key without the window columns whose window it covers (sessions merged by
    a late event). Per epoch the sink computes the correction desired − persisted
    over the keys the epoch touched (every key when the table drifted, another
    replica wrote, or a periodic check is due) and appends it with a
    compare-and-set on the table's recorded upper frontier (``epoch + 1``), in one
    transaction (PostgreSQL) or one commit (Delta); on a conflict it re-reads and
    recomputes. The executors compute and stage the correction, one Spark task
    per partition of the key; the driver mints the batch description and commits.
    Several replicas of one flow (each its own checkpoint) may write one table; a
    read-only replica writes nothing and reports its distance. The table is
    written after the epoch's job, before the epoch commits. Details, costs and
    metrics: :mod:`wire.sinks.self_correcting_sink`.

    Guarantee: ``idempotent`` — a replayed epoch finds the table at its upper and
    writes nothing; the table converges to the result collection.

    Parameters
    ----------
    target:
        ``"postgresql://..."`` / ``"host=... dbname=..."``, or a Delta table path.
    key:
        Column(s) identifying a result row, e.g. ``("origin", "window_start")``;
        integer, string, bool, date or timestamp columns.
    table:
        PostgreSQL table name (required for PostgreSQL, not allowed for Delta).
    schema:
        PostgreSQL schema of the table and of ``wire_sc_frontiers``.
    drop:
        Columns not written (default the per-run ``epoch`` and the ``emit`` kind).
    retract_column:
        Boolean column whose True rows delete their key.
    covers:
        ``(start, end)`` columns; ``start`` must be in ``key``.
    read_only:
        Start as a read-only standby (switch to write over REST or ``wire sink-mode``).
    full_check_every:
        Compare every key every N epochs (0: only on drift or another writer).
    state_dir:
        Where to keep the desired collection; default under the flow's checkpoint.
        On a cluster it must be on storage every executor reaches (as a Parquet
        sink's path).
    partitions:
        Into how many partitions of the key the desired collection and each
        correction are split, one Spark task each. Default: Spark's
        ``defaultParallelism`` at the first run (at least 2). Fixed for the state
        directory's life: a later run keeps the recorded number.

    Returns
    -------
    Sink
        A :class:`SelfCorrectingSink`.

    Raises
    ------
    ConfigError
        On a malformed ``key``, ``table`` missing for PostgreSQL or given for Delta,
        ``covers`` not two column names with ``start`` in ``key``, ``read_only`` not a
        bool, ``full_check_every`` not an int >= 0, ``drop`` naming a key column,
        ``partitions`` not None or an int from 1 to 4096.

    Examples
    --------
    >>> sink = self_correcting("/tmp/hourly_delta", key=("origin", "window_start"))
    >>> sink.describe()
    'self_correcting delta /tmp/hourly_delta key=(origin, window_start) (idempotent)'
    """
    keys = _check_key(key)
    if not isinstance(target, str | os.PathLike) or not os.fspath(target):
        raise ConfigError("target", target, "a PostgreSQL connection string / URL or a Delta table path")
    text = os.fspath(target)
    if not isinstance(read_only, bool):
        raise ConfigError("read_only", read_only, "True or False")
    if isinstance(full_check_every, bool) or not isinstance(full_check_every, int) or full_check_every < 0:
        raise ConfigError("full_check_every", full_check_every, "an int >= 0 (0: no periodic full check)")
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)
                                   or not 1 <= partitions <= 4096):
        raise ConfigError("partitions", partitions,
                          "None (Spark's default parallelism) or an int from 1 to 4096")
    drops = (drop,) if isinstance(drop, str) else tuple(drop)
    if any(not isinstance(d, str) for d in drops) or set(drops) & set(keys):
        raise ConfigError("drop", drop, "column names, none of them a key column")
    if covers is not None and (not isinstance(covers, tuple | list) or len(covers) != 2
                               or not all(isinstance(c, str) for c in covers) or covers[0] not in keys):
        raise ConfigError("covers", covers, "None or (start column, end column) with the start column in key")
    if retract_column is not None and (not isinstance(retract_column, str) or retract_column in keys):
        raise ConfigError("retract_column", retract_column, "None or a boolean column name, not a key column")
    common: dict[str, Any] = dict(
        key=keys, drop=drops, retract_column=retract_column,
        covers=tuple(covers) if covers is not None else None, read_only=read_only,
        full_check_every=full_check_every, state_dir=os.fspath(state_dir) if state_dir is not None else None,
        partitions=partitions)
    if isinstance(text, str) and _is_dsn(text):
        from wire.sinks.postgres_target import _check_dsn, _check_name

        if table is None:
            raise ConfigError("table", table, "the table name, required when target is a PostgreSQL DSN")
        return SelfCorrectingSink(backend="postgres", dsn=_check_dsn(text), table=_check_name("table", table),
                                  schema=_check_name("schema", schema), **common)
    if table is not None:
        raise ConfigError("table", table, "None when target is a Delta table path (table is for PostgreSQL)")
    with needs_extra("delta", "wire.sinks.self_correcting"):
        import deltalake  # noqa: F401
    return SelfCorrectingSink(backend="delta", path=text, **common)
