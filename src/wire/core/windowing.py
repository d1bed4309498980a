"""Window kinds and watermark policies, as immutable plan values.

Durations are converted to int milliseconds here, once (STYLE §4). Each window kind
(:class:`Tumbling`, :class:`Sliding`, :class:`Session`) owns how events are assigned to
its windows (:meth:`Window.assign`, vectorized, int64 ms) and says whether its windows
merge (:attr:`Window.merges`); the kernels (:mod:`wire.state.windows`) ask the kind and
never test which kind it is.

Windows are aligned to the Unix epoch and half-open ``[start, end)``; negative times
use floor division (``-1`` falls in ``[-size, 0)``). An event of a sliding window is
replicated once per window containing it, with ``numpy.repeat``; never a Python loop
per event. Sessions: an event at ``t`` opens ``[t, t + gap)``, and sessions of a key
that *overlap* (``a.start < b.end and b.start < a.end``) merge into ``[min start, max
end)`` (:mod:`wire.state.sessions`); events exactly ``gap`` apart stay in separate
sessions (Beam's rule; Flink also merges windows that merely touch).

Extremes: a window end past the int64 range saturates at int64 max; windows that
would start below int64 min are not representable (event times within ``size`` of
``-2**63`` are not supported).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from wire.core.time import INT64_MAX, INT64_MIN, Duration, to_millis
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError

Assigned = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(rows, start, end)`` of :meth:`Window.assign`: one int64 entry per (event, window)."""


def add_saturating(values: np.ndarray, delta: int) -> np.ndarray:
    """``values + delta`` (``delta >= 0``) clamped to int64 max instead of wrapping."""
    if delta >= INT64_MAX:
        return np.full(len(values), INT64_MAX, dtype=np.int64)
    d = np.int64(delta)
    over = values > np.int64(INT64_MAX) - d
    return np.where(over, np.int64(INT64_MAX), values + np.where(over, 0, d))


class Window(ABC):
    """A window kind: :class:`Tumbling`, :class:`Sliding` or :class:`Session`."""

    merges: ClassVar[bool] = False
    """True when windows of one key that overlap merge into one (sessions)."""

    @abstractmethod
    def assign(self, event_time: np.ndarray) -> Assigned:
        """Assign events to their windows.

        Parameters
        ----------
        event_time : numpy.ndarray
            int64 event times (ms).

        Returns
        -------
        rows, start, end : numpy.ndarray
            One entry per (event, window): the event's row index (non-decreasing: an
            event's windows are adjacent, by ascending start), the window start and end
            (int64; an end past the int64 range saturates at int64 max). A merging kind
            gives each event its own window (``rows`` is ``0 .. n - 1``), which the
            kernels then merge.
        """

    def start_of(self, end: int) -> int:
        """The start (ms) of the window of this kind that ends at ``end`` (ms).

        ``end - size`` for tumbling and sliding windows.

        Raises
        ------
        ValueError
            For merging windows: a session's start is not set by its end.
        """
        raise ValueError(f"{self.describe()}: a merged window's start is not set by its end")

    @abstractmethod
    def describe(self) -> str:
        """The kind and its durations in ms, stable across runs, e.g. ``"Tumbling(size=10000 ms)"``.

        A checkpoint's plan fingerprint records it (:mod:`wire.plan.fingerprint`).
        """


@dataclass(frozen=True)
class Tumbling(Window):
    """Tumbling (fixed, non-overlapping) event-time windows of ``size``.

    Windows are aligned to the Unix epoch (1970-01-01T00:00Z) and half-open:
    an event with event time ``t`` (ms) belongs to ``[t - t mod size, t - t mod size + size)``
    (SPEC §4).

    Parameters
    ----------
    size:
        Window length: int milliseconds, ``timedelta`` or a string like ``"1h"``.

    Raises
    ------
    ConfigError
        If ``size`` is not a positive duration.

    Example
    -------
    >>> Tumbling("1h").size_ms
    3600000
    """

    size_ms: int

    def __init__(self, size: Duration) -> None:
        object.__setattr__(self, "size_ms", to_millis(size, parameter="size", allow_zero=False))

    def assign(self, event_time: np.ndarray) -> Assigned:
        """One window per event: ``[t - t mod size, t - t mod size + size)``."""
        t = np.asarray(event_time, dtype=np.int64)
        start = t - np.mod(t, np.int64(self.size_ms))
        return np.arange(len(t), dtype=np.int64), start, add_saturating(start, self.size_ms)

    def start_of(self, end: int) -> int:
        """``end - size``."""
        return end - self.size_ms

    def describe(self) -> str:
        """``"Tumbling(size=<size> ms)"``."""
        return f"Tumbling(size={self.size_ms} ms)"


