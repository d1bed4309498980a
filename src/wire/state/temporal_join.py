"""Event-time temporal join of a stream with a versioned table, as one pure function (no Spark).

:func:`on_epoch` is ``(state, inputs, watermarks) -> (state, outputs, late, watermark)``
for one key group and one epoch: the Spark processor
(:class:`wire.compiler.temporal_join_stage.TemporalJoinProcessor`) only unpacks the
epoch's blobs, calls it on the group's chunk store (a ``MapState``) and state tables,
and packs what it returns; the unit tests call it on a
:class:`~wire.state.segments.MemoryChunkStore`.

State of a key group
    * **pending** stream events (waiting for the table watermark) in
      :class:`~wire.state.segments.Segments`, one bucket per :data:`BUCKET_MS` of event
      time (bucket id ``t // BUCKET_MS``, floor division). An epoch appends its new
      waiting events as new chunks (no read) and reads only the buckets the table
      watermark released (those that may hold an event with ``t <`` the new table
      watermark). A bucket wholly behind it is dropped; the one bucket it cuts is kept
      as it is (not rewritten): its events before the table watermark have been
      emitted, and later reads skip them. Chunks are merged by size-tiered compaction
      (concatenation: the order of arrival is kept).
    * **holds**: per (key, bucket), the earliest pending event time and the number of
      pending events (:func:`holds_schema`; one row per key and bucket, against one
      per event).
      The purge and the output watermark's hold need the earliest pending event per
      key; the holds give it without reading the pending buckets.
    * **versions**: one table (:func:`versions_schema`), read and rewritten every epoch;
      the purge (below) bounds it to one version per key plus the versions newer than
      the key's horizon ``H_k`` (when the table lags, every version since about the
      table watermark).

Versioned table (``Stream.as_table``)
    The table input is a stream of keyed upserts. Each row is a *version* of the row of
    its key, valid from its event time (the *version time*, ms) until the next version
    of that key. A row whose delete column is true is a *delete marker*: from its version
    time on, the key has no row. Two versions of one key with the same version time: the
    one that arrived last wins (greatest ``__seq``; equal or null ``__seq``: the later
    row, state before the epoch's rows).

Join rule (Flink's event-time temporal join, ``FOR SYSTEM_TIME AS OF``)
    Each stream event with key ``k`` and event time ``t`` meets the version of ``k``
    with the largest version time ``<= t``. None, or a delete marker: with
    ``how="inner"`` the event is dropped, with ``how="left"`` it is emitted with null
    table columns. A null key never matches. The output row's event time is ``t``.

Emission (SPEC §2)
    An event is emitted once the table input's watermark has passed ``t``
    (``table watermark > t``): no version at or before ``t`` can arrive any more (it
    would be late), so the version it met is final. Until then it waits in the
    *pending* buffer. The result therefore depends neither on how the inputs are split
    into epochs nor on the order in which the two inputs arrive.

Late rows (SPEC §3)
    A stream event with ``t <`` the stream input's watermark in force while it arrived
    is late; so is a table row with version time ``<`` the table input's watermark.
    Both go to the ``late`` table (:func:`late_schema`) with ``side`` (``"stream"`` or
    ``"table"``), ``event_time``, ``watermark`` and ``reason`` (:data:`STREAM_LATE_REASON`,
    :data:`TABLE_LATE_REASON`); they change nothing else.

Purge
    A not-yet-late stream event of key ``k`` has ``t >= H_k``, where ``H_k`` is the lower
    of the stream watermark after the epoch and the earliest pending event of ``k``. Per
    key the state keeps only what such an event can meet: the newest version at or
    before ``H_k`` and every newer version. That newest one is dropped too when it is a
    delete marker behind the table watermark (no version and a delete marker then mean
    the same; a delete marker at or after the table watermark still hides an older
    version that may arrive). Once the stream input ended
    (:data:`~wire.core.time.MAX_WATERMARK`) and nothing is pending, nothing is kept.

Output watermark (Beam watermark-hold rule, SPEC §2)
    ``out' = max(out, min(stream wm', table wm', earliest pending t))``: a later output
    row is a pending event or a future on-time event, never behind it.

Everything is vectorized (a sort and a ``searchsorted`` per epoch over the whole key
group), never a Python loop per event, version or key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.envelope import ET, MAX_WATERMARK, SEQ
from wire.state import operator_watermarks as OW
from wire.state.segments import FANOUT, ChunkStore, Segments
from wire.state.temporal_join_spec import (
    BUCKET,
    BUCKET_MS,
    DELETED,
    ROWS,
    STREAM_LATE_REASON,
    TABLE_LATE_REASON,
    TemporalJoinSpec,
    holds_schema,
    late_schema,
    output_schema,
    stream_schema,
    table_input_schema,
    versions_schema,
)


@dataclass(frozen=True)
class TemporalEpoch:
    """What :func:`on_epoch` returns.

    ``joined``: the emitted rows in :func:`output_schema`, ordered by event time, then
    arrival; ``event_time``: their event times (int64 ms, the stream events');
    ``late``: late rows in :func:`late_schema`; ``versions`` / ``holds``: the state
    tables to keep (:func:`versions_schema`, :func:`holds_schema`); ``index``: the
    chunk index of the pending buckets to keep
    (:data:`~wire.state.segments.INDEX_SCHEMA`); ``wm_out``: the new output watermark
    (ms); ``stats``: ``joined``, ``late``, gauges ``versions``, ``pending``,
    ``input_watermark``, ``output_watermark``.
    """

    joined: pa.Table
    event_time: pa.Array
    late: pa.Table
    versions: pa.Table
    holds: pa.Table
    index: pa.Table
    wm_out: int
    stats: dict[str, int]


def _concat(parts: Sequence[pa.Table | None], schema: pa.Schema) -> pa.Table:
    tables = []
    for t in parts:
        if t is None or not t.num_rows:
            continue
        if SEQ not in t.column_names:
            t = t.append_column(SEQ, pa.nulls(t.num_rows, pa.int64()))
        tables.append(t.select(schema.names).cast(schema))
    if not tables:
        return schema.empty_table()
    out = pa.concat_tables(tables)
    if out.column(ET).null_count:
        raise ValueError(f"{ET} must not contain nulls")
    return out


def _before(t: np.ndarray, bound: int) -> np.ndarray:
    """``t < bound`` for int64 ``t`` and any Python int ``bound``."""
    if bound > np.iinfo(np.int64).max:
        return np.ones(len(t), dtype=bool)
    if bound < np.iinfo(np.int64).min:
        return np.zeros(len(t), dtype=bool)
    return t < np.int64(bound)


def _late_rows(rows: pa.Table, side: str, schema: pa.Schema, spec: TemporalJoinSpec, wm: int) -> pa.Table:
    n = rows.num_rows
    reason = STREAM_LATE_REASON if side == "stream" else TABLE_LATE_REASON
    own = set(rows.column_names)
    columns = []
    for f in schema:
        if f.name == spec.key:
            columns.append(rows.column(spec.key if side == "stream" else spec.table_key).cast(f.type))
        elif f.name == "event_time":
            columns.append(rows.column(ET))
        elif f.name == "watermark":
            columns.append(pa.array(np.full(n, wm, np.int64)))
        elif f.name in ("reason", "side"):
            columns.append(pa.array([reason if f.name == "reason" else side] * n, pa.string()))
        elif f.name in own and (f.name in spec.stream_columns) == (side == "stream"):
            columns.append(rows.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _key_codes(a: pa.ChunkedArray, b: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Dense int64 codes of two key columns of one type (equal keys, equal codes; null = -1)."""
    both = pa.chunked_array([*a.chunks, *b.chunks], type=a.type).combine_chunks()
    codes = pc.dictionary_encode(both).indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes[: len(a)], codes[len(a):]


def _arrival(table: pa.Table) -> np.ndarray:
    """``__seq`` with nulls as -1 (a null arrival sorts first, then row order decides)."""
    seq: np.ndarray = pc.fill_null(table.column(SEQ), -1).to_numpy().astype(np.int64)
    return seq


def _upsert(old: pa.Table, new: pa.Table, spec: TemporalJoinSpec) -> pa.Table:
    """Old and new versions, one per (key, version time): the last arrived; sorted by key code, time."""
    versions = pa.concat_tables([old, new])
    if not versions.num_rows:
        return versions
    keys = versions.column(spec.key)
    codes, _ = _key_codes(keys, keys.slice(0, 0))
    t = versions.column(ET).to_numpy()
    order = np.lexsort((np.arange(len(t)), _arrival(versions), t, codes))
    codes, t = codes[order], t[order]
    last = np.ones(len(t), dtype=bool)
    last[:-1] = (codes[1:] != codes[:-1]) | (t[1:] != t[:-1])
    return versions.take(pa.array(order[last]))


def _asof(vcodes: np.ndarray, vt: np.ndarray, ecodes: np.ndarray, et: np.ndarray) -> np.ndarray:
    """Per event, the index of the version with its key and the largest time ``<= t``; -1: none.

    ``vcodes`` / ``vt`` sorted by (code, time); codes ``>= 0`` except null keys (``-1``).
    """
    if not len(vt) or not len(et):
        return np.full(len(et), -1, dtype=np.int64)
    values = np.unique(np.concatenate([vt, et]))
    m = np.int64(len(values))
    composite_v = vcodes * m + np.searchsorted(values, vt)
    composite_e = ecodes * m + np.searchsorted(values, et)
    pos = np.searchsorted(composite_v, composite_e, side="right") - 1
    ok = (pos >= 0) & (ecodes >= 0)
    ok[ok] = vcodes[pos[ok]] == ecodes[ok]
    return np.where(ok, pos, -1)


def _purge(versions: pa.Table, vcodes: np.ndarray, pending_codes: np.ndarray, pending_t: np.ndarray,
           stream_wm: int, table_wm: int, n_codes: int) -> np.ndarray:
    """Mask of the versions to keep (sorted by code, time): see "Purge" in the module docstring."""
    vt = versions.column(ET).to_numpy()
    if stream_wm >= MAX_WATERMARK:
        horizon = np.full(n_codes, np.iinfo(np.int64).max, dtype=np.int64)
        needed = np.zeros(n_codes, dtype=bool)
    else:
        horizon = np.full(n_codes, max(stream_wm, np.iinfo(np.int64).min), dtype=np.int64)
        needed = np.ones(n_codes, dtype=bool)
    ok = pending_codes >= 0
    np.minimum.at(horizon, pending_codes[ok], pending_t[ok])
    needed[pending_codes[ok]] = True
    h = horizon[vcodes]
    newer = vt > h
    at_or_before = ~newer
    # the newest version at or before the horizon: the last of its key's run with vt <= h
    nxt_same = np.zeros(len(vt), dtype=bool)
    nxt_same[:-1] = (vcodes[1:] == vcodes[:-1]) & at_or_before[1:]
    base = at_or_before & ~nxt_same
    deleted = versions.column(DELETED).to_numpy(zero_copy_only=False).astype(bool)
    # a delete marker still shadows a version older than it that may arrive (time >= table wm)
    shadows = ~_before(vt, table_wm)
    keep: np.ndarray = needed[vcodes] & (newer | (base & (~deleted | shadows)))
    return keep


def _released(bucket: int, table_wm: int, width: int) -> bool:
    """Whether ``bucket`` may hold an event with ``t < table_wm`` (Python ints: no overflow)."""
    return table_wm >= MAX_WATERMARK or bucket * width < table_wm


def _append_pending(segments: Segments, rows: pa.Table, width: int) -> pa.Table:
    """Append waiting events to their buckets; their holds (key, bucket, earliest ``__et``)."""
    ids: np.ndarray = rows.column(ET).to_numpy() // width  # floor division: negative times too
    if not len(ids):
        return _holds_of(rows, ids)
    order = np.argsort(ids, kind="stable")  # stable: a bucket's events keep their arrival order
    by_bucket = rows.take(pa.array(order))
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(order)], strict=True):
        segments.append(int(sorted_ids[lo]), by_bucket.slice(lo, hi - lo))
    return _holds_of(rows, ids)


