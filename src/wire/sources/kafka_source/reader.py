"""The Kafka source's Spark stream reader: a :class:`~wire.sources.base.partitioned.PartitionedReader`.

The base owns admission, watermarks, offsets, tasks and envelope rows. This module holds
what is Kafka's: discovering topic-partitions, the planner's consumer (one per planner
process, read ahead by a background thread that decodes the records as they come, so
that planning an epoch only takes what is ready: :class:`_ReadAhead`), the group commits
that acknowledge an epoch once Spark committed it (contraflow, SPEC §7; at most once per
``commit_interval``), and the executors' reads of exactly one partition's recorded
offset range, so a replayed epoch reads the same records (their consumers are kept
between tasks: :class:`_ConsumerCache`).

Records are handled column by column (:class:`~wire.sources.kafka_source.decode.KafkaBatch`):
offsets, keys and values are taken from each ``consume`` call's messages in one pass
each, and JSON values are parsed by Arrow's JSON reader, never one Python object per
record.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from wire.errors import WireError
from wire.sources.base.offsets import Position, positions_of
from wire.sources.base.partitioned import Admitted, PartitionedReader, Read
from wire.sources.base.source import Offset
from wire.sources.kafka_source.decode import (
    TIMESTAMP_COLUMN,
    AvroDecoder,
    KafkaBatch,
    decode_batch,
    partition_name,
    record_text,
    split_name,
)

if TYPE_CHECKING:
    import confluent_kafka

    from wire.sources.kafka_source.config import KafkaBinding

_BATCH = 50_000
"""At most this many messages per ``consume`` call."""
_GAP_S = 0.2
"""The planner stops waiting for records when none came for this long."""
_MAX_WAIT_S = 10.0
_READ_TIMEOUT_S = 60.0
"""An executor fails its task when the broker gives no record of its range for this long."""
_CACHED_CONSUMERS = 8
"""An executor process keeps at most this many consumers between tasks (:class:`_ConsumerCache`)."""
_SKIP_RANGES = 4
"""A kept consumer reads on (dropping records) to a range at most this many times its size ahead."""
_CACHED_IDLE_S = 30.0
"""A kept consumer unused for this long is closed."""


def consumer_config(binding: KafkaBinding, *, role: str) -> dict[str, Any]:
    """The client settings of a consumer: the planner's (``role="planner"``), its read-ahead's, an executor's.

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
        conf["client.id"] = f"{conf.get('client.id', 'wire')}-{binding.step}-{role}"
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
    time; a consumer in use is out of the cache. At most :data:`_CACHED_CONSUMERS` are kept;
    one unused for :data:`_CACHED_IDLE_S` is closed (a daemon thread looks every few
    seconds: a stopped query's consumers do not stay connected); a process that forked gets
    none of its parent's.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.kept: dict[tuple[str, str], _Kept] = {}
        self.lock = threading.Lock()
        self.reaper: threading.Thread | None = None

    def take(self, key: tuple[str, str]) -> _Kept | None:
        """The kept consumer of ``key`` (now out of the cache), or None."""
        with self.lock:
            if self.pid != os.getpid():
                self.pid, self.kept, self.reaper = os.getpid(), {}, None
            return self.kept.pop(key, None)

    def give(self, key: tuple[str, str], kept: _Kept) -> None:
        """Keep ``kept`` for the next task of ``key``; the least recently used go beyond the limit."""
        kept.used = time.monotonic()
        with self.lock:
            closing = [old] if (old := self.kept.pop(key, None)) is not None else []
            self.kept[key] = kept
            while len(self.kept) > _CACHED_CONSUMERS:
                closing.append(self.kept.pop(min(self.kept, key=lambda k: self.kept[k].used)))
            if self.reaper is None:
                self.reaper = threading.Thread(target=self._reap, name="kafka consumer reaper", daemon=True)
                self.reaper.start()
        for k in closing:
            k.consumer.close()

    def expire(self, now: float) -> None:
        """Close the consumers unused since ``now - _CACHED_IDLE_S``."""
        with self.lock:
            idle = [k for k, v in self.kept.items() if now - v.used > _CACHED_IDLE_S]
            closing = [self.kept.pop(k) for k in idle]
        for k in closing:
            k.consumer.close()

    def _reap(self) -> None:
        while True:
            time.sleep(min(5.0, _CACHED_IDLE_S / 4))
            self.expire(time.monotonic())


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


@dataclass(frozen=True)
class _Ahead:
    """Records of one partition the planner read ahead: offsets, event times, which are valid.

    ``event_times[i]`` counts only where ``valid[i]`` (a record that decodes, with a usable
    event time: it moves the watermark); malformed records count as admitted too.
    """

    offsets: np.ndarray
    event_times: np.ndarray
    valid: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int | None = None) -> _Ahead:
        """Records ``start`` (index) up to ``stop`` (excluded; None: the end)."""
        return _Ahead(self.offsets[start:stop], self.event_times[start:stop], self.valid[start:stop])

    @staticmethod
    def concat(parts: Sequence[_Ahead]) -> _Ahead:
        """The records of ``parts``, one after the other."""
        if len(parts) == 1:
            return parts[0]
        return _Ahead(np.concatenate([p.offsets for p in parts]) if parts else np.zeros(0, np.int64),
                      np.concatenate([p.event_times for p in parts]) if parts else np.zeros(0, np.int64),
                      np.concatenate([p.valid for p in parts]) if parts else np.zeros(0, dtype=bool))

    def admitted(self, position: int) -> Admitted:
        """These records admitted from ``position``: their count, the next position, the valid event times."""
        nxt = int(self.offsets[-1]) + 1 if len(self) else position
        return Admitted(len(self), nxt, self.event_times[self.valid])


