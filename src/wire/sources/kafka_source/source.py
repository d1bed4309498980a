"""Kafka source: each topic-partition a Wire partition with its own watermark (seed 003, SPEC §2, §7).

:func:`kafka` describes the source (an immutable plan value); the Spark stream reader is
in :mod:`wire.sources.kafka_source.reader`, on the base :mod:`wire.sources.base.partitioned` (which
owns admission, watermarks and offsets); the deserializers are in
:mod:`wire.sources.kafka_source.decode`. The client is confluent-kafka (pip extra ``kafka``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader

from wire.core.time import Duration
from wire.errors import require_extra
from wire.sources.base.source import (
    ALL_CAPABILITIES,
    BindingDataSource,
    BindingSource,
    Capability,
    warn_legacy_watermark,
)
from wire.sources.kafka_source.config import KafkaBinding, KafkaConfig, Start
from wire.sources.kafka_source.decode import AvroFraming, KeyFormat, ValueFormat

if TYPE_CHECKING:
    pass

__all__ = ["DATA_SOURCE_NAME", "KafkaBinding", "KafkaDataSource", "KafkaSource", "kafka"]

DATA_SOURCE_NAME = "wire_kafka"


class KafkaSource(KafkaConfig, BindingSource):
    """The connector: its settings (:class:`KafkaConfig`) read by :class:`KafkaDataSource`.

    Build it with :func:`kafka`. Immutable; part of a flow plan.
    """

    capabilities: ClassVar[frozenset[Capability]] = ALL_CAPABILITIES
    """Not ``"replay"``: a branched flow reads Kafka once per epoch, behind the shared shuffle
    (``wire.compiler.branches.read_once``); two scans of one epoch's offset ranges stalled the
    executors' cached consumers (the flights-from-Kafka run did not finish, issue 25)."""

    default_max_events_per_epoch: ClassVar[int] = 250_000
    """Admission per epoch when the flow gives none (``Flow.source``), larger than other
    sources' 100,000: a Kafka epoch's fixed cost (its two stages, the driver's 200-380 ms
    between jobs, the offset commit) weighs on a backlog's rate. ``bench/peers.py kafka
    --events 2000000`` (keyed tumbling count, 4 partitions): 114,760 events/s steady with
    100,000-event epochs, 177,694 with 250,000-event epochs of 0.7-1.6 s each
    (``docs/architecture.md``)."""

    def data_source(self) -> type[BindingDataSource]:
        """The Spark data source that reads this source (:class:`KafkaDataSource`)."""
        return KafkaDataSource


