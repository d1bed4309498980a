"""Sinks: where a flow's ports end.

Two kinds of sink, both committed inside the epoch (SPEC §6):

**Executor sinks** (:class:`ExecutorSink`: Parquet, JSON Lines, Delta, PostgreSQL,
SQLite) follow the two-phase form: *executors stage, the driver commits*. Per epoch
the runtime calls, in the user's driver process:

1. :meth:`ExecutorSink.prepare_epoch` on the driver, which returns a small, picklable
   :class:`EpochStager` (paths, names, an attempt token; never a connection);
2. :meth:`EpochStager.stage` **on the executors**, once per Spark task (partition)
   that has rows for the sink, with that partition's rows as one ``pyarrow.Table``.
   It writes them to a staging location and returns a small JSON-able receipt;
3. :meth:`ExecutorSink.commit_epoch` on the driver, with the receipts of the tasks
   that succeeded, which publishes the epoch atomically with its epoch id or, for a
   replayed epoch that was already published, publishes nothing and discards what
   was staged.

So no data row of an executor sink passes through the driver: only receipts do.

**Driver sinks** (console, webhook, Redis stream, the test memory sink, and the
wrappers ``guarded`` and ``round_robin``) receive the epoch's rows on the driver:

1. :meth:`Sink.open` once at run start, before the first epoch (after a restart
   too, before the replayed epoch).
2. :meth:`Sink.write_epoch` once per epoch (Spark micro-batch id) with all of the
   epoch's rows for the sink's port as one ``pyarrow.Table``.
   All sinks of a flow are written inside the epoch, **before** Spark marks the epoch
   complete in the flow's checkpoint (SPEC §6). If the run crashes before that mark,
   the restarted run calls ``write_epoch`` again with the same epoch id and the
   same rows.
3. :meth:`Sink.close` once when the run ends (normally or not).

An executor sink also accepts ``write_epoch`` (stage and commit in the calling
process), which is how the wrappers use it.

Each sink declares its ``guarantee`` for such a replay:

* ``"exactly_once"`` — ``write_epoch`` is idempotent per epoch id: a replayed
  epoch is recognised and skipped, so every row is delivered once.
* ``"idempotent"`` — the replay rewrites the same rows under deterministic keys
  (upsert): exactly once in effect.
* ``"at_least_once"`` — a replayed epoch may be delivered twice.
"""

from __future__ import annotations

import base64
import json
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from wire.delivery.epoch_files import EpochFiles, SinkOwner, fsync_file, part_file_name
from wire.errors import ConfigError, WireError

GUARANTEES = ("exactly_once", "idempotent", "at_least_once")


class Sink(ABC):
    """Base class of every sink: few methods, all called on the driver.

    Subclasses are frozen dataclasses (a sink is part of an immutable flow plan);
    state that only exists while a flow runs is kept out of the comparable fields.
    """

    guarantee: ClassVar[str]
    """``"exactly_once"``, ``"idempotent"`` or ``"at_least_once"`` (module docstring)."""

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:  # noqa: B027
        """Prepare to write; called once at run start, before the first epoch.

        Also called at a restart, before the replay of the last incomplete epoch.
        The default does nothing.
        """

    @abstractmethod
    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Deliver one epoch's rows; called once per epoch, before the epoch commits.

        Exactly-once sinks must make this idempotent per ``epoch``: a replay after a
        crash calls it again with the same epoch id and the same rows.
        """

    def close(self) -> None:  # noqa: B027
        """Release resources; called once when the run ends. The default does nothing."""

    def describe(self) -> str:
        """One line naming the sink, its target and its guarantee."""
        return f"{type(self).__name__} ({self.guarantee})"

    target_fields: ClassVar[tuple[str, ...]] = (
        "path", "table", "schema", "key", "mode", "partition_by", "url", "stream", "dsn")
    """The dataclass fields that say where the sink delivers (see :meth:`fingerprint`)."""

    def fingerprint(self) -> dict[str, Any]:
        """Where and how the sink delivers, as JSON values: kind, guarantee and target.

        Called at run start; recorded per sink step in the checkpoint's ``wire.json``
        (:func:`wire.runtime.checkpoint.open_checkpoint`), which refuses to resume when
        it changed: the sink's earlier epochs went to the old target. The default: the
        class name, :attr:`guarantee`, the dataclass fields named in
        :attr:`target_fields` (credentials removed from ``dsn`` / ``url``) and wrapped
        sinks (a field holding sinks) by their own fingerprint; tuning fields (batch
        sizes, timeouts) are left out.
        """
        fp: dict[str, Any] = {"kind": type(self).__qualname__, "guarantee": self.guarantee}
        for f in fields(self) if is_dataclass(self) else ():
            value = getattr(self, f.name)
            if isinstance(value, Sink):
                fp[f.name] = value.fingerprint()
            elif isinstance(value, tuple) and value and all(isinstance(v, Sink) for v in value):
                fp[f.name] = [v.fingerprint() for v in value]
            elif f.name in self.target_fields:
                fp[f.name] = _no_password(value) if f.name in ("dsn", "url") else value
        return fp


def _no_password(text: Any) -> Any:
    """A connection string without its password (``user:pw@`` in a URL, ``password=``)."""
    if not isinstance(text, str):
        return text
    text = re.sub(r"^([A-Za-z][\w+.-]*://[^:/@?#]*):[^@/?#]*@", r"\1@", text)
    text = re.sub(r"([?&])password=[^&]*&?", r"\1", text)
    return re.sub(r"\s*\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", "", text).strip()


@dataclass(frozen=True)
class StagedPart:
    """What one executor task staged for one sink in one epoch (travels to the driver).

    ``rows`` and ``bytes`` are the rows and bytes the task staged; ``receipt`` is the
    sink's own JSON-able description of where (file names, staging table, sizes).
    """

    partition: int
    rows: int
    bytes: int
    receipt: dict[str, Any]


class EpochStager(ABC):
    """The executor-side half of an :class:`ExecutorSink` for one epoch.

    Built on the driver by :meth:`ExecutorSink.prepare_epoch`, pickled to the
    executors, and called there once per task that has rows. It must hold only
    plain, picklable values (paths, names, tokens): connections are opened inside
    :meth:`stage`.
    """

    @abstractmethod
    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Stage one task's rows (``table.num_rows > 0``, ``epoch`` column included).

        Runs on an executor. The staged data must be durable when this returns, and
        invisible to readers of the sink until the driver commits it. A retried task
        stages again under a new name; the driver publishes only what the receipts
        of the successful attempts name.
        """


