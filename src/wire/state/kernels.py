"""Vectorized building blocks shared by the window functions and the aggregators.

Everything here works on whole columns (Arrow compute, numpy); nothing loops in
Python per event, key or window.

Groups
    A :class:`Groups` value describes rows that are *contiguous* per group: group ``g``
    is the row range ``offsets[g]:offsets[g + 1]``, and ``ids`` gives each row's
    group (non-decreasing). Window state, partials and events are always sorted by
    (key, window[, event time, arrival]) before they are grouped, so "contiguous"
    costs nothing extra.

Column names
    The event tables handled by :mod:`wire.state` carry the payload columns plus
    :data:`EVENT_TIME` and :data:`ARRIVAL`; window-assigned rows add
    :data:`WINDOW_START` and :data:`WINDOW_END`; state rows add :data:`FIRED`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.time import INT64_MAX, INT64_MIN

EVENT_TIME = "__et"
"""Event column: int64 event time, ms since the Unix epoch (UTC), never null."""
ARRIVAL = "__seq"
"""Event column: int64 arrival sequence, increasing in arrival order (null: row order)."""
WINDOW_START = "__ws"
"""Window column: int64 window start (inclusive), ms."""
WINDOW_END = "__we"
"""Window column: int64 window end (exclusive), ms."""
FIRED = "__fired"
"""State column: bool, True once the window emitted its ``final`` (or a non-early ``update``)."""



@dataclass(frozen=True)
class Groups:
    """Contiguous row groups: group ``g`` is rows ``offsets[g]:offsets[g + 1]``.

    Attributes
    ----------
    ids : numpy.ndarray
        int64 group id per row, non-decreasing, ``0 .. n - 1``.
    offsets : numpy.ndarray
        int64, ``n + 1`` boundaries; every group is non-empty.
    """

    ids: np.ndarray
    offsets: np.ndarray

    @property
    def n(self) -> int:
        """Number of groups."""
        return len(self.offsets) - 1

    @property
    def starts(self) -> np.ndarray:
        """First row of each group."""
        return self.offsets[:-1]

    @property
    def ends(self) -> np.ndarray:
        """Last row of each group (inclusive)."""
        return self.offsets[1:] - 1

    @property
    def counts(self) -> np.ndarray:
        """Rows per group."""
        return np.diff(self.offsets)

    @staticmethod
    def from_new(new: np.ndarray) -> Groups:
        """Build groups from a bool mask that is True on the first row of each group."""
        new = np.asarray(new, dtype=bool)
        if len(new):
            new = new.copy()
            new[0] = True
        ids = np.cumsum(new, dtype=np.int64) - 1
        offsets = np.append(np.flatnonzero(new), len(new)).astype(np.int64)
        return Groups(ids, offsets)

    @staticmethod
    def singletons(n: int) -> Groups:
        """One group per row."""
        return Groups(np.arange(n, dtype=np.int64), np.arange(n + 1, dtype=np.int64))


def is_int(value: object) -> bool:
    """True for a Python or NumPy integer, not a bool (parameter checks)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def changes(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Return a bool mask, True on row 0 and where any of ``columns`` differs from the row above.

    Nulls compare equal to nulls (so a null key forms one group).
    """
    n = table.num_rows
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    out[0] = True
    if n == 1:
        return out
    for name in columns:
        col = table.column(name).combine_chunks()
        below, above = col.slice(1), col.slice(0, n - 1)
        if col.null_count:
            nb, na = pc.is_null(below), pc.is_null(above)
            diff = pc.if_else(pc.or_(nb, na), pc.not_equal(nb, na), pc.not_equal(below, above))
        else:
            diff = pc.not_equal(below, above)
        out[1:] |= diff.to_numpy(zero_copy_only=False).astype(bool)
    return out


def runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """The runs of equal values of a sorted integer array: ``(value, start, stop)``, in order.

    >>> runs(np.array([2, 2, 5, 7, 7, 7]))
    [(2, 0, 2), (5, 2, 3), (7, 3, 6)]
    """
    if not len(values):
        return []
    cuts = [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]
    return [(int(values[lo]), lo, hi) for lo, hi in itertools.pairwise(cuts)]


def seg_cumsum(values: np.ndarray, groups: Groups) -> np.ndarray:
    """Cumulative sum of ``values`` restarting at each group."""
    cs = np.cumsum(values)
    if not len(cs):
        return cs
    base = (cs - values)[groups.starts]
    sums: np.ndarray = cs - np.repeat(base, groups.counts)
    return sums


def running_arg(groups: Groups, keys: Sequence[tuple[pa.Array | np.ndarray, str]]) -> np.ndarray:
    """Per row, the index of the greatest row so far in its group (a segmented running argmax).

    Rows are compared by ``keys`` (``(values, "ascending" | "descending")`` pairs,
    lexicographically; a ``"descending"`` key makes this a running argmin on it),
    nulls always compare *smallest* (they win only when every row so far is null),
    and among equal rows the later one wins. Implemented with one stable sort: each
    row's rank in (group, keys) order, then ``numpy.maximum.accumulate`` over ranks
    (ranks of a later group are all larger, so groups never interfere).
    """
    n = len(groups.ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    columns: dict[str, pa.Array | np.ndarray] = {"g": groups.ids}
    sort_keys = [("g", "ascending", "at_start")]
    for i, (values, direction) in enumerate(keys):
        columns[f"k{i}"] = values
        sort_keys.append((f"k{i}", direction, "at_start"))
    columns["row"] = np.arange(n, dtype=np.int64)
    sort_keys.append(("row", "ascending", "at_start"))
    order: np.ndarray = pc.sort_indices(pa.table(columns), sort_keys=sort_keys).to_numpy()
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    greatest: np.ndarray = order[np.maximum.accumulate(rank)]
    return greatest


def to_int64(values: pa.Array | pa.ChunkedArray | np.ndarray, what: str) -> np.ndarray:
    """Return ``values`` as an int64 numpy array; raise ValueError naming ``what`` on nulls."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        if values.null_count:
            raise ValueError(f"{what} must not contain nulls")
        values = values.to_numpy()
    return np.asarray(values).astype(np.int64, copy=False)


def arrival(table: pa.Table) -> np.ndarray:
    """Arrival sequence of each row: :data:`ARRIVAL` where set, else the row number.

    A missing column or null values mean "arrival = row order" (SPEC §1); ties
    across epochs then fall back to state-before-new (see the aggregators' merge).
    """
    n = table.num_rows
    rows = np.arange(n, dtype=np.int64)
    if ARRIVAL not in table.column_names:
        return rows
    col = table.column(ARRIVAL)
    if col.null_count == 0:
        times: np.ndarray = col.to_numpy().astype(np.int64, copy=False)
        return times
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    filled = pc.fill_null(col, 0).to_numpy().astype(np.int64)
    return np.where(valid, filled, rows)


def le_bound(values: np.ndarray, bound: int) -> np.ndarray:
    """Vectorized ``values <= bound`` for int64 ``values`` and any Python int ``bound``."""
    if bound < INT64_MIN:
        return np.zeros(len(values), dtype=bool)
    if bound >= INT64_MAX:
        return np.ones(len(values), dtype=bool)
    return values <= np.int64(bound)


def column(table: pa.Table, name: str) -> pa.Array:
    """The column ``name`` of ``table`` as one contiguous Arrow array."""
    return table.column(name).combine_chunks()


def np_column(table: pa.Table, name: str) -> np.ndarray:
    """The int64 / bool column ``name`` as a numpy array (no nulls expected)."""
    values: np.ndarray = table.column(name).to_numpy()
    return values
