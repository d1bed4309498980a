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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from wire.delivery.sink import EpochStager, ExecutorSink, Sink, StagedPart
from wire.errors import CheckpointError, ConfigError, WireError, needs_extra
from wire.sinks.arrow_kinds import is_binary, is_list, is_nested

with needs_extra("delta", "wire.sinks.delta"):
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake import Schema as DeltaSchema
    from deltalake.exceptions import DeltaError, TableNotFoundError
    from deltalake.transaction import AddAction, create_table_with_add_actions

MODES = ("append", "overwrite")

STAGING_DIR = "_wire_staging"
"""Sub-directory of the table holding the intent files of epochs being written."""

_META_FLOW = "wire.flow_id"
_META_SINK = "wire.sink_id"
_META_CHECKPOINT = "wire.checkpoint_id"
_META_EPOCH = "wire.epoch"
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


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
class _DeltaStager(EpochStager):
    """Executor side of :class:`DeltaSink` for one epoch attempt (module docstring)."""

    root: str
    tag: str
    epoch: int
    attempt: str
    partition_by: tuple[str, ...]
    schema: pa.Schema | None
    """The existing table's schema; None when the table is to be created by this epoch."""
    where: str
    skip: bool = False
    """The epoch is already in the table (a replay): stage nothing."""

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Write the task's rows as Parquet data files in the table directory; return their actions.

        Raises
        ------
        WireError
            When the rows do not fit the table's schema, a partition column is missing
            or has no Delta partition encoding, or a file cannot be written.
        """
        receipt: dict[str, Any] = {"attempt": self.attempt, "files": [], "schema": None}
        if self.skip:
            return StagedPart(partition, 0, 0, receipt)
        missing = [c for c in self.partition_by if c not in table.column_names]
        if missing:
            raise WireError(f"{self.where}: partition columns {missing} not in {table.column_names}")
        if self.schema is None:
            target, schema_json = _delta_schema(table.schema, self.where)
            receipt["schema"] = schema_json
        else:
            target = self.schema
        table = _conform(table, target, self.where)
        groups = _split_partitions(table, self.partition_by, self.where)
        fs, base, local = _filesystem(self.root)
        token = secrets.token_hex(6)
        paths = [
            "/".join([*(_hive_segment(c, v) for c, v in values.items()),
                      f"part-{partition:05d}-{self.tag}-{self.epoch:010d}-{self.attempt}-{token}-{i:04d}.parquet"])
            for i, (values, _) in enumerate(groups)
        ]
        intent_dir = f"{base}/{_attempt_dir(self.tag, self.epoch, self.attempt)}"
        try:
            fs.create_dir(intent_dir, recursive=True)
            _write_durably(fs, f"{intent_dir}/{partition:05d}-{token}.json",
                           json.dumps({"files": paths}).encode(), local)
            total = 0
            for path, (values, rows) in zip(paths, groups, strict=True):
                data = rows.drop_columns(list(self.partition_by))
                full = f"{base}/{path}"
                fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
                with fs.open_output_stream(full) as out:
                    pq.write_table(data, out, compression="snappy")
                if local:
                    _fsync(full)
                size = fs.get_file_info(full).size or 0
                total += size
                receipt["files"].append({
                    "path": path, "size": size, "partition_values": values,
                    "modification_time": int(time.time() * 1000), "stats": _stats(data),
                })
        except (OSError, pa.ArrowException) as exc:
            raise WireError(f"{self.where}: epoch {self.epoch}: writing data files failed: {exc}") from exc
        return StagedPart(partition, table.num_rows, total, receipt)


@dataclass(frozen=True)
class DeltaSink(ExecutorSink):
    """Exactly-once Delta Lake table, one commit per epoch; built by :func:`delta`."""

    guarantee: ClassVar[str] = "exactly_once"

    path: str
    mode: str = "append"
    partition_by: tuple[str, ...] = ()
    _run: _Run | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time."""
        object.__setattr__(self, "path", _check_uri(self.path))
        if self.mode not in MODES:
            raise ConfigError("mode", self.mode, " or ".join(repr(m) for m in MODES))
        object.__setattr__(self, "partition_by", _check_partition_by(self.partition_by))

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Remember the app id, refuse another checkpoint's table, clean a crashed run's files.

        Called once at run start on the driver (again at a restart). A missing table
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
                    f"written under checkpoint {previous!r}, not {checkpoint_id!r}; "
                    "write to a new table or give the sink a new id"
                )
        referenced = _referenced(table) if table is not None else set()
        fs, base, _ = _filesystem(root)
        for attempt_dir in _listdir(fs, f"{base}/{STAGING_DIR}/{run.tag}"):
            planned = _planned_files(fs, attempt_dir)
            _delete(fs, base, [p for p in planned if p not in referenced])
            _delete_dir(fs, attempt_dir)
        object.__setattr__(self, "_run", run)

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

    def close(self) -> None:
        """Forget the run; every committed epoch is already durable in the table."""
        object.__setattr__(self, "_run", None)

    def describe(self) -> str:
        """E.g. ``"delta out/flights mode=append (exactly_once)"``."""
        return f"delta {self.path} mode={self.mode} ({self.guarantee})"

    def _opened(self) -> _Run:
        if self._run is None:
            raise WireError(f"{self.describe()}: epoch written before open")
        return self._run

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
    mode: str = "append",
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
    under another checkpoint, and deletes data files a crashed run wrote but never
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


