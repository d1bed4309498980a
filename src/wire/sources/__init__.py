"""Source connectors (public namespace).

=======================================  =====================================================
constructor                              what it reads
=======================================  =====================================================
``files(path, format=...)``              CSV, JSON Lines, Parquet files in name order
``redis_stream(url, stream, group=...)`` a Redis stream through a consumer group; XACK after commit
``http_ingest(port=..., wal_dir=...)``   POSTed JSON events, 202 once durable in a write-ahead log
``kafka(servers, topics, group=...)``    Kafka topic-partitions, a watermark each; group commit after commit
=======================================  =====================================================

Each name imports its connector on first use. ``redis_stream`` needs the pip extra
``wire[redis]``, ``kafka`` the extra ``wire[kafka]`` (confluent-kafka, fastavro) and
``http_ingest`` the extra ``wire[ingest]`` (FastAPI, uvicorn);
without it the call raises :class:`wire.errors.MissingExtraError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire.sources.file_source.source import FileSource, files
    from wire.sources.http_source.source import HttpIngestSource, http_ingest
    from wire.sources.kafka_source.source import KafkaSource, kafka
    from wire.sources.redis_source.source import RedisStreamSource, redis_stream

_LAZY: LazyTable = {
    **{n: ("wire.sources.file_source.source", n) for n in ("FileSource", "files")},
    **{n: ("wire.sources.http_source.source", n) for n in ("HttpIngestSource", "http_ingest")},
    **{n: ("wire.sources.redis_source.source", n) for n in ("RedisStreamSource", "redis_stream")},
    **{n: ("wire.sources.kafka_source.source", n) for n in ("KafkaSource", "kafka")},
}
__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "FileSource",
    "HttpIngestSource",
    "KafkaSource",
    "RedisStreamSource",
    "files",
    "http_ingest",
    "kafka",
    "redis_stream",
]
