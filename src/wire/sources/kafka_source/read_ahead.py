"""The Kafka planner's read-ahead: a consumer of its own, read by a background thread while epochs run.

:class:`ReadAhead` consumes and decodes records ahead of the planning that needs them;
:class:`Ahead` is what the planner keeps of them (offsets, event times, which are valid).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from wire.sources.base.partitioned import Admitted
from wire.sources.kafka_source.consumers import (
    BATCH,
    message_offset,
    message_partition,
    raise_fatal,
    runs_by_partition,
)
from wire.sources.kafka_source.decode import KafkaBatch, split_name

if TYPE_CHECKING:
    import confluent_kafka

GAP_S = 0.2
"""The planner stops waiting for records when none came for this long."""
MAX_WAIT_S = 10.0


@dataclass(frozen=True)
class Ahead:
    """Records of one partition the planner read ahead: offsets, event times, which are valid.

    ``event_times[i]`` counts only where ``valid[i]`` (a record that decodes, with a usable
    event time: it moves the watermark); malformed records count as admitted too.

    With a local master the planner also keeps what the executors would decode
    (handed over by ``KafkaStreamReader._hand_over``): ``rows``, the valid records' columns (one
    row per valid record, in order); ``values``, every record's value as consumed (dead
    letters show it); ``reasons``, why each malformed record was rejected, by offset
    (records of other ranges may be in it). None when not kept.
    """

    offsets: np.ndarray
    event_times: np.ndarray
    valid: np.ndarray
    rows: pa.Table | None = None
    values: list[bytes | None] | None = None
    reasons: Mapping[int, str] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def kept(self) -> bool:
        """Whether the decoded records were kept (:attr:`rows`, :attr:`values`, :attr:`reasons`)."""
        return self.rows is not None and self.values is not None and self.reasons is not None

    def slice(self, start: int, stop: int | None = None) -> Ahead:
        """Records ``start`` (index) up to ``stop`` (excluded; None: the end)."""
        rows = values = None
        if self.kept:
            assert self.rows is not None and self.values is not None
            first = int(np.count_nonzero(self.valid[:start]))
            rows = self.rows.slice(first, int(np.count_nonzero(self.valid[start:stop])))
            values = self.values[start:stop]
        return Ahead(self.offsets[start:stop], self.event_times[start:stop], self.valid[start:stop],
                     rows, values, self.reasons if self.kept else None)

    @staticmethod
    def concat(parts: Sequence[Ahead]) -> Ahead:
        """The records of ``parts``, one after the other."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return Ahead(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, dtype=bool))
        rows = values = reasons = None
        if all(p.kept for p in parts):
            rows = pa.concat_tables([p.rows for p in parts if p.rows is not None])
            values = [v for p in parts for v in p.values or ()]
            reasons = {o: r for p in parts for o, r in (p.reasons or {}).items()}
        return Ahead(np.concatenate([p.offsets for p in parts]),
                     np.concatenate([p.event_times for p in parts]),
                     np.concatenate([p.valid for p in parts]), rows, values, reasons)

    def admitted(self, position: int) -> Admitted:
        """These records admitted from ``position``: their count, the next position, the valid event times."""
        nxt = int(self.offsets[-1]) + 1 if len(self) else position
        return Admitted(len(self), nxt, self.event_times[self.valid])


