"""The Kafka source's vectorized JSON path gives exactly what the record-by-record path gives.

Property (hypothesis): for any batch of records, well-formed or not (wrong types, integers
written as 3.0 or "5", missing, extra and duplicate keys, nested values, invalid JSON,
non-objects, tombstones, pretty-printed values; record keys that are not UTF-8),
``decode_records(vectorized=True)`` equals ``decode_records(vectorized=False)``: the same
rows, event times, positions and dead letters.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.sources.kafka_source import decode as kafka_decode
from wire.sources.kafka_source.decode import KafkaBatch, KafkaRecord, decode_batch, decode_records, json_table

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64()), ("ok", pa.bool_())])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
                    st.sampled_from(["5", "3.0", "2024-01-01T00:00:00Z"]), st.just(3.0))
good = st.fixed_dictionaries({"t": st.integers(0, 2**40), "k": st.text(max_size=6),
                              "v": st.floats(allow_nan=False, allow_infinity=False), "ok": st.booleans()})


@st.composite
def value(draw) -> bytes | None:
    kind = draw(st.sampled_from(["good"] * 6 + ["mixed", "nested", "raw", "pretty", "dup", "none"]))
    if kind == "none":
        return None
    if kind == "raw":
        return draw(st.sampled_from([b"", b"{", b"[1, 2]", b"5", b'{"t": 1,}', b"\xff\xfe", b'  {"t": 1}']))
    obj = draw(good)
    if kind == "mixed":
        obj = {**obj, draw(st.sampled_from(["t", "k", "v", "ok", "extra"])): draw(scalars)}
        if draw(st.booleans()):
            obj.pop(draw(st.sampled_from(["t", "k", "v", "ok"])), None)
    if kind == "nested":
        obj = {**obj, draw(st.sampled_from(["k", "extra"])): {"a": [1, 2]}}
    if kind == "dup":
        return json.dumps(obj)[:-1].encode() + b', "t": 7}'
    text = json.dumps(obj, indent=1 if kind == "pretty" else None)
    return text.encode()


keys = st.one_of(st.none(), st.sampled_from([b"key", "clé".encode(), b"\xff", b""]), st.binary(max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(value(), keys), min_size=1, max_size=12), st.sampled_from(["t", "kafka_timestamp"]),
       st.sampled_from(["string", "bytes"]))
def test_vectorized_equals_record_by_record(values, event_time, key_format):
    records = [KafkaRecord(100 + i, k, v, 1_000 + i) for i, (v, k) in enumerate(values)]
    kw = dict(topic="top", partition=3, value_format="json", key_format=key_format, payload_schema=SCHEMA,
              event_time=event_time)
    fast, slow = decode_records(records, **kw), decode_records(records, vectorized=False, **kw)
    assert fast.table.equals(slow.table), (fast.table.to_pylist(), slow.table.to_pylist())
    assert np.array_equal(fast.event_times, slow.event_times)
    assert np.array_equal(fast.positions, slow.positions)
    assert fast.dead == slow.dead


def test_the_vectorized_path_is_taken_for_plain_records_and_not_for_others():
    ok = [KafkaRecord(i, None, json.dumps({"t": i, "k": "a", "v": 0.5, "ok": True, "x": [1]}).encode(), None)
          for i in range(3)]
    assert json_table(ok, SCHEMA).to_pylist() == [{"t": i, "k": "a", "v": 0.5, "ok": True} for i in range(3)]
    assert json_table([*ok, KafkaRecord(3, None, b'{"t": 3.0}', None)], SCHEMA) is None  # 3.0: one by one
    assert json_table(ok, pa.schema([("t", pa.timestamp("ms"))])) is None  # not a plain type


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(value(), keys), min_size=1, max_size=40), st.integers(1, 8),
       st.sampled_from([None, ("k",), ("v", "kafka_offset")]))
def test_chunks_and_pruned_columns_equal_record_by_record(values, chunk, columns):
    """When a batch does not fit Arrow's reader at once it is parsed in chunks of ``_CHUNK`` records
    (here 1-8), a chunk that does not fit one by one: the same rows, positions and dead letters.
    With ``columns`` the rows keep only those columns (and the event time), the same records rejected."""
    records = [KafkaRecord(100 + i, k, v, 1_000 + i) for i, (v, k) in enumerate(values)]
    kw = dict(topic="top", partition=3, value_format="json", key_format="string", payload_schema=SCHEMA,
              event_time="t")
    saved = kafka_decode._CHUNK
    kafka_decode._CHUNK = chunk
    try:
        fast = decode_batch(KafkaBatch.of(records), columns=columns, **kw)
    finally:
        kafka_decode._CHUNK = saved
    slow = decode_records(records, vectorized=False, **kw)
    keep = slow.table.column_names if columns is None else [c for c in slow.table.column_names
                                                             if c in {*columns, "t"}]
    assert fast.table.column_names == keep
    assert fast.table.equals(slow.table.select(keep))
    assert np.array_equal(fast.event_times, slow.event_times)
    assert np.array_equal(fast.positions, slow.positions)
    assert fast.dead == slow.dead


def test_a_batch_round_trips_through_its_records():
    records = [KafkaRecord(5, b"k", b"{}", 7), KafkaRecord(9, None, None, None)]
    batch = KafkaBatch.of(records)
    assert batch.records() == records
    assert KafkaBatch.concat([batch.slice(0, 1), batch.slice(1)]).records() == records
    assert batch.slice(1).records() == records[1:] and len(KafkaBatch.empty()) == 0
