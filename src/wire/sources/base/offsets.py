"""The offsets of the source base (:mod:`wire.sources.base.partitioned`): pure, no Spark, no I/O.

An offset (Spark's offset log keeps one per epoch) is a JSON dict::

    {"admitted": 1200,            # records admitted so far, over all partitions
     "watermark": 1700000000000,  # the source watermark after the epoch (ms)
     "max_event_time": ...,       # the newest event time admitted (ms; None: none yet)
     "ended": False,              # a bounded source's last offset: True
     "started": ..., "at": ...,   # wall-clock ms: source start, offset made (None at first)
     "turn": 7,                   # round-robin counter of the admission split
     "partitions": {"orders:0": {"from": 100, "next": 160, "taken": 60, "lag": 240,
                                  ...PartitionState fields...}}}

Per partition, the epoch read ``taken`` records from position ``from`` up to position
``next`` (where the next epoch starts); ``lag`` is the backlog left when the epoch was
planned (None: unknown); ``dead``, when present, the dead letters found while planning
(e.g. files that changed). The :class:`~wire.core.watermarks.PartitionState` fields hold
the partition's watermark inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeAlias

from wire.core.time import NO_WATERMARK
from wire.core.watermarks import PartitionState
from wire.sources.base.source import Offset

Position: TypeAlias = Any
"""Where a partition is read from: a JSON value (an int offset, a string id, an object) only its
connector interprets."""

DeadLetter: TypeAlias = tuple[str, str, str]
"""A dead letter: ``(location, reason, record text)``."""

_STATE_FIELDS = {f.name for f in fields(PartitionState)}

@dataclass(frozen=True)
class PartitionOffset:
    """One partition in an offset: the epoch's range and the watermark inputs."""

    first: Position
    """Where the epoch's read started (``from``)."""
    next: Position
    """Where the next epoch's read starts: after the last record the epoch admitted."""
    taken: int
    """Records the epoch admitted from the partition."""
    lag: int | None
    """Records still waiting when the epoch was planned (None: unknown)."""
    state: PartitionState
    dead: tuple[DeadLetter, ...] = ()
    """Dead letters found while planning the epoch (:meth:`PartitionedReader.refresh`)."""

    def to_json(self) -> dict[str, Any]:
        """The offset form (JSON primitives; ``dead`` only when there are some)."""
        d = {"from": self.first, "next": self.next, "taken": self.taken, "lag": self.lag,
             **self.state.to_json()}
        if self.dead:
            d["dead"] = [list(x) for x in self.dead]
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PartitionOffset:
        """Inverse of :meth:`to_json`; also reads the Kafka source's earlier form (``high``, not ``lag``)."""
        state = PartitionState.from_json({k: v for k, v in d.items() if k in _STATE_FIELDS})
        lag = d.get("lag")
        if "high" in d:  # written by the Kafka source before this base: the end offset seen
            high = int(d["high"])
            lag = None if high < 0 else max(0, high - int(d["next"]))
        dead = tuple((str(a), str(b), str(c)) for a, b, c in d.get("dead", ()))
        return PartitionOffset(d["from"], d["next"], int(d["taken"]), lag, state, dead)

    @staticmethod
    def start_at(position: Position) -> PartitionOffset:
        """A partition before its first epoch, to be read from ``position``."""
        return PartitionOffset(position, position, 0, None, PartitionState())


def make_offset(
    parts: Mapping[str, PartitionOffset], *, admitted: int, watermark: int, started: int | None,
    at: int | None, turn: int,
) -> Offset:
    """An offset dict (module docstring)."""
    max_ets = [p.state.max_event_time for p in parts.values() if p.state.max_event_time is not None]
    return {
        "admitted": admitted,
        "watermark": watermark,
        "max_event_time": max(max_ets, default=None),
        "ended": False,
        "started": started,
        "at": at,
        "turn": turn,
        "partitions": {name: p.to_json() for name, p in sorted(parts.items())},
    }


def initial_offset(positions: Mapping[str, Position]) -> Offset:
    """The offset before the first epoch: each partition at its start position."""
    return make_offset({n: PartitionOffset.start_at(p) for n, p in positions.items()},
                       admitted=0, watermark=NO_WATERMARK, started=None, at=None, turn=0)


def partitions_of(offset: Mapping[str, Any]) -> dict[str, PartitionOffset]:
    """The partitions of an offset dict."""
    return {n: PartitionOffset.from_json(d) for n, d in offset["partitions"].items()}


def positions_of(offset: Mapping[str, Any]) -> dict[str, Position]:
    """Per partition, the position that acknowledges everything up to ``offset``."""
    return {name: p.next for name, p in partitions_of(offset).items()}


@dataclass(frozen=True)
class PlannedRead:
    """One partition's records of an epoch: ``taken`` from ``first`` up to ``next``.

    ``first_seq`` is the arrival sequence (``__seq``) of the first: records are numbered
    over the source, partitions in name order per epoch.
    """

    name: str
    first: Position
    next: Position
    taken: int
    first_seq: int


def plan_reads(start: Mapping[str, Any], end: Mapping[str, Any]) -> list[PlannedRead]:
    """The reads of the epoch ``(start, end]``: one per partition that admitted records.

    Raises
    ------
    ValueError
        When the partitions' ``taken`` do not add up to the records the epoch admitted.
    """
    seq = int(start["admitted"])
    reads = []
    for name, p in sorted(partitions_of(end).items()):
        if p.taken:
            reads.append(PlannedRead(name, p.first, p.next, p.taken, seq))
            seq += p.taken
    if seq != int(end["admitted"]):
        raise ValueError(f"the partitions of offset {dict(end)} admitted {seq - int(start['admitted'])} "
                         f"records, the offset says {int(end['admitted']) - int(start['admitted'])}")
    return reads


def upgrade_single(
    offset: Offset, before: Offset | None, name: str, position: Callable[[Offset], Position],
    state: Callable[[Offset], PartitionState],
) -> Offset:
    """An offset a one-partition connector wrote before this base, in this base's form.

    Such an offset holds ``admitted``, ``watermark``, ``started`` and ``at`` as this form
    does; ``position(offset)`` and ``state(offset)`` read its position and its watermark
    inputs. It did not record where its epoch began: that is ``before``'s position (None:
    unknown, the offset is then an epoch's start). An offset already in this form is
    returned as it is.
    """
    if "partitions" in offset:
        return offset
    first = position(offset)
    if before is not None:
        first = positions_of(before)[name] if "partitions" in before else position(before)
    taken = 0 if before is None else offset["admitted"] - before["admitted"]
    part = PartitionOffset(first, position(offset), taken, None, state(offset))
    return make_offset({name: part}, admitted=offset["admitted"], watermark=offset["watermark"],
                       started=offset["started"], at=offset["at"], turn=0)
