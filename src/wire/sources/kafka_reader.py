"""The Kafka source's Spark stream reader: a :class:`~wire.sources.partitioned.PartitionedReader`.

The base owns admission, watermarks, offsets, tasks and envelope rows. This module holds
what is Kafka's: discovering topic-partitions, the planner's consumer (one per planner
process; it consumes every partition's next records and keeps what it fetched ahead for
the next epoch), the group commits that acknowledge an epoch once Spark committed it
(contraflow, SPEC §7), and the executors' reads of exactly one partition's recorded
offset range, so a replayed epoch reads the same records.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from wire.errors import WireError
from wire.sources.kafka_decode import (
    TIMESTAMP_COLUMN,
    AvroDecoder,
    KafkaBatch,
    decode_batch,
    partition_name,
    record_text,
    split_name,
)
from wire.sources.offsets import Position
from wire.sources.partitioned import Admitted, PartitionedReader, Read

if TYPE_CHECKING:
    import confluent_kafka

    from wire.sources.kafka_source import KafkaBinding

_BATCH = 50_000
"""At most this many messages per ``consume`` call."""
_GAP_S = 0.2
"""The planner stops waiting for records when none came for this long."""
_MAX_WAIT_S = 10.0
_READ_TIMEOUT_S = 60.0
"""An executor fails its task when the broker gives no record of its range for this long."""
_CACHED_CONSUMERS = 8
"""An executor process keeps at most this many consumers between tasks (:class:`_ConsumerCache`)."""
_CACHED_IDLE_S = 120.0
"""A kept consumer unused for this long is closed (when the process next reads)."""


def consumer_config(binding: KafkaBinding, *, role: str) -> dict[str, Any]:
    """The client settings of the planner's (``role="planner"``) or an executor's consumer.

    The user's ``config`` passes through (security, SASL, SSL, fetch tuning); Wire sets
    ``group.id``, turns off auto-commit (offsets are committed after an epoch commits)
    and turns on partition-EOF events; ``isolation.level`` defaults to ``read_committed``.
    """
    src = binding.source
    conf: dict[str, Any] = {"isolation.level": "read_committed", "queued.max.messages.kbytes": 16384}
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
        conf["client.id"] = f"{conf.get('client.id', 'wire')}-{binding.step}-reader"
    return conf


def _batch(msgs: Sequence[confluent_kafka.Message], timestamps: bool) -> KafkaBatch:
    """Consumed records (no error events) column by column: one pass per column, no object per record."""
    n = len(msgs)
    offsets = np.fromiter((m.offset() for m in msgs), np.int64, n)
    stamps = np.fromiter((m.timestamp()[1] for m in msgs), np.int64, n) if timestamps else None
    return KafkaBatch(offsets, [m.key() for m in msgs], [m.value() for m in msgs], stamps)


def _records_only(
    msgs: list[confluent_kafka.Message], event: Callable[[confluent_kafka.Message], bool]
) -> tuple[list[confluent_kafka.Message], bool]:
    """The records among ``msgs`` before the first error event for which ``event`` returns True.

    ``event(msg)`` handles each error event (partition EOF, transient errors) and says
    whether to stop there. Returns the records and whether it stopped.
    """
    errors = [m.error() for m in msgs]
    if errors.count(None) == len(msgs):
        return msgs, False
    records = []
    for m, err in zip(msgs, errors, strict=True):
        if err is None:
            records.append(m)
        elif event(m):
            return records, True
    return records, False


@dataclass
class _Kept:
    consumer: confluent_kafka.Consumer
    resume_at: int | None
    """The offset the consumer's next record has (None: unknown, assign it again)."""
    used: float


