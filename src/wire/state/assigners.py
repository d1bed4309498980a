"""Window assigners (SPEC §4): the window kinds the kernels assign, times in int64 ms.

Each kind assigns its own windows (:meth:`wire.core.windowing.Window.assign`: tumbling,
sliding, session proto-windows; the alignment, overlap and saturation rules are in
:mod:`wire.core.windowing`) and says whether its windows merge
(:attr:`~wire.core.windowing.Window.merges`: sessions, merged by
:mod:`wire.state.sessions`). Here: the bound an operator's watermark hold takes from it.
"""

from __future__ import annotations

import numpy as np

from wire.core.windowing import Session, Sliding, Tumbling, Window

__all__ = ["Assigner", "Session", "Sliding", "Tumbling", "earliest_start"]

Assigner = Window
"""The window kinds the kernels assign: the API's own classes (:mod:`wire.core.windowing`),
one class per window kind."""


def earliest_start(event_time: int, assigner: Assigner) -> int:
    """The earliest window start that an event at ``event_time`` **or later** is assigned to.

    Window starts never decrease with the event time, so this is the earliest start of
    ``event_time``'s own windows: ``floor(t / size) * size`` (tumbling), the earliest
    ``k * slide`` with ``k * slide + size > t`` (sliding), ``t`` itself (sessions open
    at their first event). It bounds an operator's output watermark (Beam hold rule,
    SPEC §2): no on-time event can later produce a result with an earlier event time.
    """
    _, start, _ = assigner.assign(np.asarray([event_time], dtype=np.int64))
    return int(start.min()) if len(start) else int(event_time)
