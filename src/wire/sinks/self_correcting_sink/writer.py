"""The self-correcting sink's pure logic (SPEC §8): desired collection, correction, CAS loop.

No Spark and no database here: :mod:`wire.sinks.self_correcting_sink.sink` binds this
logic to PostgreSQL and Delta tables (each a :class:`CasTable`); the unit tests bind
it to :class:`MemoryTable`.

This module holds the protocol (batch descriptions, the :class:`CasTable` interface,
the per-shard parts and the CAS loop). The values, keys, shards and corrections are
in :mod:`wire.sinks.self_correcting_sink.rows`, the desired collection and its stores
in :mod:`wire.sinks.self_correcting_sink.desired`; their public names are re-exported
here.

Terms
    *Desired collection* — the flow's current result collection, one row per key
    (:class:`DesiredCollection`). An epoch's rows replace the earlier row of their
    key (a window's ``update`` replaces its ``final``); a row flagged in the
    retraction column deletes its key; with ``covers=(start, end)`` a row also
    retracts the earlier rows of the same remaining key whose ``[start, end)`` it
    covers (a session that absorbed other sessions).
    *Persisted collection* — what the target table holds now.
    *Frontier* — how much input the table's rows reflect
    (:class:`~wire.sinks.self_correcting_sink.frontier.Frontier`): per source its
    watermark and per partition the records consumed, never the epoch id, so
    replicas whose epochs cut the input differently agree on it. Recorded in the
    table next to its rows, with the table's *upper*: a version (int) that every
    append increases by one.
    *Batch description* ``(lower, upper, frontier)`` — minted once per epoch on the
    driver (:func:`mint`): ``lower`` is the table's upper as read, ``upper =
    lower + 1``, ``frontier`` the writer's desired frontier. None when the table's
    frontier is ahead of the writer's or not comparable with it
    (:func:`~wire.sinks.self_correcting_sink.frontier.decide`): the writer writes
    nothing. At an equal frontier the writer repairs (writes only what differs).
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
3. mint the description ``(lower, upper, frontier)`` once (:func:`mint`; None:
   read-only, or behind);
4. every partition reads its persisted rows (touched keys, or all of its keys),
   computes desired − persisted, and stages its part for that description;
5. read-only: report the distance (keys differing); behind: write nothing (and
   compare only the touched keys: a replica catching up reads no more); every
   part empty: nothing to write if the table is still as read (the writer
   confirms the upper it read);
6. commit the staged parts with the compare-and-set (:meth:`CasTable.commit`); on
   a conflict (the upper moved, or the table changed in any way since step 1)
   discard the parts, count the conflict and go back to 1 with a full check —
   never a blind append.

Invariants (tested with randomized interleavings of two writers and with arbitrary
epoch splits of the same input): after a successful append by a writer at frontier
``f``, the table equals that writer's desired collection at ``f`` (absent concurrent
edits outside the protocol, which the next epoch's drift check finds); the table's
frontier never moves back; replicas at the same frontier hold the same desired
collection, whatever their epochs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from wire.errors import WireError
from wire.sinks.self_correcting_sink.desired import DesiredCollection, DesiredStore, ShardedDesiredStore
from wire.sinks.self_correcting_sink.frontier import Frontier, decide
from wire.sinks.self_correcting_sink.rows import (
    Correction,
    Key,
    Row,
    correction,
    key_of,
    norm,
    shard_columns,
    shard_of,
)

# The protocol's names, and those of .rows and .desired
# (re-exported: this module stays the one to import the self-correcting logic from).
__all__ = [
    "BatchDescription",
    "CasTable",
    "Correction",
    "DesiredCollection",
    "DesiredStore",
    "EpochOutcome",
    "Frontier",
    "MemoryTable",
    "PartRequest",
    "PartResult",
    "SelfCorrectingWriter",
    "ShardedDesiredStore",
    "Snapshot",
    "as_frontier",
    "correct_part",
    "correction",
    "mint",
    "norm",
    "shard_columns",
    "shard_of",
]


# --- batch descriptions ----------------------------------------------------------------


@dataclass(frozen=True)
class BatchDescription:
    """One append, minted once per epoch (SPEC §8): versions ``[lower, upper)`` and the frontier recorded.

    ``lower`` is the table's recorded upper (version) that the append expects;
    ``upper`` the version it records (``lower < upper``); ``frontier`` the input the
    appended collection reflects (the writer's desired frontier). The empty
    frontier when not given.
    """

    lower: int
    upper: int
    frontier: Frontier = field(default_factory=Frontier)

    def __post_init__(self) -> None:
        """Refuse an empty or backwards description."""
        if not self.lower < self.upper:
            raise ValueError(f"batch description needs lower < upper, got ({self.lower}, {self.upper})")


def as_frontier(frontier: Frontier | int) -> Frontier:
    """``frontier`` itself, or an int as :meth:`Frontier.scalar` (an epoch-id frontier)."""
    return frontier if isinstance(frontier, Frontier) else Frontier.scalar(frontier)


def mint(table_upper: int, table_frontier: Frontier, desired: Frontier) -> BatchDescription | None:
    """The append of a writer at ``desired`` onto a table at ``table_upper`` and ``table_frontier``.

    ``(table_upper, table_upper + 1, desired)`` when the table's frontier is before
    or equal to ``desired`` (advance, or repair at an equal frontier); None when it
    is ahead or not comparable: the table reflects input the writer has not consumed
    (:func:`~wire.sinks.self_correcting_sink.frontier.decide`).
    """
    if decide(table_frontier, desired) == "behind":
        return None
    return BatchDescription(table_upper, table_upper + 1, desired)



# --- the compare-and-set loop ------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """What :meth:`CasTable.read_meta` read: the table's upper, drift, a token, and its frontier."""

    upper: int
    drifted: bool
    """The table changed outside the protocol since the last append recorded it."""
    token: Any = None
    """The table's state as read (a fingerprint, a Delta version): the parts' reads
    use it (:meth:`CasTable.read`) and :meth:`CasTable.commit` checks it, so that a
    change of any kind after this read fails the append."""
    frontier: Frontier = field(default_factory=Frontier)
    """The input the table's rows reflect, as the last append recorded it (empty: none)."""


class CasTable(Protocol):
    """A target table with a recorded upper (version) and frontier (PostgreSQL, Delta, in memory).

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
        """Apply every part staged under ``attempt``, record ``desc.upper`` and ``desc.frontier``, atomically.

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
    differed), ``"behind"`` (the table's frontier is ahead of this writer's, or not
    comparable with it),
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