class ExecutorSink(Sink):
    """A sink written by the executors and committed by the driver (module docstring)."""

    @abstractmethod
    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver, before the epoch's Spark job: return the stager the executors call.

        Must not be expensive: it runs once per epoch on the driver.
        """

    @abstractmethod
    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver, after every task staged: publish ``parts`` atomically, or skip a replay.

        Called once per epoch, also when no task had rows (``parts`` empty), so that
        the sink can discard leftovers of the attempt. A replayed epoch that an
        earlier attempt already published publishes nothing and removes what the
        replay staged. Raises when the epoch cannot be committed: the epoch then
        fails and is replayed.
        """

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Stage ``table`` as one part and commit it, in the calling process.

        The driver-side form of the protocol, used by sink wrappers
        (``guarded``, ``round_robin``) and tests; the runtime itself stages on the
        executors.
        """
        stager = self.prepare_epoch(epoch)
        parts = [stager.stage(0, table)] if table.num_rows else []
        self.commit_epoch(epoch, parts)


def _check_path(path: object) -> str:
    accepted = "a non-empty directory path (str or os.PathLike)"
    if not isinstance(path, str | os.PathLike):
        raise ConfigError("path", path, accepted)
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("path", path, accepted)
    return text


@dataclass(frozen=True)
class _FileStager(EpochStager):
    """Executor side of a file sink: one file per task into the attempt's staging directory."""

    attempt: str
    ext: str

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Write the task's rows as ``part-<partition>-<random>.<ext>``, fsync it, return its name."""
        directory = Path(self.attempt)
        directory.mkdir(parents=True, exist_ok=True)
        name = part_file_name(partition, self.ext)
        path = directory / name
        try:
            if self.ext == "parquet":
                pq.write_table(table, path)
            else:
                with open(path, "w", encoding="utf-8", newline="\n") as out:
                    for line in jsonl_lines(table):
                        out.write(line)
                        out.write("\n")
            fsync_file(path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return StagedPart(
            partition, table.num_rows, path.stat().st_size, {"attempt": self.attempt, "file": name}
        )


@dataclass(frozen=True)
class _EpochFileSink(ExecutorSink):
    """A directory with one sub-directory per epoch, published by :mod:`wire.delivery.epoch_files`."""

    guarantee: ClassVar[str] = "exactly_once"
    ext: ClassVar[str]

    path: str
    _files: EpochFiles | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate the path at flow-build time."""
        object.__setattr__(self, "path", _check_path(self.path))

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Claim the directory (ownership marker) and delete what a crashed run staged.

        The path is made absolute here, on the driver, so that executors whose
        working directory differs write to the same place.

        Raises
        ------
        CheckpointError
            When the directory belongs to another flow, sink or checkpoint.
        """
        files = EpochFiles(os.path.abspath(self.path), self.ext)
        files.open(SinkOwner(flow=flow_id, sink=sink_id, checkpoint=checkpoint_id))
        object.__setattr__(self, "_files", files)

    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Mint the epoch attempt's staging directory (created by the first executor)."""
        return _FileStager(str(self._opened().attempt_dir(epoch)), self.ext)

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Publish the staged files as ``epoch-<epoch>/``; a replayed epoch publishes nothing.

        Files staged by an earlier attempt of this epoch (a crashed run) were deleted
        at ``open``; files of a failed task attempt are deleted here.
        """
        files = self._opened()
        attempts = {p.receipt["attempt"] for p in parts}
        for attempt in attempts:
            names = [p.receipt["file"] for p in parts if p.receipt["attempt"] == attempt]
            files.publish_staged(epoch, Path(attempt), names)

    def close(self) -> None:
        """Forget the run's state; every published epoch is already durable."""
        object.__setattr__(self, "_files", None)

    def describe(self) -> str:
        """E.g. ``"parquet out/x (exactly_once)"``."""
        return f"{self.ext} {self.path} ({self.guarantee})"

    def _opened(self) -> EpochFiles:
        if self._files is None:
            raise WireError(f"{self.describe()}: epoch written before open")
        return self._files


@dataclass(frozen=True)
class ParquetSink(_EpochFileSink):
    """Exactly-once Parquet files, one directory per epoch; built by :func:`parquet`."""

    ext: ClassVar[str] = "parquet"


@dataclass(frozen=True)
class JsonlSink(_EpochFileSink):
    """Exactly-once JSON Lines files, one directory per epoch; built by :func:`jsonl`."""

    ext: ClassVar[str] = "jsonl"


@dataclass(frozen=True)
class ConsoleSink(Sink):
    """Prints each epoch to standard output; built by :func:`console`."""

    guarantee: ClassVar[str] = "at_least_once"

    max_rows: int = 20

    def __post_init__(self) -> None:
        """Validate ``max_rows`` at flow-build time."""
        if isinstance(self.max_rows, bool) or not isinstance(self.max_rows, int) or self.max_rows < 1:
            raise ConfigError("max_rows", self.max_rows, "an int >= 1")

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Print ``epoch <id>: <n> rows`` and the first ``max_rows`` rows.

        Nothing is remembered: a replayed epoch is printed again.
        """
        n = table.num_rows
        shown = min(n, self.max_rows)
        more = f" (first {shown} shown)" if shown < n else ""
        print(f"epoch {epoch}: {n} rows{more}")
        if n:
            print(table.slice(0, shown).to_pandas().to_string(index=False))

    def describe(self) -> str:
        """E.g. ``"console max_rows=20 (at_least_once)"``."""
        return f"console max_rows={self.max_rows} ({self.guarantee})"


def parquet(path: str | os.PathLike[str]) -> Sink:
    """Write each epoch's rows as Parquet files, exactly once, from the executors.

    Layout: ``<path>/epoch-<epoch:010d>/part-<partition:05d>-<random>.parquet``, one
    directory per epoch with rows (epochs without rows have none) and in it one file
    per Spark task that had rows, plus ``<path>/_wire_sink.json`` (ownership marker)
    and ``<path>/_staging/`` (epochs being written). Read it with e.g.
    ``duckdb.read_parquet("<path>/*/*.parquet")``, ``pyarrow.dataset.dataset(path)``
    or ``spark.read.parquet(path)``. Every row has an ``epoch`` column (int64). The
    table's schema is kept as is (a UTC timestamp stays a UTC timestamp).

    Guarantee: ``exactly_once``, two-phase (SPEC §6). ``open`` (run start, driver)
    claims the directory for the flow, sink and checkpoint and deletes what a
    crashed run staged. Per epoch, each executor task writes and fsyncs its file
    under ``_staging/``; after the epoch's Spark job the driver renames the
    epoch's staging directory to ``epoch-<epoch>`` (atomic: readers see all of an
    epoch or none of it), or, if an earlier attempt already published the epoch,
    deletes what the replay staged. No data row passes through the driver. The
    directory must be visible at the same path to the driver and every executor
    (local disk in local mode, a shared mount on a cluster). See
    :mod:`wire.delivery.epoch_files`.

    Parameters
    ----------
    path:
        The output directory, created at ``open``.

    Returns
    -------
    Sink
        A :class:`ParquetSink`.

    Raises
    ------
    ConfigError
        When ``path`` is empty or not a path. At ``open``: CheckpointError when the
        directory belongs to another flow, sink or checkpoint.
    """
    return ParquetSink(path=_check_path(path))


def jsonl(path: str | os.PathLike[str]) -> Sink:
    """Write each epoch's rows as JSON Lines files, exactly once, from the executors.

    Layout and protocol as :func:`parquet`, with files
    ``<path>/epoch-<epoch:010d>/part-<partition:05d>-<random>.jsonl``.
    One JSON object per row, keys in column order. Encoding: integers exact (int64
    included); floats as JSON numbers, NaN and ±inf as ``null``; timestamps as
    ISO-8601 strings at the column's precision, ending in ``Z`` when the column has a
    time zone (converted to UTC), without a zone when it has none; dates
    ``YYYY-MM-DD``; times ``HH:MM:SS[.fff]``; binary as base64; decimals as strings
    (exact); durations as integers in the column's unit; lists as arrays; structs as
    objects; maps as arrays of ``{"key": ..., "value": ...}``.

    Guarantee: ``exactly_once`` (see :func:`parquet`).

    Parameters
    ----------
    path:
        The output directory, created at ``open``.

    Returns
    -------
    Sink
        A :class:`JsonlSink`.

    Raises
    ------
    ConfigError
        When ``path`` is empty or not a path.
    """
    return JsonlSink(path=_check_path(path))


def console(*, max_rows: int = 20) -> Sink:
    """Print each epoch: its id, its row count and its first ``max_rows`` rows.

    For development. A driver sink: the epoch's rows are brought to the driver to
    be printed (not written by the executors). Guarantee: ``at_least_once`` —
    ``write_epoch`` (driver, once per epoch, before the epoch commits) prints
    immediately, so a replayed epoch is printed again. ``open`` and ``close`` do nothing.

    Parameters
    ----------
    max_rows:
        How many rows of each epoch to print, ≥ 1.

    Returns
    -------
    Sink
        A :class:`ConsoleSink`.

    Raises
    ------
    ConfigError
        When ``max_rows`` is not an int ≥ 1.
    """
    return ConsoleSink(max_rows=max_rows)


# --- JSON Lines encoding -------------------------------------------------------------


def jsonl_lines(table: pa.Table) -> list[str]:
    """Encode ``table`` as JSON Lines, one string per row (see :func:`jsonl`).

    Raises
    ------
    WireError
        When column names repeat or a column's type has no JSON encoding.
    """
    names = table.column_names
    if len(set(names)) != len(names):
        raise WireError(f"jsonl sink: duplicate column names in {names}")
    columns = [_to_json_array(col.combine_chunks()).to_pylist() for col in table.columns]
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    return [dumps(dict(zip(names, row, strict=True))) for row in zip(*columns, strict=True)]


def _to_json_array(arr: pa.Array) -> pa.Array:
    """Rewrite ``arr`` so that ``to_pylist`` yields only JSON-native Python values."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _to_json_array(arr.dictionary_decode())
    if (
        pa.types.is_null(t)
        or pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    ):
        return arr
    if pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_floating(t):
        as64 = arr.cast(pa.float64())
        return pc.if_else(pc.is_finite(as64), as64, pa.scalar(None, pa.float64()))
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S")
        return pc.strftime(arr.cast(pa.timestamp(t.unit, "UTC")), format="%Y-%m-%dT%H:%M:%SZ")
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_decimal(t):
        return arr.cast(pa.string())
    if pa.types.is_duration(t):
        return arr.cast(pa.int64())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        encoded = [None if b is None else base64.b64encode(b).decode("ascii") for b in arr.to_pylist()]
        return pa.array(encoded, pa.string())
    if pa.types.is_binary_view(t):
        return _to_json_array(arr.cast(pa.binary()))
    if pa.types.is_map(t):
        entries = pa.StructArray.from_arrays(
            [_to_json_array(arr.keys), _to_json_array(arr.items)], names=["key", "value"]
        )
        return pa.ListArray.from_arrays(arr.offsets, entries, mask=arr.is_null())
    if pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        return _to_json_array(arr.cast(pa.list_(t.value_field)))
    if pa.types.is_large_list_view(t):
        return _to_json_array(arr.cast(pa.large_list(t.value_field)))
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(arr.offsets, _to_json_array(arr.values), mask=arr.is_null())
    if pa.types.is_large_list(t):
        return pa.LargeListArray.from_arrays(arr.offsets, _to_json_array(arr.values), mask=arr.is_null())
    if pa.types.is_struct(t):
        children = [_to_json_array(child) for child in arr.flatten()]
        return pa.StructArray.from_arrays(
            children, names=[t.field(i).name for i in range(t.num_fields)], mask=arr.is_null()
        )
    raise WireError(f"jsonl sink: no JSON encoding for column type {t}")
