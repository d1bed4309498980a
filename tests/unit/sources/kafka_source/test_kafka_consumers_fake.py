"""The Kafka source's consumers against a fake broker (``fake_broker``).

Kept consumers and their pausing, the planner's read-ahead, the group's commits. What each
test expects comes from the input alone: which records a task reads with a kept consumer
(read on, or assigned again), when a consumer is paused and resumed (at a partition's
end), what the read-ahead hands out and waits for, and when the group's offsets are
committed.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError
from tests.unit.sources.kafka_source.fake_broker import (
    SCHEMA,
    Broker,
    Consumer,
    Msg,
    fresh_cache,
    make_reader,
    read_epoch,
)

from wire.core.watermarks import WatermarkPolicy
from wire.sources.base.offsets import partitions_of
from wire.sources.kafka_source import consumers, read_ahead
from wire.sources.kafka_source import reader as kafka_reader
from wire.sources.kafka_source.reader import KafkaStreamReader
from wire.sources.kafka_source.source import KafkaBinding, kafka

__all__ = ["fresh_cache"]  # the autouse fixture


def test_a_kept_consumer_reads_on_past_an_eof_it_queued_before_the_partition_grew(monkeypatch):
    """Task 1 reads [0, 2) of a 3-record partition (record 2 and an EOF at 3 stay queued); 3 more
    records come; task 2 reads [2, 6) with the same consumer: the queued EOF is stale, all 4 are read."""
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(6)]
    broker = Broker({0: recs[:3]}, {0: 3})
    r = make_reader(broker, monkeypatch)
    first = r.fetch_range("t:0", 0, 2, 2).offsets.tolist()
    (kept,) = consumers.CONSUMERS.kept.values()
    kept.consumer.consume(0)  # (the fake queues as it hands out: let it reach the end)
    assert first == [0, 1] and kept.resume_at == 2 and not kept.paused
    broker.parts[0], broker.ends[0] = recs, 6
    assert r.fetch_range("t:0", 2, 6, 4).offsets.tolist() == [2, 3, 4, 5]
    assert len(broker.consumers) == 2 and broker.consumers[1].assigns == 1  # kept, not assigned again
    # a replay of the first range: the kept consumer is assigned again, at 0
    assert r.fetch_range("t:0", 0, 3, 3).offsets.tolist() == [0, 1, 2]
    assert len(broker.consumers) == 2 and broker.consumers[1].assigns == 2


def test_a_consumer_kept_at_the_partition_end_is_paused_and_the_next_task_resumes_it(monkeypatch):
    """A consumer left fetching at a partition's end keeps a fetch waiting at the broker (noida-db
    spins on it): kept, it is paused; the next task resumes it and reads the records that came."""
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(6)]
    broker = Broker({0: recs[:3]}, {0: 3})
    r = make_reader(broker, monkeypatch)
    assert r.fetch_range("t:0", 0, 3, 3).offsets.tolist() == [0, 1, 2]
    (kept,) = consumers.CONSUMERS.kept.values()
    assert kept.paused and kept.consumer.paused == {0} and kept.resume_at == 3
    broker.parts[0], broker.ends[0] = recs, 6
    assert r.fetch_range("t:0", 3, 5, 2).offsets.tolist() == [3, 4]
    assert not kept.paused and kept.consumer.paused == set() and kept.consumer.assigns == 1
    assert r.fetch_range("t:0", 5, 6, 1).offsets.tolist() == [5]
    assert kept.paused and kept.consumer.paused == {0}


def test_the_read_ahead_pauses_a_partition_at_its_end_and_resumes_it_when_records_come(monkeypatch):
    """The planner's read-ahead reads partition 0 to its end and pauses it; once the planner's
    end offsets say more records came, planning resumes it and admits them, each once."""
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(10)]
    broker = Broker({0: recs[:4]}, {0: 4})
    r = make_reader(broker, monkeypatch)
    start = r.initialOffset()
    mid = r.latestOffset(start, ReadMaxRows(100))
    ahead = r._read_ahead()
    deadline = time.monotonic() + 10
    while ahead.consumer.paused != {0} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ahead.consumer.paused == {0} and ahead.paused == {"t:0"}
    broker.parts[0], broker.ends[0] = recs, 10
    end = r.latestOffset(mid, ReadMaxRows(100))
    rows = read_epoch(r, start, mid)[0] + read_epoch(r, mid, end)[0]
    assert [o for _, o, _, _ in rows] == list(range(10))


def test_group_offsets_are_committed_at_most_once_per_commit_interval(monkeypatch):
    """commit_interval 5 s: the first acknowledgement commits; the next two, 1 and 2 s later, wait
    (the later replaces the earlier); a planning 6 s after the commit commits the latest; stop()
    commits what waits. Never a position no epoch acknowledged; never one the group has."""
    now = [100.0]
    monkeypatch.setattr(kafka_reader.time, "monotonic", lambda: now[0])
    broker = Broker({0: [], 1: []}, {0: 0, 1: 0})
    r = make_reader(broker, monkeypatch)
    commits: list[dict[str, int]] = []
    r._client.commit = lambda offsets, asynchronous: commits.append(  # type: ignore[method-assign]
        {f"{tp.topic}:{tp.partition}": tp.offset for tp in offsets})
    r.acknowledge({"t:0": 3, "t:1": 4})
    now[0] += 1
    r.acknowledge({"t:0": 5, "t:1": 4})
    now[0] += 1
    r.acknowledge({"t:0": 7, "t:1": 9})
    r.prepare()
    assert commits == [{"t:0": 3, "t:1": 4}]
    now[0] += 4
    r.prepare()
    assert commits == [{"t:0": 3, "t:1": 4}, {"t:0": 7, "t:1": 9}]
    r.prepare()
    r.acknowledge({"t:0": 8, "t:1": 9})
    assert len(commits) == 2
    r.stop()
    assert commits[-1] == {"t:0": 8} and len(commits) == 3  # t:1 is at 9 already
    now[0] += 10
    r.acknowledge({"t:0": 8, "t:1": 9})  # nothing new (an epoch that admitted nothing)
    assert len(commits) == 3


def test_commit_interval_zero_commits_every_acknowledgement(monkeypatch):
    broker = Broker({0: []}, {0: 0})
    src = kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA, commit_interval=0)
    binding = KafkaBinding("src", src, src.resolve_schema(), "t", watermark=WatermarkPolicy(0),
                           max_events_per_epoch=10,
                           key_groups=1)
    r = KafkaStreamReader(binding)
    r._client = broker.consumer()
    commits: list[int] = []
    r._client.commit = lambda offsets, asynchronous: commits.append(offsets[0].offset)  # type: ignore[method-assign]
    for o in (1, 2, 3):
        r.acknowledge({"t:0": o})
    assert commits == [1, 2, 3]


def test_a_kept_consumer_reads_on_over_ranges_other_processes_read(monkeypatch):
    """A consumer kept at 3 reads [6, 9) by dropping 3..5 (no new assignment); for [40, 43), more than
    4 ranges ahead, it is assigned at 40."""
    recs = [(o, b"k", json.dumps({"t": o, "k": "a"}).encode(), None) for o in range(50)]
    broker = Broker({0: recs}, {0: 50})
    r = make_reader(broker, monkeypatch)
    assert r.fetch_range("t:0", 0, 3, 3).offsets.tolist() == [0, 1, 2]
    assert r.fetch_range("t:0", 6, 9, 3).offsets.tolist() == [6, 7, 8]
    (kept,) = consumers.CONSUMERS.kept.values()
    assert kept.consumer.assigns == 1 and kept.resume_at == 9
    assert r.fetch_range("t:0", 40, 43, 3).offsets.tolist() == [40, 41, 42]
    assert kept.consumer.assigns == 2 and len(broker.consumers) == 2


def test_offsets_the_group_has_are_not_committed_again(monkeypatch):
    """The group committed 2 and 0 before the query started: the first planning's catch-up
    acknowledgement of those positions commits nothing; the first epoch's end commits partition 0 only."""
    recs = [(o, b"k", json.dumps({"t": o, "k": "a"}).encode(), None) for o in range(6)]
    broker = Broker({0: recs, 1: []}, {0: 6, 1: 0})
    r = make_reader(broker, monkeypatch)
    had = {0: 2, 1: 0}
    monkeypatch.setattr(Consumer, "committed", lambda self, tps, timeout=None: [
        SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=had[tp.partition]) for tp in tps])
    commits: list[dict[str, int]] = []
    r._client.commit = lambda offsets, asynchronous: commits.append(  # type: ignore[method-assign]
        {f"{tp.topic}:{tp.partition}": tp.offset for tp in offsets})
    start = r.initialOffset()
    assert {n: p.next for n, p in partitions_of(start).items()} == {"t:0": 2, "t:1": 0}
    end = r.latestOffset(start, ReadMaxRows(10))
    assert commits == []
    r.commit(end)
    assert commits == [{"t:0": 6}]