def _holds_of(rows: pa.Table, ids: np.ndarray) -> pa.Table:
    key = rows.column_names[0]
    return _min_holds(pa.table({key: rows.column(0), BUCKET: pa.array(ids, pa.int64()), ET: rows.column(ET),
                                ROWS: pa.array(np.ones(len(ids), np.int64))}))


def _min_holds(holds: pa.Table) -> pa.Table:
    key = holds.column_names[0]
    if not holds.num_rows:
        return holds
    out = holds.group_by([key, BUCKET], use_threads=False).aggregate([(ET, "min"), (ROWS, "sum")])
    names = {f"{ET}_min": ET, f"{ROWS}_sum": ROWS}
    return out.rename_columns([names.get(n, n) for n in out.column_names]).select([key, BUCKET, ET, ROWS])


def pending_events(store: ChunkStore, index: pa.Table | None, spec: TemporalJoinSpec,
                   payload: pa.Schema, table_wm: int) -> pa.Table:
    """A key group's whole pending buffer in :func:`stream_schema` (tests and inspection).

    ``table_wm``: the table watermark after the last epoch; the stored events before it
    (emitted already, left in the bucket that watermark cut) are not pending. Reads every
    chunk of every bucket: the engine never does this.
    """
    segments = Segments(index, store, pa.concat_tables)
    rows = _concat([c for b in segments.buckets() for c in segments.read(b)], stream_schema(spec, payload))
    return rows.filter(pa.array(~_before(rows.column(ET).to_numpy(), table_wm)))


