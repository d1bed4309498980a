"""The Kafka source's Spark stream reader: admission, watermarks, group commits, envelope rows.

Planner side (Spark's long-lived planner process on the driver): ``latestOffset``
discovers the topic-partitions, admits the next records of each (max-min fair split of
the epoch's budget), decodes them to find each partition's max event time, and records
every partition's offset range and watermark inputs in the epoch's end offset
(:mod:`wire.sources.kafka_offsets`). ``commit`` commits the consumer group's offsets once
Spark has committed the epoch (contraflow, SPEC §7). Executor side: ``read`` fetches
exactly the records of one partition's recorded range, so a replayed epoch reads the
same records, and turns them into envelope rows (:mod:`wire.core.envelope`).
"""

from __future__ import annotations

import re
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from wire.core import envelope
from wire.core.control_file import is_paused
from wire.core.time import NO_WATERMARK
from wire.core.watermarks import (
    advance_partition,
    fair_split,
    should_tick,
    source_watermark,
)
from wire.errors import WireError
from wire.sources.base import Decoded, LiveReader, Offset
from wire.sources.kafka_decode import AvroDecoder, KafkaRecord, decode_records
from wire.sources.kafka_offsets import (
    PartitionOffset,
    committable,
    initial_offset,
    make_offset,
    partition_name,
    partitions_of,
    plan_reads,
    split_name,
)

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


def _raise_fatal(err: confluent_kafka.KafkaError, where: str) -> None:
    if err.fatal():
        raise WireError(f"{where}: fatal Kafka error: {err}")


@dataclass
class KafkaTask(InputPartition):
    """One Spark task of an epoch: one partition's records in ``[first, next)``, and/or the control rows.

    ``name`` is ``""`` for a control-only task (an epoch that admitted nothing).
    ``control``: the epoch's gauges (the first task carries them) or None; ``at`` the
    processing time recorded in the epoch's end offset (for ``max_future``).
    """

    name: str
    first: int
    next: int
    taken: int
    first_seq: int
    start_watermark: int
    end_watermark: int
    at: int | None
    control: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        super().__init__(None)


