"""Re-key a keyed operator's state from one number of key groups to another (rescaling).

A keyed operator keeps, per key group, watermarks (input, output, per input channel), a
chunk index (table ``__segments``, :data:`wire.state.segments.INDEX_SCHEMA`) and the
chunks themselves (``(bucket, chunk) -> Arrow table``, every row carrying the user key
column). Restarting a checkpoint with another number of key groups
(:mod:`wire.runtime.rescale`) reads every old group's state and calls :func:`rekey`,
which is pure (no Spark) and unit-tested.

The rules:

* **rows**: every row of every chunk moves to ``assign(key)`` (the new key group of its
  key: Spark's ``pmod(xxhash64(key), new_groups)``, computed by the caller). A chunk of
  old group ``a`` becomes one chunk in each new group that receives some of its rows,
  in the same bucket and at the same compaction level; within a new group's bucket, the
  chunks keep their order (old groups ascending, then the old chunk order), so the
  rows of one key keep their relative order. Chunks are renumbered ``0..n-1`` per bucket.
* **watermarks**: every new group gets the minimum over all old groups of the input
  watermark, of the output watermark, and of each input channel's watermark. Every key
  group receives the same watermark rows each epoch, so input watermarks agree across
  groups and the minimum is exact; output watermarks differ (each group holds at its
  earliest open window) and the minimum is the hold of the whole operator: what the
  downstream operators see (the minimum over the upstream's groups) does not change.
  The output watermark in force during the first epoch after a rescale can be lower
  for a key group than it was (only the ``watermark`` column of that epoch's result rows
  shows it).
* **per-group channels**: a channel ``<step>/<n>`` of an upstream keyed operator ``step``
  (one channel per upstream key group) becomes ``<step>/<m>`` for every new group ``m``,
  with the minimum over ``n``.
* tables other than the chunk index (left by layouts older than the chunks) are split by
  key like chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from wire.core.time import NO_WATERMARK
from wire.state.segments import INDEX_SCHEMA

INDEX_TABLE = "__segments"
"""The state table holding the chunk index (the compiler's ``SEGMENT_INDEX``)."""

Assign = Callable[[pa.Array], np.ndarray]
"""``assign(keys) -> new key group of each key`` (int array, one per key)."""


@dataclass
class GroupState:
    """One key group's state of one keyed operator, decoded."""

    wm_in: int = NO_WATERMARK
    wm_out: int = NO_WATERMARK
    channels: dict[str, int] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)
    chunks: dict[tuple[int, int], pa.Table] = field(default_factory=dict)


def merge_channels(
    old: Collection[dict[str, int]], *, per_group: Collection[str], new_groups: int
) -> dict[str, int]:
    """The channels of every new group: minimum per channel over the old groups.

    A channel missing from an old group counts as :data:`NO_WATERMARK` there. Channels
    ``<step>/<n>`` with ``step`` in ``per_group`` are first folded into ``step`` (minimum
    over ``n``), then spread to ``<step>/0 .. <step>/<new_groups - 1>``.
    """
    def fold(name: str) -> str:
        head, _, tail = name.rpartition("/")
        return head if head in per_group and tail.isdigit() else name

    names = {fold(n) for ch in old for n in ch}
    merged: dict[str, int] = {}
    for name in names:
        values = []
        for ch in old:
            mine = [v for n, v in ch.items() if fold(n) == name]
            values.append(min(mine) if mine else NO_WATERMARK)
        merged[name] = min(values) if values else NO_WATERMARK
    out: dict[str, int] = {}
    for name, value in sorted(merged.items()):
        if name in per_group:
            out.update({f"{name}/{m}": value for m in range(new_groups)})
        else:
            out[name] = value
    return out


def _index_rows(state: GroupState) -> list[tuple[int, int, int]]:
    """``(bucket, chunk, level)`` of the group's chunks in index order (chunks the index omits last)."""
    index = state.tables.get(INDEX_TABLE)
    rows: list[tuple[int, int, int]] = []
    if index is not None:
        for b, c, lv in zip(*(index.column(n).to_pylist() for n in ("bucket", "chunk", "level")),
                            strict=True):
            if (int(b), int(c)) in state.chunks:
                rows.append((int(b), int(c), int(lv)))
    listed = {(b, c) for b, c, _ in rows}
    rows += [(b, c, 0) for b, c in sorted(state.chunks) if (b, c) not in listed]
    return rows


def _split(table: pa.Table, key: str, assign: Assign, new_groups: int) -> dict[int, pa.Table]:
    """``table``'s rows by new key group (each part keeps the rows' order)."""
    if key not in table.column_names:
        raise KeyError(f"state rows lack the key column {key!r} (columns: {table.column_names})")
    groups = np.asarray(assign(table.column(key).combine_chunks()), dtype=np.int64)
    if len(groups) != table.num_rows or (len(groups) and (groups.min() < 0 or groups.max() >= new_groups)):
        raise ValueError(f"assign returned key groups outside 0..{new_groups - 1}")
    out = {}
    for g in np.unique(groups).tolist():
        out[int(g)] = table.take(pa.array(np.flatnonzero(groups == g)))
    return out


def rekey(
    old: dict[int, GroupState],
    *,
    key: str,
    new_groups: int,
    assign: Assign,
    per_group_channels: Collection[str] = (),
) -> dict[int, GroupState]:
    """The state of each new key group ``0..new_groups-1`` (see the module docstring).

    ``old``: per old key group, its state (groups without state may be absent). Every new
    group gets a state (its watermarks), with or without rows.

    Raises
    ------
    KeyError
        If a chunk or table lacks the key column.
    ValueError
        If ``new_groups < 1`` or ``assign`` returns a group outside the range.
    """
    if new_groups < 1:
        raise ValueError(f"new_groups must be >= 1, got {new_groups}")
    states = [old[g] for g in sorted(old)]
    wm_in = min((s.wm_in for s in states), default=NO_WATERMARK)
    wm_out = min((s.wm_out for s in states), default=NO_WATERMARK)
    channels = merge_channels([s.channels for s in states], per_group=per_group_channels,
                              new_groups=new_groups)
    placed: list[dict[int, list[tuple[int, pa.Table]]]] = [{} for _ in range(new_groups)]
    other: list[dict[str, list[pa.Table]]] = [{} for _ in range(new_groups)]
    for s in states:
        for bucket, chunk, level in _index_rows(s):
            for g, part in _split(s.chunks[(bucket, chunk)], key, assign, new_groups).items():
                placed[g].setdefault(bucket, []).append((level, part))
        for name, table in sorted(s.tables.items()):
            if name == INDEX_TABLE:
                continue
            for g, part in _split(table, key, assign, new_groups).items():
                other[g].setdefault(name, []).append(part)
    out: dict[int, GroupState] = {}
    for g in range(new_groups):
        chunks: dict[tuple[int, int], pa.Table] = {}
        index: list[tuple[int, int, int, int]] = []
        for bucket in sorted(placed[g]):
            for i, (level, part) in enumerate(placed[g][bucket]):
                chunks[(bucket, i)] = part
                index.append((bucket, i, part.num_rows, level))
        tables = {name: pa.concat_tables(parts) for name, parts in other[g].items()}
        if index or any(INDEX_TABLE in s.tables for s in states):
            tables[INDEX_TABLE] = pa.Table.from_arrays(
                [pa.array([r[i] for r in index], pa.int64()) for i in range(4)], schema=INDEX_SCHEMA)
        out[g] = GroupState(wm_in, wm_out, dict(channels), tables, chunks)
    return out
