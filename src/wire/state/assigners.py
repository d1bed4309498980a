"""Window assigners (SPEC §4): tumbling, sliding and session windows, times in int64 ms.

Windows are aligned to the Unix epoch and half-open ``[start, end)``; negative times
use floor division (``-1`` falls in ``[-size, 0)``). Assignment is vectorized: an
event of a sliding window is replicated once per window containing it, with
``numpy.repeat``; never a Python loop per event.

Session windows are per key: an event at ``t`` opens ``[t, t + gap)`` and sessions
that *overlap* (``a.start < b.end and b.start < a.end``) merge into
``[min start, max end)``. Events exactly ``gap`` apart therefore stay in separate
sessions (Beam's rule; Flink also merges windows that merely touch).

Extremes: a window end past the int64 range saturates at int64 max; windows that
would start below int64 min are not representable (event times within ``size`` of
``-2**63`` are not supported).
"""

from __future__ import annotations

import numpy as np

from wire.core.time import INT64_MIN
from wire.core.windowing import Session, Sliding, Tumbling, Window
from wire.state.kernels import add_saturating

__all__ = ["Assigner", "Session", "Sliding", "Tumbling", "assign", "earliest_start"]

Assigner = Window
"""The window kinds the kernels assign: the API's own classes (:mod:`wire.core.windowing`),
one class per window kind."""


def assign(event_time: np.ndarray, assigner: Assigner) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Assign events to their windows.

    Parameters
    ----------
    event_time : numpy.ndarray
        int64 event times (ms).
    assigner : Tumbling, Sliding or Session
        The window kind.

    Returns
    -------
    rows, start, end : numpy.ndarray
        One entry per (event, window): the event's row index (non-decreasing: an
        event's windows are adjacent, by ascending start), the window start and end
        (int64; an end past the int64 range saturates at int64 max). Sessions give
        each event its own proto-session ``[t, t + gap)``.
    """
    t = np.asarray(event_time, dtype=np.int64)
    rows = np.arange(len(t), dtype=np.int64)
    if isinstance(assigner, Session):
        return rows, t, add_saturating(t, assigner.gap_ms)
    if isinstance(assigner, Tumbling):
        start = t - np.mod(t, np.int64(assigner.size_ms))
        return rows, start, add_saturating(start, assigner.size_ms)
    size, slide = assigner.size_ms, assigner.slide_ms
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


def earliest_start(event_time: int, assigner: Assigner) -> int:
    """The earliest window start that an event at ``event_time`` **or later** is assigned to.

    Window starts never decrease with the event time, so this is the earliest start of
    ``event_time``'s own windows: ``floor(t / size) * size`` (tumbling), the earliest
    ``k * slide`` with ``k * slide + size > t`` (sliding), ``t`` itself (sessions open
    at their first event). It bounds an operator's output watermark (Beam hold rule,
    SPEC §2): no on-time event can later produce a result with an earlier event time.
    """
    _, start, _ = assign(np.asarray([event_time], dtype=np.int64), assigner)
    return int(start.min()) if len(start) else int(event_time)
