"""Kafka sink: one Kafka transaction per epoch (exactly-once), or an idempotent producer (at-least-once).

Design (why the driver writes). A Kafka transaction belongs to one producer, i.e. one
process holding one transactional id; librdkafka cannot hand an open transaction to
another process, and Spark's executor tasks do not outlive the epoch's job, so a
transaction cannot span executors and still be committed by the driver after every
task succeeded. So the Kafka sink is a *driver sink* (:class:`~wire.delivery.sink.Sink`):
the epoch's rows come to the driver, which writes them in one transaction together with
an **epoch marker** (a record in the marker topic, key ``<flow>/<sink>/<checkpoint>``,
value ``{"epoch": N, "rows": n}``) and commits it before Spark marks the epoch complete.
A ``read_committed`` consumer sees all of an epoch or none of it. The transactional id
is ``wire.<flow>.<sink>``: ``open`` (run start, also after a crash) calls
``init_transactions``, which fences a previous producer with that id (a zombie) and
aborts its open transaction, then reads the newest committed marker of this
flow/sink/checkpoint with ``read_committed``: an epoch at or below it was published
before the crash, and its replay is skipped. The price: the sink's throughput is the
driver's (SPEC §10).

Without transactions (``transactional=False``) the sink uses an idempotent producer
(no duplicates from the producer's own retries) and flushes before the epoch commits;
a replayed epoch is written again: at-least-once.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, get_args

import pyarrow as pa

from wire.delivery.sink import Guarantee, Sink
from wire.errors import ConfigError, WireError, require_extra
from wire.sinks.json_rows import jsonl_lines

__all__ = ["KafkaSink", "KafkaTransactionalSink", "encode_keys", "encode_values", "kafka"]

ValueFormat = Literal["json", "avro", "string", "bytes"]
"""How a Kafka sink encodes a row (``kafka(value_format=...)``)."""
VALUE_FORMATS: tuple[ValueFormat, ...] = get_args(ValueFormat)
EPOCH_HEADER = "wire-epoch"
_OWNED = ("bootstrap.servers", "transactional.id", "enable.idempotence")


def encode_values(table: pa.Table, value_format: str, *, value_column: str | None = None,
                  avro_schema: Any = None) -> list[bytes | None]:
    """The record values of ``table``'s rows (pure).

    ``json``: each row as a JSON object (the encoding of :func:`wire.sinks.jsonl`);
    ``avro``: each row as one Avro datum of ``avro_schema`` (parsed, binary, no header);
    ``string`` / ``bytes``: the column ``value_column`` as UTF-8 / as it is (null: a
    tombstone).
    """
    if value_format == "json":
        return [line.encode("utf-8") for line in jsonl_lines(table)]
    if value_format == "avro":
        import fastavro

        out: list[bytes | None] = []
        for row in table.to_pylist():
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, avro_schema, row)
            out.append(buf.getvalue())
        return out
    assert value_column is not None
    values = table.column(value_column).to_pylist()
    if value_format == "string":
        return [None if v is None else str(v).encode("utf-8") for v in values]
    return [None if v is None else bytes(v) for v in values]


def encode_keys(table: pa.Table, key: str | None) -> list[bytes | None]:
    """The record keys: column ``key`` as UTF-8 text (bytes as they are); None: no keys."""
    if key is None:
        return [None] * table.num_rows
    return [None if v is None else v if isinstance(v, bytes) else str(v).encode("utf-8")
            for v in table.column(key).to_pylist()]


@dataclass(frozen=True)
class KafkaSink(Sink):
    """Idempotent producer, at-least-once; see :func:`kafka`. Written on the driver."""

    guarantee: ClassVar[Guarantee] = "at_least_once"
    target_fields: ClassVar[tuple[str, ...]] = ("bootstrap_servers", "topic", "key", "value_format")

    bootstrap_servers: str
    topic: str
    key: str | None = None
    value_format: ValueFormat = "json"
    value_column: str | None = None
    avro_schema: str | None = None
    marker_topic: str | None = None
    config: tuple[tuple[str, Any], ...] = ()
    timeout_s: float = 60.0
    _state: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time."""
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers", self.bootstrap_servers, "'host:port[,host:port...]'")
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigError("topic", self.topic, "a topic name")
        if self.value_format not in VALUE_FORMATS:
            raise ConfigError("value_format", self.value_format, f"one of {VALUE_FORMATS}")
        if (self.value_format in ("string", "bytes")) != (self.value_column is not None):
            raise ConfigError("value_column", self.value_column,
                              "a column name with value_format 'string' or 'bytes', else None")
        if (self.value_format == "avro") != (self.avro_schema is not None):
            raise ConfigError("avro_schema", self.avro_schema, "an Avro schema for 'avro' values, else None")
        if self.avro_schema is not None and not isinstance(self.avro_schema, str):
            object.__setattr__(self, "avro_schema", json.dumps(self.avro_schema))
        config = dict(self.config)
        owned = sorted(set(config) & set(_OWNED))
        if owned:
            raise ConfigError("config", owned, f"client settings other than {_OWNED} (Wire sets those)")
        object.__setattr__(self, "config", tuple(sorted(config.items())))

    def _producer_config(self) -> dict[str, Any]:
        return {"linger.ms": 20, **dict(self.config), "bootstrap.servers": self.bootstrap_servers,
                "enable.idempotence": True}

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Create the producer; called once at run start on the driver."""
        from confluent_kafka import Producer

        self.close()
        self._state["producer"] = Producer(self._producer_config())

    def _encoded(self, table: pa.Table) -> tuple[list[bytes | None], list[bytes | None]]:
        schema = None
        if self.avro_schema is not None:
            import fastavro

            schema = self._state.get("avro") or fastavro.parse_schema(json.loads(self.avro_schema))
            self._state["avro"] = schema
        return encode_keys(table, self.key), encode_values(
            table, self.value_format, value_column=self.value_column, avro_schema=schema)

    def _produce(self, producer: Any, epoch: int, table: pa.Table) -> None:
        keys, values = self._encoded(table)
        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        headers = [(EPOCH_HEADER, str(epoch).encode())]
        for k, v in zip(keys, values, strict=True):
            while True:
                try:
                    producer.produce(self.topic, value=v, key=k, headers=headers, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        self._state["errors"] = errors

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Produce the epoch's rows and wait until the broker has them all (before the epoch commits).

        Raises
        ------
        WireError
            Before :meth:`open`, or when a record is not delivered.
        """
        producer = self._state.get("producer")
        if producer is None:
            raise WireError(f"{self.describe()}: write_epoch before open")
        if table.num_rows == 0:
            return
        self._produce(producer, epoch, table)
        left = producer.flush(self.timeout_s)
        errors = self._state.pop("errors", [])
        if left or errors:
            raise WireError(f"{self.describe()}: epoch {epoch}: {left} records not delivered within "
                            f"{self.timeout_s} s; errors: {errors[:3]}")

    def close(self) -> None:
        """Flush and drop the producer."""
        producer = self._state.pop("producer", None)
        if producer is not None:
            producer.flush(self.timeout_s)

    def describe(self) -> str:
        """E.g. ``"kafka topic out @ 127.0.0.1:9092 (exactly_once)"``."""
        return f"kafka topic {self.topic} @ {self.bootstrap_servers} ({self.guarantee})"