class _ReadAhead:
    """The planner's consumer, read ahead by a background thread while epochs run.

    The thread consumes the assigned partitions' records as they come (up to ``limit``
    records held; more while a :meth:`take` waits, since the records it waits for may come
    after other partitions'), splits them by partition and decodes them with ``decode``
    (valid records and their event times), so that planning an epoch takes records
    already decoded instead of fetching and decoding them while the executors wait. What
    an epoch admits does not change: :meth:`take` hands out each partition's records in
    offset order from the planner's positions, waiting for records the partition's end
    offset says exist, as the planner did when it consumed them itself (until none came
    for :data:`_GAP_S`, at most :data:`_MAX_WAIT_S`). When the positions asked differ from where
    the records read ahead continue (a restart, a replay, a new partition) the consumer
    is assigned again and what was read ahead is dropped. An error of the thread (a fatal
    Kafka error) is raised by the next :meth:`take`. The consumer is the read-ahead's own,
    used by its thread alone (while a thread consumes, metadata and offset requests of
    another thread on the same consumer were seen to block).
    """

    def __init__(self, consumer: confluent_kafka.Consumer, decode: Callable[[str, KafkaBatch], _Ahead], *,
                 stamps: bool, limit: int, where: str) -> None:
        self.consumer, self.decode, self.stamps = consumer, decode, stamps  # its own consumer
        self.limit, self.where = limit, where
        self.cond = threading.Condition()
        self.positions: dict[str, int] = {}
        """Per partition, where the next :meth:`take` starts (the records read ahead follow)."""
        self.assign_to: dict[str, int] | None = None
        """Positions the thread is to assign the consumer at, before it consumes again."""
        self.ready: dict[str, deque[_Ahead]] = {}
        self.held = 0
        self.eof: dict[str, int] = {}
        """Per partition, the offset of the partition-EOF event after the last record read ahead."""
        self.generation = 0
        self.hungry = False
        """Whether a :meth:`take` waits for records: the thread then reads on even past ``limit``."""
        self.arrived = 0.0
        self.failure: BaseException | None = None
        self.closing = False
        self.thread: threading.Thread | None = None

    def take(
        self, positions: dict[str, int], counts: dict[str, int], highs: Mapping[str, int]
    ) -> dict[str, _Ahead]:
        """Up to ``counts[n]`` records of each partition ``n`` from ``positions[n]`` on.

        ``highs``: each partition's end offset seen while planning; a partition whose
        records read ahead reached it (an EOF event at it) is not waited for.
        """
        with self.cond:
            self._raise_failure()
            self._start(positions)

            def waiting(n: str) -> bool:
                have = sum(len(a) for a in self.ready.get(n, ()))
                return have < counts[n] and self.eof.get(n, -1) < highs.get(n, -1)

            t0 = time.monotonic()
            while self.failure is None and any(waiting(n) for n in counts):
                now = time.monotonic()
                if now - max(t0, self.arrived) >= _GAP_S or now - t0 >= _MAX_WAIT_S:
                    break
                self.hungry = True  # read on past ``limit``: other partitions' records may come first
                self.cond.notify_all()
                self.cond.wait(_GAP_S / 4)
            self.hungry = False
            self._raise_failure()
            out = {n: self._pop(n, c) for n, c in counts.items()}
            self.cond.notify_all()  # room to read ahead again
            return out

    def start(self, positions: dict[str, int]) -> None:
        """Read ahead from ``positions`` on, if not already."""
        with self.cond:
            self._start(positions)

    def _start(self, positions: dict[str, int]) -> None:
        if self.positions != positions:
            self._assign(positions)
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name=f"read-ahead {self.where}", daemon=True)
            self.thread.start()

    def _pop(self, name: str, count: int) -> _Ahead:
        queue = self.ready.setdefault(name, deque())
        parts: list[_Ahead] = []
        have = 0
        while queue and have < count:
            part = queue.popleft()
            k = min(len(part), count - have)
            parts.append(part.slice(0, k))
            if k < len(part):
                queue.appendleft(part.slice(k))
            have += k
        self.held -= have
        got = _Ahead.concat(parts)
        if have:
            self.positions[name] = int(got.offsets[-1]) + 1
        return got

    def _assign(self, positions: dict[str, int]) -> None:
        """Read ahead from ``positions`` on; the thread assigns the consumer (it makes all its calls)."""
        self.generation += 1
        self.positions, self.assign_to = dict(positions), dict(positions)
        self.ready, self.held, self.eof = {n: deque() for n in positions}, 0, {}
        self.cond.notify_all()

    def eof_at(self, name: str) -> int:
        """The offset of the partition-EOF event read after partition ``name``'s last record (-1: none).

        Every record of ``name`` before that offset was read ahead (and handed out, or held).
        """
        with self.cond:
            return self.eof.get(name, -1)

    def forget(self) -> None:
        """Drop what was read ahead; the next :meth:`take` assigns the consumer again."""
        with self.cond:
            self.generation += 1
            self.positions, self.assign_to, self.ready, self.held, self.eof = {}, None, {}, 0, {}

    def close(self) -> None:
        """Stop the thread, then close the consumer."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.consumer.close()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure, self.thread = self.failure, None, None
            self.generation += 1
            self.positions, self.assign_to, self.ready, self.held, self.eof = {}, None, {}, 0, {}
            raise failure

    def _run(self) -> None:
        from confluent_kafka import TopicPartition

        while True:
            with self.cond:
                while not (self.closing or self.assign_to is not None
                           or (self.positions and (self.held < self.limit or self.hungry))):
                    self.cond.wait(0.5)
                if self.closing:
                    return
                generation, assign_to, self.assign_to = self.generation, self.assign_to, None
            try:
                if assign_to is not None:
                    self.consumer.assign([TopicPartition(*split_name(n), o) for n, o in assign_to.items()])
                items = self._read(self.consumer.consume(num_messages=_BATCH, timeout=_GAP_S / 2))
            except BaseException as e:  # raised by the next take()
                with self.cond:
                    self.failure = e
                    self.cond.notify_all()
                return
            if not items:
                continue
            with self.cond:
                if generation != self.generation:  # assigned again meanwhile: these are stale
                    continue
                for name, item in items:
                    if isinstance(item, int):
                        self.eof[name] = item
                        continue
                    self.ready.setdefault(name, deque()).append(item)
                    self.held += len(item)
                    self.eof.pop(name, None)
                    self.arrived = time.monotonic()
                self.cond.notify_all()

    def _read(self, msgs: list[confluent_kafka.Message]) -> list[tuple[str, _Ahead | int]]:
        """Consumed messages as, in order, decoded runs of one partition's records and EOF offsets."""
        from confluent_kafka import KafkaError

        events = [i for i, m in enumerate(msgs) if m.error() is not None]
        items: list[tuple[str, _Ahead | int]] = []
        at = 0
        for i in [*events, len(msgs)]:
            if i > at:
                items += [(n, self.decode(n, batch)) for n, batch in _runs(msgs[at:i], self.stamps)]
            if i < len(msgs):
                err, name = msgs[i].error(), _name(msgs[i])
                assert err is not None
                if err.code() == KafkaError._PARTITION_EOF and name:
                    items.append((name, _offset(msgs[i])))
                else:
                    _raise_fatal(err, self.where)
            at = i + 1
        return items


