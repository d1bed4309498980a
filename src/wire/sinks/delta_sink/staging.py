"""The Delta Lake sink's staging: the executors' data files and the intents naming them.

:class:`_DeltaStager` is the executor side of :class:`~wire.sinks.delta_sink.DeltaSink`
(one epoch attempt): it writes the task's rows as Parquet data files into the table
directory after recording their names in an intent file under :data:`STAGING_DIR`.
The file helpers below (file system of a location, durable writes, listing the
intents, deleting files) serve it and the driver's clean-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from wire.delivery.sink import EpochStager, StagedPart
from wire.errors import WireError
from wire.sinks.delta_sink.schema import _conform, _delta_schema, _hive_segment, _split_partitions, _stats

STAGING_DIR = "_wire_staging"
"""Sub-directory of the table holding the intent files of epochs being written."""


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
