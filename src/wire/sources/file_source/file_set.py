"""Which files a file source has read: new files are read whatever their name, changed ones reported.

Pure functions on names and stamps, no parsing and no Spark. Every offset of the file
source holds, per partition, a :class:`FileSet`: each file whose reading began, named
relative to the source's base directory, with its *stamp* (size in bytes, mtime in ns)
when its first record was admitted, and the file still being read (``open``). The
offset is the only state, so a replay and a restart see the same set. The rules, per
partition:

* **Reading order** (the arrival order): the open file continues first; then the
  listed files not in the set, in name order. A new file is read whatever its name,
  also one that sorts before files already read. A file with no record yet (e.g.
  empty) does not enter the set until it has one.
* **Changed file.** A file of the set whose stamp now differs from the recorded one
  changed after its reading began (rewritten, truncated, appended to, touched). It
  is reported once as a :class:`Change` (one dead letter naming the file, the size and
  mtime before and after, and for the open file how many records had been read); the
  set then records the new stamp (a further change is reported again). Its new
  content is never read, and an open file's remaining records are not read either:
  records cannot be matched between two versions of a file, so reading on could
  repeat or skip events. Files must therefore be complete when they become visible
  (write under a name starting with ``.`` or ``_``, or elsewhere, then rename), as
  for Spark's own file source; a file still being written is reported as changed.
* **Vanished file.** A fully read file that is no longer listed (moved away,
  deleted) is fine and stays in the set, so that a file reappearing under its name is
  not read twice. The open file vanishing is a change: its remaining records are lost.

**Size of the offsets.** Spark writes every epoch's offset to its offset log, so each
file read costs its relative name plus about 30 bytes in every offset (10,000 files:
about 0.5 MB per epoch). Keep a source below about 100,000 files; beyond that, start
a new source directory with a new checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Stamp = tuple[int, int]
"""A file's identity as recorded in offsets: (size in bytes, mtime in ns)."""


@dataclass(frozen=True)
class FileSet:
    """The files of one partition whose reading began (see the module rules).

    ``read`` maps each such file (relative name) to its recorded stamp; ``open`` is
    the file with records left to admit (None: no file is part-read).
    """

    read: Mapping[str, Stamp] = field(default_factory=dict)
    open: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the offset form (JSON primitives, names sorted)."""
        return {"read": {n: list(self.read[n]) for n in sorted(self.read)}, "open": self.open}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> FileSet:
        """Inverse of :meth:`to_json`."""
        return FileSet({n: (int(s[0]), int(s[1])) for n, s in d["read"].items()}, d["open"])


def _mtime(ns: int) -> str:
    seconds, frac = divmod(ns, 1_000_000_000)
    try:
        text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns"
    return f"{text}.{frac:09d}Z"


@dataclass(frozen=True)
class Change:
    """A file of the set whose stamp changed: its partition, name, stamps, records read.

    ``after`` is None when the file vanished; ``records_read`` is the number of its
    records admitted before the change when it was the open file, else None (it had
    been read completely).
    """

    partition: str
    file: str
    before: Stamp
    after: Stamp | None
    records_read: int | None

    def reason(self) -> str:
        r"""The dead-letter reason: what changed, before and after, and what is not read.

        >>> reason = Change("all", "a.csv", (120, 0), (48, 10**9), None).reason()
        >>> print(reason.replace(", ", ",\n").replace("; ", ";\n"))
        file changed after it was read: size 120 -> 48 bytes,
        mtime 1970-01-01T00:00:00.000000000Z -> 1970-01-01T00:00:01.000000000Z;
        its new content is not read
        """
        if self.records_read is None:
            what = "file changed after it was read"
            rest = "its new content is not read"
        else:
            what = f"file changed while being read ({self.records_read} records read)"
            rest = "its remaining records and new content are not read"
        if self.after is None:
            return f"{what.replace('changed', 'vanished')}: size was {self.before[0]} bytes; {rest}"
        (s0, m0), (s1, m1) = self.before, self.after
        return f"{what}: size {s0} -> {s1} bytes, mtime {_mtime(m0)} -> {_mtime(m1)}; {rest}"

    def record(self) -> str:
        """The dead letter's record: the stamps as a JSON object."""
        after = None if self.after is None else {"size": self.after[0], "mtime_ns": self.after[1]}
        return json.dumps(
            {
                "file": self.file,
                "before": {"size": self.before[0], "mtime_ns": self.before[1]},
                "after": after,
                "records_read": self.records_read,
            }
        )

    def to_json(self) -> list[Any]:
        """Return the offset form (a JSON list)."""
        after = None if self.after is None else list(self.after)
        return [self.partition, self.file, list(self.before), after, self.records_read]

    @staticmethod
    def from_json(d: Sequence[Any]) -> Change:
        """Inverse of :meth:`to_json`."""
        partition, name, before, after, records_read = d
        after_stamp = None if after is None else (after[0], after[1])
        return Change(partition, name, (before[0], before[1]), after_stamp, records_read)


def detect_changes(
    partition: str, files: FileSet, listed: Mapping[str, Stamp], position: int
) -> tuple[FileSet, list[Change]]:
    """Compare the set's stamps with the files listed now; return the updated set and the changes.

    ``listed`` maps the partition's files now (relative names) to their stamps;
    ``position`` is the number of records of the open file admitted so far. A changed
    file's new stamp replaces the old one; the open file, if changed or vanished, is
    no longer open.

    >>> fs = FileSet({"a": (10, 1), "b": (5, 1)}, open="b")
    >>> fs2, changes = detect_changes("all", fs, {"a": (10, 1), "b": (9, 2)}, 3)
    >>> fs2, [(c.file, c.after, c.records_read) for c in changes]
    (FileSet(read={'a': (10, 1), 'b': (9, 2)}, open=None), [('b', (9, 2), 3)])
    """
    read, open_, changes = dict(files.read), files.open, []
    for name in sorted(files.read):
        before, after = files.read[name], listed.get(name)
        was_open = name == files.open
        if after == before or (after is None and not was_open):
            continue
        changes.append(Change(partition, name, before, after, position if was_open else None))
        if after is not None:
            read[name] = after
        if was_open:
            open_ = None
    return FileSet(read, open_), changes


def reading_order(files: FileSet, listed: Collection[str]) -> list[str]:
    """The partition's files to read, in arrival order: the open file, then new files by name.

    ``listed`` holds the partition's files now (relative names); files of the set
    other than the open one are left out.

    >>> reading_order(FileSet({"b": (1, 1), "c": (1, 1)}, open="c"), ["a", "b", "c", "d"])
    ['c', 'a', 'd']
    """
    new = sorted(n for n in listed if n not in files.read)
    return ([files.open] if files.open is not None and files.open in listed else []) + new
