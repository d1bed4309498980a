"""Kafka records to payload rows: the deserializers of the Kafka source (pure, no broker, no Spark).

A record is a :class:`KafkaRecord` (offset, key, value, timestamp). :func:`decode_records`
turns the records of one topic-partition into the source's columns: the payload
columns (from the value, by ``value_format``) followed by the metadata columns
:data:`METADATA_COLUMNS`. A record that does not fit becomes a dead letter with
location ``"<topic>:<partition>:<offset>"``, the reason, and the value as text
(UTF-8, or ``base64:`` + the bytes when they are not UTF-8).

Value formats:

* ``"json"``: the value is one JSON object; its keys are the payload columns (missing
  keys are null, other keys ignored). Rejected: a null value (tombstone), invalid
  JSON, a JSON value that is not an object, a value that does not convert to its
  column's type.
* ``"avro"``: the value is one Avro datum (binary encoding, no container file) of
  the inline ``avro_schema``, a record whose fields are the payload columns; with
  ``avro_framing="confluent"`` the value starts with the 5-byte Confluent header
  (magic byte 0, 4-byte schema id), which is checked and skipped. Rejected: a null
  value, a datum that does not decode, a field that does not convert.
* ``"string"``: one payload column ``value`` (UTF-8 text). Rejected: invalid UTF-8.
* ``"bytes"``: one payload column ``value`` (binary), never rejected.

The key is ``kafka_key``: text with ``key_format="string"`` (invalid UTF-8 is
rejected) or bytes with ``"bytes"``. Then the event time (any column, e.g.
``kafka_timestamp``, the record timestamp in ms) must be usable
(:func:`wire.sources.conversions.event_times_ms`).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from wire.sources.base import Decoded
from wire.sources.conversions import array_from_values, event_times_ms

VALUE_FORMATS = ("json", "avro", "string", "bytes")
KEY_FORMATS = ("string", "bytes")
AVRO_FRAMINGS = ("none", "confluent")

METADATA_COLUMNS = ("kafka_key", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")
"""The columns every Kafka source adds after its payload columns."""

TIMESTAMP_COLUMN = "kafka_timestamp"
"""The record timestamp (ms since the Unix epoch; CreateTime or LogAppendTime as the topic says)."""


def partition_name(topic: str, partition: int) -> str:
    """The name of a topic-partition in offsets and gauges.

    >>> partition_name("orders", 3)
    'orders:3'
    """
    return f"{topic}:{partition}"


def split_name(name: str) -> tuple[str, int]:
    """Inverse of :func:`partition_name` (a topic name never contains ``:``).

    >>> split_name("orders:3")
    ('orders', 3)
    """
    topic, _, part = name.rpartition(":")
    return topic, int(part)


class KafkaRecord(NamedTuple):
    """One Kafka record as the source handles it (the topic and partition are the caller's)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None


def metadata_schema(key_format: str) -> pa.Schema:
    """The metadata columns, with ``kafka_key`` typed by ``key_format``."""
    return pa.schema([
        ("kafka_key", pa.string() if key_format == "string" else pa.binary()),
        ("kafka_topic", pa.string()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
        (TIMESTAMP_COLUMN, pa.int64()),
    ])


def value_schema(value_format: str, schema: pa.Schema | None) -> pa.Schema:
    """The payload columns: ``schema`` for json and avro, else one ``value`` column."""
    if value_format == "string":
        return pa.schema([("value", pa.string())])
    if value_format == "bytes":
        return pa.schema([("value", pa.binary())])
    assert schema is not None
    return schema


def record_text(value: bytes | None) -> str:
    """A record value for a dead letter: UTF-8 text, or ``base64:<bytes>`` when not UTF-8."""
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


class AvroDecoder:
    """Decodes Avro datums of one inline schema (fastavro, parsed once)."""

    def __init__(self, avro_schema: str | dict[str, Any], framing: str = "none") -> None:
        import fastavro

        parsed = json.loads(avro_schema) if isinstance(avro_schema, str) else avro_schema
        self.schema = fastavro.parse_schema(parsed)
        self.framing = framing
        self._read = fastavro.schemaless_reader

    def __call__(self, value: bytes) -> object:
        """The datum in ``value``; raises ValueError when it does not decode."""
        data = value
        if self.framing == "confluent":
            if len(value) < 5 or value[0] != 0:
                raise ValueError("no Confluent header (magic byte 0 and a 4-byte schema id)")
            data = value[5:]
        buf = io.BytesIO(data)
        try:
            datum = self._read(buf, self.schema, None)
        except Exception as e:  # fastavro raises EOFError, ValueError, IndexError, ... on bad input
            raise ValueError(f"not an Avro datum of the given schema: {type(e).__name__}: {e}") from e
        if buf.tell() != len(data):
            raise ValueError(f"{len(data) - buf.tell()} bytes left after the Avro datum")
        return datum


def _plain_type(typ: pa.DataType) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_float64(typ) or pa.types.is_boolean(typ)
                or pa.types.is_string(typ) or pa.types.is_large_string(typ))


def json_table(records: Sequence[KafkaRecord], payload_schema: pa.Schema) -> pa.Table | None:
    """Every record's JSON object value parsed at once (Arrow's JSON reader), or None.

    Only for payload columns of integer, float64, boolean and string types, where Arrow's
    conversions are the record-by-record path's (:func:`array_from_values`); None (parse
    them one by one) when a column has another type, a value is not one line starting
    with ``{``, or any value does not parse or convert (a wrong type, an integer written
    as ``3.0``, a duplicate key, invalid UTF-8), so that a rejected record gets its own
    reason there.
    """
    from pyarrow import json as pa_json

    if not records or not all(_plain_type(f.type) for f in payload_schema):
        return None
    values = [r.value for r in records if r.value is not None]
    if len(values) < len(records) or not all(
        v[:1] == b"{" and b"\n" not in v and b"\r" not in v for v in values
    ):
        return None
    data = b"\n".join(values)
    schema = pa.schema([f.with_nullable(True) for f in payload_schema])
    try:
        table = pa_json.read_json(
            io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=len(data) + 1),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != len(values):
        return None
    return table.select(schema.names)


def _text_keys(
    records: Sequence[KafkaRecord], raw: pa.Array, bad: dict[int, str], vectorized: bool
) -> pa.Array:
    """The keys as text; a record whose key is not UTF-8 gets a reason in ``bad``."""
    if vectorized:
        try:
            return raw.cast(pa.string())  # checks UTF-8
        except pa.ArrowInvalid:
            pass  # one by one, with a reason per invalid key
    keys: list[str | None] = []
    for i, r in enumerate(records):
        try:
            keys.append(None if r.key is None else r.key.decode("utf-8"))
        except UnicodeDecodeError as e:
            bad.setdefault(i, f"key: invalid UTF-8: {e}")
            keys.append(None)
    return pa.array(keys, pa.string())


def decode_records(
    records: Sequence[KafkaRecord],
    *,
    topic: str,
    partition: int,
    value_format: str,
    key_format: str,
    payload_schema: pa.Schema,
    event_time: str,
    avro: AvroDecoder | None = None,
    vectorized: bool = True,
) -> Decoded:
    """Decode the records of one topic-partition (module docstring); rejected ones become dead letters.

    ``payload_schema`` is the value's columns (:func:`value_schema`); ``event_time``
    names any column of the result (future-dated events are the reader's to reject:
    :meth:`~wire.sources.base.Decoded.reject_future`). With
    ``vectorized``, JSON values are first parsed all at once (:func:`json_table`); when
    that does not give every record a row, they are parsed one by one (the same result,
    slower, with a reason per rejected record).
    """
    n = len(records)
    bad: dict[int, str] = {}
    rows: list[Any] = [None] * n
    fast = json_table(records, payload_schema) if vectorized and value_format == "json" else None
    if fast is not None:
        columns = {f.name: fast.column(f.name).combine_chunks() for f in payload_schema}
    elif value_format in ("json", "avro"):
        for i, r in enumerate(records):
            if r.value is None:
                bad[i] = "null value (tombstone)"
                continue
            try:
                obj = json.loads(r.value) if value_format == "json" else avro(r.value)  # type: ignore[misc]
            except ValueError as e:
                bad[i] = f"invalid JSON: {e}" if value_format == "json" else str(e)
                continue
            if not isinstance(obj, dict):
                bad[i] = f"expected a {'JSON object' if value_format == 'json' else 'record'}, " \
                         f"got {type(obj).__name__}"
                continue
            rows[i] = obj
        columns = {}
        for f in payload_schema:
            values = [None if row is None else row.get(f.name) for row in rows]
            arr, failed = array_from_values(values, f.type)
            columns[f.name] = arr
            if failed is not None:
                for j in np.flatnonzero(failed):
                    j = int(j)
                    if rows[j] is not None:
                        bad.setdefault(j, f"field {f.name}: cannot convert {values[j]!r} to {f.type}")
    else:
        if value_format == "string":
            texts: list[str | None] = []
            for i, r in enumerate(records):
                try:
                    texts.append(None if r.value is None else r.value.decode("utf-8"))
                except UnicodeDecodeError as e:
                    bad[i] = f"value: invalid UTF-8: {e}"
                    texts.append(None)
            columns = {"value": pa.array(texts, pa.string())}
        else:
            columns = {"value": pa.array([r.value for r in records], pa.binary())}
    keys = pa.array([r.key for r in records], pa.binary())
    columns["kafka_key"] = keys if key_format == "bytes" else _text_keys(records, keys, bad, vectorized)
    columns["kafka_topic"] = pa.array([topic] * n, pa.string())
    columns["kafka_partition"] = pa.array(np.full(n, partition, np.int32))
    columns["kafka_offset"] = pa.array([r.offset for r in records], pa.int64())
    columns[TIMESTAMP_COLUMN] = pa.array([r.timestamp for r in records], pa.int64())
    schema = pa.schema([f.with_nullable(True) for f in payload_schema] +
                       [f.with_nullable(True) for f in metadata_schema(key_format)])
    table = pa.table([columns[f.name] for f in schema], schema=schema)
    ets, et_errors = event_times_ms(table.column(event_time).combine_chunks())
    for j, reason in et_errors.items():
        bad.setdefault(j, reason)
    keep = np.ones(n, dtype=bool)
    if bad:
        keep[list(bad)] = False
    dead = [
        (f"{topic}:{partition}:{records[i].offset}", reason, record_text(records[i].value))
        for i, reason in sorted(bad.items())
    ]
    if bad:
        table = table.filter(pa.array(keep, pa.bool_()))
    return Decoded(table, ets[keep], np.flatnonzero(keep).astype(np.int64), dead)
