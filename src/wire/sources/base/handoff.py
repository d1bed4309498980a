"""Decode once on a local Spark: a planner hands what it already decoded to the executors.

A partitioned source's planner reads records to admit them (it needs their event times
for the watermark); an executor then read and decoded the same records again. With a
``local`` master (:attr:`~wire.sources.base.source.Binding.local`) the planner and the
executors share one machine, so the planner writes what it decoded to a directory of its
own (:class:`HandoffDir`), as Arrow IPC files, and names the directory in the epoch's
tasks (:attr:`~wire.sources.base.partitioned.PartitionTask.handoff`). An executor
memory-maps a file (:func:`read_table`: no copy, the pages are the OS page cache's)
instead of reading and decoding.

A hand-over file is a cache, never a source of truth: its name must stand for exactly
what the executor would read (the connector's choice: a file's stamp and parse spec, a
Kafka partition's offset range), and whatever fails (no directory: a cluster's executors,
a restarted planner; a file deleted, evicted, or that does not read) makes the executor
read and decode as it did before.

Where: :func:`handoff_root`, memory (``/dev/shm``) when it has room. On the disk-backed
``/tmp`` of the development machine one 85 MiB write in ten stalled for 0.2-1.1 s
(the kernel writing back dirty pages), on the planner's critical path; in ``/dev/shm`` none
took over 45 ms (``docs/architecture.md``).

Lifetime: the connector's planner releases files once the epochs that read them
committed (:meth:`HandoffDir.release`), stops writing once its files hold
:data:`MAX_HANDOFF_BYTES`, and deletes its directory when the query stops
(:meth:`HandoffDir.close`); the directory of a planner that was killed is removed at the
next planner's start and when a run ends (:func:`remove_orphans`: directories are named
by the planner's process id).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Hashable

import pyarrow as pa

__all__ = ["MAX_HANDOFF_BYTES", "PREFIX", "ROOT_ENV", "HandoffDir", "handoff_root", "read_table",
           "remove_orphans"]

MAX_HANDOFF_BYTES = 2 << 30
"""A planner writes no new hand-over file while its files hold this many bytes (2 GiB)."""

PREFIX = "wire-handoff-"
"""Hand-over directories are ``<handoff_root()>/wire-handoff-<planner pid>-*``."""

ROOT_ENV = "WIRE_HANDOFF_ROOT"
"""The environment variable naming the directory hand-over directories are made in."""

SHARED_MEMORY = "/dev/shm"
"""Linux's memory-backed file system, the default root when it has :data:`MIN_FREE_MEMORY_BYTES` free."""

MIN_FREE_MEMORY_BYTES = 2 * MAX_HANDOFF_BYTES
"""Free bytes :data:`SHARED_MEMORY` needs to be the root (a container's 64 MiB default does not)."""


def handoff_root() -> str:
    """The directory hand-over directories are made in.

    ``$WIRE_HANDOFF_ROOT`` when set; else :data:`SHARED_MEMORY` when it is a writable directory
    with at least :data:`MIN_FREE_MEMORY_BYTES` free (4 GiB): files there are memory, never
    written back to a disk; else the temporary directory (``$TMPDIR``, ``/tmp``). A
    directory's path travels with the epoch's tasks, so processes that chose differently
    (the free space changed) still read each other's files.
    """
    root = os.environ.get(ROOT_ENV)
    if root:
        return root
    with contextlib.suppress(OSError):
        st = os.statvfs(SHARED_MEMORY)
        if st.f_bavail * st.f_frsize >= MIN_FREE_MEMORY_BYTES and os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
            return SHARED_MEMORY
    return tempfile.gettempdir()


def read_table(directory: str | None, name: str) -> pa.Table | None:
    """The table of hand-over file ``name`` in ``directory``, memory-mapped (None: none, or unreadable).

    The table's buffers keep the mapping alive: the planner may delete the file meanwhile.
    """
    if directory is None:
        return None
    try:
        return pa.ipc.open_file(pa.memory_map(os.path.join(directory, name))).read_all()
    except (OSError, ValueError, pa.ArrowException):
        return None


