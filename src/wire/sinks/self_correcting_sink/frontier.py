"""The self-correcting sink's frontier: how much of the input a desired collection reflects (SPEC §8).

A replica's desired collection after an epoch is a function of the input it has
consumed (and, for results that wait for the watermark, of its watermark), not of
where its epochs cut that input. So the frontier recorded in the table next to its
rows is a point in *input* time, as Materialize's frontier is a time: per source,
its watermark and, per partition, the records consumed — never the epoch id. Two
replicas whose epochs cut the same input at different places reach the same
frontiers at their common points, with the same desired collections there.

A frontier is built from the end offsets an epoch recorded in Spark's offset log
(:func:`frontier_of_offsets`; the offsets are those of :mod:`wire.sources.base.offsets`).
Per partition the progress is, by the form of the connector's position:

* an int (Kafka offset, HTTP log sequence): ordered as ints;
* a Redis stream id ``"<ms>-<seq>"``: ordered as the pair;
* a file source position: the files read completely, and the open file with the
  number of its records read. A file read completely is past any part of it, so a
  replica that read ``b`` before ``a`` (``b`` arrived first) and one that read ``a``
  before ``b`` meet again once both have read both;
* anything else: equal or not comparable.

Order (a partial order): ``a <= b`` when, for every source, ``a``'s watermark is at
most ``b``'s and every partition of ``a`` is at most its progress in ``b`` (a
partition ``b`` has not read is at its start). Frontiers of different flows, or of
different sources, are not comparable.

The rule (:func:`decide`), for a writer with desired frontier ``d`` and a table at
frontier ``t``:

* ``t == d`` — **repair**: the table should hold exactly the writer's collection;
  any difference is drift and is corrected (a replay writes nothing: nothing differs);
* ``t < d`` — **advance**: the writer knows more input; it appends its correction
  and records ``d``;
* otherwise (``t`` ahead, or not comparable) — **behind**: writing would take back
  input the table already reflects; the writer writes nothing and waits until its
  frontier reaches the table's.

So the table's frontier only moves forward, every append leaves the table equal to
a collection at the frontier it records, and a replica that has consumed what the
table reflects repairs and takes over whatever its epochs.

Size: a file source's frontier names every file read (as its offsets do), and it
is recorded with every append (PostgreSQL: one text value; Delta: the commit info),
about the file's name plus a few bytes per file.

Pure Python, no Spark; :func:`epoch_offsets` reads one file of Spark's offset log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["Frontier", "decide", "epoch_offsets", "frontier_of_offsets", "last_committed_epoch"]

_REDIS_ID = re.compile(r"^(\d+)-(\d+)$")

Progress = tuple[Any, ...]
"""One partition's progress, normalized: ``("n", int)``, ``("id", (ms, seq))``,
``("files", (done names...), open name | None, records of the open file)`` or
``("opaque", json text)``."""


def _progress(position: Any) -> Progress:
    """A partition position (as a connector writes it in an offset) in its comparable form."""
    if isinstance(position, bool):
        return ("opaque", json.dumps(position))
    if isinstance(position, int):
        return ("n", position)
    if isinstance(position, str) and (m := _REDIS_ID.match(position)):
        return ("id", (int(m.group(1)), int(m.group(2))))
    if isinstance(position, Mapping) and isinstance(position.get("files"), Mapping):
        files = position["files"]
        opened = files.get("open")
        done = tuple(sorted(str(n) for n in files.get("read", {}) if n != opened))
        return ("files", done, opened, int(position.get("record", 0)) if opened is not None else 0)
    return ("opaque", json.dumps(position, sort_keys=True))


def _progress_leq(a: Progress, b: Progress | None) -> bool:
    """``a <= b`` for one partition; ``b`` None: the partition is at its start in the other frontier."""
    if b is None:
        return _at_start(a)
    if a[0] != b[0]:
        return _at_start(a)
    kind = a[0]
    if kind in ("n", "id"):
        return bool(a[1] <= b[1])
    if kind == "files":
        _, done_a, open_a, rec_a = a
        _, done_b, open_b, rec_b = b
        if not set(done_a) <= set(done_b):
            return False
        if open_a is None:
            return True
        return open_a in done_b or (open_a == open_b and rec_a <= rec_b)
    return bool(a == b)


def _at_start(p: Progress) -> bool:
    """True for a partition that consumed nothing (files: none begun)."""
    return p[0] == "files" and not p[1] and p[2] is None


@dataclass(frozen=True)
class Frontier:
    """How much input a desired collection reflects: per source, a watermark and per-partition progress.

    ``sources`` holds, per source in the query's order, ``(watermark ms or None,
    ((partition, progress), ...))`` with partitions sorted by name. Hashable and
    comparable with ``<=`` (a partial order, module docstring). The empty frontier
    (no source) is before every other: a table written by no writer, or by a Wire
    that recorded no frontier.
    """

    sources: tuple[tuple[int | None, tuple[tuple[str, Progress], ...]], ...] = ()

    @staticmethod
    def scalar(n: int) -> Frontier:
        """A frontier with one source and one counter ``n`` (totally ordered among themselves).

        The sink uses it when its checkpoint records no offsets for an epoch (driven
        without Spark): then ``n`` is the epoch id + 1, and replicas agree only when
        their epochs cut the input at the same places.
        """
        return Frontier(((None, (("epoch", ("n", int(n))),)),))

    def __le__(self, other: object) -> bool:
        """``self`` reflects no input that ``other`` does not (module docstring)."""
        if not isinstance(other, Frontier):
            return NotImplemented
        if not self.sources:
            return True
        if len(self.sources) != len(other.sources):
            return False
        for (wa, pa), (wb, pb) in zip(self.sources, other.sources, strict=True):
            if wa is not None and (wb is None or wa > wb):
                return False
            theirs = dict(pb)
            if not all(_progress_leq(p, theirs.get(name)) for name, p in pa):
                return False
        return True

    def __lt__(self, other: object) -> bool:
        """``self <= other`` and not equal."""
        if not isinstance(other, Frontier):
            return NotImplemented
        return self <= other and self != other

    def __eq__(self, other: object) -> bool:
        """Equal when each is ``<=`` the other (a partition at its start equals one not yet listed)."""
        if not isinstance(other, Frontier):
            return NotImplemented
        return (self.sources == other.sources) or (self <= other and other <= self)

    def __hash__(self) -> int:
        """Hash of the sources' watermarks (equal frontiers have equal watermarks)."""
        return hash(tuple(w for w, _ in self.sources))

    def to_json(self) -> str:
        """The compact JSON text recorded in the table (PostgreSQL column, Delta commit info)."""
        return json.dumps([[w, [[n, list(p)] for n, p in parts]] for w, parts in self.sources],
                          separators=(",", ":"))

    @staticmethod
    def from_json(text: str | None) -> Frontier:
        """Inverse of :meth:`to_json`; None or ``""`` (nothing recorded): the empty frontier.

        Raises
        ------
        ValueError
            When ``text`` is not a frontier's JSON.
        """
        if not text:
            return Frontier()
        try:
            doc = json.loads(text)
            sources = []
            for w, parts in doc:
                norm: list[tuple[str, Progress]] = []
                for name, p in parts:
                    kind = p[0]
                    if kind == "id":
                        norm.append((str(name), ("id", tuple(p[1]))))
                    elif kind == "files":
                        norm.append((str(name), ("files", tuple(p[1]), p[2], int(p[3]))))
                    else:
                        norm.append((str(name), (kind, p[1])))
                sources.append((None if w is None else int(w), tuple(norm)))
        except (ValueError, TypeError, IndexError) as e:
            raise ValueError(f"not a self-correcting frontier: {text[:200]!r} ({e})") from e
        return Frontier(tuple(sources))


