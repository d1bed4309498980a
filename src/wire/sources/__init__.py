"""Source connectors (public namespace).

=======================================  =====================================================
constructor                              what it reads
=======================================  =====================================================
``files(path, format=...)``              CSV, JSON Lines, Parquet files in name order
``redis_stream(url, stream, group=...)`` a Redis stream through a consumer group; XACK after commit
``http_ingest(port=..., wal_dir=...)``   POSTed JSON events, 202 once durable in a write-ahead log
=======================================  =====================================================

Each name imports its connector on first use. ``redis_stream`` needs the pip extra
``wire[redis]`` and ``http_ingest`` the extra ``wire[ingest]`` (FastAPI, uvicorn);
without it the call raises :class:`wire.errors.MissingExtraError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire.connectors.files import FileSource, files
    from wire.connectors.http_ingest import HttpIngestSource, http_ingest
    from wire.connectors.redis_streams import RedisStreamSource, redis_stream

_LAZY: LazyTable = {
    **{n: ("wire.connectors.files", n) for n in ("FileSource", "files")},
    **{n: ("wire.connectors.http_ingest", n) for n in ("HttpIngestSource", "http_ingest")},
    **{n: ("wire.connectors.redis_streams", n) for n in ("RedisStreamSource", "redis_stream")},
}
__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "FileSource",
    "HttpIngestSource",
    "RedisStreamSource",
    "files",
    "http_ingest",
    "redis_stream",
]
