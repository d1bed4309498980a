"""The Redis Streams source's settings and binding, and the URL and name checks its sink shares."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from wire.core.time import to_millis
from wire.errors import ConfigError
from wire.sources.base.source import Binding, SchemaDataclassDict

FIELD_ENCODINGS = ("json", "fields")
STARTS = ("earliest", "latest")


def check_name(parameter: str, value: object) -> str:
    """``value`` if it is a non-empty string (a stream, group or consumer name); else ConfigError."""
    if not isinstance(value, str) or not value:
        raise ConfigError(parameter, value, "a non-empty string")
    return value


def check_url(url: object) -> str:
    """``url`` if it is a Redis URL (``redis://``, ``rediss://``, ``unix://``); else ConfigError."""
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("url", url, "a Redis URL: redis://host:port/db, rediss://... or unix://...")
    return url


@dataclass(frozen=True)
class RedisStreamConfig(SchemaDataclassDict):
    """One Redis stream read through a consumer group; build it with :func:`redis_stream`.

    Immutable; part of a flow plan. Durations are held in ms.
    """

    url: str
    stream: str
    group: str
    consumer: str
    schema: pa.Schema
    field_encoding: str = "json"
    start: str = "earliest"
    idle_timeout: int | None = None
    watermark_interval: int = 200
    bounded: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        check_url(self.url)
        for name in ("stream", "group", "consumer"):
            check_name(name, getattr(self, name))
        if not isinstance(self.schema, pa.Schema) or not len(self.schema):
            raise ConfigError("schema", self.schema, "a non-empty pyarrow.Schema")
        if self.field_encoding not in FIELD_ENCODINGS:
            raise ConfigError("field_encoding", self.field_encoding, "'json' or 'fields'")
        if self.start not in STARTS:
            raise ConfigError("start", self.start, "'earliest' or 'latest'")
        if self.idle_timeout is not None:
            idle = to_millis(self.idle_timeout, parameter="idle_timeout", allow_zero=False)
            object.__setattr__(self, "idle_timeout", idle)
        interval = to_millis(self.watermark_interval, parameter="watermark_interval")
        object.__setattr__(self, "watermark_interval", interval)

    def resolve_schema(self) -> pa.Schema:
        """Return the payload schema (the given one)."""
        return self.schema


@dataclass(frozen=True)
class RedisBinding(Binding):
    """What the compiler hands to the Spark data source for one Redis Streams step (:class:`Binding`).

    ``columns``: the payload columns produced (None: all); entries are decoded with every
    column.
    """

    source: RedisStreamConfig