# --- staging helpers (run on executors and the driver) ---------------------------------


def _attempt_dir(tag: str, epoch: int, attempt: str) -> str:
    return f"{STAGING_DIR}/{tag}/{epoch:010d}-{attempt}"


def _filesystem(root: str) -> tuple[pafs.FileSystem, str, bool]:
    """(file system, base path in it, is local) of a table location."""
    if "://" in root and not root.startswith("file://"):
        fs, base = pafs.FileSystem.from_uri(root)
        return fs, base.rstrip("/"), False
    path = root.removeprefix("file://")
    return pafs.LocalFileSystem(), os.path.abspath(path), True


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(fs: pafs.FileSystem, path: str, data: bytes, local: bool) -> None:
    with fs.open_output_stream(path) as out:
        out.write(data)
    if local:
        _fsync(path)
        _fsync(path.rsplit("/", 1)[0])


def _listdir(fs: pafs.FileSystem, path: str) -> list[str]:
    info = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(i.path for i in info)


def _planned_files(fs: pafs.FileSystem, attempt_dir: str) -> list[str]:
    """The data files (relative to the table) that the intents of an attempt name."""
    planned: list[str] = []
    for intent in _listdir(fs, attempt_dir):
        with contextlib.suppress(OSError, ValueError, KeyError), fs.open_input_stream(intent) as src:
            planned += json.loads(src.read())["files"]  # (unreadable: a task died writing it)
    return planned


def _delete(fs: pafs.FileSystem, base: str, relative: list[str]) -> None:
    for path in relative:
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(f"{base}/{path}")