class _ConsumerCache:
    """The consumers an executor process keeps between tasks, one per (client settings, partition).

    A task that reads a partition's next range (the planner's ranges follow each other)
    takes the consumer the previous task of that partition left in the process, with the
    records it already fetched, instead of connecting and fetching again; Spark's own Kafka
    source keeps its executor consumers the same way. Python workers run one task at a
    time; a consumer in use is out of the cache. At most :data:`_CACHED_CONSUMERS` are kept,
    each for at most :data:`_CACHED_IDLE_S` unused; a process that forked gets none of its
    parent's.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.kept: dict[tuple[str, str], _Kept] = {}

    def take(self, key: tuple[str, str]) -> _Kept | None:
        """The kept consumer of ``key`` (now out of the cache), or None."""
        if self.pid != os.getpid():
            self.pid, self.kept = os.getpid(), {}
        self._expire(time.monotonic())
        return self.kept.pop(key, None)

    def give(self, key: tuple[str, str], kept: _Kept) -> None:
        """Keep ``kept`` for the next task of ``key``; the least recently used go beyond the limit."""
        kept.used = time.monotonic()
        old = self.kept.pop(key, None)
        if old is not None:
            old.consumer.close()
        self.kept[key] = kept
        while len(self.kept) > _CACHED_CONSUMERS:
            self.kept.pop(min(self.kept, key=lambda k: self.kept[k].used)).consumer.close()

    def _expire(self, now: float) -> None:
        for key in [k for k, v in self.kept.items() if now - v.used > _CACHED_IDLE_S]:
            self.kept.pop(key).consumer.close()


_CONSUMERS = _ConsumerCache()


def _name(msg: confluent_kafka.Message) -> str:
    """The partition name of a consumed message; ``""`` for an event of no topic."""
    topic = msg.topic()
    if not topic:
        return ""
    partition = msg.partition()
    assert partition is not None  # librdkafka sets the partition of every message of a topic
    return partition_name(topic, partition)


def _offset(msg: confluent_kafka.Message) -> int:
    """The offset of a consumed record or partition-EOF event (librdkafka sets it for both)."""
    offset = msg.offset()
    assert offset is not None
    return offset


def _is_fatal(error: Exception) -> bool:
    """Whether a ``KafkaException`` carries a fatal error (the client cannot go on)."""
    err = error.args[0] if error.args else None
    return err is not None and hasattr(err, "fatal") and bool(err.fatal())


def _raise_fatal(err: confluent_kafka.KafkaError, where: str) -> None:
    if err.fatal():
        raise WireError(f"{where}: fatal Kafka error: {err}")


class KafkaStreamReader(PartitionedReader["confluent_kafka.Consumer"]):
    """Stream reader of :func:`wire.sources.kafka`: a :class:`PartitionedReader` over topic-partitions.

    Partitions are named ``"<topic>:<partition>"``; a position is a Kafka offset; the
    backlog is the partition's end offset minus the position; acknowledging commits the
    consumer group's offsets. ``clock`` (ms) is the processing-time clock, injectable for
    tests.
    """

    kind: ClassVar[str] = "kafka source"
    gone_reason: ClassVar[str] = "admitted records are gone (deleted by retention or compaction)"
    _binding: KafkaBinding
    _transient: ClassVar[dict[str, Any]] = {
        **PartitionedReader._transient,
        "_pos": {}, "_stash": {}, "_eof": {}, "_highs": {}, "_known": None, "_avro": None,
    }
    """The planner's per-process caches: their start values, also after pickling."""
    _pos: dict[str, int]
    _stash: dict[str, deque[KafkaBatch]]
    _eof: dict[str, int]
    _highs: dict[str, int]
    _known: list[str] | None
    _avro: AvroDecoder | None

    def __init__(self, binding: KafkaBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)
        self._discovered_at: float = 0

    def _open_client(self) -> confluent_kafka.Consumer:
        """The planner's consumer (it commits only in :meth:`acknowledge`)."""
        from confluent_kafka import Consumer

        return Consumer(consumer_config(self._binding, role="planner"))

    # -- planner (driver) --------------------------------------------------------------

    def initial_positions(self) -> dict[str, Position]:
        """Each partition at the group's committed offset, else at ``start``.

        With ``start="latest"`` a partition with no committed offset starts at its end,
        and that position is committed to the group at once (it acknowledges nothing), so
        that the call Spark makes again when it replays the first epoch gives the same
        offset. Partitions found later start at their beginning.
        """
        from confluent_kafka import TopicPartition

        names = self._discover(force=True)
        tps = [TopicPartition(*split_name(n)) for n in names]
        committed = self.client.committed(tps, timeout=self._timeout_s) if tps else []
        positions: dict[str, int] = {}
        fresh = []
        for tp in committed:
            name = partition_name(tp.topic, tp.partition)
            if tp.offset >= 0:
                positions[name] = tp.offset
                continue
            low, high = self._watermarks(name)
            positions[name] = low if self._binding.source.start == "earliest" else high
            fresh.append(TopicPartition(tp.topic, tp.partition, positions[name]))
        if fresh and self._binding.source.start == "latest":
            self.client.commit(offsets=fresh, asynchronous=False)
        return dict(positions)

    def list_partitions(self) -> list[str]:
        """The topic-partitions of the source's topics (or pattern), refreshed every discovery interval."""
        return self._discover()

    def start_position(self, name: str) -> Position:
        """A partition found later starts at its first offset."""
        return self._watermarks(name)[0]

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        """The partition's end offset minus ``position`` (offsets: transaction markers count)."""
        self._highs[name] = high = self._watermarks(name)[1]
        return high - int(position)

    def read_many(self, positions: Mapping[str, Position], budgets: Mapping[str, int]) -> dict[str, Admitted]:
        """The next records of the partitions with a budget, consumed together by the planner's consumer."""
        got = self._fetch({n: int(p) for n, p in positions.items()}, dict(budgets))
        return {n: self._read(n, batch, int(positions[n]), ()).admitted() for n, batch in got.items()}

    def acknowledge(self, positions: Mapping[str, Position]) -> None:
        """Commit the consumer group's offsets at ``positions``."""
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(*split_name(n), int(o)) for n, o in positions.items()]
        if tps:
            self.client.commit(offsets=tps, asynchronous=False)

    def transient(self, error: Exception) -> bool:
        """A Kafka error is an outage to wait out, unless it is fatal (then a WireError)."""
        from confluent_kafka import KafkaException

        if not isinstance(error, KafkaException):
            return False
        if _is_fatal(error):
            step = self._binding.step
            raise WireError(f"kafka source {step!r}: fatal Kafka error: {error.args[0]}") from error
        return True

    def reset(self) -> None:
        """Forget the consumer's positions and the records it fetched ahead (reassigned next time)."""
        self._pos, self._stash, self._eof = {}, {}, {}

    def range_location(self, name: str, first: Position, next: Position) -> str:
        """``"<topic>:<partition>:[first,next)"``."""
        return f"{name}:[{first},{next})"

    @property
    def _timeout_s(self) -> float:
        return self._binding.source.request_timeout / 1000

    def _discover(self, *, force: bool = False) -> list[str]:
        """The topic-partitions of the source's topics (or pattern), refreshed every discovery interval."""
        src = self._binding.source
        now = time.monotonic()
        fresh = (now - self._discovered_at) * 1000 < src.discovery_interval
        if not force and self._known is not None and fresh:
            return self._known
        meta = self.client.list_topics(timeout=self._timeout_s)
        if src.pattern is not None:
            rx = re.compile(src.pattern)
            topics = [t for t in meta.topics if rx.fullmatch(t) and not t.startswith("__")]
        else:
            assert src.topics is not None  # KafkaSource holds exactly one of topics and pattern
            topics = [t for t in src.topics if t in meta.topics]
        names = []
        for t in topics:
            tm = meta.topics[t]
            if tm.error is not None:
                continue
            names += [partition_name(t, p) for p in tm.partitions]
        self._known, self._discovered_at = sorted(names), now
        return self._known

    def _watermarks(self, name: str) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        low, high = self.client.get_watermark_offsets(TopicPartition(*split_name(name)),
                                                        timeout=self._timeout_s, cached=False)
        return int(low), int(high)

    def _fetch(self, positions: dict[str, int], counts: dict[str, int]) -> dict[str, KafkaBatch]:
        """Up to ``counts[n]`` records of each partition ``n`` from ``positions[n]`` on.

        Records consumed beyond a partition's count are kept for the next epoch; the
        consumer is reassigned (all partitions at ``positions``) when the planner's
        positions differ (a restart, a replay, a new partition). Records are taken column
        by column, a ``consume`` call's run of one partition's records at a time.
        """
        from confluent_kafka import KafkaError, TopicPartition

        if self._pos != positions:
            self.client.assign([TopicPartition(*split_name(n), o) for n, o in sorted(positions.items())])
            self._pos = dict(positions)
            self._stash = {n: deque() for n in positions}
            self._eof = {}
        stamps = self._binding.event_time == TIMESTAMP_COLUMN
        out: dict[str, list[KafkaBatch]] = {n: [] for n in counts}
        have = dict.fromkeys(counts, 0)

        def add(n: str, batch: KafkaBatch) -> None:
            """Give partition ``n`` the records of ``batch`` it still wants; stash the rest."""
            take = max(0, min(len(batch), counts[n] - have[n])) if n in counts and not self._stash[n] else 0
            if take:
                out[n].append(batch.slice(0, take))
                have[n] += take
            if take < len(batch):
                self._stash.setdefault(n, deque()).append(batch.slice(take))

        for n in counts:
            stash = self._stash.setdefault(n, deque())
            while stash and have[n] < counts[n]:
                add(n, stash.popleft())

        def waiting(n: str) -> bool:
            at_end = self._eof.get(n, -1) >= self._highs.get(n, -1) and not self._stash[n]
            return have[n] < counts[n] and not at_end

        def event(msg: confluent_kafka.Message) -> bool:
            err = msg.error()
            assert err is not None
            n = _name(msg)
            if err.code() == KafkaError._PARTITION_EOF and n:
                self._eof[n] = _offset(msg)
            else:
                _raise_fatal(err, f"kafka source {self._binding.step!r}")
            return False

        need = {n for n in counts if waiting(n)}
        t0 = last = time.monotonic()
        while need and time.monotonic() - last < _GAP_S and time.monotonic() - t0 < _MAX_WAIT_S:
            left = sum(counts[n] - have[n] for n in need)
            msgs, _ = _records_only(self.client.consume(num_messages=max(1, min(_BATCH, left)),
                                                        timeout=_GAP_S / 2), event)
            if msgs:
                last = time.monotonic()
                for n, batch in _runs(msgs, stamps):
                    self._eof.pop(n, None)
                    add(n, batch)
            need = {n for n in need if waiting(n)}
        got = {n: KafkaBatch.concat(b) if b else KafkaBatch.empty(stamps) for n, b in out.items()}
        for n, batch in got.items():
            if len(batch):
                self._pos[n] = int(batch.offsets[-1]) + 1
        return got

    def _read(self, name: str, batch: KafkaBatch, position: int, columns: Sequence[str] | None) -> Read:
        """The records of ``batch`` (partition ``name``, read from ``position``), decoded.

        ``columns``: the columns the rows keep besides the event time (None: all); every
        record is checked whatever they are.
        """
        b, src = self._binding, self._binding.source
        if src.value_format == "avro" and self._avro is None:
            self._avro = AvroDecoder(src.avro_schema or "", src.avro_framing)
        topic, part = split_name(name)
        decoded = decode_batch(
            batch, topic=topic, partition=part, value_format=src.value_format, key_format=src.key_format,
            payload_schema=b.payload_value_schema, event_time=b.event_time, avro=self._avro, columns=columns,
        )

        def record(positions: list[int]) -> list[tuple[str, str]]:
            return [(f"{name}:{int(batch.offsets[i])}", record_text(batch.values[i])) for i in positions]

        nxt = int(batch.offsets[-1]) + 1 if len(batch) else position
        return Read(decoded, len(batch), nxt, record)

    # -- executor ------------------------------------------------------------------------

    def fetch_range(self, name: str, first: int, nxt: int, taken: int) -> KafkaBatch:
        """The records of partition ``name`` with offsets in ``[first, nxt)``, at most ``taken``.

        Stops at the range's end or at the partition's end (records deleted by retention
        or compaction are then missing: the caller reports them). The consumer comes from
        this process's cache (:class:`_ConsumerCache`) when the previous task of the
        partition stopped where this range starts, and goes back to it.

        Raises
        ------
        WireError
            When the broker gives nothing for :data:`_READ_TIMEOUT_S` (it is down).
        """
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        topic, part = split_name(name)
        tp = TopicPartition(topic, part)
        conf = consumer_config(self._binding, role="executor")
        key = (json.dumps(sorted(conf.items())), name)
        kept = _CONSUMERS.take(key)
        if kept is None:
            kept = _Kept(Consumer(conf), None, 0.0)
        consumer = kept.consumer
        out: list[KafkaBatch] = []
        got, resume_at, closed = 0, None, False
        b = self._binding
        stamps = b.event_time == TIMESTAMP_COLUMN or TIMESTAMP_COLUMN in b.output_schema.names
        try:
            if kept.resume_at != first:
                low = self._low_offset(consumer, tp)
                consumer.assign([TopicPartition(topic, part, max(first, int(low)))])

            def event(msg: confluent_kafka.Message) -> bool:
                err = msg.error()
                assert err is not None
                if err.code() == KafkaError._PARTITION_EOF:
                    return self._partition_ended(consumer, tp, _offset(msg), nxt)
                _raise_fatal(err, f"kafka source {self._binding.step!r}")
                return False

            last = time.monotonic()
            while got < taken:
                if time.monotonic() - last > _READ_TIMEOUT_S:
                    raise WireError(f"kafka source {self._binding.step!r}: no record of {name} "
                                    f"[{first}, {nxt}) for {_READ_TIMEOUT_S:.0f} s; is the broker down?")
                consumed = consumer.consume(num_messages=min(_BATCH, taken - got), timeout=0.5)
                msgs, ended = _records_only(consumed, event)
                if msgs:
                    last = time.monotonic()
                    batch = _batch(msgs, stamps)
                    lo, hi = np.searchsorted(batch.offsets, [first, nxt])
                    out.append(batch.slice(int(lo), int(hi)))
                    got += int(hi - lo)
                    if hi < len(batch):  # past the range: records of it are gone
                        break
                if ended:
                    break
            else:
                resume_at = nxt  # every record of the range: the next record is the next range's
            return KafkaBatch.concat(out) if out else KafkaBatch.empty(stamps)
        except BaseException:
            closed = True
            consumer.close()
            raise
        finally:
            if not closed:
                kept.resume_at = resume_at
                _CONSUMERS.give(key, kept)

    def _partition_ended(
        self, consumer: confluent_kafka.Consumer, tp: confluent_kafka.TopicPartition, at: int, nxt: int
    ) -> bool:
        """Whether a partition-EOF event at offset ``at`` ends a read that wants records up to ``nxt``.

        A kept consumer may hand over an EOF it queued for an earlier task (the partition
        grew since): the read ends only when the partition's end offset really is at most ``at``.
        """
        if at >= nxt:
            return True
        for cached in (True, False):
            marks = consumer.get_watermark_offsets(tp, timeout=self._timeout_s, cached=cached)
            if marks is not None and marks[1] > at:
                return False
        return marks is not None and marks[1] >= 0

    def _low_offset(self, consumer: confluent_kafka.Consumer, tp: confluent_kafka.TopicPartition) -> int:
        """The partition's first offset (an executor's read).

        Retried while the brokers cannot be reached, up to :data:`_READ_TIMEOUT_S`, as the
        records themselves are.
        """
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + _READ_TIMEOUT_S
        while True:
            try:
                low, _ = consumer.get_watermark_offsets(tp, timeout=self._timeout_s)
                return int(low)
            except KafkaException as e:
                if _is_fatal(e) or time.monotonic() > deadline:
                    raise WireError(f"kafka source {self._binding.step!r}: cannot read the first offset "
                                    f"of {tp.topic}:{tp.partition} for {_READ_TIMEOUT_S:.0f} s: {e}") from e
                time.sleep(0.5)

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        """Partition ``name``'s records with offsets in ``[first, next)``, at most ``taken`` (executor)."""
        batch = self.fetch_range(name, int(first), int(next), taken)
        return self._read(name, batch, int(first), self._binding.output_schema.names)


def _runs(msgs: list[confluent_kafka.Message], stamps: bool) -> list[tuple[str, KafkaBatch]]:
    """Consumed records (no error events) as runs of one partition's records, in order."""
    batch = _batch(msgs, stamps)
    parts = np.fromiter((m.partition() for m in msgs), np.int64, len(msgs))
    topics = [m.topic() for m in msgs]
    if topics.count(topics[0]) != len(topics):
        codes = {t: i for i, t in enumerate(dict.fromkeys(topics))}
        parts = parts + np.fromiter((codes[t] for t in topics), np.int64, len(msgs)) * (1 << 32)
    cuts = [0, *(np.flatnonzero(parts[1:] != parts[:-1]) + 1).tolist(), len(msgs)]
    return [(_name(msgs[a]), batch.slice(a, b)) for a, b in itertools.pairwise(cuts)]
