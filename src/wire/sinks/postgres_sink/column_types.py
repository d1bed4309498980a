"""Arrow → PostgreSQL for :mod:`wire.sinks.postgres_sink.sink`: column types, and rows as CSV for ``COPY``.

:func:`_pg_type` gives the SQL type a table is created with and the types an
existing column may have (the table in :mod:`wire.sinks.postgres_sink.sink`'s
docstring); :func:`_copy_csv` sends an Arrow table through ``COPY ... FROM STDIN``
as CSV written by Arrow, each column rewritten by :func:`_csv_ready` so that
PostgreSQL parses it as intended.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pa_csv

from wire.errors import WireError, needs_extra
from wire.sinks.arrow_kinds import is_binary, is_nested
from wire.sinks.json_rows import _to_json_array

with needs_extra("postgres", "wire.sinks.postgres"):
    import psycopg
    from psycopg import sql

_CSV = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid", batch_size=8192)
_BATCH_ROWS = 65_536


_INTS: dict[str, tuple[str, frozenset[str]]] = {
    "int8": ("smallint", frozenset({"int2", "int4", "int8", "numeric"})),
    "int16": ("smallint", frozenset({"int2", "int4", "int8", "numeric"})),
    "uint8": ("smallint", frozenset({"int2", "int4", "int8", "numeric"})),
    "int32": ("integer", frozenset({"int4", "int8", "numeric"})),
    "uint16": ("integer", frozenset({"int4", "int8", "numeric"})),
    "int64": ("bigint", frozenset({"int8", "numeric"})),
    "uint32": ("bigint", frozenset({"int8", "numeric"})),
    "uint64": ("numeric", frozenset({"numeric"})),
}


def _pg_type(t: pa.DataType, where: str) -> tuple[str, frozenset[str]]:
    """(SQL type to create, ``pg_type.typname`` values accepted; empty = any) for Arrow ``t``."""
    if pa.types.is_dictionary(t):
        return _pg_type(t.value_type, where)
    if pa.types.is_integer(t):
        return _INTS[str(t)]
    if pa.types.is_floating(t):
        if t.bit_width == 64:
            return "double precision", frozenset({"float8"})
        return "real", frozenset({"float4", "float8"})
    if pa.types.is_decimal(t):
        return f"numeric({t.precision}, {t.scale})", frozenset({"numeric"})
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text", frozenset({"text", "varchar"})
    if pa.types.is_boolean(t):
        return "boolean", frozenset({"bool"})
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return "timestamp without time zone", frozenset({"timestamp"})
        return "timestamp with time zone", frozenset({"timestamptz"})
    if pa.types.is_date(t):
        return "date", frozenset({"date"})
    if pa.types.is_time(t):
        return "time without time zone", frozenset({"time"})
    if is_binary(t):
        return "bytea", frozenset({"bytea"})
    if is_nested(t):
        return "jsonb", frozenset({"jsonb", "json"})
    if pa.types.is_null(t):
        return "text", frozenset()
    raise WireError(f"{where}: no PostgreSQL type for Arrow type {t}; cast the column first")


def _csv_ready(arr: pa.Array) -> pa.Array:
    """Rewrite a column so that Arrow's CSV writer emits text PostgreSQL parses as intended."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _csv_ready(arr.dictionary_decode())
    if pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_float16(t):
        return arr.cast(pa.float32())
    if is_binary(t):
        hexed = [None if b is None else "\\x" + b.hex() for b in arr.to_pylist()]
        return pa.array(hexed, pa.string())
    if is_nested(t):
        dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
        values = _to_json_array(arr).to_pylist()
        return pa.array([None if v is None else dumps(v) for v in values], pa.string())
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    return arr


def _copy_csv(conn: psycopg.Connection, target: sql.Composable, table: pa.Table) -> None:
    """COPY ``table`` into ``target`` (its columns by name) as CSV written by Arrow.

    Every valid value is quoted and nulls are empty and unquoted, which is exactly how
    PostgreSQL's CSV format tells an empty string from NULL.
    """
    cols = sql.SQL(", ").join(map(sql.Identifier, table.column_names))
    query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, cols)
    with conn.cursor().copy(query) as copy:
        for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
            ready = pa.RecordBatch.from_arrays(
                [_csv_ready(c) for c in batch.columns], names=[f"c{i}" for i in range(batch.num_columns)]
            )
            buf = io.BytesIO()
            pa_csv.write_csv(ready, buf, _CSV)
            copy.write(buf.getbuffer())
