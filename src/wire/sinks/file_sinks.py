"""File sinks (Parquet, JSON Lines; exactly once, one directory per epoch) and the console sink.

The sink protocol they implement (:class:`~wire.delivery.sink.Sink`,
:class:`~wire.delivery.sink.ExecutorSink`) is in :mod:`wire.delivery.sink`; the
per-epoch file publication in :mod:`wire.delivery.epoch_files`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from wire.delivery.driver_run import DriverRunSink
from wire.delivery.epoch_files import EpochFiles, SinkOwner, fsync_file, part_file_name
from wire.delivery.sink import EpochStager, ExecutorSink, Guarantee, Sink, StagedPart
from wire.errors import ConfigError
from wire.sinks.column_checks import path_text
from wire.sinks.json_rows import jsonl_lines


def _check_path(path: object) -> str:
    return path_text(path, accepted="a non-empty directory path (str or os.PathLike)")


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
class _EpochFileSink(DriverRunSink[EpochFiles], ExecutorSink):
    """A directory with one sub-directory per epoch, published by :mod:`wire.delivery.epoch_files`."""

    guarantee: ClassVar[Guarantee] = "exactly_once"
    ext: ClassVar[str]

    path: str

    def __post_init__(self) -> None:
        """Validate the path at flow-build time."""
        object.__setattr__(self, "path", _check_path(self.path))

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Starting over: move this sink's epochs of another checkpoint to ``_superseded/<id>/``.

        See :meth:`wire.delivery.epoch_files.EpochFiles.supersede`.

        Raises
        ------
        CheckpointError
            When the directory belongs to another flow or sink.
        """
        files = EpochFiles(os.path.abspath(self.path), self.ext)
        files.supersede(SinkOwner(flow=flow_id, sink=sink_id, checkpoint=checkpoint_id))

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> EpochFiles:
        """``open``: claim the directory (ownership marker) and delete what a crashed run staged.

        The path is made absolute here, on the driver, so that executors whose
        working directory differs write to the same place.

        Raises
        ------
        CheckpointError
            When the directory belongs to another flow, sink or checkpoint.
        """
        files = EpochFiles(os.path.abspath(self.path), self.ext)
        files.open(SinkOwner(flow=flow_id, sink=sink_id, checkpoint=checkpoint_id))
        return files

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

    def describe(self) -> str:
        """E.g. ``"parquet out/x (exactly_once)"``."""
        return f"{self.ext} {self.path} ({self.guarantee})"


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

    guarantee: ClassVar[Guarantee] = "at_least_once"

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
    crashed run staged; when the flow starts over (``fresh=True``), the epochs of
    the old checkpoint are first moved to ``<path>/_superseded/<checkpoint id>/``
    (which those readers skip). Per epoch, each executor task writes and fsyncs its file
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