def test_the_consumer_cache_keeps_at_most_8_closes_idle_ones_and_none_after_a_fork(monkeypatch):
    now = [1_000.0]
    monkeypatch.setattr(kafka_reader.time, "monotonic", lambda: now[0])
    cache = consumers.ConsumerCache()
    broker = Broker({0: []}, {0: 0})
    kept = []
    for i in range(9):
        now[0] += 1
        kept.append(consumers.Kept(broker.consumer(), i, 0.0))
        cache.give(("conf", f"t:{i}"), kept[-1])
    assert kept[0].consumer.closed and not any(k.consumer.closed for k in kept[1:])  # the least recently used
    assert cache.take(("conf", "t:0")) is None
    assert cache.take(("conf", "t:5")) is kept[5]  # now out of the cache, in use
    now[0] += consumers.CACHED_IDLE_S - 5  # t:1, t:2 unused for longer than the idle time
    cache.expire(now[0])
    assert [k.consumer.closed for k in kept[1:5]] == [True, True, False, False]
    cache.pid = -1  # as in a process forked from this one
    assert cache.take(("conf", "t:8")) is None and not cache.kept


class Scripted:
    """A consumer that hands out ``msgs`` in order, ``size`` per consume call."""

    def __init__(self, msgs: list[Msg], size: int) -> None:
        self.msgs, self.size, self.assigned = list(msgs), size, []
        self.paused: list[set[int]] = []
        self.resumed: list[set[int]] = []

    def assign(self, tps: list[Any]) -> None:
        self.assigned.append({tp.partition: tp.offset for tp in tps})

    def pause(self, tps: list[Any]) -> None:
        self.paused.append({tp.partition for tp in tps})

    def resume(self, tps: list[Any]) -> None:
        self.resumed.append({tp.partition for tp in tps})

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        out, self.msgs = self.msgs[:min(num_messages, self.size)], self.msgs[min(num_messages, self.size):]
        if not out:
            time.sleep(0.002)
        return out

    def close(self) -> None:
        pass


