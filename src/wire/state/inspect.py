"""Decode a keyed operator's stored state into readable tables (issue 29; pure, no Spark).

A keyed operator (window, interval join, process function) keeps per key group its
watermarks and chunk index (the ``operator`` ValueState) and its rows as Arrow chunks
(the ``segments`` MapState, small chunks packed together:
:mod:`wire.state.packed_chunks`). :mod:`wire.runtime.state_reader` reads them from a
checkpoint (Spark's state data source) into :class:`~wire.state.rekey.GroupState`
values, one per key group; the functions here turn those into the documented shapes.
Times are int64 ms since the Unix epoch (UTC) throughout.

Shapes (one row per ...; every table starts with ``key_group``, int32):

window (tumbling, sliding, session; :func:`window_rows`)
    one row per (key, window) in state: ``key_group``, the key column (absent for an
    unkeyed stream), ``window_start``, ``window_end`` (int64 ms, the window is
    ``[start, end)``), per aggregation ``<name>`` (its current result, as it would be
    emitted now) and its partial columns ``<name>__<part>`` (the accumulator), then
    ``fired`` (bool: the window emitted its ``final`` row; it stays in state until
    ``window_end + allowed_lateness`` passes the watermark). For sessions these are the
    open sessions, already merged. Sorted by (key group, key, window_start).
interval join (:func:`join_rows`)
    one row per buffered event: ``key_group``, ``side`` (``"left"`` / ``"right"``), the
    key column, ``event_time`` (int64 ms), ``arrival`` (int64, the order events arrived
    in), then ``left`` and ``right``: structs of the event's payload columns (the other
    side's is null; a struct without fields while that side buffers nothing). Sorted by
    (key group, side, key, event_time, arrival).
temporal join (:func:`temporal_join_rows`)
    one row per stream event waiting for the table's watermark and per stored table
    version: ``key_group``, ``kind`` (``"pending"`` / ``"version"``), the key column
    (the stream's ``on``), ``event_time`` (int64 ms: the event's time, or the version
    time), ``arrival`` (int64, the order rows arrived in; may be null), ``deleted``
    (bool: the version is a delete marker; null for a pending event), then ``event`` and
    ``version``: structs of the stream event's and of the version's payload columns (the
    other one is null; a struct without fields while there are none of that kind).
    Sorted by (key group, kind, key, event_time, arrival).
process function (:func:`process_rows`)
    one row per key holding any state or timer: ``key_group``, the key column, one
    column per declared state named after it (value state: the value; list state: a
    list in append order; map state: a map ``map_key -> value``; null where the key has
    none), then ``timers``: a list of structs ``(domain, tag, time, output_time)`` in
    firing order (time, then tag). Sorted by (key group, key).

Per key group (:func:`group_rows`): ``key_group``, ``input_watermark``,
``output_watermark`` (int64 ms; ``-2**63`` none yet, ``2**63 - 1`` end of input),
``channels`` (each input channel's watermark), ``chunks``, ``rows`` (stored rows) and
``bytes`` (stored Arrow IPC bytes, when the reader knows them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.envelope import ET, SEQ, decode_table
from wire.state import keyed_state as K
from wire.state.join_segments import LEFT
from wire.state.kernels import FIRED, WINDOW_END, WINDOW_START, le_bound
from wire.state.packed_chunks import PACK, unpack
from wire.state.process import TIMERS_BUCKET
from wire.state.rekey import INDEX_TABLE, GroupState
from wire.state.spec import WindowSpec
from wire.state.temporal_join_spec import DELETED
from wire.state.window_segments import bucketed
from wire.state.windows import compact

KEY_GROUP = "key_group"
SIDES = ("left", "right")

LEGACY_WINDOWS = "windows"
"""A whole-table window state of a checkpoint written before the bucketed layout."""

GROUPS_SCHEMA = pa.schema([
    pa.field(KEY_GROUP, pa.int32()), pa.field("input_watermark", pa.int64()),
    pa.field("output_watermark", pa.int64()), pa.field("channels", pa.map_(pa.string(), pa.int64())),
    pa.field("chunks", pa.int64()), pa.field("rows", pa.int64()), pa.field("bytes", pa.int64()),
])
""":func:`group_rows`' schema."""

