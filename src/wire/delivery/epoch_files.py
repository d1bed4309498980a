"""Exactly-once per-epoch directories: the commit protocol shared by Wire's file sinks.

A file sink publishes each epoch (Spark micro-batch) that has rows as exactly **one**
directory holding one file per Spark task that had rows, made visible atomically, so
that a replayed epoch is recognised and skipped and a reader never sees part of an
epoch (SPEC §6, two-phase: executors stage, the driver commits). Layout::

    <dir>/_wire_sink.json                          ownership marker {"flow", "sink", "checkpoint"}
    <dir>/epoch-0000000000/part-00000-<token>.<ext>   epoch 0, Spark partition 0
    <dir>/epoch-0000000000/part-00003-<token>.<ext>   epoch 0, Spark partition 3
    <dir>/epoch-0000000007/part-00000-<token>.<ext>   epoch 7 (epochs without rows have none)
    <dir>/_staging/epoch-0000000009.<attempt>/...      an epoch being staged (never read)

Protocol for one epoch:

1. Driver, before the epoch's Spark job: mint a random attempt token
   (:meth:`EpochFiles.attempt_dir`).
2. Executors, one per task with rows: write ``part-<partition>-<random>.<ext>`` into
   ``_staging/epoch-<epoch>.<attempt>/``, fsync it, and report its name.
3. Driver, after the job (:meth:`EpochFiles.publish_staged`): if
   ``epoch-<epoch>`` already exists, an earlier attempt published the epoch (a
   replay carries the same epoch id and the same rows): delete the attempt's
   staging directory and stop. Otherwise delete every file in the staging
   directory that no successful task reported (a failed or retried task's), fsync
   it, ``os.replace`` it to ``epoch-<epoch>`` (one atomic rename of a directory on
   POSIX within one file system) and fsync the sink directory.

A crash before step 3's rename leaves only a staging directory; nothing is visible,
and :meth:`EpochFiles.open` deletes it at the next run, whose replay of the epoch
stages again. A crash after the rename leaves the whole epoch, and the replay skips
it. Readers that list ``<dir>/*/*.<ext>`` (DuckDB globs, ``pyarrow.dataset``, Spark,
which also ignore names starting with ``_`` or ``.``) only ever see whole epochs.
Directory names are zero-padded, so they sort in epoch order.

The sink directory must be on a file system that the driver and every executor see
at the same path (a local disk in local mode; a shared mount such as NFS on a
cluster): the rename is what makes the epoch visible.

The ownership marker binds the directory to one (flow, sink, checkpoint): a second
flow, another sink or a new checkpoint would restart epoch ids at 0 and skip or
overwrite the epochs already there, so :meth:`EpochFiles.open` refuses with a
:class:`~wire.errors.CheckpointError`. Starting the flow over (``fresh=True``) hands
the directory to the new checkpoint first (:meth:`EpochFiles.supersede`): the epochs
published under the old one are moved to ``<dir>/_superseded/<old checkpoint id>/``
(never read as output; delete it when no longer needed), then the marker names the
new checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wire.errors import CheckpointError, ConfigError, WireError

MARKER_NAME = "_wire_sink.json"
STAGING_NAME = "_staging"
SUPERSEDED_NAME = "_superseded"
"""Where :meth:`EpochFiles.supersede` moves the epochs of a checkpoint that a start-over replaced."""
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


def epoch_dir_name(epoch: int) -> str:
    """Return the published directory name of ``epoch``: ``epoch-<epoch:010d>``."""
    return f"epoch-{epoch:010d}"


def part_file_name(partition: int, ext: str) -> str:
    """Return a new, unique staged file name for a task of Spark partition ``partition``."""
    return f"part-{partition:05d}-{secrets.token_hex(6)}.{ext}"


def published_epochs(directory: str | os.PathLike[str]) -> list[int]:
    """List the epoch ids that have a published directory in ``directory``, ascending."""
    pattern = re.compile(r"^epoch-(\d{10})$")
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := pattern.match(p.name)) and p.is_dir())


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (creates, renames, deletes) durable."""
    _fsync(directory)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a closed file's data to stable storage."""
    _fsync(path)


