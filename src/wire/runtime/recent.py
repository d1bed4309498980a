"""Per-epoch series of a run, bounded: the newest :data:`RECENT_EPOCHS` values and a total.

A flow that runs for weeks makes millions of epochs; a run summary that kept one value per
epoch for all of them would grow without bound, and every dashboard poll that copies it
would take longer (the soak of issue 26 item 15). :class:`RecentEpochs` is a ``list`` (it
compares equal to one and slices like one) that keeps the newest values only, and counts
what it dropped and the sum of everything it was given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import SupportsIndex

RECENT_EPOCHS = 10_000
"""How many of the newest epochs' values a run summary keeps per series."""


class RecentEpochs(list[float]):
    """The newest ``keep`` values of a per-epoch series (a ``list`` of at most ``keep`` items).

    ``dropped`` is how many older values were let go, so the value of the run's epoch
    ``i`` (0-based, counted from the run's first epoch) is ``self[i - dropped]`` while it is
    kept (:meth:`since`); ``total`` is the sum of every value ever appended (an ``int`` for
    a series of ints: driver rows and bytes).
    """

    def __init__(self, values: Iterable[float] = (), *, keep: int = RECENT_EPOCHS) -> None:
        super().__init__()
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.keep = keep
        self.dropped = 0
        self.total: float = 0
        self.extend(values)

    def append(self, value: float) -> None:
        """Add the newest epoch's value; drop the oldest beyond ``keep``."""
        super().append(value)
        self.total += value
        if len(self) > self.keep:
            del self[0]
            self.dropped += 1

    def extend(self, values: Iterable[float]) -> None:
        """:meth:`append` each of ``values`` in order."""
        for v in list(values):
            self.append(v)

    def __iadd__(self, values: Iterable[float]) -> RecentEpochs:  # type: ignore[override,misc]
        self.extend(values)
        return self

    def since(self, first: int, end: int) -> list[float]:
        """The kept values of the run's epochs ``first`` to ``end - 1`` (older ones are gone)."""
        lo, hi = max(0, first - self.dropped), max(0, end - self.dropped)
        return list(self[lo:hi])

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (list(self), self.keep, self.dropped, self.total))

    def insert(self, index: SupportsIndex, value: float) -> None:  # noqa: D102
        raise TypeError("RecentEpochs only grows at its end (append)")


def _rebuild(values: list[float], keep: int, dropped: int, total: float) -> RecentEpochs:
    out: RecentEpochs = RecentEpochs(values, keep=keep)
    out.dropped, out.total = dropped, total
    return out
