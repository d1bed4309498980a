"""Kafka sink: record encoding and configuration (pure: no broker)."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest

from wire.errors import ConfigError
from wire.sinks.kafka_sink import KafkaSink, KafkaTransactionalSink, encode_keys, encode_values, kafka

TABLE = pa.table({"k": ["a", None], "n": [1, 2], "b": [b"\x00", None]})


def test_json_string_bytes_values_and_keys():
    assert [json.loads(v) for v in encode_values(TABLE.select(["k", "n"]), "json")] == [
        {"k": "a", "n": 1}, {"k": None, "n": 2}]
    assert encode_values(TABLE, "string", value_column="n") == [b"1", b"2"]
    assert encode_values(TABLE, "bytes", value_column="b") == [b"\x00", None]
    assert encode_keys(TABLE, "k") == [b"a", None] and encode_keys(TABLE, None) == [None, None]


def test_avro_values_read_back_with_the_schema():
    schema = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "k", "type": ["null", "string"]}, {"name": "n", "type": "long"}]})
    values = encode_values(TABLE.select(["k", "n"]), "avro", avro_schema=schema)
    assert [fastavro.schemaless_reader(io.BytesIO(v), schema, None) for v in values] == [
        {"k": "a", "n": 1}, {"k": None, "n": 2}]


def test_guarantees_and_config_errors():
    assert isinstance(kafka("h:1", "t"), KafkaTransactionalSink)
    assert kafka("h:1", "t").guarantee == "exactly_once"
    plain = kafka("h:1", "t", transactional=False)
    assert type(plain) is KafkaSink and plain.guarantee == "at_least_once"
    assert kafka("h:1", "t").markers == "t.wire-epochs"
    with pytest.raises(ConfigError, match="value_column"):
        kafka("h:1", "t", value_format="string")
    with pytest.raises(ConfigError, match=r"transactional\.id"):
        kafka("h:1", "t", config={"transactional.id": "x"})
    with pytest.raises(ConfigError, match="marker_topic"):
        kafka("h:1", "t", transactional=False, marker_topic="m")
    assert kafka("h:1", "t", key="k").fingerprint()["topic"] == "t"
