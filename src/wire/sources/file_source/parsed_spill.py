"""Parse once: the planner hands its parse of a file to the executors of a local Spark.

The file planner parses every file it admits records from (it needs each record's event
time for the watermark and the record count for admission); an executor then parsed the
same file again to read its planned ranges (a split file once per executor worker). With a
``local`` master, the planner and the executors share one machine, so the planner writes
each file it parses to a *spill*: one Arrow IPC file holding the :class:`ParsedFile` (the
valid records' payload, record indexes and event times; the malformed records in the
schema's metadata). An executor memory-maps the spill instead of parsing (no copy: the
pages are the OS page cache's).

A spill is named by a digest of the file's stamp (path, size, mtime in ns) and the parse
spec, so it can only stand for the very parse the executor would do. Whatever fails (no
spill: a cluster's executors, a restarted planner, an evicted spill, a spill that does
not read) makes the executor parse the file itself, as it did before: a spill is a cache,
never a source of truth.

Lifetime: the planner deletes a partition's spills of files that were read to their end
in epochs already committed (:meth:`SpillDir.release`, called when it plans the next
epoch: Spark plans an epoch only after the last one committed), stops writing once its
spills hold :data:`MAX_SPILL_BYTES`, and removes its directory when the query stops and,
for a process that was killed, at the next planner's start (directories are named by the
planner's process id).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading

import numpy as np
import pyarrow as pa

from wire.sources.file_source.formats import Malformed, ParsedFile
from wire.sources.file_source.listing import FileStamp
from wire.sources.file_source.parse_spec import ParseSpec

__all__ = ["MAX_SPILL_BYTES", "SpillDir", "read_spill", "remove_orphans"]

MAX_SPILL_BYTES = 2 << 30
"""A planner writes no new spill while its spills hold this many bytes (2 GiB)."""

_PREFIX = "wire-parsed-"
_RECORD = "__wire_record"
_EVENT_TIME = "__wire_event_time"
_META = b"wire.parsed"


def spill_name(stamp: FileStamp, spec: ParseSpec) -> str:
    """The spill's file name: a digest of the file's stamp and the parse spec (stable across processes)."""
    h = hashlib.sha256()
    key = [os.path.abspath(stamp.path), stamp.size, stamp.mtime_ns, spec.format, spec.event_time,
           spec.delimiter, list(spec.null_values), spec.columns, spec.max_field_bytes]
    h.update(json.dumps(key).encode())
    h.update(spec.payload_schema.serialize().to_pybytes())
    return h.hexdigest()[:40] + ".arrow"


def _encode(parsed: ParsedFile) -> pa.Table:
    meta = {"path": os.path.abspath(parsed.path), "records": parsed.records,
            "malformed": [[m.record, m.location, m.reason, m.raw] for m in parsed.malformed]}
    table = parsed.table.append_column(_RECORD, pa.array(parsed.valid, pa.int64()))
    table = table.append_column(_EVENT_TIME, pa.array(parsed.event_times, pa.int64()))
    return table.replace_schema_metadata({_META: json.dumps(meta).encode()})


def read_spill(directory: str | None, stamp: FileStamp, spec: ParseSpec) -> ParsedFile | None:
    """The planner's parse of ``stamp`` under ``spec`` from ``directory``, memory-mapped (None: none).

    None when there is no directory or spill, or the spill does not read or is not this
    file's (then the caller parses the file).
    """
    if directory is None:
        return None
    try:  # the table's buffers keep the mapping alive; the planner may unlink the file meanwhile
        table = pa.ipc.open_file(pa.memory_map(os.path.join(directory, spill_name(stamp, spec)))).read_all()
        meta = json.loads((table.schema.metadata or {})[_META])
        if meta["path"] != os.path.abspath(stamp.path):
            return None
        valid = table.column(_RECORD).to_numpy()
        event_times = table.column(_EVENT_TIME).to_numpy()
        payload = table.drop_columns([_RECORD, _EVENT_TIME]).replace_schema_metadata(None)
        malformed = tuple(Malformed(int(r), str(loc), str(why), str(raw))
                          for r, loc, why, raw in meta["malformed"])
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowException):
        return None
    return ParsedFile(stamp.path, int(meta["records"]), payload, valid.astype(np.int64, copy=False),
                      event_times.astype(np.int64, copy=False), malformed)


class SpillDir:
    """The planner's spills: one directory of this process, its files per source partition.

    Thread-safe (the planner's read-ahead thread writes spills). A copy made by pickling
    holds no spills (the directory stays the planner's): an executor is told the directory
    by its task and reads spills with :func:`read_spill`, never writes or deletes them.
    """

    def __init__(self, max_bytes: int = MAX_SPILL_BYTES) -> None:
        self.max_bytes = max_bytes
        self.path: str | None = None
        self._lock = threading.Lock()
        self._files: dict[str, tuple[str, str, int]] = {}  # spill name -> (partition, relative file, bytes)
        self._bytes = 0

    def __reduce__(self) -> tuple[type[SpillDir], tuple[int]]:
        return SpillDir, (self.max_bytes,)

    def write(self, partition: str, rel: str, stamp: FileStamp, spec: ParseSpec, parsed: ParsedFile) -> None:
        """Write ``parsed`` as the spill of ``stamp`` (file ``rel`` of ``partition``); best effort.

        Nothing is written past :attr:`max_bytes`, or when the disk refuses (executors
        then parse the file).
        """
        name = spill_name(stamp, spec)
        with self._lock:
            if name in self._files or self._bytes >= self.max_bytes:
                return
            if self.path is None:
                remove_orphans()
                self.path = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
            path = os.path.join(self.path, name)
        tmp = f"{path}.{threading.get_ident()}.tmp"
        try:
            table = _encode(parsed)
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            os.replace(tmp, path)
            size = os.path.getsize(path)
        except (OSError, pa.ArrowException):
            with contextlib.suppress(OSError):
                os.remove(tmp)
            return
        with self._lock:
            self._files[name] = (partition, rel, size)
            self._bytes += size

    def release(self, partition: str, done: set[str]) -> None:
        """Delete ``partition``'s spills of the files ``done`` (read to their end, committed)."""
        with self._lock:
            gone = [n for n, (p, rel, _) in self._files.items() if p == partition and rel in done]
            for name in gone:
                self._bytes -= self._files.pop(name)[2]
                if self.path is not None:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(self.path, name))

    def close(self) -> None:
        """Delete every spill and the directory (the query stopped)."""
        with self._lock:
            if self.path is not None:
                shutil.rmtree(self.path, ignore_errors=True)
            self.path, self._files, self._bytes = None, {}, 0


def remove_orphans() -> None:
    """Remove the spill directories of planner processes that no longer run.

    Spark ends a query's planner process with a signal, which skips its clean-up: the
    runner calls this when a run ends, and a planner when it creates its directory.
    """
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            if not entry.name.startswith(_PREFIX):
                continue
            pid = entry.name[len(_PREFIX):].split("-", 1)[0]
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
