"""Session windows: vectorized merging of overlapping sessions, and late candidates.

Merging is one sweep over intervals sorted by (key, start): a row starts a new
session unless it overlaps the running maximum end of the rows before it in the same
key (``start < running max end``). The running maximum is a segmented running
argmax (:func:`~wire.state.kernels.running_arg`), so no Python loop per key or row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from wire.core.envelope import MAX_WATERMARK
from wire.state.kernels import (
    EVENT_TIME,
    WINDOW_END,
    WINDOW_START,
    Groups,
    changes,
    le_bound,
    running_arg,
)
from wire.state.spec import WindowSpec

SESSION_LATE_REASON = (
    "session closed: event_time + gap + allowed_lateness <= watermark and no session in state to merge with"
)
"""The ``reason`` of a late session event."""


def session_groups(table: pa.Table, key: str) -> Groups:
    """Group rows sorted by (key, ``__ws``) into merged sessions (overlapping intervals chain)."""
    key_new = changes(table, [key])
    if table.num_rows == 0:
        return Groups.from_new(key_new)
    ws = table.column(WINDOW_START).to_numpy()
    we = table.column(WINDOW_END).to_numpy()
    run_max = we[running_arg(Groups.from_new(key_new), [(we, "ascending")])]
    new = key_new.copy()
    new[1:] |= ws[1:] >= run_max[:-1]
    return Groups.from_new(new)


def closed_by(end: np.ndarray, watermark: int, spec: WindowSpec) -> np.ndarray:
    """Windows without state at ``watermark``: ``end + allowed_lateness <= watermark``.

    At :data:`~wire.core.envelope.MAX_WATERMARK` (end of stream) every window is closed.
    """
    if watermark >= MAX_WATERMARK:
        return np.ones(len(end), dtype=bool)
    return le_bound(end, int(watermark) - spec.allowed_lateness_ms)


def candidates_alive(live: pa.Table, candidates: pa.Table, watermark: int, spec: WindowSpec) -> np.ndarray:
    """Bool per candidate: its ``[t, t + gap)`` merges (transitively) with an unpurged live session.

    ``live`` has the key, ``__ws`` and ``__we``; sessions closed at ``watermark`` are
    ignored. Candidates may chain through each other to reach a live session.
    """
    key = spec.key
    m = candidates.num_rows
    if m == 0 or watermark >= MAX_WATERMARK:
        return np.zeros(m, dtype=bool)
    live = live.select([key, WINDOW_START, WINDOW_END])
    live = live.filter(pa.array(~closed_by(live.column(WINDOW_END).to_numpy(), watermark, spec)))
    if live.num_rows == 0:
        return np.zeros(m, dtype=bool)
    t = candidates.column(EVENT_TIME).to_numpy().astype(np.int64)
    key_type = live.schema.field(key).type
    cand = pa.table(
        {
            key: candidates.column(key).cast(key_type),
            WINDOW_START: pa.array(t, pa.int64()),
            WINDOW_END: pa.array(spec.assigner.assign(t)[2], pa.int64()),  # [t, t + gap)
        }
    )
    both = pa.concat_tables([live, cand.cast(live.schema)]).append_column(
        "__cand", pa.array(np.concatenate([np.full(live.num_rows, -1), np.arange(m)]), pa.int64())
    )
    both = both.sort_by([(key, "ascending"), (WINDOW_START, "ascending")])
    groups = session_groups(both, key)
    idx = both.column("__cand").to_numpy()
    has_live = np.logical_or.reduceat(idx < 0, groups.starts)
    alive = np.zeros(m, dtype=bool)
    is_cand = idx >= 0
    alive[idx[is_cand]] = has_live[groups.ids[is_cand]]
    return alive