@dataclass(frozen=True)
class KafkaTransactionalSink(KafkaSink):
    """One transaction per epoch with an epoch marker; a replayed epoch is skipped. See :func:`kafka`."""

    guarantee: ClassVar[Guarantee] = "exactly_once"

    @property
    def markers(self) -> str:
        """The marker topic: ``marker_topic``, default ``<topic>.wire-epochs``."""
        return self.marker_topic or f"{self.topic}.wire-epochs"

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Fence older producers of this flow/sink, then find the last epoch it published.

        Called at run start and after a crash, on the driver. Creates the marker topic
        (one partition) if missing.

        Raises
        ------
        WireError
            When the broker refuses transactions or cannot be reached.
        """
        from confluent_kafka import KafkaException, Producer

        self.close()
        self._ensure_marker_topic()
        conf = {**self._producer_config(), "transactional.id": f"wire.{flow_id}.{sink_id}"}
        producer = Producer(conf)
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            raise WireError(f"{self.describe()}: init_transactions failed (does the broker support "
                            f"transactions?): {e}") from e
        marker_key = f"{flow_id}/{sink_id}/{checkpoint_id}"
        self._state.update(producer=producer, marker_key=marker_key, last=self._last_published(marker_key))

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Produce the rows and the epoch marker in one transaction and commit it; skip a published epoch.

        Raises
        ------
        WireError
            Before :meth:`open`, or when the transaction fails (it is aborted; the epoch
            fails and is retried by the supervisor).
        """
        from confluent_kafka import KafkaException

        producer = self._state.get("producer")
        if producer is None:
            raise WireError(f"{self.describe()}: write_epoch before open")
        if table.num_rows == 0 or epoch <= self._state["last"]:
            return
        try:
            producer.begin_transaction()
            self._produce(producer, epoch, table)
            marker = json.dumps({"epoch": epoch, "rows": table.num_rows}).encode()
            producer.produce(self.markers, key=self._state["marker_key"].encode(), value=marker, partition=0)
            producer.commit_transaction(self.timeout_s)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is not None and hasattr(err, "txn_requires_abort") and err.txn_requires_abort():
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(self.timeout_s)
            if err is not None and hasattr(err, "fatal") and err.fatal():
                self._state.pop("producer", None)
            raise WireError(f"{self.describe()}: epoch {epoch}: transaction failed: {e}") from e
        self._state["last"] = epoch

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by the next ``open``)."""
        self._state.pop("producer", None)

    def _ensure_marker_topic(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic  # admin re-exports it implicitly

        admin = AdminClient({**dict(self.config), "bootstrap.servers": self.bootstrap_servers})
        meta = admin.list_topics(timeout=self.timeout_s)
        if self.markers in meta.topics and meta.topics[self.markers].error is None:
            return
        new = NewTopic(self.markers, num_partitions=1, replication_factor=1)
        for f in admin.create_topics([new]).values():
            try:
                f.result(timeout=self.timeout_s)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise WireError(f"{self.describe()}: cannot create topic {self.markers}: {e}") from e

    def _last_published(self, marker_key: str) -> int:
        """The newest epoch in a committed marker of ``marker_key`` (-1: none); reads with read_committed."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({**dict(self.config), "bootstrap.servers": self.bootstrap_servers,
                             "group.id": f"{marker_key}.markers", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        try:
            tp = TopicPartition(self.markers, 0)
            low, high = consumer.get_watermark_offsets(tp, timeout=self.timeout_s, cached=False)
            if high <= low:
                return -1
            consumer.assign([TopicPartition(self.markers, 0, low)])
            last, key = -1, marker_key.encode()
            quiet_since = time.monotonic()
            while True:  # consume() returns early only with a full batch: poll in short steps
                msgs = consumer.consume(num_messages=10_000, timeout=0.2)
                if msgs:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > self.timeout_s:
                    raise WireError(f"{self.describe()}: no answer reading marker topic {self.markers}")
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return last
                        continue
                    if m.key() == key:
                        value = m.value()
                        assert value is not None  # a marker always has a value (write_epoch)
                        last = max(last, int(json.loads(value)["epoch"]))
        finally:
            consumer.close()