TIMER_STRUCT = pa.struct([pa.field(K.DOMAIN, pa.string()), pa.field(K.TAG, pa.string()),
                          pa.field(K.TIME, pa.int64()), pa.field(K.OUTPUT_TIME, pa.int64())])


@dataclass(frozen=True)
class ProcessLayout:
    """What decoding a process function's state needs: its key and declared states.

    ``states``: ``(name, spec)`` sorted by name (state ``i`` lives in bucket ``i + 1``,
    the timers in bucket 0: :mod:`wire.state.process`).
    """

    key: str
    states: tuple[tuple[str, K.StateSpec], ...]


@dataclass
class Decoded:
    """A key group's state as read: a :class:`GroupState` and the bytes it took."""

    kg: int
    state: GroupState
    bytes: int = 0
    chunk_bytes: dict[tuple[int, int], int] = field(default_factory=dict)


def add_entry(group: Decoded, bucket: int, chunk: int, blob: bytes) -> None:
    """Add one stored ``segments`` entry (Arrow IPC bytes) to ``group``: a chunk, or a pack of chunks."""
    group.bytes += len(blob)
    if (bucket, chunk) == PACK:
        group.state.chunks.update(unpack(decode_table(blob)))
    else:
        group.state.chunks[(bucket, chunk)] = decode_table(blob)


def _chunks(state: GroupState, buckets: Iterable[int] | None = None) -> list[pa.Table]:
    wanted = None if buckets is None else set(buckets)
    return [t for (b, _), t in sorted(state.chunks.items()) if (wanted is None or b in wanted) and t.num_rows]


def _with_group(table: pa.Table, kg: int) -> pa.Table:
    return table.add_column(0, KEY_GROUP, pa.array(np.full(table.num_rows, kg, np.int32), pa.int32()))


def _concat(tables: list[pa.Table], schema: pa.Schema | None) -> pa.Table:
    if not tables:
        return schema.empty_table() if schema is not None else pa.table({KEY_GROUP: pa.array([], pa.int32())})
    return pa.concat_tables(tables, promote_options="permissive")


# -- windows -----------------------------------------------------------------------------
def window_schema(spec: WindowSpec, partial: pa.Schema, *, keyed: bool = True) -> pa.Schema:
    """The schema of :func:`window_rows` given the operator's stored partial schema."""
    fields = [pa.field(KEY_GROUP, pa.int32())]
    if keyed:
        fields.append(partial.field(spec.key))
    fields += [pa.field("window_start", pa.int64()), pa.field("window_end", pa.int64())]
    probe = partial.empty_table()
    for name, agg in spec.aggregations:
        fields.append(pa.field(name, agg.result(name, probe).type))
        fields += [partial.field(p) for p in agg.partial_names(name)]
    fields.append(pa.field("fired", pa.bool_()))
    return pa.schema(fields)


def window_group(group: Decoded, spec: WindowSpec, *, keyed: bool = True) -> pa.Table | None:
    """One key group's windows (module docstring), or None when it holds none.

    For tumbling and sliding windows without callbacks ``fired`` is ``window_end <=``
    the key group's input watermark (:mod:`wire.state.window_segments`); sessions and
    windows with callbacks store it.
    """
    st = group.state
    chunks = _chunks(st)
    legacy = st.tables.get(LEGACY_WINDOWS)
    if legacy is not None and legacy.num_rows:
        chunks.append(legacy)
    if not chunks:
        return None
    rows = compact(chunks, spec)
    if bucketed(spec):
        fired = le_bound(rows.column(WINDOW_END).to_numpy(), st.wm_in)
        rows = rows.set_column(rows.schema.get_field_index(FIRED), FIRED, pa.array(fired))
    partial = rows.schema.remove(rows.schema.get_field_index(FIRED))
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    if keyed:
        columns[spec.key] = rows.column(spec.key)
    columns["window_start"] = rows.column(WINDOW_START)
    columns["window_end"] = rows.column(WINDOW_END)
    for name, agg in spec.aggregations:
        columns[name] = agg.result(name, rows)
        for p in agg.partial_names(name):
            columns[p] = rows.column(p)
    columns["fired"] = rows.column(FIRED)
    schema = window_schema(spec, partial, keyed=keyed)
    return _with_group(pa.table(columns), group.kg).cast(schema)


