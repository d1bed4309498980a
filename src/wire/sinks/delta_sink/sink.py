"""Delta Lake sink: executors write the data files, the driver makes one Delta commit per epoch.

Uses ``deltalake`` (delta-rs, no JVM) and ``pyarrow``. Two-phase, exactly once
(SPEC §6):

* **Executors** (:meth:`_DeltaStager.stage`, once per Spark task with rows): conform
  the task's rows to the table's schema, split them by the table's partition
  columns, and write one Parquet data file per partition value into the table
  directory (Hive-style sub-directories ``<column>=<value>/``), named
  ``part-<partition>-<sink tag>-<epoch>-<attempt>-<random>.parquet``. Before writing,
  the task records the names it is about to write in an *intent* file
  ``_wire_staging/<sink tag>/<epoch>-<attempt>/<partition>-<random>.json``. The
  receipt names each file with its size, partition values and statistics
  (``numRecords``, null counts, min/max). Nothing is visible yet: a Delta table is
  what its log says, not what its directory holds.
* **Driver** (:meth:`DeltaSink.commit_epoch`): one Delta commit that adds every
  receipted file and records the *application transaction* (Delta's ``txn`` action)
  app id ``"<flow_id>/<sink_id>"``, version = epoch id. Data and transaction version
  commit atomically, so a replayed epoch finds version ≥ its id, commits nothing
  and deletes the files it staged. When the table does not exist yet, the same
  single commit creates it (schema from the staged files). Files that a failed or
  retried task wrote (named in an intent, absent from the receipts) are deleted at
  the commit; intents that a crashed run left are resolved at the next ``open``.

This is how Delta's own streaming writers achieve exactly-once delivery.

This module holds :class:`DeltaSink` (the driver's side) and :func:`delta`; the
executors' stager and the staging files are in :mod:`wire.sinks.delta_sink.staging`, the
Arrow → Delta types, partition values and file statistics in
:mod:`wire.sinks.delta_sink.schema`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args
from urllib.parse import unquote

import pyarrow as pa

from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import EpochStager, ExecutorSink, Guarantee, Sink, StagedPart
from wire.errors import CheckpointError, ConfigError, WireError, needs_extra
from wire.sinks.column_checks import column_names, path_text
from wire.sinks.delta_sink.staging import (
    STAGING_DIR,
    _attempt_dir,
    _delete,
    _delete_dir,
    _DeltaStager,
    _filesystem,
    _listdir,
    _planned_files,
)

with needs_extra("delta", "wire.sinks.delta"):
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake import Schema as DeltaSchema
    from deltalake.exceptions import DeltaError, TableNotFoundError
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

DeltaMode = Literal["append", "overwrite"]
"""How a Delta sink writes an epoch (``delta(mode=...)``)."""
MODES: tuple[DeltaMode, ...] = get_args(DeltaMode)

_META_FLOW = "wire.flow_id"
_META_SINK = "wire.sink_id"
_META_CHECKPOINT = "wire.checkpoint_id"
_META_EPOCH = "wire.epoch"
_META_SUPERSEDED = "wire.superseded_checkpoint_id"

NO_EPOCH = -1
"""The app transaction version a start-over records: below every epoch id, so epoch 0 of
the new checkpoint is not taken for a replay (:meth:`DeltaSink.supersede`)."""


@dataclass
class _Run:
    """What :meth:`DeltaSink.open` learns; lives only while a flow runs."""

    flow_id: str
    sink_id: str
    checkpoint_id: str
    root: str
    """The table location executors write to: an absolute local path or a URI."""
    attempts: dict[int, str] = field(default_factory=dict)
    """Epoch → attempt token minted by ``prepare_epoch``, until ``commit_epoch``."""

    @property
    def app_id(self) -> str:
        return f"{self.flow_id}/{self.sink_id}"

    @property
    def tag(self) -> str:
        """Short name of the (flow, sink) in file names: its files are told apart from others'."""
        return hashlib.sha1(self.app_id.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class DeltaSink(DriverRunSink[_Run], ExecutorSink):
    """Exactly-once Delta Lake table, one commit per epoch; built by :func:`delta`."""

    guarantee: ClassVar[Guarantee] = "exactly_once"

    path: str
    mode: DeltaMode = "append"
    partition_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time."""
        object.__setattr__(self, "path", _check_uri(self.path))
        if self.mode not in MODES:
            raise ConfigError("mode", self.mode, " or ".join(repr(m) for m in MODES))
        object.__setattr__(self, "partition_by", _check_partition_by(self.partition_by))

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> _Run:
        """``open``: remember the app id, refuse another checkpoint's table, clean a crashed run's files.

        Called once at run start on the driver (again at a restart), by
        :meth:`~wire.delivery.driver_run.DriverRunSink.open`. A missing table
        is created by the first epoch with rows. Intent files left by a crashed run
        (``_wire_staging/<sink tag>/``) are resolved: the data files they name that
        the table does not reference are deleted.

        Raises
        ------
        CheckpointError
            When the table already holds commits of this flow and sink made under a
            different checkpoint: the new checkpoint's epochs restart at 0 and would
            all be skipped as replays.
        """
        root = self.path if "://" in self.path else os.path.abspath(self.path)
        run = _Run(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id, root=root)
        table = self._load()
        if table is not None and table.transaction_version(run.app_id) is not None:
            previous = _last_checkpoint(table, run)
            if previous is not None and previous != checkpoint_id:
                raise CheckpointError(
                    f"{self.describe()}: the table holds epochs of flow {flow_id!r} sink {sink_id!r} "
                    f"written under checkpoint {previous!r}, not this run's {checkpoint_id!r}: a new "
                    "checkpoint restarts epoch ids, which would be skipped as replays. To start the "
                    "flow over, run it with fresh=True (`wire run --fresh`), which removes this "
                    "sink's earlier files from the table in one commit (kept by Delta's time travel "
                    "until a VACUUM) and hands the table to the new checkpoint; or write to another table"
                )
        referenced = _referenced(table) if table is not None else set()
        fs, base, _ = _filesystem(root)
        for attempt_dir in _listdir(fs, f"{base}/{STAGING_DIR}/{run.tag}"):
            planned = _planned_files(fs, attempt_dir)
            _delete(fs, base, [p for p in planned if p not in referenced])
            _delete_dir(fs, attempt_dir)
        return run

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Starting over: one Delta commit removes this sink's files and resets its epoch bookkeeping.

        Called on the driver before :meth:`open`, only when the flow starts over
        (:meth:`wire.delivery.sink.Sink.supersede`). When the table holds commits of
        app id ``"<flow_id>/<sink_id>"`` whose newest one was made under another
        checkpoint, one commit removes every data file this sink wrote (its tag is in
        the file names; other writers' files stay), records the app transaction version
        :data:`NO_EPOCH` (so the new checkpoint's epoch 0 is written, not skipped) and
        names ``checkpoint_id`` in its metadata (so :meth:`open` accepts it). Removed
        files stay readable by time travel until a ``VACUUM``. No table, no commit of
        this sink, or the newest under ``checkpoint_id``: nothing is done.

        Raises
        ------
        WireError
            When the commit fails (nothing changed).
        """
        run = _Run(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id, root="")
        table = self._load()
        if table is None or table.transaction_version(run.app_id) is None:
            return
        previous = _last_checkpoint(table, run)
        if previous == checkpoint_id:
            return
        adds = pa.table(table.get_add_actions())
        mine = f"-{run.tag}-"
        now = int(time.time() * 1000)
        removes: list[AddAction | RemoveAction] = [
            RemoveAction(path=path, data_change=True, deletion_timestamp=now, size=size)
            for path, size in zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                                  strict=True)
            if os.path.basename(unquote(path)).startswith("part-") and mine in os.path.basename(unquote(path))
        ]
        properties = CommitProperties(
            custom_metadata={_META_FLOW: flow_id, _META_SINK: sink_id, _META_CHECKPOINT: checkpoint_id,
                             _META_SUPERSEDED: previous or "", _META_EPOCH: NO_EPOCH},
            app_transactions=[Transaction(run.app_id, NO_EPOCH)],
        )
        try:
            table.create_write_transaction(
                removes, mode="append", schema=table.schema(),
                partition_by=list(table.metadata().partition_columns) or None,
                commit_properties=properties,
            )
        except (DeltaError, OSError, ValueError) as exc:
            raise WireError(f"{self.describe()}: starting over failed (nothing changed): {exc}") from exc

    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver, before the epoch's job: a stager with the table's schema and a new attempt token.

        Reads the table's transaction version for the app id: a replay of an epoch
        already in the table gets a stager that writes nothing.

        Raises
        ------
        WireError
            Before :meth:`open`; when the table's partition columns differ from
            ``partition_by``.
        """
        run = self._opened()
        table = self._load()
        done = table.transaction_version(run.app_id) if table is not None else None
        skip = done is not None and done >= epoch
        schema, partition_by = None, self.partition_by
        if table is not None and not skip:
            self._check_partitions(table)
            schema = pa.schema(table.schema().to_arrow())
            partition_by = tuple(table.metadata().partition_columns)
        attempt = secrets.token_hex(4)
        run.attempts[epoch] = attempt
        return _DeltaStager(root=run.root, tag=run.tag, epoch=epoch, attempt=attempt,
                            partition_by=partition_by, schema=schema, where=self.describe(), skip=skip)

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Commit the receipted files with app transaction version ``epoch``, unless already there.

        Called on the driver once per epoch after the executors staged. Reads the
        table's transaction version for ``"<flow_id>/<sink_id>"``; when it is ≥
        ``epoch`` (a replay whose commit already landed) nothing is committed and the
        files the replay wrote are deleted. Otherwise one commit adds the files
        (``mode="append"``) or replaces the table's files with them
        (``mode="overwrite"``) and records the version; when the table does not
        exist, that commit creates it. No receipted file (an empty epoch) makes no
        commit. Files of failed task attempts are deleted.

        Raises
        ------
        WireError
            Before :meth:`open`; when tasks staged different schemas for a new table;
            when the Delta commit fails (the epoch is then replayed).
        """
        run = self._opened()
        attempts = {p.receipt["attempt"] for p in parts}
        if epoch in run.attempts:
            attempts.add(run.attempts.pop(epoch))
        files = [f for p in parts for f in p.receipt["files"]]
        fs, base, _ = _filesystem(run.root)
        attempt_dirs = [f"{base}/{_attempt_dir(run.tag, epoch, a)}" for a in sorted(attempts)]
        planned = [path for d in attempt_dirs for path in _planned_files(fs, d)]
        receipted = {f["path"] for f in files}
        _delete(fs, base, [p for p in planned if p not in receipted])  # failed task attempts
        table = self._load()
        done = table.transaction_version(run.app_id) if table is not None else None
        if done is not None and done >= epoch:
            _delete(fs, base, sorted(receipted))  # a replay: the epoch is already in the table
        elif files:
            self._commit(run, epoch, table, parts, files)
        for attempt_dir in attempt_dirs:
            _delete_dir(fs, attempt_dir)

    def describe(self) -> str:
        """E.g. ``"delta out/flights mode=append (exactly_once)"``."""
        return f"delta {self.path} mode={self.mode} ({self.guarantee})"

    def _commit(self, run: _Run, epoch: int, table: DeltaTable | None, parts: list[StagedPart],
                files: list[dict[str, Any]]) -> None:
        schemas = {p.receipt["schema"] for p in parts if p.receipt["files"]}
        actions = [
            AddAction(path=f["path"], size=f["size"], partition_values=f["partition_values"],
                      modification_time=f["modification_time"], data_change=True, stats=f["stats"])
            for f in files
        ]
        properties = CommitProperties(
            custom_metadata={
                _META_FLOW: run.flow_id,
                _META_SINK: run.sink_id,
                _META_CHECKPOINT: run.checkpoint_id,
                _META_EPOCH: epoch,
            },
            app_transactions=[Transaction(run.app_id, epoch)],
        )
        try:
            if table is None:
                if len(schemas) != 1 or None in schemas:
                    raise WireError(
                        f"{self.describe()}: epoch {epoch}: the tasks staged different schemas for the new "
                        f"table: {sorted(str(s) for s in schemas)}"
                    )
                create_table_with_add_actions(
                    run.root, DeltaSchema.from_json(schemas.pop()), actions, mode="error",
                    partition_by=list(self.partition_by) or None, commit_properties=properties,
                )
            else:
                if schemas != {None}:
                    raise WireError(
                        f"{self.describe()}: epoch {epoch}: the table was created by another writer while "
                        "the epoch was staged; the epoch will be replayed"
                    )
                table.create_write_transaction(
                    [*actions], mode=self.mode, schema=table.schema(),
                    partition_by=list(table.metadata().partition_columns) or None,
                    commit_properties=properties,
                )
        except (DeltaError, OSError, ValueError) as exc:
            raise WireError(f"{self.describe()}: commit of epoch {epoch} failed: {exc}") from exc

    def _load(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.path)
        except TableNotFoundError:
            return None

    def _check_partitions(self, table: DeltaTable) -> None:
        existing = tuple(table.metadata().partition_columns)
        if self.partition_by and existing != self.partition_by:
            raise WireError(
                f"{self.describe()}: the table is partitioned by {list(existing)}, "
                f"the sink by {list(self.partition_by)}"
            )