class KafkaStreamReader(PartitionedReader["confluent_kafka.Consumer"], SupportsTriggerAvailableNow):
    """Stream reader of :func:`wire.sources.kafka`: a :class:`PartitionedReader` over topic-partitions.

    Partitions are named ``"<topic>:<partition>"``; a position is a Kafka offset; the
    backlog is the partition's end offset minus the position; acknowledging commits the
    consumer group's offsets. ``clock`` (ms) is the processing-time clock, injectable for
    tests.

    Bounded (``bounded=True``, or an ``availableNow`` query): the partitions and their end
    offsets are taken once, at the first planning call of the query
    (:meth:`_end_offsets`); each partition is read up to its end offset, then the source
    ends (:class:`PartitionedReader`: one last epoch with the maximal watermark).
    """

    kind: ClassVar[str] = "kafka source"
    gone_reason: ClassVar[str] = "admitted records are gone (deleted by retention or compaction)"
    _binding: KafkaBinding
    _transient: ClassVar[dict[str, Any]] = {
        **PartitionedReader._transient,
        "_ahead": None, "_highs": {}, "_known": None, "_avro": None,
        "_pending": None, "_committed_at": None, "_acked": {}, "_bounds": None, "_completed": None,
    }
    """The planner's per-process caches: their start values, also after pickling."""
    _ahead: _ReadAhead | None
    _highs: dict[str, int]
    _known: list[str] | None
    _avro: AvroDecoder | None
    _pending: dict[str, int] | None
    _committed_at: float | None
    _acked: dict[str, int]
    _bounds: dict[str, int] | None
    """Bounded: each partition's end offset, taken when the query started (None: not yet)."""
    _completed: dict[str, Position] | None
    """The positions of the last completed epoch acknowledged by :meth:`latestOffset`."""

    def __init__(self, binding: KafkaBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)
        self._discovered_at: float = 0

    def _open_client(self) -> confluent_kafka.Consumer:
        """The planner's consumer (it commits only in :meth:`acknowledge`)."""
        from confluent_kafka import Consumer

        return Consumer(consumer_config(self._binding, role="planner"))

    # -- planner (driver) --------------------------------------------------------------

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """Acknowledge the epoch that ended at ``start``, then plan the next one.

        Spark plans an epoch from ``start`` only once the epoch ending there completed
        (every sink committed), but it calls :meth:`commit` for an epoch only when it plans
        the next one; on a quiet topic, or before a stop, that call never comes, and the
        group's offsets would stay an epoch behind (issue 26 item 5). ``start`` is
        therefore acknowledged here. While epochs follow each other the group's offsets
        are committed at most once per ``commit_interval`` (:meth:`acknowledge`); a
        planning that starts no epoch (the topic is quiet, the flow paused or stopping, a
        bounded source at its end) commits what waits at once: Spark keeps planning while
        the topic is quiet, so the group's offsets reach the last completed epoch right
        after it, and before a graceful stop or the end of a bounded flow.
        """
        positions = positions_of(start)
        if positions != self._completed:
            self._completed = positions
            self._acknowledge(start)
        end = super().latestOffset(start, limit)
        if end is start and self._pending is not None and self._down_since is None:
            self._try_commit()
        return end

    def prepareForTriggerAvailableNow(self) -> None:
        """An ``availableNow`` query: take the end offsets now, read up to them, then end."""
        self._available_now = True
        self._end_offsets()

    @property
    def _bounded(self) -> bool:
        return bool(self._binding.source.bounded) or self._available_now

    def _end_offsets(self) -> dict[str, int]:
        """Bounded: the partitions and their end offsets, taken at the first call of the query.

        With ``read_committed`` the end offset is the last stable offset: records of
        transactions still open then are not read.
        """
        if self._bounds is None:
            self._bounds = {n: self._watermarks(n)[1] for n in self._discover_now()}
        return self._bounds

    def initial_positions(self) -> dict[str, Position]:
        """Each partition at the group's committed offset, else at ``start``.

        With ``start="latest"`` a partition with no committed offset starts at its end,
        and that position is committed to the group at once (it acknowledges nothing), so
        that the call Spark makes again when it replays the first epoch gives the same
        offset. Partitions found later start at their beginning. The planner's read-ahead
        starts at these positions.
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
                positions[name] = self._acked[name] = tp.offset
                continue
            low, high = self._watermarks(name)
            positions[name] = low if self._binding.source.start == "earliest" else high
            fresh.append(TopicPartition(tp.topic, tp.partition, positions[name]))
        if fresh and self._binding.source.start == "latest":
            self.client.commit(offsets=fresh, asynchronous=False)
            self._acked.update((partition_name(tp.topic, tp.partition), tp.offset) for tp in fresh)
        if positions:  # the first epoch is planned from there: read ahead while the query starts
            self._read_ahead().start(positions)
        return dict(positions)

    def list_partitions(self) -> list[str]:
        """The topic-partitions of the source's topics (or pattern), refreshed every discovery interval."""
        return self._discover()

    def start_position(self, name: str) -> Position:
        """A partition found later starts at its first offset."""
        return self._watermarks(name)[0]

    def backlog(self, name: str, position: Position, cap: int | None) -> int | None:
        """The partition's end offset minus ``position`` (offsets: transaction markers count).

        Bounded: the end offset taken at the start (:meth:`_end_offsets`), not beyond.
        """
        if self._bounded:
            high = self._end_offsets().get(name, int(position))
            if high > int(position):
                high = min(high, self._watermarks(name)[1])
        else:
            high = self._watermarks(name)[1]
        self._highs[name] = high
        return max(0, high - int(position))

    def read_many(self, positions: Mapping[str, Position], budgets: Mapping[str, int]) -> dict[str, Admitted]:
        """The next records of the partitions with a budget, consumed together by the planner's consumer."""
        at = {n: int(p) for n, p in positions.items()}
        if self._bounded:
            return self._read_bounded(at, dict(budgets))
        got = self._fetch(at, dict(budgets))
        return {n: ahead.admitted(at[n]) for n, ahead in got.items()}

    def _read_bounded(self, positions: dict[str, int], budgets: dict[str, int]) -> dict[str, Admitted]:
        """:meth:`read_many` of a bounded source: records before each partition's end offset only.

        A partition is read until its budget is filled or every record before its end
        offset was read (a record at or past it came, or a partition-EOF event at or past
        it): then its next position is the end offset, so that a partition whose last
        offsets are transaction markers ends too. Records that are slow to come are waited
        for (a bounded source ends when an epoch admits nothing, so a read may not come
        back short for want of time): when, after ``request_timeout``, a partition with a
        budget got nothing and is not at its end, the planning fails as an outage
        (:meth:`transient`: retried, the watermark holds).
        """
        from confluent_kafka import KafkaError, KafkaException

        bounds = self._end_offsets()
        want = dict(budgets)
        parts: dict[str, list[_Ahead]] = {n: [] for n in budgets}
        ended: set[str] = set()
        at = dict(positions)
        deadline = time.monotonic() + self._timeout_s
        while True:
            asked = {n: w for n, w in want.items() if w > 0 and n not in ended}
            if not asked:
                break
            for n, ahead in self._fetch(at, asked).items():
                end = bounds.get(n, positions[n])
                k = int(np.searchsorted(ahead.offsets, end))
                if k:
                    parts[n].append(ahead.slice(0, k))
                    want[n] -= k
                if len(ahead):
                    at[n] = int(ahead.offsets[-1]) + 1  # where the read-ahead continues
                # short of the count asked: nothing of n is held any more, and an EOF at or past
                # the end offset says every record before it was read
                short = len(ahead) < asked[n] and self._read_ahead().eof_at(n) >= end
                if k < len(ahead) or at[n] >= end or short:
                    ended.add(n)
            late = [n for n in asked if n not in ended and want[n] > 0]
            if not late or time.monotonic() > deadline:
                if any(not parts[n] for n in late):
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                                    f"no record of {late} for {self._timeout_s:.0f} s "
                                                    f"before the end offsets taken at the start"))
                break
        out = {}
        for n in budgets:
            got = _Ahead.concat(parts[n]) if parts[n] else _Ahead.concat([])
            admitted = got.admitted(positions[n])
            if n in ended:
                admitted = Admitted(admitted.count, bounds.get(n, positions[n]), admitted.event_times)
            out[n] = admitted
        return out

    def acknowledge(self, positions: Mapping[str, Position]) -> None:
        """Commit the consumer group's offsets at ``positions``, at most once per ``commit_interval``.

        Within the interval after the last commit the positions wait (the latest replace
        the earlier): :meth:`prepare` commits them once it has passed, :meth:`latestOffset`
        as soon as a planning starts no epoch, :meth:`stop` at the end.
        Positions the group already has (committed by this process, or found committed when
        the query started) are not committed again.
        """
        self._pending = {n: int(o) for n, o in positions.items()}
        since = None if self._committed_at is None else time.monotonic() - self._committed_at
        if since is None or since * 1000 >= self._binding.source.commit_interval:
            self._commit_pending()

    def _commit_pending(self) -> None:
        from confluent_kafka import TopicPartition

        if self._pending is None:
            return
        changed = {n: o for n, o in self._pending.items() if self._acked.get(n) != o}
        if changed:  # offsets the group already has are not committed again (idle epochs)
            tps = [TopicPartition(*split_name(n), o) for n, o in changed.items()]
            self.client.commit(offsets=tps, asynchronous=False)
            self._acked.update(changed)
            self._committed_at = time.monotonic()
        self._pending = None

    def prepare(self) -> None:
        """Before planning: commit the group offsets that wait, once ``commit_interval`` has passed.

        A transient error leaves them waiting (a warning); a fatal one fails the query.
        """
        if self._pending is None or self._committed_at is None:
            return
        if (time.monotonic() - self._committed_at) * 1000 < self._binding.source.commit_interval:
            return
        self._try_commit()

    def _try_commit(self) -> None:
        try:
            self._commit_pending()
        except Exception as e:
            if not self.transient(e):
                raise
            warnings.warn(f"kafka source {self._binding.step!r}: committing the group's offsets failed, "
                          f"will retry: {e}", RuntimeWarning, stacklevel=3)

    def stop(self) -> None:
        """Commit the group offsets that wait (best effort), then close the consumer."""
        if self._pending is not None and self._client is not None:
            try:
                self._try_commit()
            except Exception as e:  # the query ends anyway; its checkpoint is what it resumes from
                warnings.warn(f"kafka source {self._binding.step!r}: the group's offsets were not committed "
                              f"at the end: {e}", RuntimeWarning, stacklevel=2)
        super().stop()

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
        """Forget the records read ahead and the consumer's positions (assigned again next time)."""
        if self._ahead is not None:
            self._ahead.forget()

    def close(self) -> None:
        """Stop reading ahead, then close this process's consumer."""
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        super().close()

    def range_location(self, name: str, first: Position, next: Position) -> str:
        """``"<topic>:<partition>:[first,next)"``."""
        return f"{name}:[{first},{next})"

    @property
    def _timeout_s(self) -> float:
        return self._binding.source.request_timeout / 1000

    def _discover(self, *, force: bool = False) -> list[str]:
        """The topic-partitions of the source's topics (or pattern), refreshed every discovery interval.

        Bounded: those found at the start (:meth:`_end_offsets`).
        """
        if self._bounded:
            return sorted(self._end_offsets())
        src = self._binding.source
        now = time.monotonic()
        fresh = (now - self._discovered_at) * 1000 < src.discovery_interval
        if not force and self._known is not None and fresh:
            return self._known
        return self._discover_now()

    def _discover_now(self) -> list[str]:
        """The topic-partitions of the source's topics (or pattern) now."""
        src = self._binding.source
        now = time.monotonic()
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

    def _fetch(self, positions: dict[str, int], counts: dict[str, int]) -> dict[str, _Ahead]:
        """Up to ``counts[n]`` records of each partition ``n`` from ``positions[n]`` on, decoded.

        Taken from what this process's :class:`_ReadAhead` read ahead (it is started, or
        its consumer assigned again at ``positions``, as needed).
        """
        return self._read_ahead().take(positions, counts, self._highs)

    def _read_ahead(self) -> _ReadAhead:
        if self._ahead is None:
            # a consumer of its own: while one thread consumes, another's metadata and offset requests
            # on the same consumer were seen to block (noida-db, partitions at their end)
            from confluent_kafka import Consumer

            consumer = Consumer(consumer_config(self._binding, role="read-ahead"))
            self._ahead = _ReadAhead(consumer, self._decode_ahead,
                                     stamps=self._binding.event_time == TIMESTAMP_COLUMN,
                                     limit=max(_BATCH, 2 * self._binding.max_events_per_epoch),
                                     where=f"kafka source {self._binding.step!r}")
        return self._ahead

    def _decode_ahead(self, name: str, batch: KafkaBatch) -> _Ahead:
        """What the planner keeps of records read ahead: offsets, which are valid, their event times."""
        decoded = self._read(name, batch, 0, ()).decoded
        valid = np.zeros(len(batch), dtype=bool)
        valid[decoded.positions] = True
        times = np.zeros(len(batch), np.int64)
        times[decoded.positions] = decoded.event_times
        return _Ahead(batch.offsets, times, valid)

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
        this process's cache (:class:`_ConsumerCache`) and goes back to it: when the task
        that used it last stopped at most :data:`_SKIP_RANGES` ranges before this one, it
        reads on from there (the records before ``first`` are consumed and dropped: they
        are usually fetched already), else it is assigned at ``first``.

        Raises
        ------
        WireError
            When the broker gives nothing for :data:`_READ_TIMEOUT_S` (it is down).
        """
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        topic, part = split_name(name)
        tp = TopicPartition(topic, part)
        conf = consumer_config(self._binding, role="reader")
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
            pos = kept.resume_at  # the offset of the consumer's next record
            if pos is None or not 0 <= first - pos <= _SKIP_RANGES * max(taken, 1):
                low = self._low_offset(consumer, tp)
                pos = max(first, int(low))
                consumer.assign([TopicPartition(topic, part, pos)])

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
                want = taken - got + max(0, first - pos)  # records before ``first`` are skipped
                consumed = consumer.consume(num_messages=min(_BATCH, want), timeout=0.5)
                msgs, ended = _records_only(consumed, event)
                if msgs:
                    last = time.monotonic()
                    batch = _batch(msgs, stamps)
                    pos = int(batch.offsets[-1]) + 1
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
