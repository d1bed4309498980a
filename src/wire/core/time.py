"""Time in Wire: int64 milliseconds since the Unix epoch, its limits, and durations.

Durations at the API boundary are converted to int milliseconds once, here
(:func:`to_millis`). The watermark constants are defined here only; every other
module imports them.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

from wire.errors import ConfigError

INT64_MIN = -(2**63)
"""The smallest int64."""
INT64_MAX = 2**63 - 1
"""The largest int64."""
NO_WATERMARK = INT64_MIN
"""The watermark before any event was seen (reported as ``None``)."""
MAX_WATERMARK = INT64_MAX
"""The watermark of a stream that has ended: every window closes and is purged."""

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")

Duration = int | str | timedelta
"""A duration: int milliseconds, a ``timedelta``, or a string such as ``"250ms"``, ``"30s"``,
``"5m"``, ``"1h"``, ``"2d"``."""


def to_millis(value: Duration, *, parameter: str, allow_zero: bool = True) -> int:
    """Convert a duration to int milliseconds.

    Parameters
    ----------
    value:
        int milliseconds, ``timedelta`` or a string ``<int><unit>`` with unit in
        ms, s, m, h, d.
    parameter:
        The parameter name, used in the error message.
    allow_zero:
        Whether 0 is accepted.

    Raises
    ------
    ConfigError
        When the value is negative, zero (if not allowed), or not a duration.
    """
    accepted = (
        "a non-negative duration" if allow_zero else "a positive duration"
    ) + ": int milliseconds, datetime.timedelta, or a string like '500ms', '30s', '5m', '1h', '1d'"
    if isinstance(value, bool):
        raise ConfigError(parameter, value, accepted)
    if isinstance(value, int):
        ms = value
    elif isinstance(value, timedelta):
        ms = value // timedelta(milliseconds=1)
    elif isinstance(value, str):
        m = _PATTERN.match(value)
        if not m:
            raise ConfigError(parameter, value, accepted)
        ms = int(m.group(1)) * _UNITS_MS[m.group(2)]
    else:
        raise ConfigError(parameter, value, accepted)
    if ms < 0 or (ms == 0 and not allow_zero):
        raise ConfigError(parameter, value, accepted)
    return ms


def wall_clock_ms() -> int:
    """The processing-time clock: wall-clock ms since the Unix epoch."""
    return time.time_ns() // 1_000_000
