"""Source connectors (public namespace).

=======================================  =====================================================
constructor                              what it reads
=======================================  =====================================================
``files(path, format=...)``              CSV, JSON Lines, Parquet files in name order
``redis_stream(url, stream, group=...)`` a Redis stream through a consumer group; XACK after commit
``http_ingest(port=..., wal_dir=...)``   POSTed JSON events, 202 once durable in a write-ahead log
=======================================  =====================================================
"""

from wire.connectors.files import FileSource, files
from wire.connectors.http_ingest import HttpIngestSource, http_ingest
from wire.connectors.redis_streams import RedisStreamSource, redis_stream

__all__ = [
    "FileSource",
    "HttpIngestSource",
    "RedisStreamSource",
    "files",
    "http_ingest",
    "redis_stream",
]
