"""The self-correcting sink's pure logic (SPEC §8): desired collection, correction, CAS loop.

No Spark and no database here: :mod:`wire.sinks.self_correcting_sink` binds this
logic to PostgreSQL and Delta tables (each a :class:`CasTable`); the unit tests bind
it to :class:`MemoryTable`.

Terms
    *Desired collection* — the flow's current result collection, one row per key
    (:class:`DesiredCollection`). An epoch's rows replace the earlier row of their
    key (a window's ``update`` replaces its ``final``); a row flagged in the
    retraction column deletes its key; with ``covers=(start, end)`` a row also
    retracts the earlier rows of the same remaining key whose ``[start, end)`` it
    covers (a session that absorbed other sessions).
    *Persisted collection* — what the target table holds now.
    *Frontier* — an int recorded in the table next to its rows: its *upper*. A
    writer whose epoch ``e`` is done has desired frontier ``e + 1``.
    *Batch description* ``(lower, upper)`` — minted once per epoch on the driver
    (:func:`mint`): ``lower`` is the table's upper as read, ``upper`` the writer's
    desired frontier. None when the table is already at or past it (another
    replica wrote that far): the writer writes nothing.
    *Correction* — desired − persisted over a set of keys (:func:`correction`):
    the keys to delete and the rows to insert; only differing keys appear.
    *Append* — :meth:`CasTable.commit`: the staged parts of a correction and the
    new upper in one atomic step that succeeds only if the table's upper still
    equals ``lower`` (compare-and-set).

*Partitions* (shards) — the keys are split by :func:`shard_of` into a fixed
number of partitions; each has its own desired collection
(:class:`ShardedDesiredStore`) and computes and stages its own *part* of a
correction (:func:`correct_part`), in the runtime one Spark task each.

The CAS loop (:meth:`SelfCorrectingWriter.write_parts`), once per epoch:

1. read the table's upper and whether it *drifted* (changed outside the
   protocol: the store's fingerprint of the table differs from the one recorded
   at the last append), with a token naming the state read;
2. compare every key (*full*) instead of the epoch's touched keys when: the table
   drifted, its upper is not the one this writer last appended or confirmed
   (another replica wrote, or this writer is new / restarted / was behind), a
   periodic check is due (``full_check_every``), or the sink is read-only;
3. mint the description ``(lower, upper)`` once (:func:`mint`; None: read-only,
   or behind);
4. every partition reads its persisted rows (touched keys, or all of its keys),
   computes desired − persisted, and stages its part for that description;
5. read-only: report the distance (keys differing); behind: write nothing; every
   part empty: nothing to write if the table is still as read (the writer
   confirms the upper it read);
6. commit the staged parts with the compare-and-set (:meth:`CasTable.commit`); on
   a conflict (the upper moved, or the table changed in any way since step 1)
   discard the parts, count the conflict and go back to 1 with a full check —
   never a blind append.

Invariant (tested with randomized interleavings of two writers): after a
successful append by a writer at epoch ``e``, the table equals that writer's
desired collection at ``e`` (absent concurrent edits outside the protocol, which
the next epoch's drift check finds).
"""

from __future__ import annotations

import json
import math
import os
import uuid
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from wire.errors import WireError

Key = tuple[Any, ...]
Row = dict[str, Any]

__all__ = [
    "BatchDescription",
    "CasTable",
    "Correction",
    "DesiredCollection",
    "DesiredStore",
    "EpochOutcome",
    "MemoryTable",
    "PartRequest",
    "PartResult",
    "SelfCorrectingWriter",
    "ShardedDesiredStore",
    "Snapshot",
    "correct_part",
    "correction",
    "mint",
    "norm",
    "shard_columns",
    "shard_of",
]


def norm(value: Any) -> Any:
    """A value in the form both sides of a comparison share (hashable).

    NaN equals NaN; Decimals that are whole compare equal to ints; lists / dicts
    become tuples. (Aware datetimes already compare and hash by instant.)
    """
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list | tuple):
        return tuple(norm(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, norm(v)) for k, v in value.items()))
    return value


def key_of(row: Mapping[str, Any], key: Sequence[str]) -> Key:
    """The normalized key tuple of ``row``."""
    return tuple(norm(row[k]) for k in key)


