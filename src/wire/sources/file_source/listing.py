"""Listing for the file source: which files exist, in which partition, in what order.

Pure filesystem functions, no parsing and no Spark. A source's files are grouped into
*partitions* (SPEC §2); the files of a partition are listed in name order, and read in
arrival order (:mod:`wire.sources.file_source.file_set`: the file being read, then new files by
name, whatever names the files already read have):

* ``partition_by=None``: all files form one partition named :data:`SINGLE_PARTITION`.
* ``"directory"``: each immediate subdirectory of the base directory is a partition
  named after the subdirectory. The path is a directory (its subdirectories' files with
  the format's extension) or a glob whose first wildcard level names the partition
  (``"in/*/*.csv"``: partition ``"a"`` holds ``in/a/*.csv``). Like a Kafka partition, a
  directory can receive new files.
* ``"file"``: every file is its own partition, named by its path relative to the base
  directory (the directory, or the glob's part before its first wildcard level).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Literal, get_args

EXTENSIONS: dict[str, tuple[str, ...]] = {
    "csv": (".csv",),
    "jsonl": (".jsonl", ".ndjson"),
    "parquet": (".parquet",),
}
"""Accepted formats and the file extensions listed when the source path is a directory."""

FileFormat = Literal["csv", "jsonl", "parquet"]
"""A file source's format (``files(format=...)``)."""
PartitionBy = Literal["directory", "file"]
"""How a file source splits its files into partitions (``files(partition_by=...)``; None: one)."""
PARTITION_MODES: tuple[PartitionBy | None, ...] = (None, *get_args(PartitionBy))
"""Accepted values of the file source's ``partition_by``."""

SINGLE_PARTITION = "all"
"""The name of the one partition of a source with ``partition_by=None``."""


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def list_files(path: str, fmt: str) -> list[str]:
    """Return the files of the source in name order.

    ``path`` is a directory (all files in it with the format's extensions) or a glob
    (``**`` recurses). Hidden files and files starting with ``_`` are skipped.
    """
    if os.path.isdir(path):
        names = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(EXTENSIONS[fmt])]
    else:
        names = glob.glob(path, recursive=True)
    return sorted(p for p in names if os.path.isfile(p) and not _hidden(os.path.basename(p)))


@dataclass(frozen=True)
class FileStamp:
    """A file's identity for caches: path, size and modification time (ns)."""

    path: str
    size: int
    mtime_ns: int

    @staticmethod
    def of(path: str) -> FileStamp:
        """Stat ``path``."""
        st = os.stat(path)
        return FileStamp(path, st.st_size, st.st_mtime_ns)


def _wildcard_level(path: str) -> tuple[str, str | None, int]:
    """Split a glob: (base directory, first wildcard component, components after it)."""
    parts = path.split(os.sep)
    for i, part in enumerate(parts):
        if glob.has_magic(part):
            base = os.sep.join(parts[:i]) or ("/" if path.startswith(os.sep) else ".")
            return base, part, len(parts) - i - 1
    return path, None, 0


def directory_glob_problem(path: str) -> str | None:
    """Why ``path`` cannot be partitioned by directory, judged from its text (None: it can).

    A glob qualifies when its first wildcard level is a directory level (``"in/*/*.csv"``);
    a path without wildcards must be a directory, which is checked when listing.
    """
    _, level, after = _wildcard_level(path)
    if level is not None and after == 0:
        return "its first wildcard level names files, not directories"
    return None


def base_directory(path: str) -> str:
    """Return the directory partition names are relative to: ``path`` or the glob's fixed part."""
    return path if os.path.isdir(path) else _wildcard_level(path)[0]


def list_partitions(path: str, fmt: str, partition_by: str | None) -> dict[str, list[str]]:
    """Return the source's partitions now: name -> files in name order.

    A ``"directory"`` partition with no file yet is listed with an empty list.

    Raises
    ------
    ValueError
        On an unknown ``partition_by``, or a ``"directory"`` path that is neither a
        directory nor a glob with a wildcard directory level.
    """
    if partition_by is None:
        return {SINGLE_PARTITION: list_files(path, fmt)}
    if partition_by == "file":
        base = base_directory(path)
        return {os.path.relpath(f, base): [f] for f in list_files(path, fmt)}
    if partition_by != "directory":
        raise ValueError(f"unknown partition_by={partition_by!r}")
    if os.path.isdir(path):
        names = os.listdir(path)
        subdirs = sorted(n for n in names if not _hidden(n) and os.path.isdir(os.path.join(path, n)))
        return {n: list_files(os.path.join(path, n), fmt) for n in subdirs}
    problem = directory_glob_problem(path)
    base, level, _ = _wildcard_level(path)
    if problem or level is None:
        raise ValueError(f"cannot partition {path!r} by directory: {problem or 'it is not a directory'}")
    found: dict[str, list[str]] = {}
    for d in sorted(glob.glob(os.path.join(base, level))):
        if os.path.isdir(d) and not _hidden(os.path.basename(d)):
            found[os.path.basename(d)] = []
    for f in list_files(path, fmt):
        found.setdefault(os.path.relpath(f, base).split(os.sep)[0], []).append(f)
    return dict(sorted(found.items()))