def window_rows(groups: Iterable[Decoded], spec: WindowSpec, *, keyed: bool = True) -> pa.Table:
    """Every key group's windows in one table (module docstring); empty: no columns but ``key_group``."""
    parts = [t for g in sorted(groups, key=lambda g: g.kg) if (t := window_group(g, spec, keyed=keyed))]
    return _concat(parts, None)


# -- interval joins ------------------------------------------------------------------------
def join_rows(groups: Iterable[Decoded], key: str) -> pa.Table:
    """Every key group's buffered join events in one table (module docstring)."""
    parts: dict[str, list[pa.Table]] = {"left": [], "right": []}
    for g in sorted(groups, key=lambda g: g.kg):
        st = g.state
        for side in SIDES:
            number = LEFT if side == "left" else 1 - LEFT
            tables = [t for (b, _), t in sorted(st.chunks.items()) if b % 2 == number and t.num_rows]
            legacy = st.tables.get(side)
            if legacy is not None and legacy.num_rows:
                tables.append(legacy)
            parts[side] += [_with_group(t, g.kg) for t in tables]
    sides = {s: pa.concat_tables(p, promote_options="permissive") for s, p in parts.items() if p}
    if not sides:
        return pa.table({KEY_GROUP: pa.array([], pa.int32())})
    structs = {}
    for side, t in sides.items():
        payload = [c for c in t.column_names if c not in (KEY_GROUP, key, ET, SEQ)]
        structs[side] = pa.struct([t.schema.field(c) for c in payload])
    key_type = next(iter(sides.values())).schema.field(key).type
    out = []
    for side, t in sides.items():
        n = t.num_rows
        payload = [c for c in t.column_names if c not in (KEY_GROUP, key, ET, SEQ)]
        mine = pa.nulls(n, structs[side])
        if payload:
            mine = pa.StructArray.from_arrays([t.column(c).combine_chunks() for c in payload],
                                              fields=list(structs[side]))
        columns = {
            KEY_GROUP: t.column(KEY_GROUP), "side": pa.array([side] * n, pa.string()),
            key: t.column(key).cast(key_type), "event_time": t.column(ET), "arrival": t.column(SEQ),
        }
        for s in SIDES:  # a side with no buffered event: a null struct without fields
            columns[s] = mine if s == side else pa.nulls(n, structs.get(s, pa.struct([])))
        out.append(pa.table(columns))
    table = pa.concat_tables(out)
    order = [(KEY_GROUP, "ascending"), ("side", "ascending"), (key, "ascending"),
             ("event_time", "ascending"), ("arrival", "ascending")]
    return table.sort_by(order)


# -- temporal joins --------------------------------------------------------------------------
TEMPORAL_KINDS = ("pending", "version")
_TJ_STRUCT = {"pending": "event", "version": "version"}
_TJ_TABLE_WM = "__table"  # the channel of the table's watermark (wire.compiler.temporal_join_stage.TABLE_WM)


def temporal_join_rows(groups: Iterable[Decoded], key: str) -> pa.Table:
    """Every key group's pending events and stored versions of a temporal join (module docstring)."""
    parts: dict[str, list[pa.Table]] = {"pending": [], "version": []}
    for g in sorted(groups, key=lambda g: g.kg):
        st = g.state
        # every bucket of a temporal join's chunks holds pending events; a table "pending":
        # the whole-table layout of the first version
        pending = [*_chunks(st), *(t for t in [st.tables.get("pending")] if t is not None and t.num_rows)]
        # stored events behind the table watermark were emitted (the bucket it cut keeps them)
        table_wm = st.channels.get(_TJ_TABLE_WM)
        if table_wm is not None:
            bound = pa.scalar(table_wm, pa.int64())
            pending = [t.filter(pc.greater_equal(t.column(ET), bound)) for t in pending]
        versions = st.tables.get("versions")
        parts["pending"] += [_with_group(t, g.kg) for t in pending]
        if versions is not None and versions.num_rows:
            parts["version"].append(_with_group(versions, g.kg))
    kinds = {k: pa.concat_tables(p, promote_options="permissive") for k, p in parts.items() if p}
    if not kinds:
        return pa.table({KEY_GROUP: pa.array([], pa.int32())})
    hidden = (KEY_GROUP, key, ET, SEQ, DELETED)
    structs = {k: pa.struct([t.schema.field(c) for c in t.column_names if c not in hidden])
               for k, t in kinds.items()}
    key_type = next(iter(kinds.values())).schema.field(key).type
    out = []
    for kind, t in kinds.items():
        n = t.num_rows
        fields = list(structs[kind])
        mine = (pa.StructArray.from_arrays([t.column(f.name).combine_chunks() for f in fields], fields=fields)
                if fields else pa.nulls(n, structs[kind]))
        deleted = (t.column(DELETED) if kind == "version" and DELETED in t.column_names
                   else pa.nulls(n, pa.bool_()))
        arrival = t.column(SEQ) if SEQ in t.column_names else pa.nulls(n, pa.int64())
        columns = {
            KEY_GROUP: t.column(KEY_GROUP), "kind": pa.array([kind] * n, pa.string()),
            key: t.column(key).cast(key_type), "event_time": t.column(ET), "arrival": arrival,
            "deleted": deleted,
        }
        for k in TEMPORAL_KINDS:  # no rows of a kind: a null struct without fields
            columns[_TJ_STRUCT[k]] = mine if k == kind else pa.nulls(n, structs.get(k, pa.struct([])))
        out.append(pa.table(columns))
    table = pa.concat_tables(out)
    order = [(KEY_GROUP, "ascending"), ("kind", "ascending"), (key, "ascending"),
             ("event_time", "ascending"), ("arrival", "ascending")]
    return table.sort_by(order)