def _same(a: Mapping[str, Any], b: Mapping[str, Any], columns: Sequence[str]) -> bool:
    return all(norm(a.get(c)) == norm(b.get(c)) for c in columns)


# --- batch descriptions ----------------------------------------------------------------


@dataclass(frozen=True)
class BatchDescription:
    """Bounds ``[lower, upper)`` of one append; minted once per epoch (SPEC §8).

    ``lower`` is the table's recorded upper that the append expects; ``upper`` the
    frontier it records. ``lower < upper``.
    """

    lower: int
    upper: int

    def __post_init__(self) -> None:
        """Refuse an empty or backwards description."""
        if not self.lower < self.upper:
            raise ValueError(f"batch description needs lower < upper, got ({self.lower}, {self.upper})")


def mint(table_upper: int, desired_upper: int) -> BatchDescription | None:
    """The description to append up to ``desired_upper`` onto a table at ``table_upper``.

    None when ``desired_upper <= table_upper``: the table is already at or past the
    writer's frontier (another replica, or this writer before a replay, wrote it).
    """
    if desired_upper <= table_upper:
        return None
    return BatchDescription(table_upper, desired_upper)


# --- the desired collection ------------------------------------------------------------


class DesiredCollection:
    """The flow's current result collection: one row (dict) per key.

    Parameters
    ----------
    key:
        Key column names.
    retract_column:
        A boolean column: a row with True deletes its key (and is not kept).
    covers:
        ``(start, end)`` column names: a row also retracts the rows of the same key
        without ``start`` / ``end`` whose ``[start, end)`` lies inside its own (a
        merged session). Both columns must be in ``key`` or be ``start`` in ``key``.
    """

    def __init__(self, key: Sequence[str], *, retract_column: str | None = None,
                 covers: tuple[str, str] | None = None, schema: pa.Schema | None = None) -> None:
        self.key = tuple(key)
        self.retract_column = retract_column
        self.covers = covers
        self.schema = schema
        """Arrow schema of the rows (set by the first :meth:`apply`), without retraction column."""
        self.rows: dict[Key, Row] = {}
        self._groups: dict[Key, set[Key]] = {}

    def _group(self, row: Mapping[str, Any]) -> Key:
        assert self.covers is not None
        return tuple(norm(row[k]) for k in self.key if k not in self.covers)

    def _put(self, k: Key, row: Row) -> None:
        self.rows[k] = row
        if self.covers is not None:
            self._groups.setdefault(self._group(row), set()).add(k)

    def _drop(self, k: Key) -> None:
        row = self.rows.pop(k, None)
        if row is not None and self.covers is not None:
            members = self._groups.get(self._group(row))
            if members is not None:
                members.discard(k)

    def apply(self, table: pa.Table) -> set[Key]:
        """Fold one epoch's rows in (in row order); return the keys touched.

        Touched keys: every key replaced, added or retracted (the correction is
        computed over them).

        Raises
        ------
        WireError
            When a key or covers column is missing from the rows.
        """
        needed = [*self.key, *(self.covers or ())]
        missing = [c for c in needed if c not in table.column_names]
        if missing:
            raise WireError(
                f"self-correcting sink: column(s) {missing} not among the rows' {table.column_names}")
        data = table
        if self.retract_column is not None and self.retract_column in table.column_names:
            data = table.drop_columns([self.retract_column])
        if self.schema is None and table.num_rows:
            self.schema = data.schema
        flags = (table.column(self.retract_column).to_pylist()
                 if self.retract_column is not None and self.retract_column in table.column_names
                 else [False] * table.num_rows)
        touched: set[Key] = set()
        for row, retract in zip(data.to_pylist(), flags, strict=True):
            k = key_of(row, self.key)
            touched.add(k)
            if retract:
                self._drop(k)
                continue
            if self.covers is not None:
                start, end = self.covers
                lo, hi = row[start], row[end]
                for other in list(self._groups.get(self._group(row), ())):
                    old = self.rows[other]
                    if other != k and lo <= old[start] and old[end] <= hi:
                        self._drop(other)
                        touched.add(other)
            self._put(k, row)
        return touched

    def columns(self) -> list[str]:
        """The data columns (from the schema)."""
        return list(self.schema.names) if self.schema is not None else list(self.key)

    def to_arrow(self) -> pa.Table:
        """All rows as one Arrow table in :attr:`schema` (in no particular order)."""
        if self.schema is None:
            return pa.table({})
        return pa.Table.from_pylist(list(self.rows.values()), schema=self.schema)

    def load(self, table: pa.Table) -> None:
        """Replace the contents with ``table``'s rows (as written by :meth:`to_arrow`)."""
        self.rows.clear()
        self._groups.clear()
        if table.num_columns:
            self.schema = table.schema
        for row in table.to_pylist():
            self._put(key_of(row, self.key), row)