class ReadAhead:
    """The planner's consumer, read ahead by a background thread while epochs run.

    The thread consumes the assigned partitions' records as they come (up to ``limit``
    records held; more while a :meth:`take` waits, since the records it waits for may come
    after other partitions'), splits them by partition and decodes them with ``decode``
    (valid records and their event times), so that planning an epoch takes records
    already decoded instead of fetching and decoding them while the executors wait. What
    an epoch admits does not change: :meth:`take` hands out each partition's records in
    offset order from the planner's positions, waiting for records the partition's end
    offset says exist, as the planner did when it consumed them itself (until none came
    for :data:`GAP_S`, at most :data:`MAX_WAIT_S`). When the positions asked differ from where
    the records read ahead continue (a restart, a replay, a new partition) the consumer
    is assigned again and what was read ahead is dropped. An error of the thread (a fatal
    Kafka error) is raised by the next :meth:`take`. The consumer is the read-ahead's own,
    used by its thread alone (while a thread consumes, metadata and offset requests of
    another thread on the same consumer were seen to block). A partition read to its end
    (an EOF event) is paused, so that no fetch waits at the broker for records that may
    not come; a :meth:`take` whose ``highs`` say records came after it resumes it.
    """

    def __init__(self, consumer: confluent_kafka.Consumer, decode: Callable[[str, KafkaBatch], Ahead], *,
                 stamps: bool, limit: int, where: str) -> None:
        self.consumer, self.decode, self.stamps = consumer, decode, stamps  # its own consumer
        self.limit, self.where = limit, where
        self.cond = threading.Condition()
        self.positions: dict[str, int] = {}
        """Per partition, where the next :meth:`take` starts (the records read ahead follow)."""
        self.assign_to: dict[str, int] | None = None
        """Positions the thread is to assign the consumer at, before it consumes again."""
        self.ready: dict[str, deque[Ahead]] = {}
        self.held = 0
        self.eof: dict[str, int] = {}
        """Per partition, the offset of the partition-EOF event after the last record read ahead."""
        self.generation = 0
        self.hungry = False
        """Whether a :meth:`take` waits for records: the thread then reads on even past ``limit``."""
        self.paused: set[str] = set()
        """Partitions read to their end, paused (or about to be) by the thread."""
        self.unpause: set[str] = set()
        """Paused partitions a :meth:`take` wants read again (the thread resumes them)."""
        self.arrived = 0.0
        self.failure: BaseException | None = None
        self.closing = False
        self.thread: threading.Thread | None = None

    def take(
        self, positions: dict[str, int], counts: dict[str, int], highs: Mapping[str, int]
    ) -> dict[str, Ahead]:
        """Up to ``counts[n]`` records of each partition ``n`` from ``positions[n]`` on.

        ``highs``: each partition's end offset seen while planning; a partition whose
        records read ahead reached it (an EOF event at it) is not waited for.
        """
        with self.cond:
            self._raise_failure()
            self._start(positions)
            self.unpause |= {n for n in counts if n in self.paused and highs.get(n, -1) > self.eof.get(n, -1)}

            def waiting(n: str) -> bool:
                have = sum(len(a) for a in self.ready.get(n, ()))
                return have < counts[n] and self.eof.get(n, -1) < highs.get(n, -1)

            t0 = time.monotonic()
            while self.failure is None and any(waiting(n) for n in counts):
                now = time.monotonic()
                if now - max(t0, self.arrived) >= GAP_S or now - t0 >= MAX_WAIT_S:
                    break
                self.hungry = True  # read on past ``limit``: other partitions' records may come first
                self.cond.notify_all()
                self.cond.wait(GAP_S / 4)
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

    def _pop(self, name: str, count: int) -> Ahead:
        queue = self.ready.setdefault(name, deque())
        parts: list[Ahead] = []
        have = 0
        while queue and have < count:
            part = queue.popleft()
            k = min(len(part), count - have)
            parts.append(part.slice(0, k))
            if k < len(part):
                queue.appendleft(part.slice(k))
            have += k
        self.held -= have
        got = Ahead.concat(parts)
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
                while not (self.closing or self.assign_to is not None or self.unpause
                           or (self.positions and (self.held < self.limit or self.hungry))):
                    self.cond.wait(0.5)
                if self.closing:
                    return
                generation, assign_to, self.assign_to = self.generation, self.assign_to, None
                resume = self.paused if assign_to is not None else self.unpause & self.paused
                self.paused, self.unpause = self.paused - resume, set()
            try:
                if resume:
                    self.consumer.resume([TopicPartition(*split_name(n)) for n in resume])
                if assign_to is not None:
                    self.consumer.assign([TopicPartition(*split_name(n), o) for n, o in assign_to.items()])
                items = self._read(self.consumer.consume(num_messages=BATCH, timeout=GAP_S / 2))
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
                ended = set()
                for name, item in items:
                    if isinstance(item, int):
                        self.eof[name] = item
                        ended.add(name)
                        continue
                    ended.discard(name)
                    self.ready.setdefault(name, deque()).append(item)
                    self.held += len(item)
                    self.eof.pop(name, None)
                    self.arrived = time.monotonic()
                ended -= self.paused
                self.paused |= ended
                self.cond.notify_all()
            if ended:
                try:
                    self.consumer.pause([TopicPartition(*split_name(n)) for n in ended])
                except BaseException as e:  # raised by the next take()
                    with self.cond:
                        self.failure = e
                        self.cond.notify_all()
                    return

    def _read(self, msgs: list[confluent_kafka.Message]) -> list[tuple[str, Ahead | int]]:
        """Consumed messages as, in order, decoded runs of one partition's records and EOF offsets."""
        from confluent_kafka import KafkaError

        events = [i for i, m in enumerate(msgs) if m.error() is not None]
        items: list[tuple[str, Ahead | int]] = []
        at = 0
        for i in [*events, len(msgs)]:
            if i > at:
                runs = runs_by_partition(msgs[at:i], self.stamps)
                items += [(n, self.decode(n, batch)) for n, batch in runs]
            if i < len(msgs):
                err, name = msgs[i].error(), message_partition(msgs[i])
                assert err is not None
                if err.code() == KafkaError._PARTITION_EOF and name:
                    items.append((name, message_offset(msgs[i])))
                else:
                    raise_fatal(err, self.where)
            at = i + 1
        return items