# --- parts ---------------------------------------------------------------------------------


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

    def write_parts(self, table: CasTable, parts: Callable[[PartRequest], list[PartResult]],
                    frontier: Frontier | int, *, read_only: bool = False, count: bool = True) -> EpochOutcome:
        """Make ``table`` equal the desired collection (as of ``frontier``) for this epoch.

        ``frontier``: the input the collection reflects (an int: an epoch-id frontier,
        :func:`as_frontier`). ``count`` False: a check between epochs (the quiet-input
        repair), which does not count towards ``full_check_every``.

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
        desired = as_frontier(frontier)
        self.epochs += int(count)
        periodic = count and self.full_check_every > 0 and self.epochs % self.full_check_every == 0
        full = read_only or periodic or self.last_upper is None
        conflicts = 0
        while True:
            snap = table.read_meta()
            if not full and (snap.drifted or snap.upper != self.last_upper):
                full = True
            desc = None if read_only else mint(snap.upper, snap.frontier, desired)
            if desc is None and not read_only:
                full = False  # behind: the parts fold the epoch's rows; comparing every key would be waste
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

    def write(self, table: CasTable, desired: DesiredCollection, touched: Collection[Key],
              frontier: Frontier | int, *, read_only: bool = False) -> EpochOutcome:
        """:meth:`write_parts` with one shard holding the whole collection, in this process."""
        return self.write_parts(table, lambda req: [correct_part(table, desired, touched, req)], frontier,
                                read_only=read_only)


class MemoryTable:
    """An in-memory :class:`CasTable` (rows, upper, frontier, and a fingerprint for drift), for tests.

    :meth:`edit` changes rows outside the protocol (drift); :attr:`appends` counts
    successful appends.
    """

    def __init__(self, key: Sequence[str]) -> None:
        self.key = tuple(key)
        self.rows: list[Row] = []
        self.upper = 0
        self.frontier = Frontier()
        self.recorded: tuple[Any, ...] = self._fingerprint()
        self.appends = 0
        self.staged: dict[str, dict[int, Correction]] = {}

    def _fingerprint(self) -> tuple[Any, ...]:
        return tuple(sorted(repr(sorted((c, norm(v)) for c, v in r.items())) for r in self.rows))

    def read_meta(self) -> Snapshot:
        """The upper, drift, and the fingerprint as token."""
        now = self._fingerprint()
        return Snapshot(self.upper, now != self.recorded, now, self.frontier)

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
        self.frontier = desc.frontier
        self.recorded = self._fingerprint()
        self.appends += 1
        return True

    def edit(self, rows: list[Row]) -> None:
        """Replace the rows outside the protocol (a hand edit: the upper stays)."""
        self.rows = [dict(r) for r in rows]
