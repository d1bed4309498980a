"""The Kafka source's consumers and consumed messages (:mod:`wire.sources.kafka_source.reader` uses them).

- :func:`consumer_config`: the client settings of the planner's, the read-ahead's and the
  executors' consumers;
- :func:`batch_of`, :func:`records_only`, :func:`runs_by_partition`: consumed messages as
  :class:`~wire.sources.kafka_source.decode.KafkaBatch` columns (one pass per column, no
  object per record), error events set apart;
- :class:`ConsumerCache` (:data:`CONSUMERS`): the consumers an executor process keeps
  between tasks.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from wire.errors import WireError
from wire.sources.kafka_source.decode import KafkaBatch, partition_name

if TYPE_CHECKING:
    import confluent_kafka

    from wire.sources.kafka_source.config import KafkaBinding

BATCH = 50_000
"""At most this many messages per ``consume`` call."""
CACHED_CONSUMERS = 8
"""An executor process keeps at most this many consumers between tasks (:class:`ConsumerCache`)."""
CACHED_IDLE_S = 30.0
"""A kept consumer unused for this long is closed."""


def consumer_config(binding: KafkaBinding, *, role: str) -> dict[str, Any]:
    """The client settings of a consumer: the planner's (``role="planner"``), its read-ahead's, an executor's.

    The user's ``config`` passes through (security, SASL, SSL, fetch tuning); Wire sets
    ``group.id``, turns off auto-commit (offsets are committed after an epoch commits)
    and turns on partition-EOF events; ``isolation.level`` defaults to ``read_committed``.

    ``queued.min.messages`` defaults to 10,000 (librdkafka: 100,000): a consumer fetches
    while fewer records are queued, and one whose fetches reached the partition's end keeps
    a fetch waiting at the broker. A noida-db broker spins 40 % of a core on each such
    fetch, and answers a fetch with the whole rest of the partition, so with 100,000 every
    consumer kept between tasks spun it for the last 100,000 records of its partition
    (1,000,000 events: 46.6-48.5 s -> 24.7-27.5 s; ``bench/results/kafka_source.md``).
    """
    src = binding.source
    conf: dict[str, Any] = {"isolation.level": "read_committed", "queued.max.messages.kbytes": 16384,
                            "queued.min.messages": 10_000}
    conf.update(src.config)
    conf.update({
        "bootstrap.servers": src.bootstrap_servers,
        "group.id": src.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    })
    if role != "planner":
        conf["client.id"] = f"{conf.get('client.id', 'wire')}-{binding.step}-{role}"
    return conf


def batch_of(msgs: Sequence[confluent_kafka.Message], timestamps: bool) -> KafkaBatch:
    """Consumed records (no error events) column by column: one pass per column, no object per record."""
    n = len(msgs)
    offsets = np.fromiter((m.offset() for m in msgs), np.int64, n)
    stamps = np.fromiter((m.timestamp()[1] for m in msgs), np.int64, n) if timestamps else None
    return KafkaBatch(offsets, [m.key() for m in msgs], [m.value() for m in msgs], stamps)


def records_only(
    msgs: list[confluent_kafka.Message], event: Callable[[confluent_kafka.Message], bool]
) -> tuple[list[confluent_kafka.Message], bool]:
    """The records among ``msgs`` before the first error event for which ``event`` returns True.

    ``event(msg)`` handles each error event (partition EOF, transient errors) and says
    whether to stop there. Returns the records and whether it stopped.
    """
    events = [i for i, m in enumerate(msgs) if m.error() is not None]  # (KafkaError == None raises)
    if not events:
        return msgs, False
    records, at = [], 0
    for i in events:
        records += msgs[at:i]
        at = i + 1
        if event(msgs[i]):
            return records, True
    return records + msgs[at:], False


@dataclass
class Kept:
    """A consumer an executor process keeps between tasks (:class:`ConsumerCache`), with its next offset."""

    consumer: confluent_kafka.Consumer
    resume_at: int | None
    """The offset the consumer's next record has (None: unknown, assign it again)."""
    used: float
    paused: bool = False
    """Whether its partition is paused: it stopped at the partition's end, where a consumer
    left fetching keeps a fetch waiting at the broker until records come (the next task
    resumes it)."""


