"""Value conversions shared by the file, Redis and HTTP-ingest sources: casts, JSON values, event times.

Pure pyarrow/numpy functions, no Spark. A value that does not fit its column is flagged
(its row becomes a dead letter) instead of raising or being changed silently:

* Integer columns take integers only. A JSON number with a fraction or an exponent is
  accepted when the number it denotes is an integer (``1000.0``, ``1e3``) and is then
  taken exactly (the text, not the nearest double, when it was parsed with
  :class:`JsonNumber`); ``1000.7`` is flagged, never truncated. Strings (CSV, Redis
  fields) follow Arrow's integer parsing: ``"1000.0"`` is flagged.
* Event times must lie in :data:`MIN_EVENT_TIME_MS` .. :data:`MAX_EVENT_TIME_MS`
  (:func:`event_times_ms`); so must timestamp and date payload columns
  (:func:`out_of_range_ms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import WireError

ARROW_ERRORS: tuple[type[Exception], ...] = (pa.ArrowException, OverflowError)
"""What a failed Arrow conversion raises (``ArrowInvalid``, ``ArrowTypeError``, ...)."""

MIN_EVENT_TIME_MS = -62_135_596_800_000
"""The earliest event time Wire supports: 0001-01-01T00:00:00.000Z, in ms since the epoch.

The supported range is the intersection of what Spark's ``TimestampType`` holds (µs in
an int64, about years -290308..294247) and what Python's ``datetime`` holds (years
1..9999, which PySpark needs to hand a timestamp to Python): years 0001..9999, UTC.
"""
MAX_EVENT_TIME_MS = 253_402_300_799_999
"""The latest event time Wire supports: 9999-12-31T23:59:59.999Z, in ms since the epoch."""
SUPPORTED_RANGE = "0001-01-01..9999-12-31"
"""The supported event-time range, as named in dead-letter reasons."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS_PER_DAY = 86_400_000
_INT64_DIGITS = 19  # a Decimal with a larger adjusted exponent cannot fit 64 bits


class JsonNumber(float):
    """A JSON number written with a fraction or an exponent: a float that keeps its text.

    Pass it as ``json.loads(text, parse_float=JsonNumber)``. An integer column then
    takes the exact integer the text denotes (``"9007199254740993.0"`` is not rounded
    through a double), and rejects a number with a fraction even when the nearest double
    is integral (``"5000.0000000000001"``). ``repr`` gives the text, so dead-letter
    reasons show the number as written.
    """

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> JsonNumber:  # noqa: D102
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __repr__(self) -> str:
        return self.text


def exact_integer(value: float) -> int | None:
    """The integer a float (or :class:`JsonNumber`) denotes exactly, or None when it is not one."""
    text = getattr(value, "text", None)
    if text is not None:
        try:
            d = Decimal(text)
        except (InvalidOperation, ValueError):
            return None
        if not d.is_finite() or d.adjusted() > _INT64_DIGITS or d != d.to_integral_value():
            return None
        return int(d)
    if not math.isfinite(value) or not value.is_integer():
        return None
    return int(value)


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a reason names a value; the record holds it all)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# ---------------------------------------------------------------------------- casts


def iso_to_ms(text: str) -> int:
    """Parse an ISO-8601 timestamp to ms since the epoch (UTC when it has no offset)."""
    dt = datetime.fromisoformat(text.strip())
    return ((dt if dt.tzinfo else dt.replace(tzinfo=UTC)) - _EPOCH) // timedelta(milliseconds=1)


