"""Redis Streams source: one stream read through a consumer group.

Each epoch admits the next entries of one stream, at most ``max_events_per_epoch``,
records their id range and the watermark in the epoch's offset, and acknowledges them
(``XACK``) only once the epoch has committed. The stream reader is in
:mod:`wire.sources.redis_source.reader`; the Redis stream sink in :mod:`wire.sinks.redis_sink`
(it checks its URL and stream with :func:`check_url` and :func:`check_name`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from wire.core.time import Duration
from wire.errors import require_extra
from wire.sources.base.source import (
    BindingDataSource,
    BindingSource,
    warn_legacy_watermark,
)
from wire.sources.redis_source.config import FieldEncoding, RedisBinding, RedisStreamConfig, Start
from wire.sources.redis_source.reader import RedisStreamReader

if TYPE_CHECKING:
    pass

__all__ = [
    "DATA_SOURCE_NAME",
    "RedisBinding",
    "RedisStreamDataSource",
    "RedisStreamSource",
    "redis_stream",
]

DATA_SOURCE_NAME = "wire_redis_stream"


class RedisStreamSource(RedisStreamConfig, BindingSource):
    """The connector: its settings (:class:`RedisStreamConfig`) read by :class:`RedisStreamDataSource`.

    Build it with :func:`redis_stream`. Immutable; part of a flow plan.
    """

    def data_source(self) -> type[BindingDataSource]:
        """The Spark data source that reads this source (:class:`RedisStreamDataSource`)."""
        return RedisStreamDataSource


def redis_stream(
    url: str,
    stream: str,
    *,
    group: str,
    consumer: str = "wire",
    schema: pa.Schema,
    field_encoding: FieldEncoding = "json",
    start: Start = "earliest",
    idle_timeout: Duration | None = None,
    watermark_interval: Duration | None = None,
) -> RedisStreamSource:
    """Read one Redis stream as a stream of events, acknowledged after each epoch commits.

    Output columns: the payload columns of ``schema`` (plus Wire's envelope columns
    inside a compiled flow). Each entry holds one event: with ``field_encoding="json"``
    its ``data`` field is a JSON object whose keys are the columns (``XADD s * data
    '{"t": 1700000000000, "k": "a"}'``; missing keys are null, other keys ignored);
    with ``"fields"`` every column is a field of its own holding the value as text
    (``XADD s * t 1700000000000 k a``). Entries that do not fit (no ``data`` field,
    invalid JSON, a value that does not convert, no usable event time, or with
    ``BoundedOutOfOrderness(max_future=...)`` an event time further ahead of the epoch's
    processing time) go to the step's ``dead_letter`` port with location
    ``"<stream>:<id>"``, the reason, and the entry's fields as a JSON object.

    **Admission and offsets.** Per epoch the source admits the next entries in id
    order, at most ``max_events_per_epoch``. The epoch's offset records the id of its
    last entry, the number of entries admitted so far and the watermark (bounded
    out-of-orderness: ``max event time - max_delay``, monotonic; with
    ``idle_timeout``, a stream without new entries advances it with processing time,
    see :mod:`wire.core.watermarks`). An epoch reads exactly the entries with
    ids in ``(previous offset's id, its own id]`` with ``XRANGE``, so a replayed epoch
    sees the same entries and the same watermarks. No state is kept beyond the
    offsets.

    **Consumer group and acknowledgement (SPEC §7).** The group is created if missing
    (``MKSTREAM``; from the stream's start, or its end with ``start="latest"``). New
    entries are delivered to ``consumer`` with ``XREADGROUP`` while an epoch is planned
    and stay pending until Spark has committed the epoch (every sink of the flow
    committed): then they are acknowledged with ``XACK``. After a crash the flow
    resumes from its checkpoint: entries delivered but not acknowledged are read again
    (an uncommitted epoch is replayed from its recorded id range); entries of a
    committed epoch whose ``XACK`` was lost are acknowledged when the flow restarts,
    not read again. A new checkpoint starts at the group's oldest pending entry, or
    after its last delivered one. One flow per group: the group records that flow's
    progress. Entries trimmed before they were acknowledged are reported on the
    ``dead_letter`` port.

    Parameters
    ----------
    url:
        The Redis URL, e.g. ``"redis://127.0.0.1:6379/0"``.
    stream:
        The stream's key.
    group, consumer:
        The consumer group and the consumer name used for deliveries.
    schema:
        The payload schema; the flow's event-time column must be one of its columns
        (int64 ms, timestamp, date, or ISO-8601 strings).
    field_encoding:
        ``"json"`` (a ``data`` field with a JSON object) or ``"fields"`` (one field per
        column).
    start:
        Where a group created by the source starts: ``"earliest"`` (all entries) or
        ``"latest"`` (only entries added after it was created).
    idle_timeout, watermark_interval:
        Deprecated: the step's watermark policy holds them,
        ``flow.source(..., watermark=wire.BoundedOutOfOrderness(max_delay, idle_timeout=...,
        interval=...))`` (:class:`wire.core.windowing.BoundedOutOfOrderness`). Given here they
        still apply (a ``DeprecationWarning``), forwarded into that policy when the flow
        compiles; a policy that sets a different value is a ``ConfigError`` then.

    Returns
    -------
    RedisStreamSource
        An immutable source description (``bounded=False``).

    Raises
    ------
    ConfigError
        On a URL that is not a Redis URL, an empty stream, group or consumer name, a
        schema that is not a non-empty ``pyarrow.Schema``, an unknown
        ``field_encoding`` or ``start``, or an invalid duration.
    MissingExtraError
        When the ``redis`` package (pip extra ``redis``) is not installed.

    Examples
    --------
    >>> src = redis_stream("redis://127.0.0.1:6379/0", "clicks", group="wire",
    ...                    schema=pa.schema([("t", pa.int64()), ("k", pa.string())]))
    >>> src.bounded, src.field_encoding, src.consumer
    (False, 'json', 'wire')
    """
    require_extra("redis", "wire.sources.redis_stream")
    warn_legacy_watermark("wire.sources.redis_stream", idle_timeout, watermark_interval)
    return RedisStreamSource(
        url, stream, group, consumer, schema, field_encoding, start, idle_timeout, watermark_interval  # type: ignore[arg-type]  # Duration: __post_init__ converts it to int ms
    )


class RedisStreamDataSource(BindingDataSource):
    """The Spark Python data source ``wire_redis_stream``; option ``binding``: RedisBinding JSON."""

    format_name = DATA_SOURCE_NAME
    binding_class = RedisBinding
    source_class = RedisStreamSource
    reader_class = RedisStreamReader

