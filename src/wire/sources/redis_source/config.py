"""The Redis Streams source's settings and binding, and the URL and name checks its sink shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import pyarrow as pa

from wire.errors import ConfigError
from wire.sources.base.source import Binding, SchemaDataclassDict, convert_legacy_watermark

FieldEncoding = Literal["json", "fields"]
"""How a Redis stream entry holds an event (``redis_stream(field_encoding=...)``)."""
Start = Literal["earliest", "latest"]
"""Where a new consumer group starts (``redis_stream(start=...)``)."""
FIELD_ENCODINGS: tuple[FieldEncoding, ...] = get_args(FieldEncoding)
STARTS: tuple[Start, ...] = get_args(Start)


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
    field_encoding: FieldEncoding = "json"
    start: Start = "earliest"
    idle_timeout: int | None = None
    """Deprecated (the watermark policy's ``idle_timeout``); ms, None: not given."""
    watermark_interval: int | None = None
    """Deprecated (the watermark policy's ``interval``); ms, None: not given."""
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
        convert_legacy_watermark(self)

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
