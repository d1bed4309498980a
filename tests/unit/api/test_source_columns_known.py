"""A wrong event_time or key column is refused when the flow is built, if the schema is given (item 8)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.errors import ConfigError

SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])


def files(schema=SCHEMA):
    return wire.sources.files("in/*.csv", format="csv", schema=schema)


def test_a_wrong_event_time_column_names_the_column_the_columns_and_the_fix():
    with pytest.raises(ConfigError) as info:
        wire.Flow("f").source(files(), event_time="tss", key="user", name="events")
    msg = str(info.value)
    assert info.value.parameter == "event_time" and info.value.step == "events"
    assert "invalid event_time='tss'" in msg
    assert "['ts', 'user', 'amount']" in msg and "did you mean 'ts'?" in msg
    assert "flow.source(..., event_time=<column>)" in msg
    wire.Flow("f").source(files(), event_time="ts", key="user", name="events")  # the fix works


def test_a_wrong_key_column_is_refused_too():
    with pytest.raises(ConfigError) as info:
        wire.Flow("f").source(files(), event_time="ts", key="users")
    assert info.value.parameter == "key" and "did you mean 'user'?" in str(info.value)


def test_a_kafka_schema_is_checked_with_its_metadata_columns():
    src = wire.sources.kafka("127.0.0.1:1", "events", group="g", schema=SCHEMA)  # no broker is asked
    with pytest.raises(ConfigError, match=r"invalid event_time='time'.*\['ts', 'user', 'amount', "):
        wire.Flow("f").source(src, event_time="time")
    wire.Flow("f").source(src, event_time="kafka_timestamp", key="user")


def test_without_a_given_schema_nothing_is_read_when_the_flow_is_built(tmp_path):
    # the files need not exist yet: the column is checked when the flow compiles
    wire.Flow("f").source(wire.sources.files(str(tmp_path / "later" / "*.csv"), format="csv"),
                          event_time="anything", key="whatever")
