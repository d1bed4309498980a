"""Kafka records to payload rows: the deserializers of the Kafka source (pure, no broker, no Spark).

The records of one topic-partition come column by column, as a :class:`KafkaBatch`
(offsets, keys, values, timestamps; :meth:`KafkaBatch.of` builds one from
:class:`KafkaRecord` s). :func:`decode_batch` turns them into the source's columns: the
payload columns (from the value, by ``value_format``) followed by the metadata columns
:data:`METADATA_COLUMNS` (only those asked for; every record is checked whatever they
are). JSON values are parsed all at once by Arrow's JSON reader; when a batch does not
fit it (a record to reject), in chunks, and a chunk that does not fit record by record,
so that each rejected record gets its reason (the results are those of the record-by-
record path: ``tests/unit/sources/kafka_source/test_kafka_decode_vectorized.py``). A record that does
not fit becomes a dead letter with location ``"<topic>:<partition>:<offset>"``, the
reason, and the value as text (UTF-8, or ``base64:`` + the bytes when they are not UTF-8).

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
(:func:`wire.sources.base.conversions.event_times_ms`).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import numpy as np
import pyarrow as pa

from wire.sources.base.conversions import array_from_values, event_times_ms
from wire.sources.base.source import Decoded

ValueFormat = Literal["json", "avro", "string", "bytes"]
"""How a Kafka record's value is decoded (``kafka(value_format=...)``)."""
KeyFormat = Literal["string", "bytes"]
"""How a Kafka record's key is decoded (``kafka(key_format=...)``)."""
AvroFraming = Literal["none", "confluent"]
"""How an Avro value is framed (``kafka(avro_framing=...)``)."""
VALUE_FORMATS: tuple[ValueFormat, ...] = get_args(ValueFormat)
KEY_FORMATS: tuple[KeyFormat, ...] = get_args(KeyFormat)
AVRO_FRAMINGS: tuple[AvroFraming, ...] = get_args(AvroFraming)

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


NO_TIMESTAMP = -1
"""A record without a timestamp in :attr:`KafkaBatch.timestamps` (Kafka's own marker)."""

_CHUNK = 4_096
"""Records parsed together again when a batch's JSON values do not all fit Arrow's reader."""


@dataclass(frozen=True)
class KafkaBatch:
    """Records of one topic-partition, column by column, in offset order.

    What :func:`decode_batch` decodes: the readers build it from the consumer's messages
    without a Python object per record. ``timestamps`` (ms, :data:`NO_TIMESTAMP` where a
    record has none) is None when the reader did not take them (no column needs them).
    """

    offsets: np.ndarray
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: np.ndarray | None

    def __len__(self) -> int:
        return len(self.values)

    @staticmethod
    def empty(timestamps: bool = True) -> KafkaBatch:
        """A batch of no records."""
        return KafkaBatch(np.zeros(0, np.int64), [], [], np.zeros(0, np.int64) if timestamps else None)

    @staticmethod
    def of(records: Sequence[KafkaRecord]) -> KafkaBatch:
        """The batch of ``records`` (one topic-partition's, in offset order)."""
        return KafkaBatch(
            np.array([r.offset for r in records], np.int64), [r.key for r in records],
            [r.value for r in records],
            np.array([NO_TIMESTAMP if r.timestamp is None else r.timestamp for r in records], np.int64))

    @staticmethod
    def concat(batches: Sequence[KafkaBatch]) -> KafkaBatch:
        """The records of ``batches``, one after the other."""
        if len(batches) == 1:
            return batches[0]
        if not batches:
            return KafkaBatch.empty()
        stamps = [b.timestamps for b in batches]
        return KafkaBatch(
            np.concatenate([b.offsets for b in batches]), [k for b in batches for k in b.keys],
            [v for b in batches for v in b.values],
            None if any(t is None for t in stamps) else np.concatenate(stamps))  # type: ignore[arg-type]

    def slice(self, start: int, stop: int | None = None) -> KafkaBatch:
        """Records ``start`` (index) up to ``stop`` (excluded; None: the end)."""
        if start == 0 and (stop is None or stop >= len(self)):
            return self
        ts = None if self.timestamps is None else self.timestamps[start:stop]
        return KafkaBatch(self.offsets[start:stop], self.keys[start:stop], self.values[start:stop], ts)

    def timestamp(self, i: int) -> int | None:
        """Record ``i``'s timestamp (None: none, or not taken)."""
        if self.timestamps is None or self.timestamps[i] < 0:
            return None
        return int(self.timestamps[i])

    def records(self) -> list[KafkaRecord]:
        """The records one by one (tests, small batches)."""
        offsets = self.offsets.tolist()
        return [KafkaRecord(o, k, v, self.timestamp(i))
                for i, (o, k, v) in enumerate(zip(offsets, self.keys, self.values, strict=True))]


def _one_line_objects(values: Sequence[bytes]) -> bytes | None:
    """``values`` joined by newlines when each is one non-empty line starting with ``{``; else None."""
    data = b"\n".join(values)
    if data.count(b"\n") != len(values) - 1 or b"\r" in data:
        return None
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    if not lengths.all():
        return None
    starts = np.zeros(len(values), np.int64)
    np.cumsum(lengths[:-1] + 1, out=starts[1:])
    if not (np.frombuffer(data, np.uint8)[starts] == ord("{")).all():
        return None
    return data


