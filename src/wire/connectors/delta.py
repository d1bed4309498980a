"""Delta Lake sink: one Delta commit per epoch, exactly once, through ``deltalake`` (no JVM).

Each epoch with rows becomes one Delta commit that also records an *application
transaction* (Delta's ``txn`` action): app id ``"<flow_id>/<sink_id>"``, version = the
epoch id. Data files and the transaction version are committed atomically, so
before writing an epoch the sink reads the table's latest version for its app id and
skips the epoch when that version is ≥ the epoch: a replay after a crash finds its
own earlier commit and writes nothing. This is how Delta's own streaming writers
achieve exactly-once delivery (SPEC §6).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from wire.connectors.arrow_kinds import is_binary, is_list
from wire.connectors.sinks import Sink
from wire.errors import CheckpointError, ConfigError, WireError

MODES = ("append", "overwrite")

_META_FLOW = "wire.flow_id"
_META_SINK = "wire.sink_id"
_META_CHECKPOINT = "wire.checkpoint_id"
_META_EPOCH = "wire.epoch"


@dataclass(frozen=True)
class _Run:
    """What :meth:`DeltaSink.open` learns; lives only while a flow runs."""

    flow_id: str
    sink_id: str
    checkpoint_id: str

    @property
    def app_id(self) -> str:
        return f"{self.flow_id}/{self.sink_id}"


@dataclass(frozen=True)
class DeltaSink(Sink):
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
        """Remember the app id; refuse a table this sink wrote under another checkpoint.

        Called once at run start on the driver (again at a restart). Nothing is
        written; a missing table is created by the first epoch with rows.

        Raises
        ------
        CheckpointError
            When the table already holds commits of this flow and sink made under a
            different checkpoint: the new checkpoint's epochs restart at 0 and would
            all be skipped as replays.
        """
        run = _Run(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)
        table = self._load()
        if table is not None and table.transaction_version(run.app_id) is not None:
            previous = _last_checkpoint(table, run)
            if previous is not None and previous != checkpoint_id:
                raise CheckpointError(
                    f"{self.describe()}: the table holds epochs of flow {flow_id!r} sink {sink_id!r} "
                    f"written under checkpoint {previous!r}, not {checkpoint_id!r}; "
                    "write to a new table or give the sink a new id"
                )
        object.__setattr__(self, "_run", run)

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Commit the epoch's rows with app transaction version ``epoch``, unless already there.

        Called on the driver once per epoch, before the epoch commits. Reads the
        table's transaction version for ``"<flow_id>/<sink_id>"``; when it is ≥
        ``epoch`` (a replay after a crash, whose commit already landed) nothing is
        written. Otherwise one commit adds the rows (``mode="append"``) or replaces
        the table's rows with them (``mode="overwrite"``) and records the version.
        An empty table makes no commit. The first commit creates the table.

        Raises
        ------
        WireError
            Before :meth:`open`; when the rows' columns or column types differ from the
            table's (no schema evolution); when a partition column is missing; when the
            Delta commit fails.
        """
        run = self._run
        if run is None:
            raise WireError(f"{self.describe()}: write_epoch before open")
        if table.num_rows == 0:
            return
        existing = self._load()
        if existing is not None:
            done = existing.transaction_version(run.app_id)
            if done is not None and done >= epoch:
                return
            self._check_partitions(existing)
            table = _conform(table, pa.schema(existing.schema().to_arrow()), self.describe())
        else:
            missing = [c for c in self.partition_by if c not in table.column_names]
            if missing:
                raise WireError(f"{self.describe()}: partition columns {missing} not in {table.column_names}")
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
            write_deltalake(
                existing if existing is not None else self.path,
                table,
                mode="append" if self.mode == "append" else "overwrite",
                partition_by=list(self.partition_by) or None,
                commit_properties=properties,
            )
        except (DeltaError, OSError, ValueError) as exc:
            raise WireError(f"{self.describe()}: commit of epoch {epoch} failed: {exc}") from exc

    def close(self) -> None:
        """Forget the run; every committed epoch is already durable in the table."""
        object.__setattr__(self, "_run", None)

    def describe(self) -> str:
        """E.g. ``"delta out/flights mode=append (exactly_once)"``."""
        return f"delta {self.path} mode={self.mode} ({self.guarantee})"

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

    Uses the ``deltalake`` package (delta-rs), no JVM. The table at ``path`` is created
    by the first epoch with rows, with that epoch's schema (the ``epoch`` column
    included); Delta stores timestamps at microsecond precision (``UTC`` when the
    column has a time zone) and unsigned integers as signed ones. Later epochs must
    have the same columns with compatible types (no schema evolution). Read it with
    ``deltalake.DeltaTable(path)`` or DuckDB's ``delta_scan``.

    Guarantee: ``exactly_once``. ``open`` (driver, run start) remembers the app id
    ``"<flow_id>/<sink_id>"`` and refuses a table this sink wrote under another
    checkpoint; ``write_epoch`` (driver, once per epoch, before the epoch commits)
    makes one Delta commit carrying the rows and an application transaction with
    version = epoch id, atomically; a replayed epoch finds version ≥ its id and is
    skipped; an empty epoch makes no commit; ``close`` does nothing durable.

    Parameters
    ----------
    path:
        The table's location: a local directory or a URI ``deltalake`` understands.
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
        names. At ``open``: CheckpointError (see :meth:`DeltaSink.open`). At
        ``write_epoch``: WireError on schema mismatch or a failed commit.
    """
    return DeltaSink(path=_check_uri(path), mode=mode, partition_by=_check_partition_by(partition_by))


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