def delta(
    path: str | os.PathLike[str],
    *,
    mode: DeltaMode = "append",
    partition_by: str | Sequence[str] | None = None,
) -> Sink:
    """Write each epoch's rows to a Delta Lake table as one commit, exactly once.

    Uses the ``deltalake`` package (delta-rs, no JVM) and ``pyarrow``. The table at
    ``path`` is created by the first epoch with rows, with that epoch's schema (the
    ``epoch`` column included); Delta stores timestamps at microsecond precision
    (``UTC`` when the column has a time zone) and unsigned integers as signed ones.
    Later epochs must have the same columns with compatible types (no schema
    evolution). Read it with ``deltalake.DeltaTable(path)`` or DuckDB's
    ``delta_scan``.

    Guarantee: ``exactly_once``, two-phase (SPEC §6). ``open`` (driver, run start)
    remembers the app id ``"<flow_id>/<sink_id>"``, refuses a table this sink wrote
    under another checkpoint (unless the flow starts over, ``fresh=True``: then one
    commit first removes this sink's files and resets its transaction version,
    :meth:`DeltaSink.supersede`), and deletes data files a crashed run wrote but never
    committed. Per epoch, ``prepare_epoch`` (driver) reads the table's schema and
    transaction version; **each executor task** conforms its rows to the schema and
    writes them as Parquet data files into the table directory (Hive-style
    ``<column>=<value>/`` sub-directories for ``partition_by``), invisible until
    committed; then ``commit_epoch`` (driver) makes **one** Delta commit that adds
    those files and records an application transaction with version = epoch id,
    atomically (the first such commit also creates the table). A replayed epoch
    finds version ≥ its id, commits nothing and deletes what it wrote; an empty
    epoch makes no commit; files of failed task attempts are deleted. No data row
    passes through the driver. The table location must be reachable at the same
    path or URI from the driver and every executor (local disk in local mode, a
    shared file system or object store on a cluster).

    Parameters
    ----------
    path:
        The table's location: a local directory or a URI ``deltalake`` and
        ``pyarrow.fs`` understand.
    mode:
        ``"append"`` (each epoch adds its rows) or ``"overwrite"`` (each epoch with
        rows replaces the table's rows with its own, e.g. for a full result table).
    partition_by:
        Column name(s) to partition the table by when it is created; an existing
        table must have the same partition columns.

    Returns
    -------
    Sink
        A :class:`DeltaSink`.

    Raises
    ------
    ConfigError
        When ``path`` is empty, ``mode`` is unknown or ``partition_by`` is not column
        names. At ``open``: CheckpointError (see :meth:`DeltaSink.open`). On the
        executors: WireError on schema mismatch; at ``commit_epoch``: WireError on a
        failed commit.
    """
    return DeltaSink(path=_check_uri(path), mode=mode, partition_by=_check_partition_by(partition_by))


def _referenced(table: DeltaTable) -> set[str]:
    """The paths (relative to the table, not URL-encoded) of the table's current data files."""
    return {unquote(p) for p in pa.table(table.get_add_actions()).column("path").to_pylist()}


# --- helpers --------------------------------------------------------------------------


def _check_uri(path: object) -> str:
    return path_text(path, accepted="a non-empty table path or URI (str or os.PathLike)")


def _check_partition_by(value: object) -> tuple[str, ...]:
    return column_names(value, parameter="partition_by", allow_none=True,
                        accepted="None, a column name or a sequence of distinct column names")

def _last_checkpoint(table: DeltaTable, run: _Run) -> str | None:
    """The checkpoint id of this flow and sink's newest commit still in the table's history."""
    for commit in table.history():
        if commit.get(_META_FLOW) == run.flow_id and commit.get(_META_SINK) == run.sink_id:
            checkpoint = commit.get(_META_CHECKPOINT)
            return checkpoint if isinstance(checkpoint, str) else None
    return None