def frontier_of_offsets(offsets: Sequence[Mapping[str, Any] | None]) -> Frontier:
    """The frontier after an epoch, from its end offsets (one per source, in the query's order).

    An offset of :mod:`wire.sources.base.offsets` gives its ``watermark`` and, per
    partition, its ``next`` position. A source with its own offsets (Nexmark's
    ``next``, ``TestStream``'s ``step``) counts as one partition ``"*"``. A source
    without an offset yet (None) has consumed nothing.
    """
    sources: list[tuple[int | None, tuple[tuple[str, Progress], ...]]] = []
    for off in offsets:
        if off is None:
            sources.append((None, ()))
            continue
        w = off.get("watermark")
        watermark = int(w) if isinstance(w, int) and not isinstance(w, bool) else None
        if isinstance(off.get("partitions"), Mapping):
            parts = tuple((str(name), _progress(p.get("next")))
                          for name, p in sorted(off["partitions"].items()))
        else:
            counter = next((off[k] for k in ("next", "step", "admitted") if k in off), None)
            parts = (("*", _progress(counter)),)
        sources.append((watermark, parts))
    return Frontier(tuple(sources))


Decision = Literal["advance", "repair", "behind"]


def decide(table: Frontier, desired: Frontier) -> Decision:
    """What a writer at ``desired`` does to a table at ``table`` (module docstring).

    ``"repair"`` when equal, ``"advance"`` when the table is before the writer,
    ``"behind"`` otherwise (the table ahead, or not comparable).
    """
    if table == desired:
        return "repair"
    if table <= desired:
        return "advance"
    return "behind"


def _spark_dir(checkpoint: str | Path) -> tuple[Path, int] | None:
    """Spark's checkpoint directory and the epoch base, from ``<checkpoint>/wire.json``."""
    root = Path(checkpoint)
    try:
        meta = json.loads((root / "wire.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    if not isinstance(meta, dict):
        meta = {}
    spark_dir = meta.get("spark_dir", "spark")
    base = meta.get("epoch_base", 0)
    if not isinstance(spark_dir, str) or not isinstance(base, int):
        return None
    return root / spark_dir, base


def last_committed_epoch(checkpoint: str | Path) -> int | None:
    """The newest epoch Spark's commit log of a Wire checkpoint holds (None: none)."""
    found = _spark_dir(checkpoint)
    if found is None or not (found[0] / "commits").is_dir():
        return None
    batches = [int(f.name) for f in (found[0] / "commits").iterdir() if f.name.isdigit()]
    return max(batches) + found[1] if batches else None


def epoch_offsets(checkpoint: str | Path, epoch: int) -> list[dict[str, Any] | None] | None:
    """The end offsets epoch ``epoch`` recorded in Spark's offset log of a Wire checkpoint.

    Reads ``<checkpoint>/wire.json`` for Spark's directory and the epoch base (a
    rescale renumbers Spark's batches), then ``<spark dir>/offsets/<epoch - base>``:
    a version line, a metadata line, one line per source (``-`` for none). None when
    the file does not exist (the sink driven without Spark) or cannot be read as that.
    """
    found = _spark_dir(checkpoint)
    if found is None:
        return None
    spark, base = found
    try:
        lines = (spark / "offsets" / str(epoch - base)).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) < 2 or not lines[0].startswith("v"):
        return None
    out: list[dict[str, Any] | None] = []
    for line in lines[2:]:
        if line.strip() == "-":
            out.append(None)
            continue
        try:
            value = json.loads(line)
        except ValueError:
            return None
        out.append(value if isinstance(value, dict) else None)
    return out
