"""Event-time interval join of two keyed streams as pure Arrow/numpy functions (no Spark).

The Spark layer calls :func:`join_epoch` once per key group per epoch with both sides'
buffered events, the epoch's new events of that group (many keys at once) and the
watermarks in force. Everything is vectorized (a sort-based band join with numpy
``searchsorted``), never a Python loop per event or per key.

Join condition (Flink's ``KeyedStream.intervalJoin(...).between(lower, upper)``)
    A left event ``l`` and a right event ``r`` with equal keys join when
    ``l.t + lower_ms <= r.t <= l.t + upper_ms`` (both bounds inclusive, as Flink's
    default; either may be negative). One output row per matching pair. Null keys never
    match (SQL equality).

Time (SPEC §1, §2)
    Event times (column ``__et``), watermarks and bounds are int64 ms. ``wm_in`` is the
    watermark in force while the epoch's events arrived (the previous epoch's ``wm_out``),
    ``wm_out`` the watermark at the end of the epoch. Use ``-2**63`` for "no watermark
    yet" and :data:`~wire.core.envelope.MAX_WATERMARK` for the end of the stream
    (every buffered event is purged).

Late events (SPEC §3; Flink's ``IntervalJoinOperator.isLate`` is ``t < watermark``)
    An incoming event of either side is late when ``t + allowed_lateness_ms < wm_in``. It
    is not joined and goes to the ``late`` table (:func:`late_schema`) with
    :data:`LATE_REASON`, ``watermark = wm_in`` and its ``side``. Every incoming event ends
    up either accepted (joined with every partner, now or later) or in ``late``.

    Why not "late when it can no longer meet a future partner" (``l.t + upper +
    lateness <= wm``)? That test would reject *on-time* events (``t >= wm``) whenever
    ``upper < 0`` (left) or ``lower > 0`` (right), and no purge rule then makes
    "every pair of accepted events joins" hold. That test is the purge rule below.

State and purge (Flink's cleanup timers at ``l.t + upper`` / ``r.t - lower``)
    Each side's buffer (:func:`state_schema`) holds accepted events while a future
    accepted partner may still arrive: left while ``l.t + upper_ms + allowed_lateness_ms
    >= wm_out``, right while ``r.t - lower_ms + allowed_lateness_ms >= wm_out``. Purging
    happens after joining. Proof that nothing is missed: a partner ``r`` accepted later
    has ``r.t + lateness >= wm`` and ``r.t <= l.t + upper``, so ``l`` is still buffered
    (symmetric for the right side with ``l.t <= r.t - lower``).

Exactly once
    New left events join (right buffer + new right events); the left buffer joins new
    right events only. The three parts (new x old, new x new, old x new) are disjoint and
    old x old pairs were emitted in earlier epochs, so each pair is emitted exactly once
    over the life of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.envelope import ENVELOPE_COLUMNS, ET, MAX_WATERMARK, SEQ
from wire.core.time import INT64_MAX, INT64_MIN
from wire.errors import ConfigError
from wire.state import operator_watermarks as OW

LATE_REASON = "interval join: event_time + allowed_lateness < watermark"
"""The ``reason`` of every row of the late table."""

_TIME_COLUMNS = ("left_event_time", "right_event_time", "event_time")
_LATE_COLUMNS = ("event_time", "watermark", "reason", "side")


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _columns(spec: IntervalJoinSpec, parameter: str, given: object) -> tuple[str, ...]:
    columns = tuple(given) if isinstance(given, list | tuple) else None
    forbidden = {spec.key, *ENVELOPE_COLUMNS}
    if (
        columns is None
        or not all(isinstance(c, str) and c and c not in forbidden for c in columns)
        or len(set(columns)) != len(columns)
    ):
        accepted = f"a tuple of unique, non-empty column names other than {sorted(forbidden)}"
        raise ConfigError(parameter, given, accepted)
    return columns


def _check_unique(spec: IntervalJoinSpec, names: list[str], what: str) -> None:
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        accepted = f"prefixes that make the {what} column names {names} unique (clash: {dups})"
        raise ConfigError("left_prefix/right_prefix", (spec.left_prefix, spec.right_prefix), accepted)


@dataclass(frozen=True)
class IntervalJoinSpec:
    """Configuration of an event-time interval join (an immutable value).

    Parameters
    ----------
    key : str
        Key column, present on both sides with the same type.
    lower_ms, upper_ms : int
        Inclusive bounds of ``r.t - l.t`` in ms, ``lower_ms <= upper_ms``; may be negative.
    left_columns, right_columns : tuple of str
        Payload columns of each side (not the key, not ``__et`` / ``__seq``). Lists are
        accepted and stored as tuples.
    left_prefix, right_prefix : str
        Prefixes of the payload columns in the output and late tables.
    allowed_lateness_ms : int
        How far behind the watermark (ms, >= 0) an event is still accepted; buffers are
        kept that much longer.

    Raises
    ------
    ConfigError
        If a parameter is out of range or output / late column names clash.
    """

    key: str
    lower_ms: int
    upper_ms: int
    left_columns: tuple[str, ...]
    right_columns: tuple[str, ...]
    left_prefix: str = ""
    right_prefix: str = "right_"
    allowed_lateness_ms: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key or self.key in ENVELOPE_COLUMNS:
            raise ConfigError("key", self.key, f"a non-empty column name, none of {list(ENVELOPE_COLUMNS)}")
        for name in ("lower_ms", "upper_ms"):
            value = getattr(self, name)
            if not _is_int(value) or not INT64_MIN <= value <= INT64_MAX:
                raise ConfigError(name, value, "an int64 (milliseconds, may be negative)")
        if self.lower_ms > self.upper_ms:
            raise ConfigError("lower_ms", self.lower_ms, f"an int <= upper_ms ({self.upper_ms})")
        lateness = self.allowed_lateness_ms
        if not _is_int(lateness) or not 0 <= lateness <= INT64_MAX:
            raise ConfigError("allowed_lateness_ms", lateness, "an int >= 0 (milliseconds)")
        for name in ("left_prefix", "right_prefix"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError(name, getattr(self, name), "a string")
        object.__setattr__(self, "left_columns", _columns(self, "left_columns", self.left_columns))
        object.__setattr__(self, "right_columns", _columns(self, "right_columns", self.right_columns))
        payload = [
            self.key,
            *(self.left_prefix + c for c in self.left_columns),
            *(self.right_prefix + c for c in self.right_columns),
        ]
        _check_unique(self, [*payload, *_TIME_COLUMNS], "output")
        _check_unique(self, [*payload, *_LATE_COLUMNS], "late")


def _side_columns(spec: IntervalJoinSpec, side: str) -> tuple[str, tuple[str, ...]]:
    if side == "left":
        return spec.left_prefix, spec.left_columns
    return spec.right_prefix, spec.right_columns


def _payload_fields(spec: IntervalJoinSpec, schema: pa.Schema, side: str) -> list[pa.Field]:
    """Key field + the side's payload fields (unprefixed), checked against ``schema``."""
    _, columns = _side_columns(spec, side)
    missing = [c for c in (spec.key, *columns) if c not in schema.names]
    if missing:
        raise ConfigError(f"{side}_columns", missing, f"columns of the {side} input {schema.names}")
    return [schema.field(c) for c in (spec.key, *columns)]


