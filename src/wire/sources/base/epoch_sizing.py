"""Epoch sizing from a target epoch duration (flow control, SPEC §5).

A source with ``target_epoch_duration`` set admits, per epoch, a number of events that
keeps an epoch of a backlog near that duration: fewer when epochs run long (latency),
more when they run short (throughput, the per-epoch fixed cost shared by more events),
never more than ``max_events_per_epoch`` and never fewer than :data:`MIN_EVENTS` (or
``max_events_per_epoch`` if that is smaller).

The measurement needs no clock inside Spark's epoch: Wire's queries trigger back to back
(``processingTime="0 seconds"`` or ``availableNow``), so when an epoch admitted all it
was allowed (more was waiting), Spark calls the source's ``latestOffset`` again as soon
as that epoch has committed. The time between the two calls is the epoch's duration,
planning and commit included. Only such *full* epochs adjust the size: an epoch that
took everything available says nothing about how many events fit in the target. The
first full epoch of a planner process is not measured either (it carries the run's
start-up: Python workers, the first state-store load).

The size changes by the factor ``target / duration``, bounded to
[:data:`MIN_FACTOR`, :data:`MAX_FACTOR`] per epoch so that one slow epoch (a garbage
collection, a busy machine) cannot collapse it.

Determinism: the admitted range of each epoch is recorded in its offset, so a replayed
epoch admits the same events whatever the sizing does now; but *which* events are in
which epoch of a run then depends on the machine's speed, and with it everything that
depends on the epoch split (the watermark's progress, hence which events are late).
That is why sizing is opt-in: without ``target_epoch_duration`` every epoch admits
``max_events_per_epoch`` and a run's epoch split depends only on its input.
"""

from __future__ import annotations

MIN_EVENTS = 1_000
"""The smallest adaptive epoch (events), unless ``max_events_per_epoch`` is smaller."""
MIN_FACTOR = 0.25
"""The most an epoch's size can shrink from one epoch to the next (x 0.25)."""
MAX_FACTOR = 2.0
"""The most an epoch's size can grow from one epoch to the next (x 2)."""


class EpochSizer:
    """How many events the next epoch of one source may admit (module docstring).

    Lives in the source's planner process, one per stream reader; not persisted (a
    restarted run starts again from ``max_events_per_epoch``).

    Parameters
    ----------
    max_events_per_epoch:
        The upper bound, and the first epoch's size (positive).
    target_epoch_ms:
        The target epoch duration in milliseconds; None: no sizing, every epoch may
        admit ``max_events_per_epoch``.
    """

    def __init__(self, max_events_per_epoch: int, target_epoch_ms: int | None) -> None:
        self.max_events = max_events_per_epoch
        self.target_ms = target_epoch_ms
        self.min_events = min(MIN_EVENTS, max_events_per_epoch)
        self.size = max_events_per_epoch
        self._full_since_ms: float | None = None
        self._measured_start_up = False

    def budget(self, now_ms: float) -> int:
        """The most events the epoch planned at ``now_ms`` (ms, any monotonic clock) may admit.

        Call once per ``latestOffset``, before admitting; then :meth:`admitted`.
        """
        if self.target_ms is None:
            return self.max_events
        if self._full_since_ms is not None:
            took = max(now_ms - self._full_since_ms, 1.0)
            if self._measured_start_up:
                factor = min(MAX_FACTOR, max(MIN_FACTOR, self.target_ms / took))
                self.size = min(self.max_events, max(self.min_events, round(self.size * factor)))
            self._measured_start_up = True
            self._full_since_ms = None
        return self.size

    def admitted(self, now_ms: float, count: int, budget: int) -> None:
        """Record what the epoch planned at ``now_ms`` admitted: ``count`` of ``budget`` events.

        ``count >= budget`` (a full epoch: more was waiting) makes the next
        :meth:`budget` call measure this epoch's duration.
        """
        self._full_since_ms = now_ms if count >= budget > 0 else None