def kafka(
    bootstrap_servers: str,
    topics: str | list[str] | tuple[str, ...] | None = None,
    *,
    group: str,
    pattern: str | None = None,
    value_format: ValueFormat = "json",
    schema: pa.Schema | None = None,
    key_format: KeyFormat = "string",
    avro_schema: str | dict[str, Any] | None = None,
    avro_framing: AvroFraming = "none",
    start: Start = "earliest",
    config: dict[str, str | int | float | bool] | None = None,
    idle_timeout: Duration | None = None,
    watermark_interval: Duration | None = None,
    discovery_interval: Duration = "5s",
    request_timeout: Duration = "10s",
    unavailable_timeout: Duration | None = "5m",
    commit_interval: Duration = "5s",
    bounded: bool = False,
) -> KafkaSource:
    """Read Kafka topics as a stream of events; each topic-partition has its own watermark.

    Output columns: the value's payload columns (``schema`` for ``value_format="json"``
    or ``"avro"``; one column ``value`` for ``"string"`` (text) and ``"bytes"``), then
    ``kafka_key`` (text, or bytes with ``key_format="bytes"``), ``kafka_topic``,
    ``kafka_partition`` (int32), ``kafka_offset`` (int64) and ``kafka_timestamp`` (the
    record timestamp, int64 ms). The flow's ``event_time`` may be a payload column or
    ``kafka_timestamp``. A record that does not decode (see
    :mod:`wire.sources.kafka_source.decode`: invalid JSON or Avro, a tombstone, a value that does
    not convert, invalid UTF-8, an unusable event time, or with
    ``BoundedOutOfOrderness(max_future=...)`` an event time too far ahead) goes to the
    step's ``dead_letter`` port with location ``"<topic>:<partition>:<offset>"``, the
    reason and the value as text; the flow keeps going.

    **Partitions and watermarks (seed 003).** Each topic-partition is a partition of
    the source: its watermark is its max event time minus the flow's ``max_delay``
    (monotonic); the source watermark is the minimum over partitions that are not idle.
    A partition with no new record for ``idle_timeout`` (processing time) while it has
    nothing waiting stops holding the watermark back; when all are idle the watermark
    follows processing time. Without ``idle_timeout`` an empty or silent partition
    holds the watermark back for good. Partitions added to a topic (or topics matching
    ``pattern``) are found within ``discovery_interval`` and read from their beginning.

    **Admission and offsets.** Per epoch the source admits at most
    ``max_events_per_epoch`` records (``Flow.source``; 250,000 unless the flow says,
    :attr:`KafkaSource.default_max_events_per_epoch`), shared max-min fairly over the
    partitions with records waiting. The epoch's offset in Spark's offset log records, per partition,
    the range ``[from, next)`` it read, the number of records and the watermark inputs
    (:mod:`wire.sources.base.partitioned`), so a replayed epoch reads the same records and
    sees the same watermarks. A fresh checkpoint starts each partition at the group's
    committed offset, else at its beginning (``start="earliest"``) or end
    (``"latest"``).

    **Consumer group (SPEC §7).** The group's offsets are committed only after the
    epoch that read the records committed (every sink of the flow), never before, at
    most once per ``commit_interval``: the offsets of the last completed epoch, also
    when no epoch follows it (a quiet topic: within about ``commit_interval`` of its
    end, since Spark keeps asking the source for records; a graceful stop or the end
    of a bounded flow: when the query stops), so that the group's lag reaches 0 once
    the flow caught up. A commit the broker refuses is retried before the next epoch.
    The flow resumes from its checkpoint, not from the group's offsets, which are for
    monitoring (lag) and for a new checkpoint. One flow per group. ``isolation.level``
    defaults to ``read_committed``: records of aborted or open transactions are not
    read.

    **How a Kafka flow ends.** Unbounded (the default), a Kafka flow runs until it is
    stopped (``RunningFlow.stop()``, ``wire stop``, Ctrl-C) or fails; a quiet topic
    does not end it. With ``bounded=True`` (as Flink's ``setBounded(latest)`` or
    Spark's ``availableNow``) the source takes each partition's end offset once, when
    the run starts (with ``read_committed``, the last stable offset), reads the
    partitions that exist then up to those offsets, in epochs as usual, and then ends:
    one last epoch moves the watermark to its maximum (every window still open fires),
    and a flow whose sources are all bounded stops by itself (``flow.run`` returns).
    Records produced after the start and partitions added after it are not read. A
    bounded flow restarted on its checkpoint before it ended reads up to the end
    offsets of the new start; once ended, its checkpoint has nothing left to read.

    **Lag.** Per partition, the gauge ``offset_lag:<topic>:<partition>`` (records behind
    the partition's end when the epoch was planned) and ``watermark:<topic>:<partition>``
    are in ``/metrics`` (``wire_step_gauge``, ``wire_watermark_ms``) and the REST status.

    Parameters
    ----------
    bootstrap_servers:
        ``"host:port[,host:port...]"``.
    topics:
        One topic or a list of topics; or None with ``pattern``.
    group:
        The consumer group whose offsets the source commits.
    pattern:
        A regular expression (Python ``re``, full match) over topic names, instead of
        ``topics``; internal topics (``__...``) are never matched.
    value_format:
        ``"json"``, ``"avro"``, ``"string"`` or ``"bytes"``.
    schema:
        The payload columns (``pyarrow.Schema``) for ``"json"`` and ``"avro"``; None for
        the other formats.
    key_format:
        ``"string"`` or ``"bytes"``.
    avro_schema:
        The Avro schema (JSON text or dict) of the values, for ``value_format="avro"``.
    avro_framing:
        ``"none"`` (plain Avro binary) or ``"confluent"`` (a 5-byte schema-registry header
        before each datum, skipped; the inline schema is used).
    start:
        Where a partition without a committed group offset starts on a fresh
        checkpoint: ``"earliest"`` or ``"latest"``.
    config:
        librdkafka client settings passed through as they are (e.g.
        ``{"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username":
        ..., "sasl.password": ...}``); Wire sets the group, auto-commit, partition-EOF
        and offset-reset settings itself.
    idle_timeout, watermark_interval:
        Deprecated: the step's watermark policy holds them,
        ``flow.source(..., watermark=wire.BoundedOutOfOrderness(max_delay, idle_timeout=...,
        interval=...))`` (:class:`wire.core.windowing.BoundedOutOfOrderness`). Given here they
        still apply (a ``DeprecationWarning``), forwarded into that policy when the flow
        compiles; a policy that sets a different value is a ``ConfigError`` then.
    discovery_interval:
        How often the planner looks for new partitions and topics.
    request_timeout:
        Timeout of the planner's metadata, offset and commit requests.
    unavailable_timeout:
        How long the planner waits through a broker outage (requests failing or timing
        out) before the flow fails with :class:`~wire.errors.WireError`; meanwhile no
        epoch starts and the watermark holds. None: wait for good. An executor reading
        an epoch's recorded range fails its task after 60 s without records.
    commit_interval:
        The least processing time between two commits of the group's offsets (as Kafka's
        own ``auto.commit.interval.ms``, 5 s by default); 0: after every epoch.
    bounded:
        True: read up to the end offsets taken when the run starts, then end (see "How
        a Kafka flow ends"); False: read until stopped.

    Returns
    -------
    KafkaSource
        An immutable source description.

    Raises
    ------
    ConfigError
        On a missing or invalid setting (both or neither of ``topics`` and ``pattern``,
        an unknown format, a schema missing or given where it has no use, an invalid
        Avro schema, a payload column named like a metadata column, a ``config`` entry
        Wire owns, an invalid duration, a ``bounded`` that is not a bool).
    MissingExtraError
        When confluent-kafka (pip extra ``kafka``) is not installed.

    Examples
    --------
    >>> src = kafka("127.0.0.1:9092", "clicks", group="wire",
    ...             schema=pa.schema([("t", pa.int64()), ("page", pa.string())]))
    >>> src.topics, src.resolve_schema().names[-3:]
    (('clicks',), ['kafka_partition', 'kafka_offset', 'kafka_timestamp'])
    """
    require_extra("kafka", "wire.sources.kafka")
    warn_legacy_watermark("wire.sources.kafka", idle_timeout, watermark_interval)
    # __post_init__ normalizes what the fields hold: one topic name to a tuple, an Avro schema
    # dict to its JSON text, durations to int ms (hence the type: ignores below)
    return KafkaSource(
        bootstrap_servers,
        topics if topics is None or isinstance(topics, str) else tuple(topics),  # type: ignore[arg-type]
        pattern, group, schema, value_format, key_format, avro_schema, avro_framing,  # type: ignore[arg-type]
        start, tuple((config or {}).items()), idle_timeout, watermark_interval,  # type: ignore[arg-type]
        discovery_interval, request_timeout, unavailable_timeout,  # type: ignore[arg-type]
        commit_interval, bounded,  # type: ignore[arg-type]
    )


class KafkaDataSource(BindingDataSource):
    """The Spark Python data source ``wire_kafka``; option ``binding``: KafkaBinding JSON."""

    format_name = DATA_SOURCE_NAME
    binding_class = KafkaBinding
    source_class = KafkaSource

    def stream_reader(self, binding: KafkaBinding) -> DataSourceStreamReader:
        """The Kafka source's stream reader (:mod:`wire.sources.kafka_source.reader`)."""
        from wire.sources.kafka_source.reader import KafkaStreamReader

        return KafkaStreamReader(binding)
