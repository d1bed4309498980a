"""The Kafka source's settings and binding: what its reader is given (no Spark data source here)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, get_args

import pyarrow as pa

from wire.core.time import to_millis
from wire.errors import ConfigError
from wire.sources.base.source import Binding, SchemaDataclassDict, convert_legacy_watermark, schema_from_b64
from wire.sources.kafka_source.decode import (
    AVRO_FRAMINGS,
    KEY_FORMATS,
    METADATA_COLUMNS,
    VALUE_FORMATS,
    AvroFraming,
    KeyFormat,
    ValueFormat,
    metadata_schema,
    value_schema,
)

Start = Literal["earliest", "latest"]
"""Where a consumer group starts on a partition it never committed (``kafka(start=...)``)."""
STARTS: tuple[Start, ...] = get_args(Start)
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_WIRE_OWNED = ("bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store",
               "enable.partition.eof", "auto.offset.reset")


@dataclass(frozen=True)
class KafkaConfig(SchemaDataclassDict):
    """Kafka topics (or a topic pattern) read as one source; build it with :func:`kafka`.

    Immutable; part of a flow plan. Durations are held in ms; ``schema`` holds the
    value's payload columns (one ``value`` column for the ``string`` and ``bytes``
    formats); ``config`` the client settings as sorted ``(name, value)`` pairs.
    """

    bootstrap_servers: str
    topics: tuple[str, ...] | None
    pattern: str | None
    group: str
    schema: pa.Schema | None
    value_format: ValueFormat = "json"
    key_format: KeyFormat = "string"
    avro_schema: str | None = None
    avro_framing: AvroFraming = "none"
    start: Start = "earliest"
    config: tuple[tuple[str, Any], ...] = ()
    idle_timeout: int | None = None
    """Deprecated (the watermark policy's ``idle_timeout``); ms, None: not given."""
    watermark_interval: int | None = None
    """Deprecated (the watermark policy's ``interval``); ms, None: not given."""
    discovery_interval: int = 5_000
    request_timeout: int = 10_000
    unavailable_timeout: int | None = 300_000
    commit_interval: int = 5_000
    bounded: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers", self.bootstrap_servers, "'host:port[,host:port...]'")
        self._check_topics()
        if not isinstance(self.group, str) or not self.group:
            raise ConfigError("group", self.group, "a non-empty consumer group id")
        if self.value_format not in VALUE_FORMATS:
            raise ConfigError("value_format", self.value_format, f"one of {VALUE_FORMATS}")
        if self.key_format not in KEY_FORMATS:
            raise ConfigError("key_format", self.key_format, f"one of {KEY_FORMATS}")
        if self.avro_framing not in AVRO_FRAMINGS:
            raise ConfigError("avro_framing", self.avro_framing, f"one of {AVRO_FRAMINGS}")
        if self.start not in STARTS:
            raise ConfigError("start", self.start, "'earliest' or 'latest'")
        self._check_schema()
        if not isinstance(self.bounded, bool):
            raise ConfigError("bounded", self.bounded, "True (read up to the end offsets at start) or False")
        config = dict(self.config)
        if not all(isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in config.items()):
            raise ConfigError("config", config, "a dict of librdkafka setting names to str/int/float/bool")
        owned = sorted(set(config) & set(_WIRE_OWNED))
        if owned:
            raise ConfigError("config", owned, f"client settings other than {_WIRE_OWNED} (Wire sets those)")
        object.__setattr__(self, "config", tuple(sorted(config.items())))
        convert_legacy_watermark(self)
        for name in ("discovery_interval", "request_timeout", "commit_interval"):
            object.__setattr__(self, name, to_millis(getattr(self, name), parameter=name))
        if self.unavailable_timeout is not None:
            wait = to_millis(self.unavailable_timeout, parameter="unavailable_timeout", allow_zero=False)
            object.__setattr__(self, "unavailable_timeout", wait)

    def _check_topics(self) -> None:
        if (self.topics is None) == (self.pattern is None):
            raise ConfigError("topics", self.topics, "topics or pattern (exactly one of them)")
        if self.topics is not None:
            topics = (self.topics,) if isinstance(self.topics, str) else tuple(self.topics)
            if not topics or not all(isinstance(t, str) and _TOPIC.fullmatch(t) for t in topics):
                raise ConfigError("topics", self.topics, "one or more topic names ([A-Za-z0-9._-], 1..249)")
            object.__setattr__(self, "topics", topics)
        else:
            try:
                re.compile(str(self.pattern))
            except re.error as e:
                raise ConfigError("pattern", self.pattern, f"a Python regular expression ({e})") from None

    def _check_schema(self) -> None:
        if self.value_format == "avro":
            if self.avro_schema is None:
                raise ConfigError("avro_schema", None, "an Avro schema (JSON text or dict) for 'avro' values")
            text = self.avro_schema if isinstance(self.avro_schema, str) else json.dumps(self.avro_schema)
            try:
                import fastavro

                fastavro.parse_schema(json.loads(text))
            except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
                raise ConfigError("avro_schema", self.avro_schema, f"a valid Avro schema ({e})") from None
            object.__setattr__(self, "avro_schema", text)
        elif self.avro_schema is not None:
            raise ConfigError("avro_schema", "...", "None unless value_format='avro'")
        if self.value_format in ("json", "avro"):
            if not isinstance(self.schema, pa.Schema) or not len(self.schema):
                raise ConfigError("schema", self.schema, f"a non-empty pyarrow.Schema for value_format="
                                                         f"{self.value_format!r}")
        elif self.schema is not None and self.schema != value_schema(self.value_format, None):
            raise ConfigError("schema", self.schema, "None: the 'string' and 'bytes' formats have one "
                                                     "column, 'value'")
        schema = value_schema(self.value_format, self.schema)
        clash = sorted(set(schema.names) & set(METADATA_COLUMNS))
        if clash:
            raise ConfigError("schema", clash, f"payload column names other than {METADATA_COLUMNS}")
        object.__setattr__(self, "schema", schema)

    def resolve_schema(self) -> pa.Schema:
        """The source's columns: the value's payload columns, then :data:`METADATA_COLUMNS`."""
        assert self.schema is not None
        return pa.schema(list(self.schema) + list(metadata_schema(self.key_format)))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serializable form (see :meth:`from_dict`)."""
        d = super().to_dict()
        d["config"] = [list(kv) for kv in self.config]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["config"] = tuple(tuple(kv) for kv in d["config"])
        if d["topics"] is not None:
            d["topics"] = tuple(d["topics"])
        return cls(**{**d, "schema": schema_from_b64(d["schema"])})


@dataclass(frozen=True)
class KafkaBinding(Binding):
    """What the compiler hands to the Spark data source for one Kafka source step (:class:`Binding`).

    ``payload_schema``: every column of the source, the value's payload columns, then the
    metadata columns.
    """

    source: KafkaConfig

    @property
    def payload_value_schema(self) -> pa.Schema:
        """The value's payload columns (what the deserializer fills)."""
        assert self.source.schema is not None
        return self.source.schema
