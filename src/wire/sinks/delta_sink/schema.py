"""Arrow → Delta Lake for :mod:`wire.sinks.delta_sink.sink`: types, partition values, file statistics.

The schema a new table gets (:func:`_delta_schema`) and the check that an epoch's
rows fit an existing one (:func:`_conform`); the rows split by partition value with
Delta's partition encoding (:func:`_split_partitions`, :func:`_hive_segment`); and
the statistics of a data file as Delta records them (:func:`_stats`).
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import WireError, needs_extra
from wire.sinks.arrow_kinds import is_binary, is_list, is_nested

with needs_extra("delta", "wire.sinks.delta"):
    from deltalake import Schema as DeltaSchema

_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _arrow_for_delta(t: pa.DataType) -> pa.DataType:
    """The Arrow type Delta stores for ``t``: µs timestamps (UTC or naive), signed integers."""
    if pa.types.is_dictionary(t):
        return _arrow_for_delta(t.value_type)
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", None if t.tz is None else "UTC")
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[t.bit_width]
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if is_list(t):
        return pa.list_(pa.field("element", _arrow_for_delta(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_arrow_for_delta(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_arrow_for_delta(t.key_type), _arrow_for_delta(t.item_type))
    return t


def _delta_schema(schema: pa.Schema, where: str) -> tuple[pa.Schema, str]:
    """(Arrow schema of the data files, Delta schema JSON) of a table created from ``schema``."""
    converted = pa.schema([f.with_type(_arrow_for_delta(f.type)) for f in schema])
    try:
        as_json = DeltaSchema.from_arrow(converted).to_json()
        return pa.schema(DeltaSchema.from_json(as_json).to_arrow()), as_json
    except Exception as exc:  # deltalake raises plain exceptions with a Rust backtrace
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WireError(f"{where}: the rows' schema has no Delta Lake equivalent: {first}") from exc


def _split_partitions(table: pa.Table, columns: tuple[str, ...],
                      where: str) -> list[tuple[dict[str, str | None], pa.Table]]:
    """The rows grouped by partition value, each group with its Delta partition values."""
    if not columns:
        return [({}, table)]
    for c in columns:
        t = table.schema.field(c).type
        if is_nested(t) or is_binary(t):
            raise WireError(f"{where}: partition column {c!r} has type {t}, which Delta cannot partition by")
    distinct = table.select(list(columns)).group_by(list(columns), use_threads=False).aggregate([])
    groups = []
    for values in distinct.to_pylist():
        mask = None
        for c in columns:
            v = values[c]
            hit = pc.is_null(table.column(c)) if v is None else pc.equal(table.column(c), v)
            hit = pc.fill_null(hit, False)
            mask = hit if mask is None else pc.and_(mask, hit)
        groups.append(({c: _partition_value(values[c]) for c in columns}, table.filter(mask)))
    return groups


def _partition_value(value: object) -> str | None:
    """A partition value as Delta serialises it (``deltalake`` writes the same strings)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text: str
    if hasattr(value, "strftime") and hasattr(value, "hour"):  # datetime: µs, UTC or naive
        text = value.strftime("%Y-%m-%d %H:%M:%S.%f")
        return text
    if hasattr(value, "isoformat"):
        text = value.isoformat()
        return text
    return str(value)


def _hive_segment(column: str, value: str | None) -> str:
    encoded = _HIVE_NULL if value is None else quote(value, safe="")
    return f"{quote(column, safe='')}={encoded}"


def _stat_value(arr: pa.Array, value: pa.Scalar) -> object:
    t = arr.type
    v = value.as_py()
    if v is None:
        return None
    if pa.types.is_timestamp(t):
        text = v.strftime("%Y-%m-%dT%H:%M:%S.%f")
        return text + "Z" if t.tz is not None else text
    if pa.types.is_date(t):
        return v.isoformat()
    return v


def _stats(table: pa.Table) -> str:
    """Delta file statistics: ``numRecords``, ``nullCount`` and, where exact, ``minValues``/``maxValues``."""
    nulls: dict[str, int] = {}
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        if is_nested(t):
            continue
        nulls[name] = col.null_count
        orderable = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_date(t)
                     or pa.types.is_timestamp(t) or pa.types.is_string(t) or pa.types.is_large_string(t))
        if not orderable or col.null_count == len(col):
            continue
        if pa.types.is_floating(t) and pc.any(pc.is_nan(col)).as_py():
            continue
        bounds = pc.min_max(col)
        lo, hi = _stat_value(col, bounds["min"]), _stat_value(col, bounds["max"])
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    stats = {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return json.dumps(stats, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def _kind(t: pa.DataType) -> str:
    """A type's family as Delta stores it: widths, units, offsets and zones other than UTC ignored."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if is_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_decimal(t):
        return "decimal"
    if is_list(t):
        return f"list<{_kind(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{_kind(f.type)}" for f in t) + ">"
    if pa.types.is_map(t):
        return f"map<{_kind(t.key_type)},{_kind(t.item_type)}>"
    return str(t)


def _conform(table: pa.Table, target: pa.Schema, where: str) -> pa.Table:
    """``table`` with ``target``'s column order and types; WireError when they do not match.

    ``deltalake`` itself casts silently (an int column into a string column), hence
    this check: the columns must be the same and of the same type family; values must
    fit the table's types exactly (no overflow, no truncation).
    """
    got, want = table.column_names, target.names
    if sorted(got) != sorted(want) or len(set(got)) != len(got):
        raise WireError(
            f"{where}: schema mismatch: the epoch has columns {got}, the table {want} "
            "(schema evolution is not supported)"
        )
    bad = [
        f"{f.name}: {table.schema.field(f.name).type} vs table {f.type}"
        for f in target
        if not pa.types.is_null(table.schema.field(f.name).type)
        and _kind(table.schema.field(f.name).type) != _kind(f.type)
    ]
    if bad:
        raise WireError(f"{where}: schema mismatch: {'; '.join(bad)} (schema evolution is not supported)")
    try:
        return table.select(want).cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise WireError(f"{where}: the epoch's values do not fit the table's types: {exc}") from exc