def _delete_dir(fs: pafs.FileSystem, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


def _referenced(table: DeltaTable) -> set[str]:
    """The paths (relative to the table, not URL-encoded) of the table's current data files."""
    return {unquote(p) for p in pa.table(table.get_add_actions()).column("path").to_pylist()}


def _arrow_for_delta(t: pa.DataType) -> pa.DataType:
    """The Arrow type Delta stores for ``t``: µs timestamps (UTC or naive), signed integers."""
    if pa.types.is_dictionary(t):
        return _arrow_for_delta(t.value_type)
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", None if t.tz is None else "UTC")
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[t.bit_width]
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if is_list(t):
        return pa.list_(pa.field("element", _arrow_for_delta(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_arrow_for_delta(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_arrow_for_delta(t.key_type), _arrow_for_delta(t.item_type))
    return t


def _delta_schema(schema: pa.Schema, where: str) -> tuple[pa.Schema, str]:
    """(Arrow schema of the data files, Delta schema JSON) of a table created from ``schema``."""
    converted = pa.schema([f.with_type(_arrow_for_delta(f.type)) for f in schema])
    try:
        as_json = DeltaSchema.from_arrow(converted).to_json()
        return pa.schema(DeltaSchema.from_json(as_json).to_arrow()), as_json
    except Exception as exc:  # deltalake raises plain exceptions with a Rust backtrace
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WireError(f"{where}: the rows' schema has no Delta Lake equivalent: {first}") from exc


def _split_partitions(table: pa.Table, columns: tuple[str, ...],
                      where: str) -> list[tuple[dict[str, str | None], pa.Table]]:
    """The rows grouped by partition value, each group with its Delta partition values."""
    if not columns:
        return [({}, table)]
    for c in columns:
        t = table.schema.field(c).type
        if is_nested(t) or is_binary(t):
            raise WireError(f"{where}: partition column {c!r} has type {t}, which Delta cannot partition by")
    distinct = table.select(list(columns)).group_by(list(columns), use_threads=False).aggregate([])
    groups = []
    for values in distinct.to_pylist():
        mask = None
        for c in columns:
            v = values[c]
            hit = pc.is_null(table.column(c)) if v is None else pc.equal(table.column(c), v)
            hit = pc.fill_null(hit, False)
            mask = hit if mask is None else pc.and_(mask, hit)
        groups.append(({c: _partition_value(values[c]) for c in columns}, table.filter(mask)))
    return groups


def _partition_value(value: object) -> str | None:
    """A partition value as Delta serialises it (``deltalake`` writes the same strings)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text: str
    if hasattr(value, "strftime") and hasattr(value, "hour"):  # datetime: µs, UTC or naive
        text = value.strftime("%Y-%m-%d %H:%M:%S.%f")
        return text
    if hasattr(value, "isoformat"):
        text = value.isoformat()
        return text
    return str(value)


def _hive_segment(column: str, value: str | None) -> str:
    encoded = _HIVE_NULL if value is None else quote(value, safe="")
    return f"{quote(column, safe='')}={encoded}"


def _stat_value(arr: pa.Array, value: pa.Scalar) -> object:
    t = arr.type
    v = value.as_py()
    if v is None:
        return None
    if pa.types.is_timestamp(t):
        text = v.strftime("%Y-%m-%dT%H:%M:%S.%f")
        return text + "Z" if t.tz is not None else text
    if pa.types.is_date(t):
        return v.isoformat()
    return v


def _stats(table: pa.Table) -> str:
    """Delta file statistics: ``numRecords``, ``nullCount`` and, where exact, ``minValues``/``maxValues``."""
    nulls: dict[str, int] = {}
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        if is_nested(t):
            continue
        nulls[name] = col.null_count
        orderable = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_date(t)
                     or pa.types.is_timestamp(t) or pa.types.is_string(t) or pa.types.is_large_string(t))
        if not orderable or col.null_count == len(col):
            continue
        if pa.types.is_floating(t) and pc.any(pc.is_nan(col)).as_py():
            continue
        bounds = pc.min_max(col)
        lo, hi = _stat_value(col, bounds["min"]), _stat_value(col, bounds["max"])
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    stats = {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return json.dumps(stats, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


# --- helpers --------------------------------------------------------------------------


def _check_uri(path: object) -> str:
    accepted = "a non-empty table path or URI (str or os.PathLike)"
    if not isinstance(path, str | os.PathLike):
        raise ConfigError("path", path, accepted)
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("path", path, accepted)
    return text


def _check_partition_by(value: object) -> tuple[str, ...]:
    accepted = "None, a column name or a sequence of distinct column names"
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Sequence):
        raise ConfigError("partition_by", value, accepted)
    names = tuple(value)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ConfigError("partition_by", value, accepted)
    return names


def _last_checkpoint(table: DeltaTable, run: _Run) -> str | None:
    """The checkpoint id of this flow and sink's newest commit still in the table's history."""
    for commit in table.history():
        if commit.get(_META_FLOW) == run.flow_id and commit.get(_META_SINK) == run.sink_id:
            checkpoint = commit.get(_META_CHECKPOINT)
            return checkpoint if isinstance(checkpoint, str) else None
    return None


def _kind(t: pa.DataType) -> str:
    """A type's family as Delta stores it: widths, units, offsets and zones other than UTC ignored."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if is_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_decimal(t):
        return "decimal"
    if is_list(t):
        return f"list<{_kind(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{_kind(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{_kind(t.key_type)},{_kind(t.item_type)}>"
    return str(t)


def _conform(table: pa.Table, target: pa.Schema, where: str) -> pa.Table:
    """``table`` with ``target``'s column order and types; WireError when they do not match.

    ``deltalake`` itself casts silently (an int column into a string column), hence
    this check: the columns must be the same and of the same type family; values must
    fit the table's types exactly (no overflow, no truncation).
    """
    got, want = table.column_names, target.names
    if sorted(got) != sorted(want) or len(set(got)) != len(got):
        raise WireError(
            f"{where}: schema mismatch: the epoch has columns {got}, the table {want} "
            "(schema evolution is not supported)"
        )
    bad = [
        f"{f.name}: {table.schema.field(f.name).type} vs table {f.type}"
        for f in target
        if not pa.types.is_null(table.schema.field(f.name).type)
        and _kind(table.schema.field(f.name).type) != _kind(f.type)
    ]
    if bad:
        raise WireError(f"{where}: schema mismatch: {'; '.join(bad)} (schema evolution is not supported)")
    try:
        return table.select(want).cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise WireError(f"{where}: the epoch's values do not fit the table's types: {exc}") from exc