class HandoffDir:
    """A planner's hand-over files: one directory of this process, each file with an owner.

    The owner is the connector's key for releasing (a partition and a file, a partition
    and an offset range). Thread-safe (a planner's read-ahead thread may write). A copy
    made by pickling holds no files (the directory stays the planner's): an executor is
    told the directory by its task and reads with :func:`read_table`, never writes or
    deletes.
    """

    def __init__(self, max_bytes: int = MAX_HANDOFF_BYTES, path: str | None = None) -> None:
        self.max_bytes = max_bytes
        self.path: str | None = path
        """The directory (None: made at the first write). A given path may be written before
        this object exists, by another process that knows it (the driver warming up the file
        planner's first parses, :meth:`WireFileStreamReader.warm_up`); it is made when missing."""
        self._lock = threading.Lock()
        self._files: dict[str, tuple[Hashable, int]] = {}  # file name -> (owner, bytes)
        self._bytes = 0

    def __reduce__(self) -> tuple[type[HandoffDir], tuple[int]]:
        return type(self), (self.max_bytes,)

    def write(self, name: str, owner: Hashable, table: Callable[[], pa.Table]) -> bool:
        """Write ``table()`` as hand-over file ``name`` of ``owner``; best effort.

        Returns whether the file is there. Nothing is written (False) past
        :attr:`max_bytes`, or when the disk refuses (executors then read themselves);
        a name already written is not written again (True).
        """
        with self._lock:
            if name in self._files:
                return True
            if self._bytes >= self.max_bytes:
                return False
            if self.path is None:
                remove_orphans()
                root = handoff_root()
                try:
                    os.makedirs(root, exist_ok=True)
                    self.path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
                except OSError:  # executors read themselves
                    return False
            path = os.path.join(self.path, name)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = table()
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
                writer.write_table(data)
            os.replace(tmp, path)
            size = os.path.getsize(path)
        except (OSError, pa.ArrowException):
            with contextlib.suppress(OSError):
                os.remove(tmp)
            return False
        with self._lock:
            self._files[name] = (owner, size)
            self._bytes += size
        return True

    def adopt(self, name: str, owner: Hashable) -> None:
        """Count hand-over file ``name``, written into this directory by another process, as ``owner``'s."""
        with self._lock:
            if name in self._files or self.path is None:
                return
            try:
                size = os.path.getsize(os.path.join(self.path, name))
            except OSError:
                return
            self._files[name] = (owner, size)
            self._bytes += size

    def release(self, done: Callable[[Hashable], bool]) -> None:
        """Delete the files whose owner is ``done`` (their epochs committed)."""
        with self._lock:
            gone = [n for n, (owner, _) in self._files.items() if done(owner)]
            for name in gone:
                self._bytes -= self._files.pop(name)[1]
                if self.path is not None:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(self.path, name))

    def close(self) -> None:
        """Delete every file and the directory (the query stopped)."""
        with self._lock:
            if self.path is not None:
                shutil.rmtree(self.path, ignore_errors=True)
            self.path, self._files, self._bytes = None, {}, 0


def remove_orphans() -> None:
    """Remove the hand-over directories of planner processes that no longer run.

    Spark ends a query's planner process with a signal, which skips its clean-up: the
    runner calls this when a run ends, and a planner when it creates its directory. Every
    root :func:`handoff_root` may have chosen is looked through.
    """
    for root in dict.fromkeys([handoff_root(), SHARED_MEMORY, tempfile.gettempdir()]):
        with contextlib.suppress(OSError):
            for entry in os.scandir(root):
                if not entry.name.startswith(PREFIX):
                    continue
                pid = entry.name[len(PREFIX):].split("-", 1)[0]
                if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
