"""Kafka source deserializers and partition watermarks (pure: no broker, no Spark)."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest

from wire.core.watermarks import (
    NO_WATERMARK,
    PartitionState,
    WatermarkPolicy,
    advance_partition,
    source_watermark,
)
from wire.errors import ConfigError
from wire.sources.kafka_source.decode import AvroDecoder, KafkaRecord, decode_records, record_text
from wire.sources.kafka_source.source import kafka

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])


def rec(offset, value, key=b"k", ts=1_000):
    return KafkaRecord(offset, key, value if not isinstance(value, dict) else json.dumps(value).encode(), ts)


def decode(records, **kw):
    args = dict(topic="orders", partition=2, value_format="json", key_format="string",
                payload_schema=SCHEMA, event_time="t")
    args.update(kw)
    return decode_records(records, **args)


def test_json_rows_and_each_kind_of_poison_record():
    records = [rec(10, {"t": 5, "k": "a"}), rec(11, b"{nope"), rec(12, b"[1]"), rec(13, None),
               rec(14, {"t": "x", "k": "b"}), rec(15, {"t": 7, "k": 3}), rec(16, {"t": 9}, key=b"\xff")]
    d = decode(records)
    assert d.table.column("t").to_pylist() == [5]
    assert d.table.column("kafka_offset").to_pylist() == [10]
    assert d.table.column("kafka_partition").to_pylist() == [2]
    assert d.event_times.tolist() == [5] and d.positions.tolist() == [0]
    where = [loc for loc, _, _ in d.dead]
    assert where == [f"orders:2:{o}" for o in (11, 12, 13, 14, 15, 16)]
    reasons = [r for _, r, _ in d.dead]
    assert "invalid JSON" in reasons[0] and "JSON object" in reasons[1] and "tombstone" in reasons[2]
    assert "field t: cannot convert" in reasons[3] and "field k" in reasons[4]
    assert "key: invalid UTF-8" in reasons[5]
    assert d.dead[0][2] == "{nope"


def test_event_time_from_the_record_timestamp_and_max_future():
    records = [rec(0, b"a", ts=1_000), rec(1, b"b", ts=9_000), rec(2, b"c", ts=None)]
    d = decode(records, value_format="string", payload_schema=pa.schema([("value", pa.string())]),
               event_time="kafka_timestamp")
    assert d.table.column("value").to_pylist() == ["a", "b"] and d.max_event_time == 9_000
    assert [loc for loc, _, _ in d.dead] == ["orders:2:2"] and "missing" in d.dead[0][1]
    # the reader rejects future-dated events (Decoded.reject_future): 9_000 > 5_000 + 1_000
    d = d.reject_future(5_000, 1_000, lambda ps: [(f"orders:2:{records[i].offset}", "?") for i in ps])
    assert d.table.column("value").to_pylist() == ["a"]
    assert d.max_event_time == 1_000
    assert d.dead[1][0] == "orders:2:1"
    assert d.dead[1][1].startswith("event time") and "beyond max_future" in d.dead[1][1]


def test_bytes_are_never_rejected_and_invalid_utf8_text_is():
    raw = [rec(0, b"\xff\x00"), rec(1, None)]
    d = decode(raw, value_format="bytes", payload_schema=pa.schema([("value", pa.binary())]),
               event_time="kafka_timestamp", key_format="bytes")
    assert d.table.column("value").to_pylist() == [b"\xff\x00", None] and not d.dead
    d = decode(raw[:1], value_format="string", payload_schema=pa.schema([("value", pa.string())]),
               event_time="kafka_timestamp")
    assert d.dead[0][1].startswith("value: invalid UTF-8") and d.dead[0][2] == "base64:/wA="
    assert record_text(b"ok") == "ok"


AVRO = {"type": "record", "name": "E",
        "fields": [{"name": "t", "type": "long"}, {"name": "k", "type": "string"}]}


def avro_bytes(datum, header=b""):
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO), datum)
    return header + buf.getvalue()


@pytest.mark.parametrize("framing", ["none", "confluent"])
def test_avro_with_inline_schema(framing):
    header = b"\x00\x00\x00\x00\x07" if framing == "confluent" else b""
    good = avro_bytes({"t": 42, "k": "z"}, header)
    d = decode([rec(0, good), rec(1, header + b"\x01"), rec(2, good + b"junk")], value_format="avro",
               avro=AvroDecoder(json.dumps(AVRO), framing))
    assert d.table.select(["t", "k"]).to_pylist() == [{"t": 42, "k": "z"}]
    assert [loc for loc, _, _ in d.dead] == ["orders:2:1", "orders:2:2"]
    assert "bytes left" in d.dead[1][1]


def test_a_lagging_partition_holds_the_watermark_and_an_idle_one_does_not():
    """Seed 003: the source watermark is the minimum over active partitions."""
    pol = WatermarkPolicy(max_delay_ms=10, idle_timeout_ms=1_000)
    fast = advance_partition(PartitionState(), file="", record=5, taken=5, max_event_time=500, pending=False,
                             bounded=False, now=0, started=0, policy=pol)
    slow = advance_partition(PartitionState(), file="", record=5, taken=5, max_event_time=100, pending=False,
                             bounded=False, now=0, started=0, policy=pol)
    assert source_watermark(NO_WATERMARK, {"t:0": fast, "t:1": slow}, 0, pol) == 90
    quiet = advance_partition(slow, file="", record=5, taken=0, max_event_time=None, pending=False,
                              bounded=False, now=2_000, started=0, policy=pol)
    fast2 = advance_partition(fast, file="", record=6, taken=1, max_event_time=700, pending=False,
                              bounded=False, now=2_000, started=0, policy=pol)
    assert quiet.idle and source_watermark(90, {"t:0": fast2, "t:1": quiet}, 2_000, pol) == 690


def test_config_errors():
    with pytest.raises(ConfigError, match="topics"):
        kafka("h:1", group="g", schema=SCHEMA)
    with pytest.raises(ConfigError, match="schema"):
        kafka("h:1", "t", group="g")
    with pytest.raises(ConfigError, match=r"group\.id"):
        kafka("h:1", "t", group="g", schema=SCHEMA, config={"group.id": "x"})
    with pytest.raises(ConfigError, match="kafka_offset"):
        kafka("h:1", "t", group="g", schema=pa.schema([("kafka_offset", pa.int64())]))
    with pytest.raises(ConfigError, match="avro_schema"):
        kafka("h:1", "t", group="g", schema=SCHEMA, value_format="avro", avro_schema={"type": "nope"})
    src = kafka("h:1", pattern="orders-.*", group="g", value_format="string",
                config={"security.protocol": "SSL"})
    assert type(src).from_dict(json.loads(json.dumps(src.to_dict()))) == src
    assert src.resolve_schema().names == ["value", "kafka_key", "kafka_topic", "kafka_partition",
                                          "kafka_offset", "kafka_timestamp"]