def _json_fast(values: Sequence[bytes], payload_schema: pa.Schema) -> pa.Table | None:
    """``values`` (none null) parsed at once by Arrow's JSON reader; None unless all fit."""
    from pyarrow import json as pa_json

    data = _one_line_objects(values)
    if data is None:
        return None
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


def json_table(records: Sequence[KafkaRecord], payload_schema: pa.Schema) -> pa.Table | None:
    """Every record's JSON object value parsed at once (Arrow's JSON reader), or None.

    Only for payload columns of integer, float64, boolean and string types, where Arrow's
    conversions are the record-by-record path's (:func:`array_from_values`); None (parse
    them one by one) when a column has another type, a value is null or not one line
    starting with ``{``, or any value does not parse or convert (a wrong type, an integer
    written as ``3.0``, a duplicate key, invalid UTF-8), so that a rejected record gets
    its own reason there.
    """
    values = [r.value for r in records]
    if not values or not all(_plain_type(f.type) for f in payload_schema) or None in values:
        return None
    return _json_fast(values, payload_schema)  # type: ignore[arg-type]


def _objects_payload(
    objects: Sequence[object | None], payload_schema: pa.Schema, bad: dict[int, str]
) -> list[pa.Array]:
    """Payload columns from decoded objects (None: the record is already rejected in ``bad``)."""
    columns = []
    for f in payload_schema:
        values = [row.get(f.name) if isinstance(row, dict) else None for row in objects]
        arr, failed = array_from_values(values, f.type)
        columns.append(arr)
        if failed is not None:
            for j in np.flatnonzero(failed):
                j = int(j)
                if objects[j] is not None:
                    bad.setdefault(j, f"field {f.name}: cannot convert {values[j]!r} to {f.type}")
    return columns


def _json_rows(
    values: Sequence[bytes | None], payload_schema: pa.Schema, bad: dict[int, str]
) -> list[pa.Array]:
    """JSON values parsed one by one: the payload columns, a reason in ``bad`` per rejected record."""
    rows: list[object | None] = [None] * len(values)
    for i, v in enumerate(values):
        if v is None:
            bad[i] = "null value (tombstone)"
            continue
        try:
            obj = json.loads(v)
        except ValueError as e:
            bad[i] = f"invalid JSON: {e}"
            continue
        if not isinstance(obj, dict):
            bad[i] = f"expected a JSON object, got {type(obj).__name__}"
            continue
        rows[i] = obj
    return _objects_payload(rows, payload_schema, bad)


def _json_values(values: Sequence[bytes], payload_schema: pa.Schema, bad: dict[int, str]) -> list[pa.Array]:
    """JSON values (no None): at once when they all fit Arrow's reader, else in chunks, else one by one."""
    table = _json_fast(values, payload_schema)
    if table is not None:
        return [table.column(f.name).combine_chunks() for f in payload_schema]
    if len(values) <= _CHUNK:
        return _json_rows(values, payload_schema, bad)
    parts = []
    for at in range(0, len(values), _CHUNK):
        found: dict[int, str] = {}
        parts.append(_json_values(values[at:at + _CHUNK], payload_schema, found))
        bad.update((at + j, reason) for j, reason in found.items())
    return [pa.concat_arrays([p[c] for p in parts]) for c in range(len(payload_schema))]


def _json_payload(
    values: Sequence[bytes | None], payload_schema: pa.Schema, bad: dict[int, str], vectorized: bool
) -> list[pa.Array]:
    """The payload columns of JSON values; tombstones and records that do not fit get a reason in ``bad``."""
    if not vectorized or not all(_plain_type(f.type) for f in payload_schema) or not values:
        return _json_rows(values, payload_schema, bad)
    if None not in values:
        return _json_values(values, payload_schema, bad)  # type: ignore[arg-type]
    present = np.array([v is not None for v in values], dtype=bool)
    kept = np.flatnonzero(present)
    for i in np.flatnonzero(~present):
        bad[int(i)] = "null value (tombstone)"
    found: dict[int, str] = {}
    columns = _json_values([values[i] for i in kept.tolist()], payload_schema, found)
    bad.update((int(kept[j]), reason) for j, reason in found.items())
    row_of = np.full(len(values), -1, np.int64)
    row_of[kept] = np.arange(len(kept))
    at = pa.array(row_of, mask=~present)
    return [c.take(at) for c in columns]


def _text_keys(
    keys: Sequence[bytes | None], raw: pa.Array, bad: dict[int, str], vectorized: bool
) -> pa.Array:
    """The keys as text; a record whose key is not UTF-8 gets a reason in ``bad``."""
    if vectorized:
        try:
            return raw.cast(pa.string())  # checks UTF-8
        except pa.ArrowInvalid:
            pass  # one by one, with a reason per invalid key
    texts: list[str | None] = []
    for i, k in enumerate(keys):
        try:
            texts.append(None if k is None else k.decode("utf-8"))
        except UnicodeDecodeError as e:
            bad.setdefault(i, f"key: invalid UTF-8: {e}")
            texts.append(None)
    return pa.array(texts, pa.string())


