"""Exactly-once per-epoch files: the commit protocol shared by Wire's file sinks.

A file sink writes each epoch (Spark micro-batch) that has rows as exactly **one**
file, published atomically, so that a replayed epoch is recognised and skipped and a
reader never sees part of an epoch (SPEC §6). Layout of a sink directory::

    <dir>/_wire_sink.json               ownership marker {"flow", "sink", "checkpoint"}
    <dir>/part-0000000000.<ext>         epoch 0
    <dir>/part-0000000007.<ext>         epoch 7 (epochs without rows have no file)
    <dir>/_staging/<name>.<random>.tmp  an epoch being written (never read)

Protocol for one epoch, run on the Spark driver before the epoch is marked complete
in the checkpoint:

1. If ``part-<epoch>.<ext>`` exists, the epoch was published by an earlier attempt
   (a replay after a crash carries the same epoch id and the same rows): skip it.
2. Otherwise write ``_staging/part-<epoch>.<ext>.<random>.tmp``, fsync it,
   ``os.replace`` it to ``part-<epoch>.<ext>`` (atomic on POSIX within one file
   system) and fsync the directory so that the rename is durable.

A crash before step 2's rename leaves only a temp file under ``_staging``; nothing
is visible and :meth:`EpochFiles.open` deletes it at the next run, whose replay of
the epoch writes the file. A crash after the rename leaves the whole file, and the
replay skips it. Readers that list ``<dir>/*.<ext>`` (DuckDB globs,
``pyarrow.dataset``, Spark, which also ignore names starting with ``_`` or ``.``)
only ever see whole epochs. File names are zero-padded, so they sort in epoch order.

The ownership marker binds the directory to one (flow, sink, checkpoint): a second
flow, another sink or a fresh checkpoint would restart epoch ids at 0 and skip or
overwrite the epochs already there, so :meth:`EpochFiles.open` refuses with a
:class:`~wire.errors.CheckpointError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wire.errors import CheckpointError, ConfigError, WireError

MARKER_NAME = "_wire_sink.json"
STAGING_NAME = "_staging"
MAX_EPOCH = 10**10 - 1
"""Largest epoch id that fits the 10-digit file name (file names must sort in epoch order)."""

_EXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class SinkOwner:
    """The (flow, sink, checkpoint) that owns a sink directory."""

    flow: str
    sink: str
    checkpoint: str

    def to_json(self) -> dict[str, str]:
        """Return the marker file's content."""
        return {"flow": self.flow, "sink": self.sink, "checkpoint": self.checkpoint}


def epoch_file_name(epoch: int, ext: str) -> str:
    """Return the published file name of ``epoch``: ``part-<epoch:010d>.<ext>``."""
    return f"part-{epoch:010d}.{ext}"


def published_epochs(directory: str | os.PathLike[str], ext: str) -> list[int]:
    """List the epoch ids that have a published file in ``directory``, ascending."""
    pattern = re.compile(rf"^part-(\d{{10}})\.{re.escape(ext)}$")
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := pattern.match(p.name)))


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (creates, renames, deletes) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a closed file's data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EpochFiles:
    """One sink directory following the per-epoch file protocol (see the module docstring).

    Runtime-only, driver-side object: a sink creates it in its ``open`` and calls
    :meth:`publish` from ``write_epoch``.

    Parameters
    ----------
    directory:
        The sink directory; created (with parents) at :meth:`open`.
    ext:
        File extension without the dot, e.g. ``"parquet"``.
    """

    def __init__(self, directory: str | os.PathLike[str], ext: str) -> None:
        if not _EXT.match(ext) or ext in {"json", "tmp"}:
            raise ConfigError(
                "ext", ext, "a file extension without dot or separator, other than 'json', 'tmp'"
            )
        self.directory = Path(directory)
        self.ext = ext
        self.staging = self.directory / STAGING_NAME
        self.owner: SinkOwner | None = None

    def open(self, owner: SinkOwner) -> None:
        """Claim the directory for ``owner`` and delete temp files left by a crash.

        Called once at run start, before the first epoch. Creates the directory and
        writes the ownership marker if it has none.

        Raises
        ------
        CheckpointError
            When the directory belongs to another flow, sink or checkpoint, or its
            marker cannot be read.
        ConfigError
            When the path exists and is not a directory.
        """
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError("path", str(self.directory), "a directory (or a path to create)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.staging.mkdir(exist_ok=True)
        marker = self.directory / MARKER_NAME
        if marker.exists():
            recorded = self._read_marker(marker)
            if recorded != owner.to_json():
                raise CheckpointError(
                    f"sink directory {str(self.directory)!r} belongs to {recorded}, not to "
                    f"{owner.to_json()}; epoch ids of different flows or checkpoints would "
                    "collide; use another directory, or delete it to start over"
                )
        else:
            self._write_atomic(
                MARKER_NAME, lambda p: p.write_text(json.dumps(owner.to_json(), indent=1) + "\n")
            )
        for leftover in self.staging.iterdir():
            if leftover.is_file() and leftover.name.endswith(".tmp"):
                leftover.unlink()
        fsync_dir(self.staging)
        self.owner = owner

    def path_of(self, epoch: int) -> Path:
        """Return the published path of ``epoch``."""
        return self.directory / epoch_file_name(epoch, self.ext)

    def is_published(self, epoch: int) -> bool:
        """Whether ``epoch`` already has its file (a replay must then skip it)."""
        return self.path_of(epoch).exists()

    def publish(self, epoch: int, write: Callable[[Path], None]) -> bool:
        """Write ``epoch``'s file once, atomically.

        Parameters
        ----------
        epoch:
            The epoch (Spark batch) id, 0 ≤ epoch ≤ :data:`MAX_EPOCH`.
        write:
            Writes the whole file at the path it is given (a temp path under
            ``_staging``) and closes it; it is not called for a replayed epoch.

        Returns
        -------
        bool
            True if the file was written, False if the epoch was already published.

        Raises
        ------
        WireError
            When called before :meth:`open`.
        ConfigError
            When ``epoch`` is not an int in range.
        """
        if self.owner is None:
            raise WireError(f"sink directory {str(self.directory)!r}: publish before open")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
            raise ConfigError("epoch", epoch, f"an int in [0, {MAX_EPOCH}]")
        if self.is_published(epoch):
            return False
        self._write_atomic(epoch_file_name(epoch, self.ext), write)
        return True

    def _write_atomic(self, name: str, write: Callable[[Path], None]) -> None:
        tmp = self.staging / f"{name}.{secrets.token_hex(8)}.tmp"
        try:
            write(tmp)
            fsync_file(tmp)
            os.replace(tmp, self.directory / name)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        fsync_dir(self.directory)

    def _read_marker(self, marker: Path) -> dict[str, str]:
        try:
            recorded = json.loads(marker.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(
                f"sink directory {str(self.directory)!r} has an unreadable ownership marker "
                f"{marker.name}: {exc}"
            ) from exc
        if not isinstance(recorded, dict):
            raise CheckpointError(
                f"sink directory {str(self.directory)!r} has an invalid ownership marker "
                f"{marker.name}: {recorded!r}"
            )
        return recorded