def cast(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    """Cast with Wire's rules: ISO strings without an offset are UTC for zoned timestamps."""
    if arr.type == typ:
        return arr
    try:
        return arr.cast(typ)
    except ARROW_ERRORS:
        if not (pa.types.is_timestamp(typ) and typ.tz and pa.types.is_string(arr.type)):
            raise
    try:
        return arr.cast(pa.timestamp(typ.unit)).cast(typ)
    except ARROW_ERRORS:
        pass
    try:
        ms = [None if v is None else iso_to_ms(v) for v in arr.to_pylist()]
    except (ValueError, OverflowError) as e:
        raise pa.ArrowInvalid(str(e)) from e
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", typ.tz)).cast(typ)


def _cast_rows(arr: pa.Array, typ: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Cast value by value: the slow path when a column's failures cannot be found by value."""
    parts, bad = [], np.zeros(len(arr), dtype=bool)
    for i in range(len(arr)):
        try:
            parts.append(cast(arr.slice(i, 1), typ))
        except ARROW_ERRORS:
            parts.append(pa.nulls(1, typ))
            bad[i] = True
    return (pa.concat_arrays(parts) if parts else pa.array([], typ)), bad


def cast_column(arr: pa.Array, typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Cast ``arr`` to ``typ``; values that do not convert become null and are flagged.

    Returns the cast array and a boolean mask of the failed rows (None if all converted).
    Only a failing column pays for the search, over its distinct values (value by value
    for types Arrow cannot deduplicate).
    """
    try:
        return cast(arr, typ), None
    except ARROW_ERRORS:
        pass
    try:
        distinct = pc.unique(arr)
        failed = []
        for i in range(len(distinct)):
            try:
                cast(distinct.slice(i, 1), typ)
                failed.append(False)
            except ARROW_ERRORS:
                failed.append(True)
        bad_values = distinct.filter(pa.array(failed, pa.bool_()))
        bad = pc.fill_null(pc.is_in(arr, value_set=bad_values), False)
        cleaned = pc.if_else(bad, pa.nulls(len(arr), arr.type), arr)
        return cast(cleaned, typ), bad.to_numpy(zero_copy_only=False)
    except ARROW_ERRORS:
        return _cast_rows(arr, typ)


# ValueError: e.g. a lone surrogate in a str
_VALUE_ERRORS: tuple[type[Exception], ...] = (*ARROW_ERRORS, TypeError, ValueError)


def array_from_values(values: Sequence[object], typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Build a ``typ`` array from parsed JSON values; flag values that do not fit.

    Only strings are parsed into other types (e.g. ISO timestamps); a number is not
    turned into a string, nor a boolean into a number. For an integer ``typ``, a float is
    taken only when it denotes an integer exactly (:func:`exact_integer`). For a floating
    ``typ``, an integer is taken as the nearest float, as Arrow's CSV and JSON readers take
    it (``9007199254740993``, 2**53 + 1, as ``9007199254740992.0``; one beyond the double range
    as infinity, as a float written beyond it, ``1e400``, parses).
    """
    flagged: np.ndarray | None = None
    if pa.types.is_integer(typ) and any(isinstance(v, float) for v in values):
        values = list(values)
        flagged = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            if isinstance(v, float):
                n = exact_integer(v)
                flagged[i] = n is None
                values[i] = n
    elif pa.types.is_floating(typ) and any(type(v) is int for v in values):  # a bool is not a number
        values = [_nearest_float(v) if type(v) is int else v for v in values]
    arr, bad = _array_from_values(values, typ)
    if flagged is None or not flagged.any():
        return arr, bad
    return arr, flagged if bad is None else (flagged | bad)


def _nearest_float(n: int) -> float:
    try:
        return float(n)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def _array_from_values(values: Sequence[object], typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    try:
        return pa.array(values, typ), None
    except _VALUE_ERRORS:
        pass
    try:
        inferred = pa.array(values)
    except _VALUE_ERRORS:
        inferred = None
    if inferred is not None and pa.types.is_string(inferred.type):
        return cast_column(inferred, typ)
    parts, bad = [], np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values):
        try:
            parts.append(pa.array([v], typ))
        except _VALUE_ERRORS:
            try:
                if not isinstance(v, str):
                    raise
                parts.append(cast(pa.array([v]), typ))
            except _VALUE_ERRORS:
                parts.append(pa.nulls(1, typ))
                bad[i] = True
    return pa.concat_arrays(parts) if parts else pa.array([], typ), bad


# ---------------------------------------------------------------------------- event times


def out_of_range_reason(ms: int) -> str:
    """The dead-letter reason for an event time outside the supported range."""
    return f"event time {ms} ms is outside the supported range {SUPPORTED_RANGE}"


def _temporal_ms(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, Callable[[int], int]]:
    """Timestamps, dates or integers as ms: (ms, 0 where out of range; out-of-range mask; exact ms of row i).

    Nothing overflows: a value whose ms would not fit int64 is out of range. Sub-ms
    parts round down (towards the earlier instant). Null rows read as 0.
    """
    typ = arr.type
    if pa.types.is_timestamp(typ) or pa.types.is_date64(typ):
        raw = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        unit = typ.unit if pa.types.is_timestamp(typ) else "ms"
    elif pa.types.is_date32(typ):
        days = pc.fill_null(arr.cast(pa.int32()), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        raw, unit = days * _MS_PER_DAY, "ms"  # |days| < 2**31: no overflow
    elif pa.types.is_unsigned_integer(typ):
        raw = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.uint64)
        out = raw > np.uint64(MAX_EVENT_TIME_MS)
        return np.where(out, 0, raw).astype(np.int64), out, lambda i: int(raw[i])
    else:
        raw = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        unit = "ms"
    raw = raw.astype(np.int64)
    if unit == "s":
        out = (raw < -(-MIN_EVENT_TIME_MS // 1000)) | (raw > MAX_EVENT_TIME_MS // 1000)
        ms = np.where(out, 0, raw) * 1000
        return ms, out, lambda i: int(raw[i]) * 1000
    ms = raw // {"ms": 1, "us": 1000, "ns": 1_000_000}[unit]  # numpy's // rounds down
    out = (ms < MIN_EVENT_TIME_MS) | (ms > MAX_EVENT_TIME_MS)
    return np.where(out, 0, ms), out, lambda i: int(ms[i])


def out_of_range_ms(arr: pa.Array) -> dict[int, int]:
    """Rows of a timestamp or date column whose value lies outside the supported range: row -> ms."""
    _, out, exact = _temporal_ms(arr)
    valid = ~arr.is_null().to_numpy(zero_copy_only=False)
    return {int(i): exact(int(i)) for i in np.flatnonzero(out & valid)}


def event_times_ms(arr: pa.Array) -> tuple[np.ndarray, dict[int, str]]:
    """Event times in ms since the epoch, and a reason per row whose event time is unusable.

    Accepts integer columns (already ms), timestamps (naive = UTC; any unit, sub-ms parts
    round down), dates, and strings with ISO-8601 timestamps (UTC when they carry no
    offset). A missing or unparseable event time, or one outside
    :data:`MIN_EVENT_TIME_MS` .. :data:`MAX_EVENT_TIME_MS`, gets a reason (the row is a
    dead letter) and reads as 0 in the returned array; nothing raises for a value.

    Raises
    ------
    WireError
        For a column type that cannot hold event times (checked when a flow is built).
    """
    errors = {int(i): "event time missing" for i in np.flatnonzero(arr.is_null().to_numpy(False))}
    typ = arr.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        arr = _parse_iso(arr, errors)
    elif not (pa.types.is_timestamp(typ) or pa.types.is_date(typ) or pa.types.is_integer(typ)):
        raise WireError(f"event time column of type {typ} is not supported")
    ms, out, exact = _temporal_ms(arr)
    for i in np.flatnonzero(out):
        errors.setdefault(int(i), out_of_range_reason(exact(int(i))))
    return ms.astype(np.int64), errors


def _parse_iso(arr: pa.Array, errors: dict[int, str]) -> pa.Array:
    """ISO-8601 strings as int64 ms; a reason in ``errors`` for each value that does not parse."""
    try:
        return arr.cast(pa.timestamp("ms", "UTC")).cast(pa.int64())
    except ARROW_ERRORS:
        pass
    try:
        return arr.cast(pa.timestamp("ms")).cast(pa.int64())
    except ARROW_ERRORS:  # mixed or bad values: parse each distinct value in Python
        pass
    ms_of: dict[str, int | None] = {}
    for v in pc.unique(arr.drop_null()).to_pylist():
        try:
            ms_of[v] = iso_to_ms(v)
        except (ValueError, OverflowError):
            ms_of[v] = None
    values = arr.to_pylist()
    for i, v in enumerate(values):
        if v is not None and ms_of[v] is None:
            errors[i] = f"event time not parseable: {short_repr(v)}"
    return pa.array([None if v is None else ms_of[v] for v in values], pa.int64())