def test_the_read_ahead_reads_past_its_limit_for_a_partition_that_waits(monkeypatch):
    """Limit 4 records held; partition 0's 20 records come before partition 1's: a planning that
    wants partition 1's records gets them (the thread reads on while it waits), and partition 0's
    records read meanwhile are kept, in order, for the next planning."""
    value = b'{"t": 1, "k": "a"}'
    msgs = [Msg("t", 0, o, b"k", value, None) for o in range(20)] + [Msg("t", 1, o, b"k", value, None)
                                                                  for o in range(5)]
    eofs = [Msg("t", p, n, error=KafkaError(KafkaError._PARTITION_EOF)) for p, n in ((0, 20), (1, 5))]
    consumer = Scripted(msgs + eofs, size=3)
    broker = Broker({0: [], 1: []}, {0: 20, 1: 5})
    r = make_reader(broker, monkeypatch)
    ahead = read_ahead.ReadAhead(consumer, r._decode_ahead, stamps=False, limit=4, where="test")
    try:
        got = ahead.take({"t:0": 0, "t:1": 0}, {"t:1": 5}, {"t:0": 20, "t:1": 5})
        assert got["t:1"].offsets.tolist() == [0, 1, 2, 3, 4] and got["t:1"].valid.all()
        got = ahead.take({"t:0": 0, "t:1": 5}, {"t:0": 20}, {"t:0": 20, "t:1": 5})
        assert got["t:0"].offsets.tolist() == list(range(20))
        assert consumer.assigned == [{0: 0, 1: 0}]  # once: the positions followed on
    finally:
        ahead.close()


def spark_like_run(r: KafkaStreamReader, budget: int, quiet_plannings: int = 3) -> list[dict]:
    """Epochs planned as Spark's micro-batch loop does: ``latestOffset(start)`` once the epoch
    ending at ``start`` completed; ``commit`` of that epoch only when the next epoch is planned
    (never for the last one); then a few plannings that find nothing (a quiet topic)."""
    offset = r.initialOffset()
    ends, quiet = [], 0
    while quiet < quiet_plannings:
        end = r.latestOffset(offset, ReadMaxRows(budget))
        if end == offset:
            quiet += 1
            continue
        r.commit(offset)  # Spark: the previous epoch is done, now that this one is planned
        read_epoch(r, offset, end)
        ends.append(end)
        offset = end
    return ends


def test_the_last_completed_epoch_reaches_the_group_when_no_epoch_follows(monkeypatch):
    """Issue 26 item 5: 2 partitions of 61 records, epochs of 50 (25 + 25): Spark tells the source
    that the epochs ending at 25 and 50 are done, never the last one (61). The group's offsets
    still end at {61, 61} once the topic is quiet, with the default commit_interval (5 s)."""
    recs = [(o, b"k", json.dumps({"t": o, "k": "a"}).encode(), None) for o in range(61)]
    broker = Broker({0: recs, 1: recs}, {0: 61, 1: 61})
    r = make_reader(broker, monkeypatch)
    commits: list[dict[str, int]] = []
    r._client.commit = lambda offsets, asynchronous: commits.append(  # type: ignore[method-assign]
        {f"{tp.topic}:{tp.partition}": tp.offset for tp in offsets})
    ends = spark_like_run(r, 50)
    assert [{n: p.next for n, p in partitions_of(e).items()} for e in ends] == [
        {"t:0": 25, "t:1": 25}, {"t:0": 50, "t:1": 50}, {"t:0": 61, "t:1": 61}]
    group: dict[str, int] = {}
    for c in commits:
        group.update(c)
    assert group == {"t:0": 61, "t:1": 61}
    for c in commits:  # never ahead of a completed epoch
        assert c in ({"t:0": 0, "t:1": 0}, {"t:0": 25, "t:1": 25}, {"t:0": 50, "t:1": 50},
                     {"t:0": 61, "t:1": 61})