def _text_values(values: Sequence[bytes | None], bad: dict[int, str], vectorized: bool) -> pa.Array:
    """``string`` values as text; a value that is not UTF-8 gets a reason in ``bad``."""
    if vectorized:
        try:
            return pa.array(values, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:
            pass
    texts: list[str | None] = []
    for i, v in enumerate(values):
        try:
            texts.append(None if v is None else v.decode("utf-8"))
        except UnicodeDecodeError as e:
            bad[i] = f"value: invalid UTF-8: {e}"
            texts.append(None)
    return pa.array(texts, pa.string())


def decode_batch(
    batch: KafkaBatch,
    *,
    topic: str,
    partition: int,
    value_format: str,
    key_format: str,
    payload_schema: pa.Schema,
    event_time: str,
    avro: AvroDecoder | None = None,
    vectorized: bool = True,
    columns: Sequence[str] | None = None,
) -> Decoded:
    """Decode the records of one topic-partition (module docstring); rejected ones become dead letters.

    ``payload_schema`` is the value's columns (:func:`value_schema`); ``event_time``
    names any column of the result (future-dated events are the reader's to reject:
    :meth:`~wire.sources.base.Decoded.reject_future`). ``columns``: the columns the
    result's table holds, besides ``event_time`` (None: all); every record is checked
    whatever they are, so the same records are rejected. With ``vectorized``, JSON values
    are parsed all at once by Arrow's JSON reader; when they do not all fit (a record to
    reject, a type Arrow converts otherwise), in chunks, and a chunk that does not fit one
    by one (the same result, slower, with a reason per rejected record); keys and
    ``string`` values are checked as UTF-8 all at once.
    """
    n = len(batch)
    wanted = None if columns is None else {*columns, event_time}
    bad: dict[int, str] = {}
    out: dict[str, pa.Array] = {}
    if value_format == "json":
        payload = _json_payload(batch.values, payload_schema, bad, vectorized)
        out.update((f.name, a) for f, a in zip(payload_schema, payload, strict=True))
    elif value_format == "avro":
        assert avro is not None
        objects: list[object | None] = [None] * n
        for i, v in enumerate(batch.values):
            if v is None:
                bad[i] = "null value (tombstone)"
                continue
            try:
                obj = avro(v)
            except ValueError as e:
                bad[i] = str(e)
                continue
            if not isinstance(obj, dict):
                bad[i] = f"expected a record, got {type(obj).__name__}"
                continue
            objects[i] = obj
        payload = _objects_payload(objects, payload_schema, bad)
        out.update((f.name, a) for f, a in zip(payload_schema, payload, strict=True))
    elif value_format == "string":
        out["value"] = _text_values(batch.values, bad, vectorized)
    else:
        out["value"] = pa.array(batch.values, pa.binary())
    meta = metadata_schema(key_format)
    if key_format == "string" or wanted is None or "kafka_key" in wanted:
        keys = pa.array(batch.keys, pa.binary())
        out["kafka_key"] = keys if key_format == "bytes" else _text_keys(batch.keys, keys, bad, vectorized)
    make: dict[str, Callable[[], pa.Array]] = {
        "kafka_topic": lambda: pa.array([topic] * n, pa.string()),
        "kafka_partition": lambda: pa.array(np.full(n, partition, np.int32)),
        "kafka_offset": lambda: pa.array(batch.offsets, pa.int64()),
        TIMESTAMP_COLUMN: lambda: _timestamps(batch),
    }
    for name, build in make.items():
        if wanted is None or name in wanted:
            out[name] = build()
    fields = [f.with_nullable(True) for f in (*payload_schema, *meta)
              if wanted is None or f.name in wanted]
    table = pa.table([out[f.name] for f in fields], schema=pa.schema(fields))
    ets, et_errors = event_times_ms(table.column(event_time).combine_chunks())
    for j, reason in et_errors.items():
        bad.setdefault(j, reason)
    keep = np.ones(n, dtype=bool)
    if bad:
        keep[list(bad)] = False
        table = table.filter(pa.array(keep, pa.bool_()))
    dead = [(f"{topic}:{partition}:{int(batch.offsets[i])}", reason, record_text(batch.values[i]))
            for i, reason in sorted(bad.items())]
    return Decoded(table, ets[keep], np.flatnonzero(keep).astype(np.int64), dead)


def _timestamps(batch: KafkaBatch) -> pa.Array:
    if batch.timestamps is None:
        raise ValueError("the records' timestamps were not taken")
    return pa.array(batch.timestamps, pa.int64(), mask=batch.timestamps < 0)


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
    """:func:`decode_batch` of records given one by one (every column)."""
    return decode_batch(KafkaBatch.of(records), topic=topic, partition=partition,
                        value_format=value_format, key_format=key_format, payload_schema=payload_schema,
                        event_time=event_time, avro=avro, vectorized=vectorized)