def on_epoch(
    store: ChunkStore,
    index: pa.Table | None,
    versions: pa.Table | None,
    holds: pa.Table | None,
    stream: Sequence[pa.Table],
    table: Sequence[pa.Table],
    *,
    stream_wm: int,
    new_stream_wm: int,
    table_wm: int,
    new_table_wm: int,
    wm_out: int,
    spec: TemporalJoinSpec,
    stream_payload: pa.Schema,
    table_payload: pa.Schema,
    legacy_pending: pa.Table | None = None,
    fanout: int = FANOUT,
    bucket_ms: int = BUCKET_MS,
) -> TemporalEpoch:
    """Run one epoch of a key group's temporal join; the rules are in the module docstring.

    Parameters
    ----------
    store, index : ChunkStore, pyarrow.Table or None
        The key group's pending-event chunks and their chunk index as the previous epoch
        left them (``index`` None: nothing pending). The store is updated in place.
    versions, holds : pyarrow.Table or None
        The key group's stored versions (:func:`versions_schema`) and the holds of its
        pending events (:func:`holds_schema`) as the previous epoch left them (None: empty).
    stream, table : sequence of pyarrow.Table
        The epoch's new stream events and table rows: payload + int64 ``__et`` (event /
        version time, ms, no nulls) + int64 ``__seq`` (arrival, may be null or absent).
    stream_wm, table_wm : int
        Each input's watermark in force while the epoch's rows arrived (ms).
    new_stream_wm, new_table_wm : int
        Each input's watermark after the epoch (ms; never below the one before).
    wm_out : int
        The output watermark before the epoch (ms).
    spec : TemporalJoinSpec
        The join's configuration.
    stream_payload, table_payload : pyarrow.Schema
        The inputs' payload columns.
    legacy_pending : pyarrow.Table or None
        A whole pending table (:func:`stream_schema`) of a state written before the
        bucketed layout; moved into the buckets first.
    fanout : int
        Compaction fan-in of the pending buckets (:class:`~wire.state.segments.Segments`).
    bucket_ms : int
        Event-time width of a pending bucket (ms, >= 1); one value for the whole life of
        a state (the engine always uses :data:`BUCKET_MS`).

    Returns
    -------
    TemporalEpoch
        Joined rows, late rows, the state to keep, the new output watermark, counters.

    Raises
    ------
    ValueError
        If a watermark decreases or an ``__et`` is null.
    ConfigError
        If a column is missing or the key types differ.

    Examples
    --------
    >>> from wire.state.segments import MemoryChunkStore
    >>> spec = TemporalJoinSpec("cur", "cur", ("amount",), ("rate",))
    >>> sp = pa.schema([("cur", pa.string()), ("amount", pa.int64())])
    >>> tp = pa.schema([("cur", pa.string()), ("rate", pa.float64())])
    >>> rates = pa.table({"cur": ["EUR", "EUR"], "rate": [1.1, 1.2], "__et": [0, 10]})
    >>> orders = pa.table({"cur": ["EUR", "EUR", "USD"], "amount": [5, 6, 7], "__et": [9, 10, 3]})
    >>> out = on_epoch(MemoryChunkStore(), None, None, None, [orders], [rates], stream_wm=0,
    ...                new_stream_wm=11, table_wm=0, new_table_wm=11, wm_out=0, spec=spec,
    ...                stream_payload=sp, table_payload=tp)
    >>> out.joined.to_pylist()  # doctest: +NORMALIZE_WHITESPACE
    [{'cur': 'EUR', 'amount': 5, 'rate': 1.1, 'version_time': 0},
     {'cur': 'EUR', 'amount': 6, 'rate': 1.2, 'version_time': 10}]
    >>> out.versions.column("rate").to_pylist(), out.wm_out
    ([1.2], 11)
    """
    if new_stream_wm < stream_wm or new_table_wm < table_wm:
        raise ValueError("watermarks never decrease: "
                         f"stream {stream_wm} -> {new_stream_wm}, table {table_wm} -> {new_table_wm}")
    if bucket_ms < 1:
        raise ValueError(f"bucket_ms must be >= 1, got {bucket_ms}")
    out_schema = output_schema(spec, stream_payload, table_payload)
    lschema = late_schema(spec, stream_payload, table_payload)
    sschema = stream_schema(spec, stream_payload)
    vschema = versions_schema(spec, table_payload)
    hschema = holds_schema(spec, stream_payload)
    events = _concat(stream, sschema)
    rows = _concat(table, table_input_schema(spec, table_payload))
    segments = Segments(index, store, pa.concat_tables, fanout=fanout)
    # holds of buckets as the epoch found them (a released bucket's go), and of buckets it wrote
    old_holds = [holds.select(hschema.names).cast(hschema)] if holds is not None else []
    if legacy_pending is not None and legacy_pending.num_rows:
        old_holds.append(_append_pending(segments, _concat([legacy_pending], sschema), bucket_ms))
    new_holds: list[pa.Table] = []

    late_s = _before(events.column(ET).to_numpy(), stream_wm)
    late_t = _before(rows.column(ET).to_numpy(), table_wm)
    late = pa.concat_tables([
        _late_rows(events.filter(pa.array(late_s)), "stream", lschema, spec, stream_wm),
        _late_rows(rows.filter(pa.array(late_t)), "table", lschema, spec, table_wm),
    ])
    accepted = rows.filter(pa.array(~late_t))
    deleted = (pc.fill_null(accepted.column(spec.delete), False) if spec.delete is not None
               else pa.array(np.zeros(accepted.num_rows, dtype=bool)))
    new_versions = (accepted.select([spec.table_key, *vschema.names[1:-1]]).rename_columns(vschema.names[:-1])
                    .append_column(DELETED, deleted).cast(vschema))
    old_versions = _concat([versions], vschema)
    all_versions = _upsert(old_versions, new_versions, spec).cast(vschema)
    # the valid key codes of a null-free versions table: drop versions with a null key
    all_versions = all_versions.filter(pc.is_valid(all_versions.column(spec.key)))

    # the pending buckets the table watermark released: read them, emit what is ready
    # (stored events before table_wm were emitted by an earlier epoch: the bucket that
    # watermark cut keeps them, rather than being rewritten, until it is dropped)
    released = [b for b in segments.buckets() if _released(b, new_table_wm, bucket_ms)]
    out_parts: list[pa.Table] = []
    for b in released:
        bucket = _concat(list(segments.read(b)), sschema)
        t = bucket.column(ET).to_numpy()
        whole = new_table_wm >= MAX_WATERMARK or (b + 1) * bucket_ms <= new_table_wm
        waiting = np.zeros(len(t), dtype=bool) if whole else ~_before(t, new_table_wm)
        out_parts.append(bucket.filter(pa.array(~_before(t, table_wm) & ~waiting)))
        if whole:
            segments.drop(b)
        else:  # the bucket the new watermark cuts: its holds from the events still waiting
            rest = bucket.filter(pa.array(waiting))
            new_holds.append(_holds_of(rest, np.full(rest.num_rows, b, dtype=np.int64)))
    fresh = events.filter(pa.array(~late_s))
    ft = fresh.column(ET).to_numpy()
    fresh_ready = np.ones(len(ft), dtype=bool) if new_table_wm >= MAX_WATERMARK else _before(ft, new_table_wm)
    new_holds.append(_append_pending(segments, fresh.filter(pa.array(~fresh_ready)), bucket_ms))
    ready = pa.concat_tables([sschema.empty_table(), *out_parts, fresh.filter(pa.array(fresh_ready))])
    if released:
        gone = np.asarray(released, dtype=np.int64)
        old_holds = [h.filter(pa.array(~np.isin(h.column(BUCKET).to_numpy(), gone))) for h in old_holds]
    all_holds = _min_holds(pa.concat_tables(
        [hschema.empty_table(), *(h.cast(hschema) for h in (*old_holds, *new_holds))]))

    pt = ready.column(ET).to_numpy()
    hkey = all_holds.column(spec.key).cast(all_versions.schema.field(spec.key).type)
    vcodes, rcodes_hcodes = _key_codes(all_versions.column(spec.key), pa.chunked_array(
        [*ready.column(spec.key).cast(hkey.type).chunks, *hkey.chunks], type=hkey.type))
    ecodes, hcodes = rcodes_hcodes[: ready.num_rows], rcodes_hcodes[ready.num_rows:]
    vt = all_versions.column(ET).to_numpy()

    go = np.lexsort((_arrival(ready), pt))
    hit = _asof(vcodes, vt, ecodes[go], pt[go])
    if hit.size and all_versions.num_rows:
        is_del = all_versions.column(DELETED).to_numpy(zero_copy_only=False).astype(bool)
        hit = np.where((hit >= 0) & is_del[np.maximum(hit, 0)], -1, hit)
    if spec.how == "inner":
        go, hit = go[hit >= 0], hit[hit >= 0]
    emitted = ready.take(pa.array(go, pa.int64()))
    idx = pa.array(hit, pa.int64(), mask=hit < 0)
    met = all_versions.take(idx)
    joined = pa.Table.from_arrays(
        [*(emitted.column(c) for c in (spec.key, *spec.stream_columns)),
         *(met.column(c) for c in spec.table_columns), met.column(ET)],
        schema=out_schema)

    ht = all_holds.column(ET).to_numpy()
    n_codes = int(max(vcodes.max(initial=-1), rcodes_hcodes.max(initial=-1))) + 1
    keep = _purge(all_versions, vcodes, hcodes, ht, new_stream_wm, new_table_wm, n_codes)
    kept = all_versions.filter(pa.array(keep))

    new_in = min(new_stream_wm, new_table_wm)
    hold = int(ht.min()) if len(ht) else None
    new_out = OW.output_watermark(wm_out, new_in, hold)
    stats = {
        "joined": joined.num_rows,
        "late": late.num_rows,
        "gauge:versions": kept.num_rows,
        "gauge:pending": int(pc.sum(all_holds.column(ROWS)).as_py() or 0),
        "gauge:input_watermark": new_in,
        "gauge:output_watermark": new_out,
    }
    return TemporalEpoch(joined, emitted.column(ET).combine_chunks(), late, kept, all_holds,
                         segments.index(), new_out, stats)
