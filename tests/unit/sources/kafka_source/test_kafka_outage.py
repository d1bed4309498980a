"""The Kafka planner through a broker outage, against a fake consumer (no broker, no Spark).

Hand-derived expectations: while every request fails the planner returns the epoch's start
offset (no epoch, the watermark held), and once the outage has lasted longer than
``unavailable_timeout`` it fails with a WireError naming that parameter; a fatal error fails
at once; after the outage the next epoch admits the records, from the committed position.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException

from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError, WireError
from wire.sources.base.offsets import initial_offset, partitions_of
from wire.sources.kafka_source import range_fetch
from wire.sources.kafka_source.decode import KafkaBatch, KafkaRecord
from wire.sources.kafka_source.reader import KafkaStreamReader
from wire.sources.kafka_source.source import KafkaBinding, kafka

SCHEMA = pa.schema([("t", pa.int64())])


class FakeConsumer:
    """Topic ``t`` with one partition holding ``n`` records; ``down`` makes every request fail."""

    def __init__(self, n: int) -> None:
        self.n, self.down, self.fatal = n, False, False

    def _check(self) -> None:
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down", fatal=self.fatal))

    def commit(self, offsets, asynchronous):
        self._check()

    def list_topics(self, timeout):
        self._check()

        from types import SimpleNamespace

        return SimpleNamespace(topics={"t": SimpleNamespace(error=None, partitions={0: None})})

    def get_watermark_offsets(self, tp, timeout, cached):
        self._check()
        return 0, self.n


def reader(unavailable_timeout) -> tuple[KafkaStreamReader, FakeConsumer]:
    src = kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA, unavailable_timeout=unavailable_timeout)
    binding = KafkaBinding("src", src, src.resolve_schema(), "t", watermark=WatermarkPolicy(0),
                           max_events_per_epoch=100, key_groups=1)
    r = KafkaStreamReader(binding, clock=lambda: 1_000_000)
    fake = FakeConsumer(5)
    r._client = fake
    # The fetch path reads from the consumer; serve the records straight from the fake.
    r._fetch = lambda positions, counts: {  # type: ignore[method-assign]
        n: r._decode_ahead(n, KafkaBatch.of([KafkaRecord(o, b"k", b'{"t": %d}' % (o * 10), None)
                                             for o in range(positions[n], positions[n] + c)]))
        for n, c in counts.items()}
    return r, fake


def said(record, text: str) -> bool:
    return any(text in str(w.message) for w in record)


def test_outage_holds_then_fails_after_unavailable_timeout():
    r, fake = reader("1s")
    start = initial_offset({"t:0": 0})
    fake.down = True
    with pytest.warns(RuntimeWarning) as record:
        assert r.latestOffset(start, r.getDefaultReadLimit()) == start
        assert r.latestOffset(start, r.getDefaultReadLimit()) == start
        time.sleep(1.1)
        with pytest.raises(WireError, match="unavailable_timeout=1000 ms"):
            r.latestOffset(start, r.getDefaultReadLimit())
    assert said(record, "kafka source 'src': unreachable, waiting")


def test_outage_then_recovery_admits_from_the_same_position():
    r, fake = reader(None)
    start = initial_offset({"t:0": 0})
    fake.down = True
    with pytest.warns(RuntimeWarning) as record:
        for _ in range(3):
            assert r.latestOffset(start, r.getDefaultReadLimit()) == start
        fake.down = False
        end = r.latestOffset(start, r.getDefaultReadLimit())
    assert said(record, "unreachable, waiting") and said(record, "reachable again")
    p = partitions_of(end)["t:0"]
    assert (p.first, p.next, p.taken) == (0, 5, 5)
    assert end["admitted"] == 5


def test_fatal_error_fails_at_once():
    r, fake = reader(None)
    fake.down, fake.fatal = True, True
    with pytest.raises(WireError, match="fatal"):
        r.latestOffset(initial_offset({"t:0": 0}), r.getDefaultReadLimit())


@pytest.mark.parametrize("bad", [0, "soon", -5])
def test_unavailable_timeout_is_checked_at_build_time(bad):
    with pytest.raises(ConfigError, match="unavailable_timeout"):
        kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA, unavailable_timeout=bad)


def test_executor_read_retries_the_first_offset_through_an_outage(monkeypatch):
    """An executor's first-offset lookup fails twice (brokers down), then answers: the read goes on."""
    calls = []

    class Flaky:
        def get_watermark_offsets(self, tp, timeout):
            calls.append(tp)
            if len(calls) < 3:
                raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "down"))
            return 7, 10

    monkeypatch.setattr("wire.sources.kafka_source.range_fetch.time.sleep", lambda s: None)
    from confluent_kafka import TopicPartition

    assert range_fetch._low_offset(Flaky(), TopicPartition("t", 0), "src", 1.0) == 7
    assert len(calls) == 3
