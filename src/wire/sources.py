"""Source connectors (public namespace).

=======================================  =====================================================
constructor                              what it reads
=======================================  =====================================================
``files(path, format=...)``              CSV, JSON Lines, Parquet files in name order
``redis_stream(url, stream, group=...)`` a Redis stream through a consumer group; XACK after commit
=======================================  =====================================================
"""

from wire.connectors.files import FileSource, files
from wire.connectors.redis_streams import RedisStreamSource, redis_stream

__all__ = ["FileSource", "RedisStreamSource", "files", "redis_stream"]
