"""Window assignment and watermark policies, as immutable plan values.

Durations are converted to int milliseconds here, once (STYLE §4).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.api.time import Duration, to_millis


@dataclass(frozen=True)
class Tumbling:
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


@dataclass(frozen=True)
class BoundedOutOfOrderness:
    """Watermark policy: ``W = max event time seen - max_delay`` (SPEC §2).

    The source computes it from the event times it has admitted, keeps it
    monotonically non-decreasing, and records it with each epoch's offsets.

    Parameters
    ----------
    max_delay:
        How far behind the newest event an event may arrive and still be on time:
        int milliseconds, ``timedelta`` or a string like ``"30m"``; 0 is allowed.

    Raises
    ------
    ConfigError
        If ``max_delay`` is negative or not a duration.

    Example
    -------
    >>> BoundedOutOfOrderness("30m").max_delay_ms
    1800000
    """

    max_delay_ms: int

    def __init__(self, max_delay: Duration) -> None:
        object.__setattr__(self, "max_delay_ms", to_millis(max_delay, parameter="max_delay"))
