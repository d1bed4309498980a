"""The Kafka reader's planner and executor reads against a fake broker (no broker, no Spark; ``fake_broker``).

The fake consumer hands out records the way librdkafka does in ways that matter here:
runs of one partition's records interleaved across partitions (run lengths drawn at
random), a partition-EOF event queued when a partition's records run out (it may reach a
later ``consume`` after the partition grew), offsets with gaps (transaction markers),
records deleted below a low watermark, and timestamps. Expectations come from the input
alone: every valid record read exactly once, in offset order, whatever the epoch split,
the runs, and whether an executor's consumer is new or kept from an earlier task; the
malformed records as dead letters (``topic:partition:offset``); each epoch's recorded
watermark equal to the minimum over partitions of (largest valid event time admitted so
far minus the delay), computed here from the admitted offsets; a replay of an epoch reads
the same rows.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxRows

pytest.importorskip("confluent_kafka")
import confluent_kafka
from confluent_kafka import KafkaError
from tests.unit.sources.kafka_source.fake_broker import (
    DELAY,
    READERS,
    SCHEMA,
    Broker,
    Consumer,
    Msg,
    fresh_cache,
    make_reader,
    read_epoch,
    topics,
)

from wire.core import envelope
from wire.core.time import NO_WATERMARK
from wire.core.watermarks import WatermarkPolicy
from wire.errors import WireError
from wire.sources.base.offsets import partitions_of
from wire.sources.kafka_source import consumers
from wire.sources.kafka_source.reader import KafkaStreamReader
from wire.sources.kafka_source.source import KafkaBinding, kafka

__all__ = ["fresh_cache"]  # the autouse fixture


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topics(), st.lists(st.integers(3, 30), min_size=1, max_size=12), st.booleans(),
       st.lists(st.integers(0, 2), min_size=1, max_size=8))
def test_every_record_once_and_the_watermark_of_each_epoch(monkeypatch, data, budgets, replay, workers):
    """Each epoch is read by one of three executor processes (``workers``, cycled), each with its
    consumer cache: a kept consumer reads on from where it stopped, skipping ranges other
    processes read, or is assigned again. Budgets of at least the partition count: a smaller
    budget can go, epoch after epoch, to a partition whose only backlog is a trailing
    transaction marker (a known limit, not new here)."""
    broker, truth = data
    caches = [consumers.ConsumerCache() for _ in range(3)]
    r = make_reader(broker, monkeypatch)
    try:
        check_every_record_once(r, broker, truth, budgets, replay, workers, caches, monkeypatch)
    finally:
        r.close()


def check_every_record_once(r, broker, truth, budgets, replay, workers, caches, monkeypatch):
    offset = r.initialOffset()
    rows, dead, seen = [], [], set()
    i = 0
    while True:
        end = r.latestOffset(offset, ReadMaxRows(budgets[i % len(budgets)]))
        i += 1
        if end == offset:  # no epoch: nothing left, or nothing read ahead yet (the thread is late)
            if offset["admitted"] == len(truth):
                break
            continue
        monkeypatch.setattr(consumers, "CONSUMERS", caches[workers[i % len(workers)]])
        got, letters = read_epoch(r, offset, end)
        if replay:  # a replay, with the consumers the first read left in the cache
            assert read_epoch(r, offset, end) == (got, letters)
        rows += got
        dead += letters
        for name, p in partitions_of(end).items():
            seen |= {(int(name.split(":")[1]), o) for o in range(p.first, p.next)}
        # the recorded watermark: min over partitions of their largest valid event time so far, minus DELAY
        marks = []
        for part in broker.parts:
            ets = [v[0] for (q, o), v in truth.items() if q == part and (q, o) in seen and v is not None]
            marks.append(max(ets) - DELAY if ets else NO_WATERMARK)
        assert end["watermark"] == max(NO_WATERMARK, min(marks)), (end, marks)
        r.commit(end)
        offset = end
        assert i < 200
    expected = sorted((p, o, v[0], v[1]) for (p, o), v in truth.items() if v is not None)
    assert sorted(rows) == expected and len(rows) == len(expected)
    for p in broker.parts:  # in offset order within a partition
        assert [o for q, o, _, _ in rows if q == p] == sorted(o for q, o, _, _ in rows if q == p)
    assert sorted(loc for loc, _ in dead) == sorted(f"t:{p}:{o}" for (p, o), v in truth.items() if v is None)
    assert offset["admitted"] == len(truth)


def test_records_deleted_below_the_low_watermark_are_one_gone_dead_letter(monkeypatch):
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(8)]
    broker = Broker({0: recs}, {0: 8})
    r = make_reader(broker, monkeypatch)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(8))
    broker.low[0] = 5  # retention deleted 0..4 before the executor read the range
    consumers.CONSUMERS.kept.clear()
    rows, dead = read_epoch(r, start, end)
    assert [o for _, o, _, _ in rows] == [5, 6, 7]
    assert dead == [("t:0:[0,8)", "5 admitted records are gone (deleted by retention or compaction)")]


def test_pruned_columns_and_kafka_timestamp_event_time(monkeypatch):
    """The flow reads only ``k``: rows carry it alone; event time from the record timestamp."""
    recs = [(o, b"k", json.dumps({"t": o, "k": f"k{o}"}).encode(), 5_000 + o) for o in range(4)]
    broker = Broker({0: recs}, {0: 4})
    src = kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA)
    binding = KafkaBinding("src", src, src.resolve_schema(), "kafka_timestamp", watermark=WatermarkPolicy(0),
                           max_events_per_epoch=10, key_groups=1, columns=("k",))
    r = KafkaStreamReader(binding, clock=lambda: 1_000_000)
    r._client = broker.consumer()
    READERS.append(r)
    monkeypatch.setattr(confluent_kafka, "Consumer", broker.consumer)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadMaxRows(10))
    assert end["watermark"] == 5_003
    batches = [b for task in r.partitions(start, end) for b in r.read(task)]
    data = pa.Table.from_batches(batches).to_pylist()
    got = [(d["k"], d["__et"]) for d in data if d["__kind"] == envelope.KIND_DATA]
    assert got == [(f"k{o}", 5_000 + o) for o in range(4)]
    assert "t" not in pa.Table.from_batches(batches).column_names


def test_planning_again_from_an_earlier_offset_reads_the_same_records(monkeypatch):
    """The planner read ahead past the first epoch; planned again from the start (as after a failed
    batch), the read-ahead consumer is assigned back and the epoch admits the same range."""
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(30)]
    broker = Broker({0: recs, 1: recs[:10]}, {0: 30, 1: 10})
    r = make_reader(broker, monkeypatch)
    start = r.initialOffset()
    first = r.latestOffset(start, ReadMaxRows(8))
    second = r.latestOffset(first, ReadMaxRows(8))
    again = r.latestOffset(start, ReadMaxRows(8))
    assert partitions_of(again) == partitions_of(first)
    assert {n: (p.first, p.next, p.taken) for n, p in partitions_of(second).items()} == {
        "t:0": (4, 8, 4), "t:1": (4, 8, 4)}
    assert again["watermark"] == first["watermark"] == 30 - DELAY


def test_a_fatal_error_read_ahead_fails_the_planning(monkeypatch):
    recs = [(o, b"k", json.dumps({"t": o, "k": "a"}).encode(), None) for o in range(5)]
    broker = Broker({0: recs}, {0: 5})
    r = make_reader(broker, monkeypatch)
    start = r.initialOffset()
    fatal = Msg("t", 0, 0, error=KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    monkeypatch.setattr(Consumer, "consume", lambda self, num_messages=1, timeout=-1: [fatal])
    with pytest.raises(WireError, match="fatal Kafka error"):
        r.latestOffset(start, ReadMaxRows(5))


def test_a_bounded_source_reads_up_to_the_end_offsets_taken_at_the_start(monkeypatch):
    """Issue 26 item 10: partition 0 ends at 20, partition 1 at 16 (its last offset, 15, a
    transaction marker); then 10 records come to each, and a partition 2 is added. The bounded
    source admits exactly the records before 20 and 16, then ends (the maximal watermark, ``ended``),
    in epochs of 7 (and no later planning admits anything)."""
    value = lambda o, p: json.dumps({"t": 100 * p + o, "k": f"k{o % 3}"}).encode()  # noqa: E731
    p0 = [(o, b"k", value(o, 0), None) for o in range(20)]
    p1 = [(o, b"k", value(o, 1), None) for o in range(15)]
    broker = Broker({0: p0, 1: p1}, {0: 20, 1: 16})
    r = make_reader(broker, monkeypatch, bounded=True)
    offset = r.initialOffset()
    later = {0: [(o, b"k", value(o, 0), None) for o in range(20, 30)],
             1: [(o, b"k", value(o, 1), None) for o in range(16, 26)]}
    for p, recs in later.items():
        broker.parts[p] = broker.parts[p] + recs
        broker.ends[p] = recs[-1][0] + 1
    broker.parts[2], broker.ends[2], broker.low[2] = later[0], 30, 0
    rows = []
    for _ in range(50):
        end = r.latestOffset(offset, ReadMaxRows(7))
        if end == offset:
            break
        rows += read_epoch(r, offset, end)[0]
        offset = end
    assert offset.get("ended") and offset["watermark"] == envelope.MAX_WATERMARK
    assert {n: p.next for n, p in partitions_of(offset).items()} == {"t:0": 20, "t:1": 16}
    expected = sorted([(0, o, o, f"k{o % 3}") for o in range(20)] + [(1, o, 100 + o, f"k{o % 3}")
                                                                      for o in range(15)])
    assert sorted(rows) == expected and len(rows) == len(expected)
    assert r.latestOffset(offset, ReadMaxRows(7)) is offset


def test_bounded_is_checked_when_the_source_is_built():
    from wire.errors import ConfigError

    with pytest.raises(ConfigError, match="bounded"):
        kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA, bounded="yes")  # type: ignore[arg-type]
    assert kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA, bounded=True).bounded


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topics(), st.lists(st.integers(3, 30), min_size=1, max_size=6), st.integers(0, 5))
def test_a_bounded_source_admits_every_record_before_the_start_ends_once_and_nothing_after(
        monkeypatch, data, budgets, more):
    """Any topic (poison records, transaction-marker gaps, trailing markers), any epoch budgets:
    after the start ``more`` records come to each partition; the bounded source admits each
    record before the start's end offsets once (the valid ones as rows, the others as dead
    letters), none after them, and ends."""
    broker, truth = data
    monkeypatch.setattr(consumers, "CONSUMERS", consumers.ConsumerCache())  # none of another example
    r = make_reader(broker, monkeypatch, bounded=True)
    offset = r.initialOffset()
    for p in broker.parts:
        first = broker.ends[p]
        broker.parts[p] = broker.parts[p] + [(first + i, b"k", b'{"t": 1, "k": "late"}', None)
                                             for i in range(more)]
        broker.ends[p] = first + more
    rows, dead = [], []
    for i in range(400):
        end = r.latestOffset(offset, ReadMaxRows(budgets[i % len(budgets)]))
        if end == offset:
            break
        got, letters = read_epoch(r, offset, end)
        rows += got
        dead += letters
        r.commit(end)
        offset = end
    assert offset.get("ended")
    expected = sorted((p, o, v[0], v[1]) for (p, o), v in truth.items() if v is not None)
    assert sorted(rows) == expected and len(rows) == len(expected)
    assert sorted(loc for loc, _ in dead) == sorted(f"t:{p}:{o}" for (p, o), v in truth.items() if v is None)
