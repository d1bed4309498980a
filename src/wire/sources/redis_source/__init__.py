"""The Redis Streams source connector: one stream through a consumer group (``wire.sources.redis_stream``).

:mod:`.source` (the connector, :func:`~.source.redis_stream`, its Spark data source),
:mod:`.config` (its settings and binding, and the URL and name checks the Redis stream
sink shares), :mod:`.reader` (the stream reader, on the partitioned base).
"""

from __future__ import annotations

from wire.sources.redis_source.source import RedisStreamSource, redis_stream

__all__ = ["RedisStreamSource", "redis_stream"]
