"""The self-correcting sink's driver side: :class:`SelfCorrectingSink`.

Built by :func:`~wire.sinks.self_correcting_sink.self_correcting`. Opens the run
(state directory, partitions, connection), hands the executors the stager of each
epoch, runs the compare-and-set loop after the epoch's job
(:meth:`SelfCorrectingSink.commit_epoch`) and, while no epoch comes, every
``repair_interval`` ms from a timer thread (:meth:`SelfCorrectingSink.quiet_check`),
and reports the metrics. Protocol, costs and metrics:
:mod:`wire.sinks.self_correcting_sink.sink`.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from wire.core.control_file import control_path, sink_mode
from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import EpochStager, ExecutorSink, Guarantee, StagedPart
from wire.errors import WireError
from wire.sinks.self_correcting_sink.desired import ShardedDesiredStore
from wire.sinks.self_correcting_sink.frontier import (
    Frontier,
    epoch_offsets,
    frontier_of_offsets,
    last_committed_epoch,
)
from wire.sinks.self_correcting_sink.parts import _InputStager, _PartTask, _run_parts
from wire.sinks.self_correcting_sink.rows import shard_columns
from wire.sinks.self_correcting_sink.tables import (
    DELTA_APP_ID,
    DELTA_FRONTIER,
    DELTA_MARK,
    FRONTIER_TABLE,
    _DeltaTable,
    _PgTable,
)
from wire.sinks.self_correcting_sink.writer import EpochOutcome, SelfCorrectingWriter

MODES = ("write", "read_only")

log = logging.getLogger("wire.sinks.self_correcting")


@dataclass
class _Run:
    """What the sink holds while a flow runs (between ``open`` and ``close``)."""

    flow: str
    sink: str
    state_dir: Path
    control: str | None
    checkpoint: str | None
    writer: SelfCorrectingWriter
    store: ShardedDesiredStore
    schema: pa.Schema | None = None
    table: Any = None
    conn: Any = None
    last: EpochOutcome | None = None
    counters: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held while the table is written: by an epoch, or by a check between epochs."""
    last_epoch: int | None = None
    """The newest epoch this run corrected the table for."""
    checked_ms: float = field(default_factory=lambda: time.monotonic() * 1000)
    """When the table was last checked (an epoch or a quiet check), monotonic ms."""
    stop: threading.Event = field(default_factory=threading.Event)
    timer: threading.Thread | None = None
    quiet_error: str | None = None
    """Why the last check between epochs failed, if it did (retried at the next interval)."""


