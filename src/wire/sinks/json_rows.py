"""Rows as JSON: the encoding of the JSON Lines, webhook and Redis stream sinks.

Also used by the PostgreSQL and SQLite sinks for nested columns (``_to_json_array``).
"""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import WireError


def jsonl_lines(table: pa.Table) -> list[str]:
    """Encode ``table`` as JSON Lines, one string per row (see :func:`jsonl`).

    Raises
    ------
    WireError
        When column names repeat or a column's type has no JSON encoding.
    """
    names = table.column_names
    if len(set(names)) != len(names):
        raise WireError(f"jsonl sink: duplicate column names in {names}")
    columns = [_to_json_array(col.combine_chunks()).to_pylist() for col in table.columns]
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    return [dumps(dict(zip(names, row, strict=True))) for row in zip(*columns, strict=True)]


def _to_json_array(arr: pa.Array) -> pa.Array:
    """Rewrite ``arr`` so that ``to_pylist`` yields only JSON-native Python values."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _to_json_array(arr.dictionary_decode())
    if (
        pa.types.is_null(t)
        or pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    ):
        return arr
    if pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_floating(t):
        as64 = arr.cast(pa.float64())
        return pc.if_else(pc.is_finite(as64), as64, pa.scalar(None, pa.float64()))
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return pc.strftime(arr, format="%Y-%m-%dT%H:%M:%S")
        return pc.strftime(arr.cast(pa.timestamp(t.unit, "UTC")), format="%Y-%m-%dT%H:%M:%SZ")
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_decimal(t):
        return arr.cast(pa.string())
    if pa.types.is_duration(t):
        return arr.cast(pa.int64())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        encoded = [None if b is None else base64.b64encode(b).decode("ascii") for b in arr.to_pylist()]
        return pa.array(encoded, pa.string())
    if pa.types.is_binary_view(t):
        return _to_json_array(arr.cast(pa.binary()))
    if pa.types.is_map(t):
        entries = pa.StructArray.from_arrays(
            [_to_json_array(arr.keys), _to_json_array(arr.items)], names=["key", "value"]
        )
        return pa.ListArray.from_arrays(arr.offsets, entries, mask=arr.is_null())
    if pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        return _to_json_array(arr.cast(pa.list_(t.value_field)))
    if pa.types.is_large_list_view(t):
        return _to_json_array(arr.cast(pa.large_list(t.value_field)))
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(arr.offsets, _to_json_array(arr.values), mask=arr.is_null())
    if pa.types.is_large_list(t):
        return pa.LargeListArray.from_arrays(arr.offsets, _to_json_array(arr.values), mask=arr.is_null())
    if pa.types.is_struct(t):
        children = [_to_json_array(child) for child in arr.flatten()]
        return pa.StructArray.from_arrays(
            children, names=[t.field(i).name for i in range(t.num_fields)], mask=arr.is_null()
        )
    raise WireError(f"jsonl sink: no JSON encoding for column type {t}")
