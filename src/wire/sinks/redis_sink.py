"""Redis stream sink: each epoch's rows appended with ids derived from the epoch (idempotent).

A replayed epoch adds nothing: its ids are already in the stream. The Redis Streams
source is in :mod:`wire.sources.redis_source.source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import Guarantee, Sink
from wire.errors import ConfigError, WireError, require_extra
from wire.sinks.json_rows import jsonl_lines
from wire.sources.redis_source.config import check_name, check_url
from wire.sources.redis_source.reader import parse_id

if TYPE_CHECKING:
    import redis
    from redis.typing import EncodableT, FieldT

__all__ = ["RedisStreamSink", "redis_stream_sink"]


@dataclass(frozen=True)
class RedisStreamSink(DriverRunSink[Any], Sink):
    """Idempotent appends to a Redis stream, ids derived from the epoch; see :func:`redis_stream_sink`."""

    guarantee: ClassVar[Guarantee] = "idempotent"

    url: str
    stream: str
    maxlen: int | None = None

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time."""
        check_url(self.url)
        check_name("stream", self.stream)
        if self.maxlen is not None and (
            isinstance(self.maxlen, bool) or not isinstance(self.maxlen, int) or self.maxlen < 1
        ):
            raise ConfigError("maxlen", self.maxlen, "None or an int >= 1")

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> Any:
        """``open``: connect and check the server answers; called once at run start on the driver.

        The run is the ``redis.Redis`` client.

        Raises
        ------
        WireError
            When the server cannot be reached.
        """
        import redis

        client = redis.Redis.from_url(self.url)
        try:
            client.ping()
        except redis.exceptions.RedisError as e:
            client.close()
            raise WireError(f"{self.describe()}: cannot reach {self.url}: {e}") from e
        return client

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Append the epoch's rows as entries ``<epoch + 1>-<row>``, in one ``MULTI``/``EXEC``.

        Called on the driver once per epoch, before the epoch commits. Each row is one
        entry with a ``data`` field holding the row as a JSON object (the encoding of
        :func:`wire.sinks.file_sinks.jsonl`). Rows already in the stream (a replayed
        epoch, fully or partly written) are skipped: the stream's last id tells which,
        and an ``XADD`` rejected with "equal or smaller than the target stream top item"
        counts as already written. An empty table writes nothing.

        Raises
        ------
        WireError
            Before :meth:`open`; when the stream's last id is beyond this epoch (another
            writer, or a flow started with a new checkpoint on an old stream); when
            Redis fails.
        """
        import redis

        client: redis.Redis = self._opened(epoch)
        n = table.num_rows
        if n == 0:
            return
        ms = epoch + 1
        try:
            top = self._last_id(client)
            if top[0] > ms:
                raise WireError(
                    f"{self.describe()}: the stream's last id {top[0]}-{top[1]} is beyond epoch {epoch} "
                    f"(ids {ms}-<row>): the stream has another writer, or this flow started with a "
                    "new checkpoint; write to a new stream or delete it"
                )
            first = top[1] + 1 if top[0] == ms else 0
            if first >= n:
                return  # the whole epoch is there already (replay)
            lines = jsonl_lines(table)
            pipe = client.pipeline(transaction=True)
            for i in range(first, n):
                entry: dict[FieldT, EncodableT] = {"data": lines[i]}
                pipe.xadd(self.stream, entry, id=f"{ms}-{i}", maxlen=self.maxlen, approximate=True)
            results = pipe.execute(raise_on_error=False)
        except redis.exceptions.RedisError as e:
            raise WireError(f"{self.describe()}: epoch {epoch} failed: {e}") from e
        for r in results:
            if isinstance(r, Exception) and "equal or smaller" not in str(r):
                raise WireError(f"{self.describe()}: epoch {epoch} failed: {r}")

    def _end_run(self, run: Any) -> None:
        """``close``: close the connection; every written epoch is already in the stream."""
        run.close()

    def describe(self) -> str:
        """E.g. ``"redis stream out @ redis://127.0.0.1:6379/0 (idempotent)"``."""
        return f"redis stream {self.stream} @ {self.url} ({self.guarantee})"

    def _last_id(self, client: redis.Redis) -> tuple[int, int]:
        if not client.exists(self.stream):
            return (0, 0)
        info = client.xinfo_stream(self.stream)
        last = info["last-generated-id"]
        return parse_id(last.decode() if isinstance(last, bytes) else str(last))


def redis_stream_sink(url: str, stream: str, *, maxlen: int | None = None) -> Sink:
    """Append each epoch's rows to a Redis stream, exactly once in effect.

    A driver sink: the epoch's rows are brought to the driver, because entry ids
    must be appended in increasing order, which parallel writers cannot keep.

    Each row becomes one entry whose ``data`` field holds the row as a JSON object
    (keys in column order, values encoded as :func:`wire.sinks.jsonl` does). Entry ids
    are ``<epoch + 1>-<row index>``: increasing over epochs and rows, and the same for
    a replayed epoch, which therefore adds nothing. The ids are not times: read the
    stream by id (``XREAD``, ``XRANGE``), never by time. The stream must have no other
    writer, and a flow restarted with a new checkpoint (epochs start at 0 again) needs
    a new stream.

    Guarantee: ``idempotent``. ``open`` (run start, driver) connects; ``write_epoch``
    (driver, once per epoch, before the epoch commits) appends the rows in one
    ``MULTI``/``EXEC`` transaction, skipping those already there; ``close`` disconnects.

    Parameters
    ----------
    url:
        The Redis URL, e.g. ``"redis://127.0.0.1:6379/0"``.
    stream:
        The stream's key (created by the first ``XADD``).
    maxlen:
        Trim the stream to about this many entries (``MAXLEN ~``); None: no trimming.

    Returns
    -------
    Sink
        A :class:`RedisStreamSink`.

    Raises
    ------
    ConfigError
        On a URL that is not a Redis URL, an empty stream name or a ``maxlen`` that is
        not None or an int ≥ 1.
    MissingExtraError
        When the ``redis`` package (pip extra ``redis``) is not installed.
    """
    require_extra("redis", "wire.sinks.redis_stream_sink")
    return RedisStreamSink(url=url, stream=stream, maxlen=maxlen)