@dataclass(frozen=True)
class SelfCorrectingSink(DriverRunSink[_Run], ExecutorSink):
    """Keeps a PostgreSQL or Delta table equal to the flow's results; see :func:`self_correcting`."""

    guarantee: ClassVar[Guarantee] = "idempotent"

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
    repair_interval: int | None = 60_000
    """ms; None: check the table only at epochs (see :func:`self_correcting`)."""
    _checkpoint: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    def describe(self) -> str:
        """E.g. ``"self_correcting postgres public.hourly key=(origin, window_start) (idempotent)"``."""
        where = f"{self.schema}.{self.table}" if self.backend == "postgres" else str(self.path)
        return f"self_correcting {self.backend} {where} key=({', '.join(self.key)}) ({self.guarantee})"

    def bind_checkpoint(self, checkpoint: str) -> None:
        """Runner, before :meth:`open`: the flow's checkpoint directory (desired collection, control file)."""
        self._checkpoint[:] = [str(checkpoint)]

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Driver, run start: start the run (:meth:`_start_run`), then the checks between epochs.

        Unless ``repair_interval`` is None, a daemon thread checks the table every
        ``repair_interval`` ms without an epoch (:meth:`quiet_check`) until :meth:`close`.

        Raises
        ------
        WireError
            When neither ``state_dir`` nor the flow's checkpoint is known, or the
            database cannot be reached.
        """
        super().open(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)
        run = self._opened()
        if self.repair_interval is not None:
            run.timer = threading.Thread(target=self._quiet_loop, args=(run,), daemon=True,
                                         name=f"wire {flow_id}/{sink_id} self-correcting repair")
            run.timer.start()

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> _Run:
        """``open``: find the state directory and its partitions, connect (PostgreSQL)."""
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
            checkpoint=checkpoint,
            writer=SelfCorrectingWriter(self.key, full_check_every=self.full_check_every),
            store=ShardedDesiredStore.open(state, self.partitions or _default_partitions()),
        )
        schema_file = state / "schema.parquet"
        if schema_file.is_file():
            run.schema = pq.read_schema(schema_file)
        if self.backend == "postgres":
            from wire.sinks.postgres_sink.target import _connect

            try:
                run.conn = _connect(str(self.dsn), f"wire {flow_id}/{sink_id} self-correcting")
            except Exception as e:
                raise WireError(f"{self.describe()}: cannot open: {e}") from e
        return run

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Starting over (``fresh=True``): move the table's frontier back to the start of input time.

        Called on the driver before :meth:`open`, only when the flow starts over
        (:meth:`wire.delivery.sink.Sink.supersede`). The table's frontier is where
        the input its rows reflect ends; a new checkpoint reads its input from the
        start, so without this its writer would stay behind that frontier (writing
        nothing) until it had read as far as the old run. The frontier becomes the
        empty one and the upper moves on by one (a writer of the old flow still
        running fails its compare-and-set): the new run's first epoch is ahead, finds
        that another writer appended, and compares every key, so the table is
        corrected to the new flow's results (rows the new flow does not produce are
        deleted). No row is touched here; a hand edit stays until that first epoch.
        Idempotent in effect: a second call before the new run's first epoch leaves
        the frontier empty. Replicas share the table: start every replica over, or
        the old flow's replicas, ahead of the new run, keep writing their results.

        Raises
        ------
        WireError
            When the database cannot be reached or the change fails (nothing changed).
        """
        empty = Frontier().to_json()
        try:
            if self.backend == "postgres":
                self._supersede_postgres(flow_id, sink_id, empty)
            else:
                self._supersede_delta(empty)
        except WireError:
            raise
        except Exception as e:
            raise WireError(f"{self.describe()}: cannot start over: {e}") from e
        log.info("%s: frontier reset for a start over (checkpoint %s)", self.describe(), checkpoint_id)

    def _supersede_postgres(self, flow_id: str, sink_id: str, empty: str) -> None:
        from psycopg import sql

        from wire.sinks.postgres_sink.target import _connect

        app = f"wire {flow_id}/{sink_id} self-correcting start over"
        with _connect(str(self.dsn), app) as conn, conn.transaction():
            known = conn.execute("SELECT to_regclass(%s)",
                                 (f'"{self.schema}"."{FRONTIER_TABLE}"',)).fetchone()
            if known is None or known[0] is None:
                return  # no table was ever written: nothing to move back
            conn.execute(sql.SQL(
                "UPDATE {} SET upper = upper + 1, frontier = %s, writer = %s, updated_at = now() "
                "WHERE schema_name = %s AND table_name = %s"
            ).format(sql.Identifier(self.schema, FRONTIER_TABLE)),
                (empty, "start-over", self.schema, self.table))

    def _supersede_delta(self, empty: str) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        path = str(self.path)
        if not DeltaTable.is_deltatable(path):
            return
        dt = DeltaTable(path)
        upper = int(dt.transaction_version(DELTA_APP_ID) or 0)
        data = dt.schema().to_arrow()
        empty_rows = pa.Table.from_batches([], schema=pa.schema(data))
        # one commit that adds no rows: the next upper and the empty frontier in its commit info
        write_deltalake(path, empty_rows, mode="append", commit_properties=CommitProperties(
            max_commit_retries=0, app_transactions=[Transaction(DELTA_APP_ID, upper + 1)],
            custom_metadata={DELTA_MARK: str(upper + 1), DELTA_FRONTIER: empty,
                             "wire.sc.writer": "start-over"}))

    def _end_run(self, run: _Run) -> None:
        """``close``: stop the checks between epochs (waiting for a running one), disconnect."""
        run.stop.set()
        if run.timer is not None and run.timer is not threading.current_thread():
            run.timer.join(timeout=120)
        with run.lock:
            if run.conn is not None:
                run.conn.close()
                run.conn, run.table = None, None

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
        run = self._opened(epoch)
        return _InputStager(str(run.state_dir / "input" / str(epoch)), self.key,
                            shard_columns(self.key, self.covers), run.store.shards, self.drop,
                            self.describe())

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver, after the epoch's job: correct the table for epoch ``epoch`` (also with no rows).

        Runs :meth:`SelfCorrectingWriter.write_parts
        <wire.sinks.self_correcting_sink.writer.SelfCorrectingWriter.write_parts>`: reads the
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
        run = self._opened(epoch)
        with run.lock:
            self._commit_epoch(run, epoch, parts)

    def _commit_epoch(self, run: _Run, epoch: int, parts: list[StagedPart]) -> None:
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
            out = run.writer.write_parts(target, lambda req: _run_parts(task, req, job),
                                         epoch_frontier(run.checkpoint, epoch),
                                         read_only=self.mode() == "read_only")
        except WireError:
            raise
        except Exception as e:
            _drop_connection(run)
            raise WireError(f"{self.describe()}: epoch {epoch} not written: {e}") from e
        for old in (run.state_dir / "input").glob("*"):
            if old.name.isdigit() and int(old.name) <= epoch:
                shutil.rmtree(old, ignore_errors=True)
        run.last = out
        run.last_epoch = epoch
        run.checked_ms = time.monotonic() * 1000
        self._count(run, out)

    @staticmethod
    def _count(run: _Run, out: EpochOutcome) -> None:
        run.counters["sc_corrections"] += out.corrections
        run.counters["sc_drift_rows"] += out.drift
        run.counters["sc_cas_conflicts"] += out.conflicts
        run.counters["sc_epochs_behind"] += out.status == "behind"

    def _quiet_loop(self, run: _Run) -> None:
        """The timer thread: a :meth:`quiet_check` whenever no check ran for ``repair_interval`` ms."""
        assert self.repair_interval is not None
        interval = self.repair_interval
        while not run.stop.wait(min(max(interval / 4, 50), 5_000) / 1000):
            if time.monotonic() * 1000 - run.checked_ms < interval:
                continue
            try:
                self.quiet_check(run)
                run.quiet_error = None
            except Exception as e:  # a database outage: retried at the next interval
                run.quiet_error = f"{type(e).__name__}: {e}"
                log.warning("%s: check between epochs failed, retried in %d ms: %s",
                            self.describe(), interval, run.quiet_error)
            finally:
                run.checked_ms = time.monotonic() * 1000

    def quiet_check(self, run: _Run | None = None) -> EpochOutcome | None:
        """Between epochs (quiet input): correct the table for the newest epoch, at its frontier.

        Runs the compare-and-set loop with no new rows: the frontier is that of the
        newest epoch this run corrected (or, before its first, the newest Spark
        committed), so the writer *repairs* when the table is at its frontier — every
        key is compared when the table drifted or another replica wrote, and only
        what differs is written. Nothing when an epoch is being written (it checks
        the table itself), in read-only mode, before any epoch or row, or when the
        table is ahead of this replica. Called by the timer every
        ``repair_interval`` ms without an epoch; returns what it did (None: skipped).

        Raises
        ------
        WireError
            As :meth:`commit_epoch`: the database fails, or too many conflicts.
        """
        run = run if run is not None else self._run
        if run is None or run.stop.is_set() or self.mode() == "read_only":
            return None
        if not run.lock.acquire(blocking=False):  # an epoch is writing the table: it checks it itself
            return None
        try:
            epoch = run.last_epoch
            if epoch is None and run.checkpoint is not None:
                epoch = last_committed_epoch(run.checkpoint)
            if epoch is None or run.schema is None:
                return None
            task = _PartTask(
                backend=self.backend, target=str(self.dsn if self.backend == "postgres" else self.path),
                table=self.table, schema_name=self.schema, key=self.key, retract_column=self.retract_column,
                covers=self.covers, state_dir=str(run.state_dir), partitions=run.store.shards,
                epoch=epoch + 1, inputs={}, schema=run.schema, writer=self._writer(run))
            job = f"wire {run.flow}/{run.sink}: self-correcting check after epoch {epoch} (quiet input)"
            try:
                out = run.writer.write_parts(self._table(run), lambda req: _run_parts(task, req, job),
                                             epoch_frontier(run.checkpoint, epoch), count=False)
            except WireError:
                raise
            except Exception as e:
                _drop_connection(run)
                raise WireError(f"{self.describe()}: check after epoch {epoch} failed: {e}") from e
            self._count(run, out)
            run.counters["sc_quiet_checks"] += 1
            return out
        finally:
            run.lock.release()

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
        """Counters summed over this run (corrections, drift rows, conflicts, epochs behind, quiet checks).

        Corrections and drift rows include those of the checks between epochs
        (``sc_quiet_checks``), which no epoch's metrics report.
        """
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
            from wire.sinks.postgres_sink.target import _connect, _Target

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


def epoch_frontier(checkpoint: str | None, epoch: int) -> Frontier:
    """The frontier after ``epoch``: from the end offsets Spark's offset log recorded for it.

    Independent of where the epochs cut the input
    (:mod:`wire.sinks.self_correcting_sink.frontier`). When the checkpoint records no
    offsets for the epoch (the sink driven without Spark, e.g. :meth:`write_epoch`),
    the epoch id + 1 (:meth:`Frontier.scalar`).
    """
    offsets = epoch_offsets(checkpoint, epoch) if checkpoint is not None else None
    if not offsets:
        return Frontier.scalar(epoch + 1)
    return frontier_of_offsets(offsets)


def _default_partitions() -> int:
    """Spark's default parallelism when Spark runs (at least 2), else 2."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return max(2, int(sc.defaultParallelism)) if sc is not None else 2


def _drop_connection(run: Any) -> None:
    """Close a run's database connection after a failed write (the next write reconnects)."""
    if run.conn is not None:
        with contextlib.suppress(Exception):
            run.conn.close()
        run.conn, run.table = None, None