@dataclass(frozen=True)
class BoundedOutOfOrderness(WatermarkPolicy):
    """A source's watermark policy: ``W = max event time seen - max_delay`` (SPEC §2).

    The one value that says how a source's watermark moves, given once at
    ``flow.source(..., watermark=...)`` and used by every connector; durations are
    converted to ms here, once (a :class:`~wire.core.watermarks.WatermarkPolicy`). The
    source computes the watermark from the event times it has admitted, keeps it
    monotonically non-decreasing, and records it with each epoch's offsets.

    With ``max_future`` set, an event whose event time is more than ``max_future``
    ahead of processing time is a malformed record (SPEC §3): it goes to the flow's
    dead-letter output with the reason (e.g. ``"event time 2100-01-01T00:00:00Z is
    74y ahead of processing time 2026-01-01T00:00:00Z, beyond max_future=1h"``) and
    does not move the watermark, so one event from a wrong clock cannot make every
    following event late. Processing time is the one recorded in the epoch's offsets
    when the source admitted the event (the planner's clock on the driver host), so a
    replayed epoch rejects exactly the same events. Sources that admit external event
    times apply it: files, Kafka, HTTP ingest, Redis streams; sources whose event times
    Wire generates or scripts (Nexmark, ``TestStream``) ignore it.

    ``max_future`` is off by default because it trusts the clock of the host running
    Wire: with that clock wrong (e.g. set years back), every event would look
    future-dated and go to the dead-letter output. Set it where the host's clock is
    kept (NTP) and producers' clocks are not trusted.

    Parameters
    ----------
    max_delay:
        How far behind the newest event an event may arrive and still be on time:
        int milliseconds, ``timedelta`` or a string like ``"30m"``; 0 is allowed.
    max_future:
        How far ahead of processing time an event time may be: a duration like
        ``max_delay`` (0 allowed: no event from the future), or None (the default):
        no check.
    idle_timeout:
        Processing time after which a partition without new records stops holding the
        watermark back (it is active again when records arrive); when every partition
        is idle the watermark advances with processing time (the rules are in
        :mod:`wire.core.watermarks`). A positive duration, or None (the default): a
        partition is never idle.
    interval:
        Least processing time between two epochs that only advance the watermark (no
        new records); default ``"200ms"``.

    Raises
    ------
    ConfigError
        If ``max_delay``, ``max_future`` or ``interval`` is negative or not a duration, or
        ``idle_timeout`` is not a positive duration.

    Example
    -------
    >>> BoundedOutOfOrderness("30m").max_delay_ms
    1800000
    >>> BoundedOutOfOrderness("5s", max_future="1h").max_future_ms
    3600000
    >>> p = BoundedOutOfOrderness("5s", idle_timeout="30s", interval="1s")
    >>> p.idle_timeout_ms, p.interval_ms
    (30000, 1000)
    """

    def __init__(
        self, max_delay: Duration, *, max_future: Duration | None = None,
        idle_timeout: Duration | None = None, interval: Duration = 200,
    ) -> None:
        object.__setattr__(self, "max_delay_ms", to_millis(max_delay, parameter="max_delay"))
        future = None if max_future is None else to_millis(max_future, parameter="max_future")
        object.__setattr__(self, "max_future_ms", future)
        idle = None if idle_timeout is None else to_millis(idle_timeout, parameter="idle_timeout",
                                                           allow_zero=False)
        object.__setattr__(self, "idle_timeout_ms", idle)
        object.__setattr__(self, "interval_ms", to_millis(interval, parameter="interval"))


