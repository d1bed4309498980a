"""Parse once: the file planner hands its parse of a file to the executors of a local Spark.

The file planner parses every file it admits records from (it needs each record's event
time for the watermark and the record count for admission); an executor then parsed the
same file again to read its planned ranges (a split file once per executor worker). With a
``local`` master the planner writes each file it parses as a hand-over file
(:mod:`wire.sources.base.handoff`): one Arrow IPC file holding the :class:`ParsedFile` (the
valid records' payload, record indexes and event times; the malformed records in the
schema's metadata), which an executor memory-maps instead of parsing.

A spill is named by a digest of the file's stamp (path, size, mtime in ns) and the parse
spec, so it can only stand for the very parse the executor would do. The planner deletes a
partition's spills of files that were read to their end in epochs already committed
(:meth:`SpillDir.release`, called when it plans the next epoch: Spark plans an epoch only
after the last one committed).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time

import numpy as np
import pyarrow as pa

from wire.sources.base.handoff import HandoffDir, read_table
from wire.sources.file_source.formats import Malformed, ParsedFile
from wire.sources.file_source.listing import FileStamp
from wire.sources.file_source.parse_spec import ParseSpec

__all__ = ["SpillDir", "WarmUpLock", "await_warm_up", "read_spill", "spill_name"]

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
    table = read_table(directory, spill_name(stamp, spec))
    if table is None:
        return None
    try:
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


WARM_UP_LOCK = "warm-up.lock"
"""The lock file, in a spill directory, that the driver's warm-up holds while it parses."""


class WarmUpLock:
    """The driver's warm-up of a spill directory (``fcntl.flock``, exclusive): taken, then released.

    Taken on the driver's main thread before the query starts, released by the warm-up's
    thread when its parses are spilled, so that a planner started meanwhile waits for
    them (:func:`await_warm_up`) instead of parsing the same files at the same time. The
    operating system releases it if the driver dies. Best effort: a directory that cannot
    be made gives no lock.
    """

    def __init__(self, directory: str) -> None:
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            os.makedirs(directory, exist_ok=True)
            fd = os.open(os.path.join(directory, WARM_UP_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise
            self._fd = fd

    def release(self) -> None:
        """Let waiting planners go on (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def await_warm_up(directory: str | None, timeout_s: float = 60.0) -> bool:
    """Wait until no warm-up holds ``directory``'s lock (:class:`WarmUpLock`); True if one was found.

    False at once without a directory or lock file (no warm-up: the caller parses), or when
    ``timeout_s`` seconds pass first (the driver's runner joins a warm-up for 60 s).
    """
    if directory is None:
        return False
    try:
        fd = os.open(os.path.join(directory, WARM_UP_LOCK), os.O_RDONLY)
    except OSError:
        return False
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)
    except OSError:
        return False
    finally:
        os.close(fd)


class SpillDir(HandoffDir):
    """The file planner's spills (a :class:`HandoffDir`), owned by ``(partition, relative file)``."""

    def write_parse(
        self, partition: str, rel: str, stamp: FileStamp, spec: ParseSpec, parsed: ParsedFile
    ) -> None:
        """Write ``parsed`` as the spill of ``stamp`` (file ``rel`` of ``partition``); best effort."""
        self.write(spill_name(stamp, spec), (partition, rel), lambda: _encode(parsed))

    def read_parse(self, partition: str, rel: str, stamp: FileStamp, spec: ParseSpec) -> ParsedFile | None:
        """The spill of ``stamp`` another process wrote here (None: none), now ``(partition, rel)``'s."""
        parsed = read_spill(self.path, stamp, spec)
        if parsed is not None:
            self.adopt(spill_name(stamp, spec), (partition, rel))
        return parsed

    def release_files(self, partition: str, done: set[str]) -> None:
        """Delete ``partition``'s spills of the files ``done`` (read to their end, committed)."""
        self.release(lambda owner: owner[0] == partition and owner[1] in done)  # type: ignore[index]