# -- process functions ---------------------------------------------------------------------
def _table(st: GroupState, bucket: int) -> pa.Table | None:
    tables = _chunks(st, [bucket])
    return pa.concat_tables(tables, promote_options="permissive") if tables else None


def _slots(keys: pa.Array, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per row of ``column``: the index of its key in the distinct ``keys`` (nulls match nulls)."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    want, have = K.codes([col], [keys.cast(col.type)])
    return K.lookup(want, have)


def _nested(keys: pa.Array, table: pa.Table, key: str, order: list[str]) -> tuple[pa.Array, np.ndarray]:
    """Offsets (int32) of each key's rows in ``table`` sorted by (key, ``order``), and the row order."""
    slot = _slots(keys, table.column(key))
    sort_keys = [table.column(c).to_numpy() for c in reversed(order)] + [slot]
    rows = np.lexsort(sort_keys) if table.num_rows else np.zeros(0, np.int64)
    counts = np.bincount(slot, minlength=len(keys))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    return offsets, rows


def process_group(group: Decoded, layout: ProcessLayout) -> pa.Table | None:
    """One key group's process-function state (module docstring), or None when it holds none."""
    st = group.state
    key = layout.key
    tables = {name: _table(st, 1 + i) for i, (name, _) in enumerate(layout.states)}
    timers = _table(st, TIMERS_BUCKET)
    present = [t for t in [*tables.values(), timers] if t is not None and t.num_rows]
    if not present:
        return None
    key_type = present[0].schema.field(key).type
    keys = pc.unique(pa.chunked_array([t.column(key).cast(key_type) for t in present]).combine_chunks())
    keys = keys.take(pc.array_sort_indices(keys, null_placement="at_end"))
    columns: dict[str, pa.Array] = {key: keys}
    for name, spec in layout.states:
        t = tables[name]
        if spec.kind == "value":
            vtype = spec.value_type if t is None else t.schema.field(K.VALUE).type
            if t is None:
                columns[name] = pa.nulls(len(keys), vtype)
                continue
            want, have = K.codes([keys], [t.column(key).combine_chunks().cast(keys.type)])
            idx = K.lookup(want, have)
            vals = t.column(K.VALUE).combine_chunks()
            columns[name] = vals.take(pa.array(np.maximum(idx, 0), pa.int64(), mask=idx < 0)) if len(vals) \
                else pa.nulls(len(keys), vtype)
        elif spec.kind == "list":
            vtype = spec.value_type if t is None else t.schema.field(K.VALUE).type
            if t is None:
                columns[name] = pa.nulls(len(keys), pa.list_(vtype))
                continue
            offsets, rows = _nested(keys, t, key, [K.POS])
            vals = t.column(K.VALUE).combine_chunks().take(pa.array(rows, pa.int64()))
            lists = pa.ListArray.from_arrays(offsets, vals)
            empty = np.diff(offsets.to_numpy()) == 0
            columns[name] = pc.if_else(pa.array(empty), pa.nulls(len(keys), lists.type), lists)
        else:
            ktype = spec.map_key_type if t is None else t.schema.field(K.MAP_KEY).type
            vtype = spec.value_type if t is None else t.schema.field(K.VALUE).type
            mtype = pa.map_(ktype, vtype)
            if t is None:
                columns[name] = pa.nulls(len(keys), mtype)
                continue
            offsets, rows = _nested(keys, t, key, [K.MAP_KEY])
            take = pa.array(rows, pa.int64())
            maps = pa.MapArray.from_arrays(offsets, t.column(K.MAP_KEY).combine_chunks().take(take),
                                           t.column(K.VALUE).combine_chunks().take(take))
            empty = np.diff(offsets.to_numpy()) == 0
            columns[name] = pc.if_else(pa.array(empty), pa.nulls(len(keys), mtype), maps)
    if timers is None:
        columns["timers"] = pa.array([[] for _ in range(len(keys))], pa.list_(TIMER_STRUCT))
    else:
        offsets, rows = _timer_order(keys, timers, key)
        take = pa.array(rows, pa.int64())
        structs = pa.StructArray.from_arrays(
            [timers.column(c).combine_chunks().take(take).cast(TIMER_STRUCT.field(c).type)
             for c in (K.DOMAIN, K.TAG, K.TIME, K.OUTPUT_TIME)], fields=list(TIMER_STRUCT))
        columns["timers"] = pa.ListArray.from_arrays(offsets, structs)
    return _with_group(pa.table(columns), group.kg)


def _timer_order(keys: pa.Array, timers: pa.Table, key: str) -> tuple[pa.Array, np.ndarray]:
    """Offsets of each key's timers sorted by (time, tag), and the row order."""
    slot = _slots(keys, timers.column(key))
    rows = np.zeros(0, np.int64)
    if timers.num_rows:
        tags = pc.rank(timers.column(K.TAG).combine_chunks(), sort_keys="ascending", tiebreaker="dense")
        rows = np.lexsort([tags.to_numpy(), timers.column(K.TIME).to_numpy(), slot])
    counts = np.bincount(slot, minlength=len(keys))
    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)), rows


