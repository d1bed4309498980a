"""An executor's read of one Kafka partition's offset range from the broker, with a kept consumer.

What a Kafka source task reads when the planner did not hand the range over
(:mod:`wire.sources.kafka_source.handoff`: a cluster's executors, a restarted planner):
:func:`fetch_range`. Its consumers are kept between tasks in the executor process
(:data:`~wire.sources.kafka_source.consumers.CONSUMERS`).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import numpy as np

from wire.errors import WireError
from wire.sources.kafka_source import consumers
from wire.sources.kafka_source.consumers import (
    BATCH,
    Kept,
    batch_of,
    consumer_config,
    is_fatal,
    message_offset,
    raise_fatal,
    records_only,
)
from wire.sources.kafka_source.decode import KafkaBatch, split_name

if TYPE_CHECKING:
    import confluent_kafka

    from wire.sources.kafka_source.config import KafkaBinding

__all__ = ["fetch_range"]

_READ_TIMEOUT_S = 60.0
"""An executor fails its task when the broker gives no record of its range for this long."""
_SKIP_RANGES = 4
"""A kept consumer reads on (dropping records) to a range at most this many times its size ahead."""


def fetch_range(binding: KafkaBinding, name: str, first: int, nxt: int, taken: int, *, stamps: bool,
                timeout_s: float) -> KafkaBatch:
    """The records of partition ``name`` with offsets in ``[first, nxt)``, at most ``taken``.

    Stops at the range's end or at the partition's end (records deleted by retention
    or compaction are then missing: the caller reports them). The consumer comes from
    this process's cache (:data:`~wire.sources.kafka_source.consumers.CONSUMERS`) and
    goes back to it: when the task that used it last stopped at most
    :data:`_SKIP_RANGES` ranges before this one, it reads on from there (the records
    before ``first`` are consumed and dropped: they are usually fetched already), else
    it is assigned at ``first``. A consumer that
    stopped at the partition's end goes back paused (no fetch waits at the broker
    while it is unused; a noida-db broker spins a core's 40 % on each) and the next
    task resumes it.

    ``stamps``: take the records' timestamps; ``timeout_s``: the broker's request timeout.

    Raises
    ------
    WireError
        When the broker gives nothing for :data:`_READ_TIMEOUT_S` (it is down).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    topic, part = split_name(name)
    tp = TopicPartition(topic, part)
    conf = consumer_config(binding, role="reader")
    key = (json.dumps(sorted(conf.items())), name)
    kept = consumers.CONSUMERS.take(key)
    if kept is None:
        kept = Kept(Consumer(conf), None, 0.0)
    consumer = kept.consumer
    out: list[KafkaBatch] = []
    got, resume_at, closed, at_end = 0, None, False, False
    try:
        if kept.paused:  # it fetches again from its position (nothing was queued: it was at the end)
            consumer.resume([tp])
            kept.paused = False
        pos = kept.resume_at  # the offset of the consumer's next record
        if pos is None or not 0 <= first - pos <= _SKIP_RANGES * max(taken, 1):
            low = _low_offset(consumer, tp, binding.step, timeout_s)
            pos = max(first, int(low))
            consumer.assign([TopicPartition(topic, part, pos)])

        def event(msg: confluent_kafka.Message) -> bool:
            err = msg.error()
            assert err is not None
            if err.code() == KafkaError._PARTITION_EOF:
                return _partition_ended(consumer, tp, message_offset(msg), nxt, timeout_s)
            raise_fatal(err, f"kafka source {binding.step!r}")
            return False

        last = time.monotonic()
        while got < taken:
            if time.monotonic() - last > _READ_TIMEOUT_S:
                raise WireError(f"kafka source {binding.step!r}: no record of {name} "
                                f"[{first}, {nxt}) for {_READ_TIMEOUT_S:.0f} s; is the broker down?")
            want = taken - got + max(0, first - pos)  # records before ``first`` are skipped
            consumed = consumer.consume(num_messages=min(BATCH, want), timeout=0.5)
            msgs, ended = records_only(consumed, event)
            if msgs:
                last = time.monotonic()
                batch = batch_of(msgs, stamps)
                pos = int(batch.offsets[-1]) + 1
                lo, hi = np.searchsorted(batch.offsets, [first, nxt])
                out.append(batch.slice(int(lo), int(hi)))
                got += int(hi - lo)
                if hi < len(batch):  # past the range: records of it are gone
                    break
            if ended:
                at_end = True
                break
        else:
            resume_at = nxt  # every record of the range: the next record is the next range's
            marks = consumer.get_watermark_offsets(tp, cached=True)  # as of its last fetch; no request
            at_end = marks is not None and 0 <= marks[1] <= nxt
        if at_end:  # kept fetching, it would keep a fetch waiting at the broker until the next task
            consumer.pause([tp])
            kept.paused = True
        return KafkaBatch.concat(out) if out else KafkaBatch.empty(stamps)
    except BaseException:
        closed = True
        consumer.close()
        raise
    finally:
        if not closed:
            kept.resume_at = resume_at
            consumers.CONSUMERS.give(key, kept)


def _partition_ended(consumer: confluent_kafka.Consumer, tp: confluent_kafka.TopicPartition, at: int,
                     nxt: int, timeout_s: float) -> bool:
    """Whether a partition-EOF event at offset ``at`` ends a read that wants records up to ``nxt``.

    A kept consumer may hand over an EOF it queued for an earlier task (the partition
    grew since): the read ends only when the partition's end offset really is at most ``at``.
    """
    if at >= nxt:
        return True
    for cached in (True, False):
        marks = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=cached)
        if marks is not None and marks[1] > at:
            return False
    return marks is not None and marks[1] >= 0

def _low_offset(consumer: confluent_kafka.Consumer, tp: confluent_kafka.TopicPartition, step: str,
                timeout_s: float) -> int:
    """The partition's first offset (an executor's read).

    Retried while the brokers cannot be reached, up to :data:`_READ_TIMEOUT_S`, as the
    records themselves are.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + _READ_TIMEOUT_S
    while True:
        try:
            low, _ = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            return int(low)
        except KafkaException as e:
            if is_fatal(e) or time.monotonic() > deadline:
                raise WireError(f"kafka source {step!r}: cannot read the first offset "
                                f"of {tp.topic}:{tp.partition} for {_READ_TIMEOUT_S:.0f} s: {e}") from e
            time.sleep(0.5)