def _fsync(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EpochFiles:
    """One sink directory following the per-epoch file protocol (see the module docstring).

    Runtime-only, driver-side object: a sink creates it in its ``open``, asks
    :meth:`attempt_dir` for each epoch's staging directory and calls
    :meth:`publish_staged` once the executors have staged their files.

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
                raise CheckpointError(self._refusal(recorded, owner))
        else:
            self._write_atomic(
                MARKER_NAME, lambda p: p.write_text(json.dumps(owner.to_json(), indent=1) + "\n")
            )
        for leftover in self.staging.iterdir():
            _remove_tree(leftover)
        fsync_dir(self.staging)
        self.owner = owner

    def supersede(self, owner: SinkOwner) -> list[int]:
        """Starting over: give the directory to ``owner``, setting aside another checkpoint's epochs.

        Called on the driver before :meth:`open`, only when the flow starts over. When
        the marker names ``owner``'s flow and sink under another checkpoint, every
        published epoch is moved to ``_superseded/<that checkpoint id>/`` and the
        marker is rewritten (atomically) to name ``owner``. A crash in between leaves
        the old marker, and the next call moves the rest. No marker, or ``owner``'s
        already: nothing changes.

        Returns
        -------
        list[int]
            The epoch ids moved aside.

        Raises
        ------
        CheckpointError
            When the marker names another flow or sink (not this sink's output), or is
            unreadable.
        """
        marker = self.directory / MARKER_NAME
        if not marker.exists():
            return []
        recorded = self._read_marker(marker)
        mine = owner.to_json()
        if recorded == mine:
            return []
        if recorded.get("flow") != owner.flow or recorded.get("sink") != owner.sink:
            raise CheckpointError(self._refusal(recorded, owner))
        old = str(recorded.get("checkpoint"))
        aside = self.directory / SUPERSEDED_NAME / (old if _EXT.match(old) else "unknown")
        aside.mkdir(parents=True, exist_ok=True)
        moved = published_epochs(self.directory)
        for epoch in moved:
            target = aside / epoch_dir_name(epoch)
            if target.exists():  # set aside by an earlier start-over from the same checkpoint
                target = aside / f"{epoch_dir_name(epoch)}.{secrets.token_hex(4)}"
            os.replace(self.path_of(epoch), target)
        fsync_dir(aside)
        fsync_dir(self.directory)
        self.staging.mkdir(exist_ok=True)
        self._write_atomic(MARKER_NAME, lambda p: p.write_text(json.dumps(mine, indent=1) + "\n"))
        return moved

    def _refusal(self, recorded: dict[str, str], owner: SinkOwner) -> str:
        """Why :meth:`open` refuses the directory, and what works instead."""
        where = f"sink directory {str(self.directory)!r}"
        if recorded.get("flow") == owner.flow and recorded.get("sink") == owner.sink:
            return (
                f"{where} holds epochs of flow {owner.flow!r} sink {owner.sink!r} written under "
                f"checkpoint {recorded.get('checkpoint')!r}, not this run's {owner.checkpoint!r}: a "
                "new checkpoint restarts epoch ids, which would be skipped as replays. To start the "
                "flow over, run it with fresh=True (`wire run --fresh`), which moves those epochs to "
                f"{SUPERSEDED_NAME}/ and hands the directory to the new checkpoint; or write to "
                "another directory"
            )
        return (
            f"{where} belongs to flow {recorded.get('flow')!r} sink {recorded.get('sink')!r} "
            f"(checkpoint {recorded.get('checkpoint')!r}), not to flow {owner.flow!r} sink "
            f"{owner.sink!r} (checkpoint {owner.checkpoint!r}): their epoch ids would collide. "
            "Write to another directory"
        )

    def path_of(self, epoch: int) -> Path:
        """Return the published directory of ``epoch``."""
        return self.directory / epoch_dir_name(epoch)

    def is_published(self, epoch: int) -> bool:
        """Whether ``epoch`` already has its directory (a replay must then skip it)."""
        return self.path_of(epoch).is_dir()

    def attempt_dir(self, epoch: int) -> Path:
        """Driver: return a new staging directory path for one attempt of ``epoch``.

        Nothing is created: executors create it when they stage their first file.

        Raises
        ------
        WireError
            When called before :meth:`open`.
        ConfigError
            When ``epoch`` is not an int in ``[0, MAX_EPOCH]``.
        """
        if self.owner is None:
            raise WireError(f"sink directory {str(self.directory)!r}: staging before open")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
            raise ConfigError("epoch", epoch, f"an int in [0, {MAX_EPOCH}]")
        return self.staging / f"{epoch_dir_name(epoch)}.{secrets.token_hex(8)}"

    def publish_staged(self, epoch: int, attempt: Path, files: list[str]) -> bool:
        """Driver: publish the ``files`` staged under ``attempt`` as epoch ``epoch``.

        Files in ``attempt`` that ``files`` does not name (written by a failed task
        attempt) are deleted first. With no files, nothing is published.

        Returns
        -------
        bool
            True if the epoch was published now; False if an earlier attempt already
            published it (the replay's staged files are deleted) or ``files`` is empty.

        Raises
        ------
        WireError
            When a named file is missing from ``attempt``.
        """
        if self.is_published(epoch) or not files:
            _remove_tree(attempt)
            return False
        keep = set(files)
        present = {p.name for p in attempt.iterdir()} if attempt.is_dir() else set()
        missing = keep - present
        if missing:
            raise WireError(
                f"sink directory {str(self.directory)!r}: epoch {epoch} staged files "
                f"{sorted(missing)} are missing from {str(attempt)!r}"
            )
        for name in present - keep:
            (attempt / name).unlink()
        fsync_dir(attempt)
        os.replace(attempt, self.path_of(epoch))
        fsync_dir(self.directory)
        return True

    def _write_atomic(self, name: str, write: Callable[[Path], object]) -> None:
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


def _remove_tree(path: Path) -> None:
    """Delete a staging file or directory if it exists."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