def process_rows(groups: Iterable[Decoded], layout: ProcessLayout) -> pa.Table:
    """Every key group's process-function state in one table (module docstring)."""
    parts = [t for g in sorted(groups, key=lambda g: g.kg) if (t := process_group(g, layout))]
    return _concat(parts, None)


# -- per key group -------------------------------------------------------------------------
def group_rows(groups: Iterable[Decoded]) -> pa.Table:
    """One row per key group: watermarks, channels, chunks, rows, bytes (module docstring)."""
    rows = []
    for g in sorted(groups, key=lambda g: g.kg):
        st = g.state
        stored = sum(t.num_rows for t in st.chunks.values())
        stored += sum(t.num_rows for n, t in st.tables.items() if n != INDEX_TABLE)
        rows.append({KEY_GROUP: g.kg, "input_watermark": st.wm_in, "output_watermark": st.wm_out,
                     "channels": sorted(st.channels.items()), "chunks": len(st.chunks), "rows": stored,
                     "bytes": g.bytes})
    return pa.Table.from_pylist(rows, schema=GROUPS_SCHEMA)


def filter_key(table: pa.Table, key: str, value: object) -> pa.Table:
    """The rows of ``table`` whose ``key`` column equals ``value`` (None: the null key).

    ``value`` is cast to the column's type (a string ``"42"`` to an integer key, ...).

    Raises
    ------
    ValueError
        If ``value`` cannot be cast to the key column's type.
    """
    if key not in table.column_names:
        return table.slice(0, 0)
    col = table.column(key)
    if value is None:
        return table.filter(pc.is_null(col))
    try:
        scalar = pa.scalar(value).cast(col.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise ValueError(f"key {value!r} is not a value of the key column {key!r} ({col.type}): {e}") \
            from None
    return table.filter(pc.fill_null(pc.equal(col, scalar), False))


def merge_watermarks(groups: Mapping[int, GroupState]) -> tuple[int | None, int | None]:
    """The operator's input and output watermarks: the minimum over its key groups (None: no group)."""
    if not groups:
        return None, None
    return min(s.wm_in for s in groups.values()), min(s.wm_out for s in groups.values())
