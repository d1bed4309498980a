"""The HTTP ingest source's settings and binding, shared by its reader and its server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from wire.core.control_file import check_bind
from wire.errors import ConfigError
from wire.sources.base.source import Binding, SchemaDataclassDict, convert_legacy_watermark

WAL_PARTITION = "wal"
"""The reader's one partition: the write-ahead log."""
WAL_FILE = "wal.sqlite"
"""The log's file name inside ``wal_dir``."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""Default largest accepted request body (bytes, 16 MiB); a larger one is answered 413."""
PAUSED_RETRY_AFTER_S = 5
"""``Retry-After`` (s) while the flow is paused or stopping, or the log cannot be written."""


@dataclass(frozen=True)
class HttpIngestConfig(SchemaDataclassDict):
    """The HTTP ingest source's settings, checked: the endpoint and its write-ahead log.

    The connector is :class:`wire.sources.http_source.source.HttpIngestSource`. Immutable;
    part of a flow plan. Durations in ms.
    """

    port: int
    wal_dir: str
    schema: pa.Schema
    host: str = "127.0.0.1"
    path: str = "/events"
    token: str | None = field(default=None, repr=False)
    idle_timeout: int | None = None
    """Deprecated (the watermark policy's ``idle_timeout``); ms, None: not given."""
    watermark_interval: int | None = None
    """Deprecated (the watermark policy's ``interval``); ms, None: not given."""
    max_body_bytes: int = MAX_BODY_BYTES
    allow_remote: bool = False
    bounded: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        port = self.port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError("port", port, "an int between 1 and 65535")
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError("host", self.host, "a host name or IP address, e.g. '127.0.0.1'")
        if not isinstance(self.path, str) or not self.path.startswith("/"):
            raise ConfigError("path", self.path, "a URL path starting with '/', e.g. '/events'")
        if not isinstance(self.wal_dir, str | Path) or not str(self.wal_dir):
            raise ConfigError("wal_dir", self.wal_dir, "a directory path for the write-ahead log")
        object.__setattr__(self, "wal_dir", str(self.wal_dir))
        if not isinstance(self.schema, pa.Schema) or not len(self.schema):
            raise ConfigError("schema", self.schema, "a non-empty pyarrow.Schema of the events' fields")
        if self.token is not None and (not isinstance(self.token, str) or not self.token):
            raise ConfigError("token", "<hidden>", "None or a non-empty string")
        check_bind(self.host, token=self.token, allow_remote=self.allow_remote, server="HTTP ingest")
        limit = self.max_body_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError("max_body_bytes", limit, "a positive int (bytes), e.g. 16 * 1024 * 1024")
        convert_legacy_watermark(self)

    @property
    def wal_path(self) -> str:
        """The write-ahead log's database file."""
        return str(Path(self.wal_dir) / WAL_FILE)

    def resolve_schema(self) -> pa.Schema:
        """Return the payload schema (the events' fields)."""
        return self.schema


@dataclass(frozen=True)
class IngestBinding(Binding):
    """What the compiler hands to the Spark data source for one HTTP ingest step (:class:`Binding`).

    ``payload_schema`` is the source's schema; records are parsed with every column of it,
    whatever ``columns`` produces. ``resume`` is always None: the source cannot resume on
    a new Spark checkpoint (no ``"resume"`` capability).
    """

    source: HttpIngestConfig