def state_schema(spec: IntervalJoinSpec, side_schema: pa.Schema, side: str) -> pa.Schema:
    """Return the schema of one side's buffer: key, payload columns, ``__et``, ``__seq``.

    ``side`` is ``"left"`` or ``"right"``; ``side_schema`` is that side's input schema.
    """
    if side not in ("left", "right"):
        raise ConfigError("side", side, "'left' or 'right'")
    fields = _payload_fields(spec, side_schema, side)
    return pa.schema([*fields, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])


def _prefixed(spec: IntervalJoinSpec, left: pa.Schema, right: pa.Schema) -> list[pa.Field]:
    lkey, *lfields = _payload_fields(spec, left, "left")
    rkey, *rfields = _payload_fields(spec, right, "right")
    if lkey.type != rkey.type:
        raise ConfigError(
            "key",
            spec.key,
            f"a column of the same type on both sides, got {lkey.type} (left) and {rkey.type} (right)",
        )
    return [
        lkey.with_nullable(True),
        *(f.with_name(spec.left_prefix + f.name) for f in lfields),
        *(f.with_name(spec.right_prefix + f.name) for f in rfields),
    ]


def output_schema(spec: IntervalJoinSpec, left_schema: pa.Schema, right_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the joined rows.

    The key, the left payload columns (``left_prefix``), the right payload columns
    (``right_prefix``), then int64 ``left_event_time``, ``right_event_time`` and
    ``event_time`` (the later of the two).

    Raises
    ------
    ConfigError
        If a column is missing from an input or the key types differ.
    """
    return pa.schema(
        [*_prefixed(spec, left_schema, right_schema), *(pa.field(n, pa.int64()) for n in _TIME_COLUMNS)]
    )


def late_schema(spec: IntervalJoinSpec, left_schema: pa.Schema, right_schema: pa.Schema) -> pa.Schema:
    """Return the schema of the late (dead-letter) table, shared by both sides.

    The payload columns of :func:`output_schema` (the other side's columns are null in a
    late row), then int64 ``event_time`` and ``watermark``, string ``reason`` and string
    ``side`` (``"left"`` or ``"right"``).
    """
    return pa.schema(
        [
            *_prefixed(spec, left_schema, right_schema),
            pa.field("event_time", pa.int64()),
            pa.field("watermark", pa.int64()),
            pa.field("reason", pa.string()),
            pa.field("side", pa.string()),
        ]
    )


def _ge(t: np.ndarray, bound: int) -> np.ndarray:
    """Vectorized ``t >= bound`` for int64 ``t`` and a Python int ``bound`` (no overflow)."""
    if bound <= INT64_MIN:
        return np.ones(len(t), dtype=bool)
    if bound > INT64_MAX:
        return np.zeros(len(t), dtype=bool)
    return t >= np.int64(bound)


def _shift(t: np.ndarray, delta: int) -> np.ndarray:
    """``t + delta``, saturating at the int64 limits."""
    out = t + np.int64(delta)
    if delta > 0:
        out[out < t] = INT64_MAX
    elif delta < 0:
        out[out > t] = INT64_MIN
    return out


def _normalize(table: pa.Table | None, schema: pa.Schema, name: str) -> pa.Table:
    """Select the state columns of ``table`` (None = empty); ``__seq`` defaults to null."""
    if table is None:
        return schema.empty_table()
    if ET not in table.column_names:
        raise ConfigError(name, table.column_names, f"a table with an int64 {ET!r} column")
    if table.column(ET).null_count:
        raise ValueError(f"{name}: {ET} must not contain nulls")
    if SEQ not in table.column_names:
        table = table.append_column(SEQ, pa.nulls(table.num_rows, pa.int64()))
    return table.select(schema.names).cast(schema)


def _band_join(
    lk: np.ndarray, lt: np.ndarray, rk: np.ndarray, rt: np.ndarray, lower: int, upper: int
) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)`` with ``lk[i] == rk[j] >= 0`` and ``lt[i]+lower <= rt[j] <= lt[i]+upper``.

    Sort the right side by (key code, time), then two ``searchsorted`` per left row over a
    composite int64 (key code x dense rank of time) give each left row's run of partners.
    """
    lrows, rrows = np.flatnonzero(lk >= 0), np.flatnonzero(rk >= 0)
    lk, lt, rk, rt = lk[lrows], lt[lrows], rk[rrows], rt[rrows]
    order = np.lexsort((rt, rk))
    lo_t, hi_t = _shift(lt, lower), _shift(lt, upper)
    values = np.unique(np.concatenate([rt, lo_t, hi_t]))
    m = np.int64(len(values))
    composite_r = rk[order] * m + np.searchsorted(values, rt[order])
    lo = np.searchsorted(composite_r, lk * m + np.searchsorted(values, lo_t), side="left")
    hi = np.searchsorted(composite_r, lk * m + np.searchsorted(values, hi_t), side="right")
    counts = hi - lo
    first = np.cumsum(counts) - counts
    li = np.repeat(np.arange(len(lk)), counts)
    pos = np.repeat(lo - first, counts) + np.arange(int(counts.sum()))
    return lrows[li], rrows[order[pos]]


def _key_codes(tables: list[pa.Table], key: str, key_type: pa.DataType) -> list[np.ndarray]:
    """Dense int64 codes of the key over all ``tables`` (equal keys, equal codes; null = -1)."""
    keys = pa.chunked_array([c for t in tables for c in t.column(key).chunks], type=key_type)
    codes = pc.dictionary_encode(keys.combine_chunks()).indices.fill_null(-1)
    codes = codes.to_numpy(zero_copy_only=False).astype(np.int64)
    return np.split(codes, np.cumsum([t.num_rows for t in tables])[:-1])


def _late_rows(
    events: pa.Table, side: str, schema: pa.Schema, spec: IntervalJoinSpec, wm_in: int
) -> pa.Table:
    n = events.num_rows
    columns = []
    for field in schema:
        if field.name == spec.key:
            columns.append(events.column(spec.key))
        elif field.name == "event_time":
            columns.append(events.column(ET))
        elif field.name == "watermark":
            columns.append(pa.repeat(pa.scalar(int(wm_in), pa.int64()), n))
        elif field.name == "reason":
            columns.append(pa.repeat(pa.scalar(LATE_REASON), n))
        elif field.name == "side":
            columns.append(pa.repeat(pa.scalar(side), n))
        else:
            prefix, names = _side_columns(spec, side)
            own = [c for c in names if prefix + c == field.name]
            columns.append(events.column(own[0]) if own else pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def join_epoch(
    left_state: pa.Table | None,
    right_state: pa.Table | None,
    left: pa.Table,
    right: pa.Table,
    wm_in: int,
    wm_out: int,
    spec: IntervalJoinSpec,
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """Join one epoch's events of both sides; the rules are in the module docstring.

    Parameters
    ----------
    left_state, right_state : pyarrow.Table or None
        Each side's buffer from the previous epoch (:func:`state_schema`); None = empty.
    left, right : pyarrow.Table
        The epoch's new events: the key, the side's payload columns, int64 ``__et`` (no
        nulls) and optionally int64 ``__seq`` (arrival order, may be null). Other columns
        are ignored.
    wm_in, wm_out : int
        Watermark while the events arrived, and at the end of the epoch (ms).
    spec : IntervalJoinSpec
        The join configuration.

    Returns
    -------
    new_left_state, new_right_state : pyarrow.Table
        The buffers after joining and purging (:func:`state_schema`), in arrival order.
    joined : pyarrow.Table
        New pairs in :func:`output_schema`, sorted by key, left event time, left
        ``__seq``, right event time, right ``__seq`` (nulls last), then buffer position.
    late : pyarrow.Table
        Late new events in :func:`late_schema`, left ones first, each in input order.

    Raises
    ------
    ConfigError
        If a column is missing or the key types differ.
    ValueError
        If ``__et`` contains nulls.

    Examples
    --------
    >>> spec = IntervalJoinSpec("k", -5, 10, ("a",), ("b",))
    >>> left = pa.table({"k": ["x", "x"], "a": [1, 2], "__et": [100, 50]})
    >>> right = pa.table({"k": ["x", "y"], "b": [7, 8], "__et": [105, 100]})
    >>> ls, rs, joined, late = join_epoch(None, None, left, right, 60, 100, spec)
    >>> joined.select(["k", "a", "right_b", "event_time"]).to_pylist()
    [{'k': 'x', 'a': 1, 'right_b': 7, 'event_time': 105}]
    >>> late.column("side").to_pylist(), ls.num_rows, rs.num_rows
    (['left'], 1, 2)
    """
    out_schema = output_schema(spec, left.schema, right.schema)
    lschema = state_schema(spec, left.schema, "left")
    rschema = state_schema(spec, right.schema, "right")
    ls = _normalize(left_state, lschema, "left_state")
    rs = _normalize(right_state, rschema, "right_state")
    ln = _normalize(left, lschema, "left")
    rn = _normalize(right, rschema, "right")

    lateness = spec.allowed_lateness_ms
    on_time_l = _ge(ln.column(ET).to_numpy(), int(wm_in) - lateness)
    on_time_r = _ge(rn.column(ET).to_numpy(), int(wm_in) - lateness)
    lschema_late = late_schema(spec, left.schema, right.schema)
    late = pa.concat_tables(
        [
            _late_rows(ln.filter(pa.array(~on_time_l)), "left", lschema_late, spec, wm_in),
            _late_rows(rn.filter(pa.array(~on_time_r)), "right", lschema_late, spec, wm_in),
        ]
    )
    lall = pa.concat_tables([ls, ln.filter(pa.array(on_time_l))])
    rall = pa.concat_tables([rs, rn.filter(pa.array(on_time_r))])
    lk, rk = _key_codes([lall, rall], spec.key, out_schema.field(spec.key).type)
    lt, rt = lall.column(ET).to_numpy(), rall.column(ET).to_numpy()
    nl, nr = ls.num_rows, rs.num_rows
    # New left x (right buffer + new right), then left buffer x new right: disjoint parts.
    li1, ri1 = _band_join(lk[nl:], lt[nl:], rk, rt, spec.lower_ms, spec.upper_ms)
    li2, ri2 = _band_join(lk[:nl], lt[:nl], rk[nr:], rt[nr:], spec.lower_ms, spec.upper_ms)
    li = pa.array(np.concatenate([li1 + nl, li2]), pa.int64())
    ri = pa.array(np.concatenate([ri1, ri2 + nr]), pa.int64())

    lrows, rrows = lall.take(li), rall.take(ri)
    let, ret = lrows.column(ET), rrows.column(ET)
    sort_columns = [lrows.column(spec.key), let, lrows.column(SEQ), ret, rrows.column(SEQ), li, ri]
    order = pc.sort_indices(
        pa.table(sort_columns, names=[str(i) for i in range(7)]),
        sort_keys=[(str(i), "ascending", "at_end") for i in range(7)],
    )
    columns = [
        lrows.column(spec.key),
        *(lrows.column(c) for c in spec.left_columns),
        *(rrows.column(c) for c in spec.right_columns),
        let,
        ret,
        pc.max_element_wise(let, ret),
    ]
    joined = pa.Table.from_arrays(columns, schema=out_schema).take(order)

    if wm_out >= MAX_WATERMARK:
        keep_l, keep_r = np.zeros(len(lt), dtype=bool), np.zeros(len(rt), dtype=bool)
    else:
        keep_l = _ge(lt, int(wm_out) - spec.upper_ms - lateness)
        keep_r = _ge(rt, int(wm_out) + spec.lower_ms - lateness)
    return lall.filter(pa.array(keep_l)), rall.filter(pa.array(keep_r)), joined, late


def accepted(events: pa.Table, schema: pa.Schema, wm_in: int, spec: IntervalJoinSpec) -> pa.Table:
    """The events of one side that :func:`join_epoch` accepts: what enters the buffer.

    Accepted: ``t + allowed_lateness >= wm_in``. Returned in ``schema`` (the side's
    :func:`state_schema`), in input order.
    """
    rows = _normalize(events, schema, "events")
    return rows.filter(pa.array(_ge(rows.column(ET).to_numpy(), int(wm_in) - spec.allowed_lateness_ms)))


def output_watermark(old_out: int, new_in: int, spec: IntervalJoinSpec) -> int:
    """The join's new output watermark (ms): ``max(old_out, new_in - allowed_lateness_ms)``.

    Beam watermark-hold rule, SPEC §2: the output watermark never passes the event time
    of a row the join may still emit. A joined row's event time is the later of its two
    events, and at least one of them is new in the epoch that emits the row; a new event
    is accepted when ``t + allowed_lateness_ms >= wm_in`` (:func:`join_epoch`), so every
    later row has ``event_time >= new_in - allowed_lateness_ms``. The bounds
    ``lower_ms`` / ``upper_ms`` only decide *which* pairs meet, never how early a row's
    event time is, so they do not enter the hold.

    Parameters
    ----------
    old_out : int
        The output watermark forwarded so far (ms).
    new_in : int
        The join's input watermark after the epoch (ms, minimum over both inputs);
        ``-2**63`` = none yet, :data:`~wire.core.envelope.MAX_WATERMARK` = end of input.
    spec : IntervalJoinSpec
        The join configuration (its ``allowed_lateness_ms``).

    Returns
    -------
    int
        Never below ``old_out``; :data:`~wire.core.envelope.MAX_WATERMARK` once the
        input ended (no event can arrive any more, so nothing holds).
    """
    lateness = spec.allowed_lateness_ms
    hold = new_in - lateness if INT64_MIN + lateness < new_in < MAX_WATERMARK else None
    return OW.output_watermark(old_out, new_in, hold)