class KafkaStreamReader(LiveReader["confluent_kafka.Consumer"], DataSourceStreamReader):
    """Stream reader of :func:`wire.sources.kafka`; offsets: :mod:`wire.sources.kafka_offsets`.

    ``clock`` (ms) is the processing-time clock, injectable for tests.
    """

    _binding: KafkaBinding
    _transient: ClassVar[dict[str, Any]] = {
        "_pos": {}, "_stash": {}, "_eof": {}, "_known": None, "_avro": None, "_unacked": None,
        "_caught_up": False, "_down_since": None,
    }
    """The planner's per-process caches: their start values, also after pickling."""
    _pos: dict[str, int]
    _stash: dict[str, deque[KafkaRecord]]
    _eof: dict[str, int]
    _known: list[str] | None
    _avro: AvroDecoder | None
    _unacked: Offset | None
    _caught_up: bool
    _down_since: float | None

    def __init__(self, binding: KafkaBinding, clock: Callable[[], int] | None = None) -> None:
        self._init_live(binding, clock)
        self._discovered_at: float = 0

    def _open_client(self) -> confluent_kafka.Consumer:
        """The planner's consumer (it commits only in :meth:`commit`)."""
        from confluent_kafka import Consumer

        return Consumer(consumer_config(self._binding, role="planner"))

    # -- planner (driver) --------------------------------------------------------------

    def initialOffset(self) -> Offset:
        """Each partition at the group's committed offset, else at ``start``; called on a fresh query.

        With ``start="latest"`` a partition with no committed offset starts at its end,
        and that position is committed to the group at once (it acknowledges nothing), so
        that the call Spark makes again when it replays the first epoch gives the same
        offset. Partitions found later start at their beginning.
        """
        from confluent_kafka import TopicPartition

        names = self._discover(force=True)
        tps = [TopicPartition(*split_name(n)) for n in names]
        committed = self.client.committed(tps, timeout=self._timeout_s) if tps else []
        positions, fresh = {}, []
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
        return initial_offset(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(max_events_per_epoch)``: the admission limit per epoch."""
        return ReadMaxRows(self._binding.max_events_per_epoch)

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """Admit the next records after ``start``, at most ``limit``, split over partitions.

        ``start`` is the end of the last committed epoch. Per partition the demand is its
        end offset minus its position; the budget is shared max-min fairly
        (:func:`~wire.core.watermarks.fair_split`, remainder rotating). The admitted
        records are decoded here to advance each partition's watermark (bounded
        out-of-orderness, idleness; a partition whose records wait is never idle), and the
        source watermark is the minimum over partitions that are not idle. Returns
        ``start`` when paused (control file: pause, stop, open breaker) or when nothing
        is new and the watermark does not tick. The first call in a planner process
        commits the group's offsets up to ``start``, should a crash have come between an
        epoch's commit and its group commit. While the brokers cannot be reached it
        returns ``start`` (no epoch, the watermark held) for up to the source's
        ``unavailable_timeout``, then raises :class:`~wire.errors.WireError`.
        """
        from confluent_kafka import KafkaException

        b = self._binding
        sized = self._sizer.budget(self._clock())
        if is_paused(b.control_file, b.step):
            return start
        try:
            end = self._admit(start, limit, sized)
        except KafkaException as e:
            return self._unreachable(start, e)
        if self._down_since is not None:
            warnings.warn(f"kafka source {b.step!r}: the brokers answer again after "
                          f"{time.monotonic() - self._down_since:.1f} s", RuntimeWarning, stacklevel=2)
            self._down_since = None
        return end

    def _unreachable(self, start: Offset, error: Exception) -> Offset:
        """An outage while planning: no new epoch (``start``), until ``unavailable_timeout``.

        The watermark does not advance while the brokers cannot be asked (an outage is not
        idleness). The consumer is reassigned on the next call, since records it fetched
        for the failed call were not admitted.
        """
        b, src = self._binding, self._binding.source
        err = error.args[0] if error.args else None
        if err is not None and hasattr(err, "fatal") and err.fatal():
            raise WireError(f"kafka source {b.step!r}: fatal Kafka error: {err}") from error
        self._pos, self._stash, self._eof = {}, {}, {}
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            warnings.warn(f"kafka source {b.step!r}: brokers unreachable, waiting (up to "
                          f"unavailable_timeout={src.unavailable_timeout} ms): {error}",
                          RuntimeWarning, stacklevel=3)
        down_ms = (now - self._down_since) * 1000
        if src.unavailable_timeout is not None and down_ms > src.unavailable_timeout:
            raise WireError(f"kafka source {b.step!r}: the brokers have been unreachable for "
                            f"{down_ms / 1000:.1f} s, more than unavailable_timeout="
                            f"{src.unavailable_timeout} ms; last error: {error}") from error
        return start

    def _admit(self, start: Offset, limit: ReadLimit, sized: int) -> Offset:
        """:meth:`latestOffset`'s work once not paused; raises ``KafkaException`` on an outage."""
        if not self._caught_up or self._unacked is not None:
            self._commit(self._unacked or start)
            self._caught_up = True
        budget = min(self._budget(limit), sized)
        before = partitions_of(start)
        names = sorted(set(before) | set(self._discover()))
        parts = {n: before.get(n) or PartitionOffset.start_at(self._watermarks(n)[0]) for n in names}
        highs = {n: self._watermarks(n)[1] for n in names}
        demand = [max(0, highs[n] - parts[n].next) for n in names]
        first = start["turn"] % len(names) if names else 0
        alloc = fair_split(demand, budget, first)
        counts = {n: a for n, a in zip(names, alloc, strict=True) if a}
        got = self._fetch({n: parts[n].next for n in names}, counts, highs) if counts else {}
        now = self._clock()
        if self._started is None:
            self._started = now
        started = self._started if start["started"] is None else start["started"]
        live = set(self._known or ())
        after: dict[str, PartitionOffset] = {}
        taken = 0
        for n, want, a in zip(names, demand, alloc, strict=True):
            recs = got.get(n, [])
            taken += len(recs)
            max_et = self._decode(n, recs, now).max_event_time if recs else None
            p = parts[n]
            nxt = recs[-1].offset + 1 if recs else p.next
            state = advance_partition(
                p.state, file="", record=nxt, taken=len(recs), max_event_time=max_et,
                pending=len(recs) >= a and a < want, bounded=False, now=now, started=started,
                policy=self._policy,
            )
            if n not in live and not recs:
                state = replace(state, done=True)  # its topic is gone
            after[n] = PartitionOffset(p.next, nxt, len(recs), highs[n], state)
        self._sizer.admitted(now, taken, budget)
        watermark = source_watermark(start["watermark"], {n: p.state for n, p in after.items()}, now,
                                     self._policy)
        if not taken and not should_tick(start["watermark"], watermark, start["at"], now, self._policy):
            return start
        return make_offset(after, admitted=start["admitted"] + taken, watermark=watermark,
                           started=started, at=now, turn=start["turn"] + (1 if taken else 0))

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        """Plan the epoch ``(start, end]``: one task per partition that admitted records.

        The first task also emits the epoch's gauges and watermark rows (a task of its
        own when nothing was admitted). Called on the driver per epoch, also on a replay
        with offsets from the offset log.
        """
        if start == end:
            return []
        try:
            reads = plan_reads(start, end)
        except ValueError as e:
            raise WireError(f"kafka source {self._binding.step!r}: {e}") from e
        w0, w1, at = start["watermark"], end["watermark"], end["at"]
        parts = partitions_of(end)
        control: dict[str, int] = {
            "gauge:watermark": w1,
            "gauge:max_event_time": max((p.state.max_event_time for p in parts.values()
                                         if p.state.max_event_time is not None), default=NO_WATERMARK),
        }
        for n, p in parts.items():
            control[f"gauge:watermark:{n}"] = p.state.watermark
            if p.lag is not None:
                control[f"gauge:offset_lag:{n}"] = p.lag
        ctl = tuple(sorted(control.items()))
        tasks = [KafkaTask(r.name, r.first, r.next, r.taken, r.first_seq, w0, w1, at) for r in reads]
        if not tasks:
            return [KafkaTask("", 0, 0, 0, start["admitted"], w0, w1, at, ctl)]
        tasks[0].control = ctl
        return list(tasks)

    def commit(self, end: Offset) -> None:
        """Commit the group's offsets up to ``end``; Spark calls it after the epoch committed.

        That is after every sink of the flow committed (contraflow, SPEC §7). A commit
        the broker refuses (e.g. it is down) is retried before the next epoch is planned;
        it never fails the flow: the offsets in Spark's checkpoint are what the flow
        resumes from.
        """
        self._commit(end)

    def _commit(self, offset: Offset) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        tps = [TopicPartition(*split_name(n), o) for n, o in committable(offset).items()]
        if not tps:
            self._unacked = None
            return
        try:
            self.client.commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            self._unacked = offset
            warnings.warn(f"kafka source {self._binding.step!r}: group commit failed, will retry: {e}",
                          RuntimeWarning, stacklevel=2)
            return
        self._unacked = None

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

    def _budget(self, limit: ReadLimit) -> int:
        cap = self._binding.max_events_per_epoch
        if isinstance(limit, ReadMaxRows):
            return max(0, min(limit.max_rows, cap))
        if isinstance(limit, ReadAllAvailable):
            return cap
        return cap

    def _fetch(
        self, positions: dict[str, int], counts: dict[str, int], highs: dict[str, int]
    ) -> dict[str, list[KafkaRecord]]:
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
            at_end = self._eof.get(n, -1) >= highs[n] and not self._stash[n]
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

    def _decode(self, name: str, records: list[KafkaRecord], at: int | None) -> Decoded:
        b, src = self._binding, self._binding.source
        if src.value_format == "avro" and self._avro is None:
            self._avro = AvroDecoder(src.avro_schema or "", src.avro_framing)
        topic, part = split_name(name)
        return decode_records(
            records, topic=topic, partition=part, value_format=src.value_format, key_format=src.key_format,
            payload_schema=b.payload_value_schema, event_time=b.event_time, avro=self._avro, at=at,
            max_future_ms=b.max_future_ms,
        )

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
                err = e.args[0] if e.args else None
                fatal = err is not None and hasattr(err, "fatal") and err.fatal()
                if fatal or time.monotonic() > deadline:
                    raise WireError(f"kafka source {self._binding.step!r}: cannot read the first offset "
                                    f"of {tp.topic}:{tp.partition} for {_READ_TIMEOUT_S:.0f} s: {e}") from e
                time.sleep(0.5)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield a task's rows: data rows, dead letters, metrics, then (control task) watermark rows.

        Runs on an executor. Data rows carry ``__et`` (event time), ``__wm`` (the epoch's
        start watermark) and ``__seq`` (arrival order over the source).
        """
        if not isinstance(partition, KafkaTask):
            raise TypeError(f"expected a KafkaTask partition, got {type(partition).__name__}")
        b, schema, p = self._binding, self._row_schema, partition
        counters: dict[str, int] = {}
        if p.name:
            records = self.fetch_range(p.name, p.first, p.next, p.taken)
            decoded = self._decode(p.name, records, p.at)
            n = decoded.table.num_rows
            missing = p.taken - len(records)
            gone = (f"{p.name}:[{p.first},{p.next})",
                    f"{missing} admitted records are gone (deleted by retention or compaction)", missing)
            yield from decoded.batches(schema, b.step, b.output_schema.names,
                                       start_watermark=p.start_watermark, first_seq=p.first_seq, gone=gone)
            counters.update(records=p.taken, events=n, malformed=p.taken - n)
        if p.control is not None:
            counters.update(dict(p.control))
        if counters:
            yield envelope.side_batch(schema, envelope.METRICS_PORT, envelope.metrics_table(b.step, counters))
        if p.control is not None:
            yield envelope.watermark_batch(schema, p.end_watermark, range(b.key_groups))
