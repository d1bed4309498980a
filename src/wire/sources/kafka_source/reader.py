"""The Kafka source's Spark stream reader: a :class:`~wire.sources.base.partitioned.PartitionedReader`.

The base owns admission, watermarks, offsets, tasks and envelope rows. This module holds
what is Kafka's: discovering topic-partitions, the planner's consumer (one per planner
process, read ahead by a background thread that decodes the records as they come, so
that planning an epoch only takes what is ready: :class:`ReadAhead`), the group commits
that acknowledge an epoch once Spark committed it (contraflow, SPEC §7; at most once per
``commit_interval``), and the executors' reads of exactly one partition's recorded
offset range, so a replayed epoch reads the same records (their consumers are kept
between tasks: :class:`ConsumerCache`).

Records are handled column by column (:class:`~wire.sources.kafka_source.decode.KafkaBatch`):
offsets, keys and values are taken from each ``consume`` call's messages in one pass
each, and JSON values are parsed by Arrow's JSON reader, never one Python object per
record.
"""

from __future__ import annotations

import functools
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from wire.errors import WireError
from wire.sources.base.handoff import HandoffDir, read_table
from wire.sources.base.offsets import Position, positions_of
from wire.sources.base.partitioned import Admitted, PartitionedReader, Read
from wire.sources.base.source import Offset
from wire.sources.kafka_source.consumers import (
    BATCH,
    consumer_config,
    is_fatal,
)
from wire.sources.kafka_source.decode import (
    TIMESTAMP_COLUMN,
    AvroDecoder,
    KafkaBatch,
    decode_batch,
    partition_name,
    record_text,
    split_name,
)
from wire.sources.kafka_source.handoff import decode as decode_range
from wire.sources.kafka_source.handoff import encode as encode_range
from wire.sources.kafka_source.handoff import handoff_name
from wire.sources.kafka_source.range_fetch import fetch_range
from wire.sources.kafka_source.read_ahead import Ahead, ReadAhead

if TYPE_CHECKING:
    import confluent_kafka

    from wire.sources.kafka_source.config import KafkaBinding


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
    _ahead: ReadAhead | None
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
        self._handoff = HandoffDir() if binding.local else None
        """Planner, local master: each epoch's decoded ranges, handed to the executors (:mod:`.handoff`)."""

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
            if self._handoff is not None:  # the epochs that read them committed
                at = {n: int(p) for n, p in positions.items()}
                self._handoff.release(lambda owner: owner[1] <= at.get(owner[0], -1))  # type: ignore[index]
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
        out = {n: ahead.admitted(at[n]) for n, ahead in got.items()}
        self._hand_over(at, got, out)
        return out

    def _hand_over(self, positions: Mapping[str, int], got: Mapping[str, Ahead],
                   admitted: Mapping[str, Admitted]) -> None:
        """Local master: write each admitted range's decoded records for the executors (:mod:`.handoff`)."""
        if self._handoff is None:
            return
        for n, ahead in got.items():
            a = admitted[n]
            if a.count and ahead.kept:
                first, nxt = positions[n], int(a.next)
                self._handoff.write(handoff_name(n, first, nxt, a.count), (n, nxt),
                                    functools.partial(encode_range, n, first, nxt, ahead))

    def handoff(self) -> str | None:
        """The directory of this planner's decoded ranges (None: not a local master, or none yet)."""
        return None if self._handoff is None else self._handoff.path

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
        parts: dict[str, list[Ahead]] = {n: [] for n in budgets}
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
        out, kept = {}, {}
        for n in budgets:
            got = Ahead.concat(parts[n]) if parts[n] else Ahead.concat([])
            admitted = got.admitted(positions[n])
            if n in ended:
                admitted = Admitted(admitted.count, bounds.get(n, positions[n]), admitted.event_times)
            out[n] = admitted
            kept[n] = got
        self._hand_over(positions, kept, out)
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
        """Commit the group offsets that wait (best effort), delete the hand-over files, close the client."""
        if self._handoff is not None:
            self._handoff.close()
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
        if is_fatal(error):
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

    def _fetch(self, positions: dict[str, int], counts: dict[str, int]) -> dict[str, Ahead]:
        """Up to ``counts[n]`` records of each partition ``n`` from ``positions[n]`` on, decoded.

        Taken from what this process's :class:`ReadAhead` read ahead (it is started, or
        its consumer assigned again at ``positions``, as needed).
        """
        return self._read_ahead().take(positions, counts, self._highs)

    def _read_ahead(self) -> ReadAhead:
        if self._ahead is None:
            # a consumer of its own: while one thread consumes, another's metadata and offset requests
            # on the same consumer were seen to block (noida-db, partitions at their end)
            from confluent_kafka import Consumer

            consumer = Consumer(consumer_config(self._binding, role="read-ahead"))
            self._ahead = ReadAhead(consumer, self._decode_ahead, stamps=self._stamps(planner=True),
                                     limit=max(BATCH, 2 * self._binding.max_events_per_epoch),
                                     where=f"kafka source {self._binding.step!r}")
        return self._ahead

    def _stamps(self, *, planner: bool) -> bool:
        """Whether a read takes the records' timestamps: the event time, or (executor) a column, needs them.

        A local planner decodes the executors' columns too (:meth:`_decode_ahead`).
        """
        b = self._binding
        return b.event_time == TIMESTAMP_COLUMN or (
            (not planner or self._handoff is not None) and TIMESTAMP_COLUMN in b.output_schema.names)

    def _decode_ahead(self, name: str, batch: KafkaBatch) -> Ahead:
        """What the planner keeps of records read ahead: offsets, which are valid, their event times.

        Local master: also the executors' decoded columns, the values and the malformed
        records' reasons (:attr:`Ahead.kept`, handed over by :meth:`_hand_over`).
        """
        local = self._handoff is not None
        decoded = self._read(name, batch, 0, self._binding.output_schema.names if local else ()).decoded
        valid = np.zeros(len(batch), dtype=bool)
        valid[decoded.positions] = True
        times = np.zeros(len(batch), np.int64)
        times[decoded.positions] = decoded.event_times
        if not local:
            return Ahead(batch.offsets, times, valid)
        bad = np.flatnonzero(~valid).tolist()
        reasons = {int(batch.offsets[i]): reason for i, (_, reason, _) in zip(bad, decoded.dead, strict=True)}
        return Ahead(batch.offsets, times, valid, decoded.table, batch.values, reasons)

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
        """Partition ``name``'s records with offsets in ``[first, nxt)``, at most ``taken``, from the broker.

        :func:`wire.sources.kafka_source.range_fetch.fetch_range` with this source's settings.
        """
        return fetch_range(self._binding, name, first, nxt, taken, stamps=self._stamps(planner=False),
                           timeout_s=self._timeout_s)

    def read_range(self, name: str, first: Position, next: Position, taken: int) -> Read:
        """Partition ``name``'s records with offsets in ``[first, next)``, at most ``taken`` (executor).

        The range the planner handed over (local master: :mod:`.handoff`), else fetched
        from the broker and decoded.
        """
        first, next = int(first), int(next)
        if self.task_handoff is not None:
            handed = decode_range(read_table(self.task_handoff, handoff_name(name, first, next, taken)),
                                  name, first, next, taken)
            if handed is not None:
                return handed
        batch = self.fetch_range(name, first, next, taken)
        return self._read(name, batch, int(first), self._binding.output_schema.names)
