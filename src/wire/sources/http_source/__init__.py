"""The HTTP ingest source connector: POSTed JSON events via a write-ahead log (``wire.sources.http_ingest``).

:mod:`.source` (the connector, :func:`~.source.http_ingest`, its Spark data source),
:mod:`.config` (its settings and binding), :mod:`.reader` (the stream reader, one
partition: the log), :mod:`.server` (the endpoint, FastAPI and uvicorn: pip extra
``wire[ingest]``, imported by the planner process only).
"""

from __future__ import annotations

from wire.sources.http_source.source import HttpIngestSource, http_ingest

__all__ = ["HttpIngestSource", "http_ingest"]