@dataclass(frozen=True)
class Sliding(Window):
    """Sliding (hopping) event-time windows of ``size`` every ``slide``.

    Windows start at multiples of ``slide`` (aligned to the Unix epoch) and are
    half-open ``[start, start + size)``; an event belongs to every window that
    contains it, ``ceil(size / slide)`` windows when ``slide`` divides ``size``
    (SPEC §4).

    Parameters
    ----------
    size, slide:
        Durations (int ms, ``timedelta`` or strings like ``"10s"``); ``0 < slide <= size``.

    Raises
    ------
    ConfigError
        If a duration is invalid or ``slide > size``.

    Example
    -------
    >>> Sliding("10s", "2s").slide_ms
    2000
    """

    size_ms: int
    slide_ms: int

    def __init__(self, size: Duration, slide: Duration) -> None:
        size_ms = to_millis(size, parameter="size", allow_zero=False)
        slide_ms = to_millis(slide, parameter="slide", allow_zero=False)
        if slide_ms > size_ms:
            raise ConfigError("slide", slide, f"a duration <= size ({size_ms} ms)")
        object.__setattr__(self, "size_ms", size_ms)
        object.__setattr__(self, "slide_ms", slide_ms)

    def assign(self, event_time: np.ndarray) -> Assigned:
        """Every window ``[k * slide, k * slide + size)`` that contains the event, by ascending start."""
        t = np.asarray(event_time, dtype=np.int64)
        rows = np.arange(len(t), dtype=np.int64)
        size, slide = self.size_ms, self.slide_ms
        n_max = -(-size // slide)
        last = t - np.mod(t, np.int64(slide))  # the latest window containing t starts here
        rows = np.repeat(rows, n_max)
        j = np.tile(np.arange(n_max - 1, -1, -1, dtype=np.int64), len(t))  # ascending starts
        last = np.repeat(last, n_max)
        # start = last - j * slide must stay in int64 and contain t: t - start < size
        representable = last >= np.int64(INT64_MIN) + j * np.int64(slide)
        start = np.where(representable, last - np.where(representable, j, 0) * np.int64(slide), 0)
        keep = representable & (np.repeat(t, n_max) - start < np.int64(size))
        rows, start = rows[keep], start[keep]
        return rows, start, add_saturating(start, size)

    def start_of(self, end: int) -> int:
        """``end - size``."""
        return end - self.size_ms

    def describe(self) -> str:
        """``"Sliding(size=<size> ms, slide=<slide> ms)"``."""
        return f"Sliding(size={self.size_ms} ms, slide={self.slide_ms} ms)"


@dataclass(frozen=True)
class Session(Window):
    """Session windows per key: activity separated by gaps of at least ``gap``.

    An event at ``t`` opens ``[t, t + gap)``; windows of the same key that overlap
    merge into ``[min start, max end)``, also when a late event (within allowed
    lateness) bridges two sessions (SPEC §4).

    Parameters
    ----------
    gap:
        The inactivity gap: int ms, ``timedelta`` or a string like ``"30m"``.

    Raises
    ------
    ConfigError
        If ``gap`` is not a positive duration.

    Example
    -------
    >>> Session("30m").gap_ms
    1800000
    """

    gap_ms: int

    merges = True

    def __init__(self, gap: Duration) -> None:
        object.__setattr__(self, "gap_ms", to_millis(gap, parameter="gap", allow_zero=False))

    def assign(self, event_time: np.ndarray) -> Assigned:
        """Each event's own proto-session ``[t, t + gap)`` (merged by :mod:`wire.state.sessions`)."""
        t = np.asarray(event_time, dtype=np.int64)
        return np.arange(len(t), dtype=np.int64), t, add_saturating(t, self.gap_ms)

    def describe(self) -> str:
        """``"Session(gap=<gap> ms)"``."""
        return f"Session(gap={self.gap_ms} ms)"
