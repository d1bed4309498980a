"""One watermark policy per source step: given at flow.source, converted once, used by every connector.

``wire.BoundedOutOfOrderness(max_delay, max_future=, idle_timeout=, interval=)`` is the
value; the compiler hands it to the connector in its ``ReadRequest``, the binding carries it
to the readers. The connectors' own ``idle_timeout`` / ``watermark_interval`` still work
(deprecated) and are forwarded into it. Expected watermarks are derived by hand from the
rules of :mod:`wire.core.watermarks`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import wire
from wire.compiler.plan_compiler import _open_source
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError
from wire.sources.base.source import ReadRequest
from wire.sources.file_source.source import FileSource, SourceBinding, WireFileStreamReader, files
from wire.sources.http_source.config import IngestBinding
from wire.sources.http_source.reader import HttpIngestReader
from wire.sources.http_source.source import http_ingest
from wire.sources.kafka_source.config import KafkaBinding
from wire.sources.kafka_source.reader import KafkaStreamReader
from wire.sources.kafka_source.source import kafka
from wire.sources.redis_source.config import RedisBinding
from wire.sources.redis_source.reader import RedisStreamReader
from wire.sources.redis_source.source import redis_stream

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


def put(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id,ts\n" + "".join(f"{i},{ts}\n" for i, ts in rows))


def step(reader, start):
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    return (start, None) if end == start else (end, end)


def test_the_policy_converts_every_duration_once_to_ms():
    p = wire.BoundedOutOfOrderness("5s", max_future="1h", idle_timeout=timedelta(seconds=30), interval="1s")
    got = (p.max_delay_ms, p.max_future_ms, p.idle_timeout_ms, p.interval_ms)
    assert got == (5_000, 3_600_000, 30_000, 1_000)
    assert isinstance(p, WatermarkPolicy)
    d = wire.BoundedOutOfOrderness(0)
    assert (d.max_delay_ms, d.max_future_ms, d.idle_timeout_ms, d.interval_ms) == (0, None, None, 200)


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"idle_timeout": 0}, "idle_timeout"),
    ({"idle_timeout": "-1s"}, "idle_timeout"),
    ({"interval": -5}, "interval"),
    ({"interval": "soon"}, "interval"),
])
def test_an_invalid_policy_fails_when_built_naming_the_parameter(kwargs, param):
    with pytest.raises(ConfigError) as e:
        wire.BoundedOutOfOrderness("1s", **kwargs)
    assert e.value.parameter == param


def test_flow_source_hands_the_one_policy_to_the_connector():
    seen: list[ReadRequest] = []

    class Capture:
        bounded = True

        def resolve_schema(self) -> pa.Schema:
            return SCHEMA

        def read_stream(self, spark: Any, request: ReadRequest) -> Any:
            seen.append(request)
            return None

    policy = wire.BoundedOutOfOrderness("2s", max_future="1m", idle_timeout="3s", interval="400ms")
    flow = wire.Flow("policy")
    flow.source(Capture(), event_time="ts", watermark=policy, name="events")
    node = flow.plan().node("events")
    _open_source(None, node, 2, None)  # type: ignore[arg-type]
    assert seen[0].watermark.to_json() == WatermarkPolicy(2_000, 3_000, 400, 60_000).to_json()


def test_idle_timeout_of_the_policy_idles_a_silent_file_partition(tmp_path):
    """p1 silent: it holds the watermark at 100 until silent for more than 1000 ms."""
    base, now = tmp_path / "in", [0]
    put(base / "p0" / "a.csv", [(1, 1000)])
    put(base / "p1" / "a.csv", [(2, 100)])
    src = files(str(base), format="csv", partition_by="directory", bounded=False)
    binding = SourceBinding("src", src, SCHEMA, "ts", wire.BoundedOutOfOrderness(0, idle_timeout="1s"), 4, 1)
    reader = WireFileStreamReader(binding, clock=lambda: now[0])
    start, _ = step(reader, reader.initialOffset())
    assert start["watermark"] == 100
    now[0] = 800
    put(base / "p0" / "b.csv", [(3, 2000)])
    start, _ = step(reader, start)
    assert start["watermark"] == 100 and not start["partitions"]["p1"]["idle"]
    now[0] = 1500
    put(base / "p0" / "c.csv", [(4, 3000)])
    start, _ = step(reader, start)
    assert start["watermark"] == 3000 and start["partitions"]["p1"]["idle"]


def test_interval_of_the_policy_spaces_watermark_only_epochs(tmp_path):
    """Both partitions idle after 1000 ms: W = 5000 + (now - 1000); ticks at least 500 ms apart."""
    base, now = tmp_path / "in", [0]
    put(base / "p0" / "a.csv", [(1, 5000)])
    put(base / "p1" / "a.csv", [(2, 3000)])
    src = files(str(base), format="csv", partition_by="directory", bounded=False)
    policy = wire.BoundedOutOfOrderness(0, idle_timeout=1000, interval="500ms")
    reader = WireFileStreamReader(SourceBinding("src", src, SCHEMA, "ts", policy, 4, 1), clock=lambda: now[0])
    start, _ = step(reader, reader.initialOffset())
    assert start["watermark"] == 3000
    now[0] = 1100
    start, _ = step(reader, start)
    assert start["watermark"] == 5100
    now[0] = 1599  # 499 ms after the last tick
    assert step(reader, start)[1] is None
    now[0] = 1600
    start, _ = step(reader, start)
    assert start["watermark"] == 5600


def test_every_live_connector_reads_the_same_policy(tmp_path):
    policy = wire.BoundedOutOfOrderness(7, max_future="9s", idle_timeout="3s", interval="321ms")
    expected = WatermarkPolicy(7, 3_000, 321, 9_000)
    put(tmp_path / "in" / "a.csv", [(1, 1)])
    schema = pa.schema([("t", pa.int64())])
    file_src = files(str(tmp_path / "in"), format="csv", schema=SCHEMA)
    k = kafka("127.0.0.1:9092", "t", group="g", schema=schema)
    r = redis_stream("redis://127.0.0.1:6379/0", "s", group="g", schema=schema)
    h = http_ingest(port=8080, wal_dir=str(tmp_path / "wal"), schema=schema)
    readers = [
        WireFileStreamReader(SourceBinding("f", file_src, SCHEMA, "ts", policy, 10, 1)),
        KafkaStreamReader(KafkaBinding("k", k, k.resolve_schema(), "t", policy, 10, 1)),
        RedisStreamReader(RedisBinding("r", r, schema, "t", policy, 10, 1)),
        HttpIngestReader(IngestBinding("h", h, schema, "t", policy, 10, 1)),
    ]
    assert [rd._policy for rd in readers] == [expected] * 4


def test_a_binding_carries_the_policy_through_json(tmp_path):
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    policy = wire.BoundedOutOfOrderness(5, max_future=6, idle_timeout=7, interval=8)
    b = SourceBinding("src", src, SCHEMA, "ts", policy, 10, 1)
    back = SourceBinding.from_json(b.to_json(), FileSource)
    assert back == b and back.watermark == WatermarkPolicy(5, 7, 8, 6)


def test_connector_keywords_are_deprecated_and_forwarded_into_the_policy(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"files\(idle_timeout=\.\.\., watermark_interval=\.\.\.\) "
                                                 r"is deprecated.*BoundedOutOfOrderness"):
        src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA, idle_timeout="2s",
                    watermark_interval="1s")
    b = SourceBinding("src", src, SCHEMA, "ts", wire.BoundedOutOfOrderness(10), 10, 1)
    assert b.watermark == WatermarkPolicy(10, 2_000, 1_000)
    same = SourceBinding("src", src, SCHEMA, "ts", wire.BoundedOutOfOrderness(10, idle_timeout="2s"), 10, 1)
    assert same.watermark == WatermarkPolicy(10, 2_000, 1_000)
    with pytest.raises(ConfigError) as e:
        SourceBinding("src", src, SCHEMA, "ts", wire.BoundedOutOfOrderness(10, idle_timeout="5s"), 10, 1)
    assert e.value.parameter == "idle_timeout" and "5000 ms" in str(e.value)


def test_a_policy_the_connector_contradicts_fails_at_flow_source(tmp_path):
    with pytest.warns(DeprecationWarning):
        src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA, idle_timeout="2s")
    flow = wire.Flow("contradiction")
    with pytest.raises(ConfigError) as e:
        flow.source(src, event_time="ts", watermark=wire.BoundedOutOfOrderness(10, idle_timeout="5s"))
    assert e.value.parameter == "idle_timeout" and "5000 ms" in str(e.value) and "2000" in str(e.value)
    assert flow.plan().nodes == ()  # nothing was added
    flow.source(src, event_time="ts", watermark=wire.BoundedOutOfOrderness(10, idle_timeout="2s"))  # agrees


T = pa.schema([("t", pa.int64())])


@pytest.mark.parametrize("make", [
    lambda tmp: kafka("127.0.0.1:9092", "t", group="g", schema=T, idle_timeout="1s"),
    lambda tmp: redis_stream("redis://127.0.0.1:6379/0", "s", group="g", schema=T, watermark_interval="1s"),
    lambda tmp: http_ingest(port=8080, wal_dir=str(tmp), schema=T, idle_timeout=5),
])
def test_every_connector_warns_about_its_watermark_keywords(make, tmp_path):
    with pytest.warns(DeprecationWarning, match="BoundedOutOfOrderness"):
        make(tmp_path)


def test_no_warning_without_the_deprecated_keywords(tmp_path, recwarn):
    files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