class DesiredStore:
    """The desired collection of every epoch, kept as Parquet files under ``directory``.

    ``desired-<epoch>.parquet`` holds the collection after ``epoch``; written
    atomically (rename) after the epoch's rows were folded in. To process epoch
    ``e`` the sink loads the newest file of an epoch ``< e`` (a replay of ``e`` after
    a crash finds the one before and recomputes ``e`` from the same rows). An
    epoch that changed nothing saves no file. Once ``e`` is saved only it and the
    newest file before it are kept. Cost: one Parquet write of the collection per
    epoch that changed it, and its disk size twice.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _epochs(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        out = []
        for p in self.directory.glob("desired-*.parquet"):
            stem = p.stem[len("desired-"):]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def newest_before(self, epoch: int) -> int | None:
        """The newest saved epoch ``< epoch``, or None."""
        older = [e for e in self._epochs() if e < epoch]
        return older[-1] if older else None

    def load_before(self, epoch: int) -> tuple[int, pa.Table] | None:
        """The newest saved ``(epoch', table)`` with ``epoch' < epoch``, or None."""
        e = self.newest_before(epoch)
        if e is None:
            return None
        return e, pq.read_table(self.directory / f"desired-{e}.parquet")

    def save(self, epoch: int, table: pa.Table) -> None:
        """Write the collection after ``epoch``; keep only it and the newest file before it.

        Epochs that changed nothing need no file: the newest one before them holds
        their collection.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"desired-{epoch}.parquet"
        tmp = final.with_suffix(".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        before = self.newest_before(epoch)
        for e in self._epochs():
            if before is not None and e < before:
                (self.directory / f"desired-{e}.parquet").unlink(missing_ok=True)


class ShardedDesiredStore:
    """The desired collection split into shards (:func:`shard_of`), one :class:`DesiredStore` each.

    Layout: ``<directory>/shards.json`` (``{"shards": n}``, fixed for the
    directory's life: set by the first run) and ``<directory>/shard-<i>/desired-<epoch>.parquet``.
    Each shard is loaded, folded and saved by its own task (an executor), so no
    process holds the whole collection. A directory written by an unsharded
    :class:`DesiredStore` (files directly under ``directory``) is read as the
    shards' starting point.
    """

    def __init__(self, directory: str | os.PathLike[str], shards: int) -> None:
        self.directory = Path(directory)
        self.shards = shards

    @classmethod
    def open(cls, directory: str | os.PathLike[str], shards: int) -> ShardedDesiredStore:
        """The store at ``directory``: its recorded number of shards, or ``shards`` for a new one."""
        path = Path(directory) / "shards.json"
        if path.is_file():
            return cls(directory, int(json.loads(path.read_text())["shards"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"shards": shards}))
        os.replace(tmp, path)
        return cls(directory, shards)

    def shard(self, n: int) -> DesiredStore:
        """Shard ``n``'s own store."""
        return DesiredStore(self.directory / f"shard-{n}")

    def load_before(self, n: int, epoch: int, columns: Sequence[str]) -> pa.Table | None:
        """Shard ``n``'s newest collection saved before ``epoch`` (rows sharded on ``columns``)."""
        got = self.shard(n).load_before(epoch)
        if got is not None:
            return got[1]
        legacy = DesiredStore(self.directory).load_before(epoch)
        if legacy is None:
            return None
        table = legacy[1]
        keep = [shard_of(r, columns, self.shards) == n for r in table.select(list(columns)).to_pylist()]
        return table.filter(pa.array(keep, pa.bool_())) if table.num_columns else table


# --- corrections -----------------------------------------------------------------------


@dataclass(frozen=True)
class Correction:
    """desired − persisted over some keys: delete every persisted row of ``deletes``, insert ``inserts``.

    ``differing`` counts the keys whose persisted rows differ from the desired row
    (missing, extra, altered or duplicated); ``keys`` the keys compared.
    """

    deletes: frozenset[Key]
    inserts: tuple[Row, ...]
    differing: frozenset[Key]
    keys: int

    @property
    def size(self) -> int:
        """Rows this correction writes: keys deleted plus rows inserted."""
        return len(self.deletes) + len(self.inserts)

    @property
    def empty(self) -> bool:
        """True when the persisted rows already equal the desired ones."""
        return not self.deletes and not self.inserts


def correction(desired: Mapping[Key, Row], persisted: Iterable[Row], key: Sequence[str],
               columns: Sequence[str], keys: Collection[Key] | None = None) -> Correction:
    """The correction that makes the persisted rows of ``keys`` equal the desired ones.

    ``keys`` None compares every key of ``desired`` and ``persisted`` (a full check);
    otherwise persisted rows of other keys are ignored. A key whose persisted rows
    are exactly one row equal (on ``columns``, :func:`norm`) to the desired row is
    left alone; otherwise its persisted rows are deleted (if any) and the desired
    row inserted (if any).
    """
    by_key: dict[Key, list[Row]] = {}
    for row in persisted:
        k = key_of(row, key)
        if keys is None or k in keys:
            by_key.setdefault(k, []).append(row)
    compare = set(desired) | set(by_key) if keys is None else set(keys)
    deletes: set[Key] = set()
    inserts: list[Row] = []
    differing: set[Key] = set()
    for k in compare:
        want = desired.get(k)
        have = by_key.get(k, [])
        if want is not None and len(have) == 1 and _same(have[0], want, columns):
            continue
        if want is None and not have:
            continue
        differing.add(k)
        if have:
            deletes.add(k)
        if want is not None:
            inserts.append(want)
    return Correction(frozenset(deletes), tuple(inserts), frozenset(differing), len(compare))


# --- the compare-and-set loop ------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """What :meth:`CasTable.read_meta` read: the table's upper, drift, and a token."""

    upper: int
    drifted: bool
    """The table changed outside the protocol since the last append recorded it."""
    token: Any = None
    """The table's state as read (a fingerprint, a Delta version): the parts' reads
    use it (:meth:`CasTable.read`) and :meth:`CasTable.commit` checks it, so that a
    change of any kind after this read fails the append."""


class CasTable(Protocol):
    """A target table with a recorded upper frontier (PostgreSQL, Delta, in memory).

    The append is two-phase, as SPEC §8's batch descriptions: the parts of one
    correction are staged (by the executors, each for its shard of the keys) under
    an *attempt* id for one :class:`BatchDescription`, then committed together by
    the driver with a compare-and-set, or discarded.
    """

    def read_meta(self) -> Snapshot:
        """The table's upper, drift, and the token of the state read."""
        ...

    def read(self, keys: Collection[Key] | None, token: Any) -> list[Row]:
        """The rows of ``keys`` (None: every row), as of ``token`` where the store can."""
        ...

    def stage(self, attempt: str, shard: int, desc: BatchDescription, corr: Correction) -> None:
        """Stage one shard's part of a correction for ``desc``, invisible to readers.

        Idempotent per ``(attempt, shard)``: a retried task replaces its part.
        """
        ...

    def commit(self, desc: BatchDescription, attempt: str, token: Any) -> bool:
        """Apply every part staged under ``attempt`` and record ``desc.upper``, atomically.

        Only if the upper is ``desc.lower`` and the table is still as ``token`` says.
        Returns False (and changes nothing in the table) otherwise. The parts are
        gone afterwards either way.
        """
        ...



Status = Literal["written", "unchanged", "behind", "read_only"]


@dataclass(frozen=True)
class EpochOutcome:
    """What one :meth:`SelfCorrectingWriter.write_parts` did.

    ``status``: ``"written"`` (appended a correction), ``"unchanged"`` (nothing
    differed), ``"behind"`` (the table is at or past this writer's frontier),
    ``"read_only"`` (computed, wrote nothing). ``corrections`` rows written (keys
    deleted + rows inserted); ``drift`` keys found differing that this epoch did not
    touch (hand edits, another writer's different contents); ``distance`` keys
    differing from the desired collection before this epoch's append; ``conflicts``
    failed compare-and-sets; ``full`` whether every key was compared; ``parts`` the
    shards that staged a part of the appended correction.
    """

    status: Status
    description: BatchDescription | None
    corrections: int
    drift: int
    distance: int
    conflicts: int
    full: bool
    table_upper: int
    parts: int = 0


# --- shards and parts ---------------------------------------------------------------------


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def _canon(value: Any) -> Any:
    """A key value in a form equal on both sides (Arrow rows, database rows), for hashing."""
    v = norm(value)
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            return ("t", (v - _EPOCH_UTC) // timedelta(microseconds=1))
        return ("n", v.isoformat())
    if isinstance(v, date):
        return ("d", v.toordinal())
    if isinstance(v, bool):
        return ("b", int(v))
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, str):
        return ("s", v)
    return ("r", repr(v))


def shard_columns(key: Sequence[str], covers: tuple[str, str] | None) -> tuple[str, ...]:
    """The key columns a row's shard is computed from: ``key`` without the ``covers`` columns.

    So a merged session and the sessions it covers share a shard.
    """
    return tuple(k for k in key if covers is None or k not in covers)


def shard_of(row: Mapping[str, Any], columns: Sequence[str], shards: int) -> int:
    """The shard (``0 .. shards - 1``) of ``row``: CRC-32 of its canonical shard-key values.

    Stable across processes and runs, and equal for a row read back from the table
    (aware timestamps hash by instant, whole Decimals as ints).
    """
    if shards == 1:
        return 0
    text = repr(tuple(_canon(row[c]) for c in columns)).encode()
    return zlib.crc32(text) % shards


@dataclass(frozen=True)
class PartRequest:
    """What the driver asks every shard for, once per attempt of an epoch's append.

    ``description`` None: compare only (read-only mode, or the table is ahead).
    ``full``: compare every key of the shard (desired ∪ persisted) rather than the
    keys the epoch touched. ``token``: the :attr:`Snapshot.token` the reads use.
    """

    attempt: str
    description: BatchDescription | None
    full: bool
    token: Any


@dataclass(frozen=True)
class PartResult:
    """What one shard found and staged: keys differing, of which drift, rows staged."""

    shard: int
    differing: int
    drift: int
    corrections: int


def correct_part(table: CasTable, desired: DesiredCollection, touched: Collection[Key],
                 req: PartRequest, *, shard: int = 0, shards: int = 1) -> PartResult:
    """One shard's part of an append: read, compute desired − persisted, stage it.

    ``desired`` holds the shard's rows only (the whole collection when ``shards``
    is 1) and ``touched`` the shard's touched keys. A full request reads every row
    of the table and keeps the shard's (:func:`shard_of`); otherwise it reads the
    touched keys. The part is staged only when ``req.description`` is set and it is
    not empty.
    """
    rows = table.read(None if req.full else touched, req.token)
    if req.full and shards > 1:
        cols = shard_columns(desired.key, desired.covers)
        rows = [r for r in rows if shard_of(r, cols, shards) == shard]
    corr = correction(desired.rows, rows, desired.key, desired.columns(), None if req.full else touched)
    drift = len(corr.differing - set(touched)) if req.full else 0
    if req.description is not None and not corr.empty:
        table.stage(req.attempt, shard, req.description, corr)
    return PartResult(shard, len(corr.differing), drift, corr.size)


# --- the compare-and-set loop ------------------------------------------------------------


@dataclass
class SelfCorrectingWriter:
    """The per-epoch CAS loop of one replica's sink (module docstring).

    ``full_check_every`` > 0 compares every key every that many epochs even without
    drift; ``max_conflicts`` bounds the retries of one epoch (then WireError).
    """

    key: tuple[str, ...]
    full_check_every: int = 0
    max_conflicts: int = 1000
    last_upper: int | None = None
    """The upper this writer last appended or confirmed; None: unknown (full check next)."""
    epochs: int = field(default=0)

    def write_parts(self, table: CasTable, parts: Callable[[PartRequest], list[PartResult]], upper: int,
                    *, read_only: bool = False) -> EpochOutcome:
        """Make ``table`` equal the desired collection (as of frontier ``upper``) for this epoch.

        ``parts(request)`` runs :func:`correct_part` for every shard (the runtime: one
        Spark task per shard; :meth:`write`: in this process) and returns their
        results. Per attempt: read the upper and drift, decide full or touched,
        mint the description, have the shards stage their parts, commit them with
        the compare-and-set; on a conflict discard the parts and retry in full.

        Raises
        ------
        WireError
            After ``max_conflicts`` failed compare-and-sets in one epoch.
        """
        self.epochs += 1
        periodic = self.full_check_every > 0 and self.epochs % self.full_check_every == 0
        full = read_only or periodic or self.last_upper is None
        conflicts = 0
        while True:
            snap = table.read_meta()
            if not full and (snap.drifted or snap.upper != self.last_upper):
                full = True
            desc = None if read_only else mint(snap.upper, upper)
            attempt = uuid.uuid4().hex
            results = parts(PartRequest(attempt, desc, full, snap.token))
            differing = sum(r.differing for r in results)
            drift = sum(r.drift for r in results)
            size = sum(r.corrections for r in results)
            if read_only:
                self.last_upper = None
                return EpochOutcome("read_only", None, 0, drift, differing, conflicts, full, snap.upper)
            if desc is None:
                self.last_upper = None
                return EpochOutcome("behind", None, 0, 0, differing, conflicts, full, snap.upper)
            if size == 0:
                now = table.read_meta()  # the parts read after ``snap``: still the same table?
                if now.upper == snap.upper and now.token == snap.token:
                    self.last_upper = snap.upper
                    return EpochOutcome("unchanged", desc, 0, drift, 0, conflicts, full, snap.upper)
            elif table.commit(desc, attempt, snap.token):  # a failed commit removes the parts itself
                self.last_upper = desc.upper
                staged = sum(1 for r in results if r.corrections)
                return EpochOutcome("written", desc, size, drift, differing, conflicts, full, desc.upper,
                                    staged)
            conflicts += 1
            if conflicts >= self.max_conflicts:
                raise WireError(f"self-correcting sink: {conflicts} compare-and-set conflicts in one epoch")
            full = True

    def write(self, table: CasTable, desired: DesiredCollection, touched: Collection[Key], upper: int,
              *, read_only: bool = False) -> EpochOutcome:
        """:meth:`write_parts` with one shard holding the whole collection, in this process."""
        return self.write_parts(table, lambda req: [correct_part(table, desired, touched, req)], upper,
                                read_only=read_only)


class MemoryTable:
    """An in-memory :class:`CasTable` (rows, upper, and a fingerprint for drift), for tests.

    :meth:`edit` changes rows outside the protocol (drift); :attr:`appends` counts
    successful appends.
    """

    def __init__(self, key: Sequence[str]) -> None:
        self.key = tuple(key)
        self.rows: list[Row] = []
        self.upper = 0
        self.recorded: tuple[Any, ...] = self._fingerprint()
        self.appends = 0
        self.staged: dict[str, dict[int, Correction]] = {}

    def _fingerprint(self) -> tuple[Any, ...]:
        return tuple(sorted(repr(sorted((c, norm(v)) for c, v in r.items())) for r in self.rows))

    def read_meta(self) -> Snapshot:
        """The upper, drift, and the fingerprint as token."""
        now = self._fingerprint()
        return Snapshot(self.upper, now != self.recorded, now)

    def read(self, keys: Collection[Key] | None, token: Any = None) -> list[Row]:
        """A copy of the rows of ``keys`` (None: all)."""
        return [dict(r) for r in self.rows if keys is None or key_of(r, self.key) in keys]

    def stage(self, attempt: str, shard: int, desc: BatchDescription, corr: Correction) -> None:
        """Keep ``corr`` as ``attempt``'s part ``shard``."""
        self.staged.setdefault(attempt, {})[shard] = corr

    def commit(self, desc: BatchDescription, attempt: str, token: Any) -> bool:
        """Apply ``attempt``'s parts and set the upper iff it is ``desc.lower`` and the rows are as read."""
        parts = self.staged.pop(attempt, {})
        if self.upper != desc.lower or self._fingerprint() != token:
            return False
        for corr in parts.values():
            self.rows = [r for r in self.rows if key_of(r, self.key) not in corr.deletes]
        for corr in parts.values():
            self.rows += [dict(r) for r in corr.inserts]
        self.upper = desc.upper
        self.recorded = self._fingerprint()
        self.appends += 1
        return True

    def edit(self, rows: list[Row]) -> None:
        """Replace the rows outside the protocol (a hand edit: the upper stays)."""
        self.rows = [dict(r) for r in rows]