class ConsumerCache:
    """The consumers an executor process keeps between tasks, one per (client settings, partition).

    A task that reads a partition's next range (the planner's ranges follow each other)
    takes the consumer the previous task of that partition left in the process, with the
    records it already fetched, instead of connecting and fetching again; Spark's own Kafka
    source keeps its executor consumers the same way. Python workers run one task at a
    time; a consumer in use is out of the cache. At most :data:`CACHED_CONSUMERS` are kept;
    one unused for :data:`CACHED_IDLE_S` is closed (a daemon thread looks every few
    seconds: a stopped query's consumers do not stay connected); a process that forked gets
    none of its parent's.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.kept: dict[tuple[str, str], Kept] = {}
        self.lock = threading.Lock()
        self.reaper: threading.Thread | None = None

    def take(self, key: tuple[str, str]) -> Kept | None:
        """The kept consumer of ``key`` (now out of the cache), or None."""
        with self.lock:
            if self.pid != os.getpid():
                self.pid, self.kept, self.reaper = os.getpid(), {}, None
            return self.kept.pop(key, None)

    def give(self, key: tuple[str, str], kept: Kept) -> None:
        """Keep ``kept`` for the next task of ``key``; the least recently used go beyond the limit."""
        kept.used = time.monotonic()
        with self.lock:
            closing = [old] if (old := self.kept.pop(key, None)) is not None else []
            self.kept[key] = kept
            while len(self.kept) > CACHED_CONSUMERS:
                closing.append(self.kept.pop(min(self.kept, key=lambda k: self.kept[k].used)))
            if self.reaper is None:
                self.reaper = threading.Thread(target=self._reap, name="kafka consumer reaper", daemon=True)
                self.reaper.start()
        for k in closing:
            k.consumer.close()

    def expire(self, now: float) -> None:
        """Close the consumers unused since ``now - CACHED_IDLE_S``."""
        with self.lock:
            idle = [k for k, v in self.kept.items() if now - v.used > CACHED_IDLE_S]
            closing = [self.kept.pop(k) for k in idle]
        for k in closing:
            k.consumer.close()

    def _reap(self) -> None:
        while True:
            time.sleep(min(5.0, CACHED_IDLE_S / 4))
            self.expire(time.monotonic())


CONSUMERS = ConsumerCache()


def message_partition(msg: confluent_kafka.Message) -> str:
    """The partition name of a consumed message; ``""`` for an event of no topic."""
    topic = msg.topic()
    if not topic:
        return ""
    partition = msg.partition()
    assert partition is not None  # librdkafka sets the partition of every message of a topic
    return partition_name(topic, partition)


def message_offset(msg: confluent_kafka.Message) -> int:
    """The offset of a consumed record or partition-EOF event (librdkafka sets it for both)."""
    offset = msg.offset()
    assert offset is not None
    return offset


def is_fatal(error: Exception) -> bool:
    """Whether a ``KafkaException`` carries a fatal error (the client cannot go on)."""
    err = error.args[0] if error.args else None
    return err is not None and hasattr(err, "fatal") and bool(err.fatal())


def raise_fatal(err: confluent_kafka.KafkaError, where: str) -> None:
    """Raise ``WireError`` (``where``: the fatal Kafka error) if ``err`` is fatal; else return."""
    if err.fatal():
        raise WireError(f"{where}: fatal Kafka error: {err}")


def runs_by_partition(msgs: list[confluent_kafka.Message], stamps: bool) -> list[tuple[str, KafkaBatch]]:
    """Consumed records (no error events) as runs of one partition's records, in order."""
    batch = batch_of(msgs, stamps)
    parts = np.fromiter((m.partition() for m in msgs), np.int64, len(msgs))
    topics = [m.topic() for m in msgs]
    if topics.count(topics[0]) != len(topics):
        codes = {t: i for i, t in enumerate(dict.fromkeys(topics))}
        parts = parts + np.fromiter((codes[t] for t in topics), np.int64, len(msgs)) * (1 << 32)
    cuts = [0, *(np.flatnonzero(parts[1:] != parts[:-1]) + 1).tolist(), len(msgs)]
    return [(message_partition(msgs[a]), batch.slice(a, b)) for a, b in itertools.pairwise(cuts)]
