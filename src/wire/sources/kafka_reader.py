"""The Kafka source's Spark stream reader: a :class:`~wire.sources.partitioned.PartitionedReader`.

The base owns admission, watermarks, offsets, tasks and envelope rows. This module holds
what is Kafka's: discovering topic-partitions, the planner's consumer (one per planner
process; it consumes every partition's next records and keeps what it fetched ahead for
the next epoch), the group commits that acknowledge an epoch once Spark committed it
(contraflow, SPEC §7), and the executors' reads of exactly one partition's recorded
offset range, so a replayed epoch reads the same records.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from wire.errors import WireError
from wire.sources.kafka_decode import (
    AvroDecoder,
    KafkaRecord,
    decode_records,
    partition_name,
    record_text,
    split_name,
)
from wire.sources.offsets import Position
from wire.sources.partitioned import Admitted, PartitionedReader, Read

if TYPE_CHECKING:
    import confluent_kafka

    from wire.sources.kafka_source import KafkaBinding

_BATCH = 10_000
_GAP_S = 0.2
"""The planner stops waiting for records when none came for this long."""
_MAX_WAIT_S = 10.0
_READ_TIMEOUT_S = 60.0
"""An executor fails its task when the broker gives no record of its range for this long."""


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


def _timestamp(msg: confluent_kafka.Message) -> int | None:
    kind, ts = msg.timestamp()
    return None if kind == 0 or ts < 0 else int(ts)


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
    _stash: dict[str, deque[KafkaRecord]]
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
        return {n: self._read(n, recs, int(positions[n])).admitted() for n, recs in got.items()}

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

    def _fetch(self, positions: dict[str, int], counts: dict[str, int]) -> dict[str, list[KafkaRecord]]:
        """Up to ``counts[n]`` records of each partition ``n`` from ``positions[n]`` on.

        Records consumed beyond a partition's count are kept for the next epoch; the
        consumer is reassigned (all partitions at ``positions``) when the planner's
        positions differ (a restart, a replay, a new partition).
        """
        from confluent_kafka import KafkaError, TopicPartition

        if self._pos != positions:
            self.client.assign([TopicPartition(*split_name(n), o) for n, o in sorted(positions.items())])
            self._pos = dict(positions)
            self._stash = {n: deque() for n in positions}
            self._eof = {}
        wanted = {n: (positions[n], c) for n, c in counts.items()}
        out: dict[str, list[KafkaRecord]] = {n: [] for n in wanted}
        for n, (_, count) in wanted.items():
            stash = self._stash.setdefault(n, deque())
            while stash and len(out[n]) < count:
                out[n].append(stash.popleft())

        def waiting(n: str) -> bool:
            at_end = self._eof.get(n, -1) >= self._highs.get(n, -1) and not self._stash[n]
            return len(out[n]) < wanted[n][1] and not at_end

        need = {n for n in wanted if waiting(n)}
        t0 = last = time.monotonic()
        while need and time.monotonic() - last < _GAP_S and time.monotonic() - t0 < _MAX_WAIT_S:
            left = sum(wanted[n][1] - len(out[n]) for n in need)
            for msg in self.client.consume(num_messages=max(1, min(_BATCH, left)), timeout=_GAP_S / 2):
                err = msg.error()
                n = _name(msg)
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and n:
                        self._eof[n] = _offset(msg)
                    else:
                        _raise_fatal(err, f"kafka source {self._binding.step!r}")
                    continue
                last = time.monotonic()
                self._eof.pop(n, None)
                rec = KafkaRecord(_offset(msg), msg.key(), msg.value(), _timestamp(msg))
                if n in out and len(out[n]) < wanted[n][1] and not self._stash[n]:
                    out[n].append(rec)
                else:
                    self._stash.setdefault(n, deque()).append(rec)
            need = {n for n in need if waiting(n)}
        for n, recs in out.items():
            if recs:
                self._pos[n] = recs[-1].offset + 1
        return out

    def _read(self, name: str, records: list[KafkaRecord], position: int) -> Read:
        """``records`` of partition ``name``, read from ``position``, decoded."""
        b, src = self._binding, self._binding.source
        if src.value_format == "avro" and self._avro is None:
            self._avro = AvroDecoder(src.avro_schema or "", src.avro_framing)
        topic, part = split_name(name)
        decoded = decode_records(
            records, topic=topic, partition=part, value_format=src.value_format, key_format=src.key_format,
            payload_schema=b.payload_value_schema, event_time=b.event_time, avro=self._avro,
        )

        def record(positions: list[int]) -> list[tuple[str, str]]:
            return [(f"{name}:{records[i].offset}", record_text(records[i].value)) for i in positions]

        return Read(decoded, len(records), records[-1].offset + 1 if records else position, record)

    # -- executor ------------------------------------------------------------------------

    def fetch_range(self, name: str, first: int, nxt: int, taken: int) -> list[KafkaRecord]:
        """The records of partition ``name`` with offsets in ``[first, nxt)``, at most ``taken``.

        Stops at the range's end or at the partition's end (records deleted by retention
        or compaction are then missing: the caller reports them).

        Raises
        ------
        WireError
            When the broker gives nothing for :data:`_READ_TIMEOUT_S` (it is down).
        """
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        topic, part = split_name(name)
        consumer = Consumer(consumer_config(self._binding, role="executor"))
        try:
            low = self._low_offset(consumer, TopicPartition(topic, part))
            consumer.assign([TopicPartition(topic, part, max(first, int(low)))])
            out: list[KafkaRecord] = []
            last = time.monotonic()
            while len(out) < taken:
                if time.monotonic() - last > _READ_TIMEOUT_S:
                    raise WireError(f"kafka source {self._binding.step!r}: no record of {name} "
                                    f"[{first}, {nxt}) for {_READ_TIMEOUT_S:.0f} s; is the broker down?")
                msgs = consumer.consume(num_messages=min(_BATCH, taken - len(out)), timeout=0.5)
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return out
                        _raise_fatal(err, f"kafka source {self._binding.step!r}")
                        continue
                    last = time.monotonic()
                    offset = _offset(msg)
                    if offset >= nxt:
                        return out
                    out.append(KafkaRecord(offset, msg.key(), msg.value(), _timestamp(msg)))
            return out
        finally:
            consumer.close()

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
        return self._read(name, self.fetch_range(name, int(first), int(next), taken), int(first))
