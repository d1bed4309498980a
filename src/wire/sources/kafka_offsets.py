"""The Kafka source's offsets and admission plan: pure functions, no broker and no Spark.

An offset (Spark's offset log keeps one per epoch) is a JSON dict::

    {"admitted": 1200,            # records admitted so far, over all partitions
     "watermark": 1700000000000,  # the source watermark after the epoch (ms)
     "started": ..., "at": ...,   # wall-clock ms: source start, offset made (None at first)
     "turn": 7,                   # round-robin counter of the admission split
     "partitions": {"orders:0": {"from": 100, "next": 160, "taken": 60, "high": 400,
                                  ...PartitionState fields...}}}

Per partition (named ``"<topic>:<partition>"``), the epoch read the records with offsets in
``[from, next)`` — ``taken`` of them (fewer than ``next - from`` where a transaction
marker or an aborted record sits in between) — and ``high`` is the partition's end
offset seen when the epoch was planned (for the lag). The
:class:`~wire.core.watermarks.PartitionState` fields (``record`` = ``next``) hold the
partition's watermark inputs. So a replayed epoch reads exactly the same records and sees
the same watermarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from wire.core.time import NO_WATERMARK
from wire.core.watermarks import PartitionState

_STATE_FIELDS = {f.name for f in fields(PartitionState)}


def partition_name(topic: str, partition: int) -> str:
    """The name of a topic-partition in offsets and gauges.

    >>> partition_name("orders", 3)
    'orders:3'
    """
    return f"{topic}:{partition}"


def split_name(name: str) -> tuple[str, int]:
    """Inverse of :func:`partition_name` (a topic name never contains ``:``).

    >>> split_name("orders:3")
    ('orders', 3)
    """
    topic, _, part = name.rpartition(":")
    return topic, int(part)


@dataclass(frozen=True)
class PartitionOffset:
    """One topic-partition in an offset: the epoch's range and the watermark inputs."""

    first: int
    """The first offset the epoch could read (``from``)."""
    next: int
    """One past the last record the epoch admitted; where the next epoch starts."""
    taken: int
    """Records the epoch admitted from the partition."""
    high: int
    """The partition's end offset when the epoch was planned (-1: unknown)."""
    state: PartitionState

    def to_json(self) -> dict[str, Any]:
        """The offset form (JSON primitives)."""
        return {"from": self.first, "next": self.next, "taken": self.taken, "high": self.high,
                **self.state.to_json()}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PartitionOffset:
        """Inverse of :meth:`to_json`."""
        state = PartitionState.from_json({k: v for k, v in d.items() if k in _STATE_FIELDS})
        return PartitionOffset(int(d["from"]), int(d["next"]), int(d["taken"]), int(d["high"]), state)

    @staticmethod
    def start_at(position: int) -> PartitionOffset:
        """A partition before its first epoch, to be read from ``position``."""
        return PartitionOffset(position, position, 0, -1, PartitionState(record=position))

    @property
    def lag(self) -> int | None:
        """Records (offsets) behind the end seen at planning: ``high - next`` (None: unknown)."""
        return None if self.high < 0 else max(0, self.high - self.next)


def make_offset(
    parts: Mapping[str, PartitionOffset],
    *,
    admitted: int,
    watermark: int,
    started: int | None,
    at: int | None,
    turn: int,
) -> dict[str, Any]:
    """An offset dict (module docstring)."""
    return {
        "admitted": admitted,
        "watermark": watermark,
        "started": started,
        "at": at,
        "turn": turn,
        "partitions": {name: p.to_json() for name, p in sorted(parts.items())},
    }


def initial_offset(positions: Mapping[str, int]) -> dict[str, Any]:
    """The offset before the first epoch: each partition at its start position."""
    return make_offset(
        {n: PartitionOffset.start_at(p) for n, p in positions.items()},
        admitted=0, watermark=NO_WATERMARK, started=None, at=None, turn=0,
    )


def partitions_of(offset: Mapping[str, Any]) -> dict[str, PartitionOffset]:
    """The partitions of an offset dict."""
    return {n: PartitionOffset.from_json(d) for n, d in offset["partitions"].items()}


@dataclass(frozen=True)
class PlannedRead:
    """One Spark task of an epoch: the records of one partition with offsets in ``[first, next)``.

    ``taken`` records were admitted there; ``first_seq`` is the arrival sequence of the
    first (records are numbered over the source in partition-name order per epoch).
    """

    name: str
    first: int
    next: int
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


def committable(offset: Mapping[str, Any]) -> dict[str, int]:
    """Per partition, the consumer-group offset that acknowledges everything up to ``offset``."""
    return {name: p.next for name, p in partitions_of(offset).items()}