def kafka(
    bootstrap_servers: str,
    topic: str,
    *,
    key: str | None = None,
    value_format: ValueFormat = "json",
    value_column: str | None = None,
    avro_schema: str | dict[str, Any] | None = None,
    transactional: bool = True,
    marker_topic: str | None = None,
    config: dict[str, str | int | float | bool] | None = None,
    timeout_s: float = 60.0,
) -> Sink:
    """Write each epoch's rows to a Kafka topic; exactly once with transactions (module docstring).

    Each row is one record: key from column ``key`` (text as UTF-8, bytes as they are;
    None: no key, the producer spreads records), value by ``value_format`` (``json``:
    the row as a JSON object, encoded as :func:`wire.sinks.jsonl` does; ``avro``: one
    datum of ``avro_schema``, whose fields are the columns; ``string``/``bytes``: column
    ``value_column``), and a header ``wire-epoch`` with the epoch id.

    Guarantee: ``exactly_once`` with ``transactional=True`` (the default; needs a broker
    with transactions; consumers must read with ``isolation.level=read_committed``):
    one transaction per epoch holding its rows and an epoch marker in ``marker_topic``
    (default ``<topic>.wire-epochs``, one partition, created if missing); transactional
    id ``wire.<flow>.<sink>``; a replayed epoch already published is skipped. With
    ``transactional=False``: ``at_least_once`` (idempotent producer, flushed before the
    epoch commits; a replayed epoch is written again). Either way a driver sink: the
    epoch's rows come to the driver. Two runs of one flow and sink must not write at
    once (the second fences the first).

    Parameters
    ----------
    bootstrap_servers:
        ``"host:port[,host:port...]"``.
    topic:
        The topic written (it must exist, or the broker must create topics).
    key, value_format, value_column, avro_schema:
        Record key and value encoding, as above.
    transactional:
        Exactly-once through transactions (True) or at-least-once (False).
    marker_topic:
        Where the epoch markers go (transactional only).
    config:
        librdkafka producer settings passed through (security, SASL, SSL, batching);
        not ``bootstrap.servers``, ``transactional.id`` or ``enable.idempotence``.
    timeout_s:
        Flush, commit and metadata timeout.

    Returns
    -------
    Sink
        A :class:`KafkaTransactionalSink` or a :class:`KafkaSink`.

    Raises
    ------
    ConfigError
        On an empty servers string or topic, an unknown format, a missing or superfluous
        ``value_column`` / ``avro_schema``, or a ``config`` entry Wire owns.
    MissingExtraError
        When confluent-kafka (pip extra ``kafka``) is not installed.

    Examples
    --------
    >>> kafka("127.0.0.1:9092", "alerts", key="k").guarantee
    'exactly_once'
    """
    require_extra("kafka", "wire.sinks.kafka")
    cls = KafkaTransactionalSink if transactional else KafkaSink
    if marker_topic is not None and not transactional:
        raise ConfigError("marker_topic", marker_topic, "None unless transactional=True")
    if avro_schema is not None and not isinstance(avro_schema, str):
        avro_schema = json.dumps(avro_schema)
    return cls(bootstrap_servers, topic, key, value_format, value_column, avro_schema, marker_topic,
               tuple((config or {}).items()), timeout_s)
