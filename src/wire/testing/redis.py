"""A throw-away Redis server for tests: start on a free port in a temp dir, stop, delete.

Used by Wire's own tests of :mod:`wire.sources.redis_source.source` and usable by users'
tests the same way::

    ok, reason = RedisServer.available()
    if not ok:
        pytest.skip(reason)
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)

The server listens on ``127.0.0.1`` on a free port, keeps nothing on disk (``--save ""
--appendonly no``) and works in its own temp dir, deleted at :meth:`RedisServer.stop`.
It is stopped through its process id (SIGTERM, then SIGKILL), never by name
(:class:`wire.testing.server.ThrowawayServer`).

Binary: ``binary`` if given, else ``$WIRE_REDIS_SERVER``, else ``redis-server`` on
``PATH``, else ``/usr/bin/redis-server``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from wire.errors import WireError
from wire.testing.server import HOST, ThrowawayServer, free_port, log_tail, terminate, wait_until

__all__ = ["RedisServer"]

_START_ATTEMPTS = 3
_READY_TIMEOUT_S = 30.0


class RedisServer(ThrowawayServer):
    """A throw-away Redis server; a context manager (``start`` / ``stop``).

    Parameters
    ----------
    binary:
        Path of ``redis-server`` (see the module docstring for the default).
    base_dir:
        Where the temp dir is created; default the system temp dir.
    """

    prefix = "wire-redis-"

    def __init__(
        self, binary: str | os.PathLike[str] | None = None, *, base_dir: str | os.PathLike[str] | None = None
    ) -> None:
        super().__init__(base_dir=base_dir)
        self._requested = binary
        self.binary = _find_binary(binary)
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @classmethod
    def available(cls, binary: str | os.PathLike[str] | None = None) -> tuple[bool, str]:
        """Whether a server can be started here: ``(True, "")`` or ``(False, reason)``.

        Checks that ``redis-server`` exists and that the ``redis`` client package is
        installed; it does not start anything.
        """
        found = _find_binary(binary)
        if found is None:
            where = os.fspath(binary) if binary is not None else "$WIRE_REDIS_SERVER, PATH, /usr/bin"
            return False, f"redis-server not found (looked in {where})"
        try:
            import redis  # noqa: F401
        except ImportError:
            return False, "the redis Python package is not installed (pip install redis)"
        return True, ""

    @property
    def url(self) -> str:
        """The server's URL, ``redis://127.0.0.1:<port>/0``."""
        if self.port is None:
            raise WireError("RedisServer: url asked before start()")
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return None if self._process is None else self._process.pid

    def start(self) -> RedisServer:
        """Start the server; return when it answers ``PING``.

        Raises
        ------
        WireError
            When the binary is missing or the server does not start; the message
            carries the tail of the server's log.
        """
        ok, reason = self.available(self._requested)
        if not ok or self.binary is None:
            raise WireError(f"RedisServer: cannot start: {reason}")
        return super().start()

    # --- internals ------------------------------------------------------------------

    @property
    def _log(self) -> Path:
        assert self.root is not None
        return self.root / "redis.log"

    def _launch(self) -> None:
        assert self.root is not None and self.binary is not None
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = free_port()
            cmd = [
                str(self.binary), "--port", str(port), "--bind", HOST,
                "--save", "", "--appendonly", "no", "--dir", str(self.root),
                "--daemonize", "no", "--logfile", str(self._log),
            ]  # fmt: skip
            process = subprocess.Popen(
                cmd, cwd=self.root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            self._process, self.port = process, port
            try:
                self._wait_ready(process)
                return
            except WireError:
                self._process, self.port = None, None
                terminate(process)
                if attempt < _START_ATTEMPTS and "Address already in use" in log_tail(self._log):
                    continue  # the free port was taken meanwhile: try another one
                raise

    def _shutdown(self) -> None:
        process, self._process, self.port = self._process, None, None
        if process is not None:
            terminate(process)

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        import redis

        port = self.port
        assert port is not None  # _launch sets it before waiting

        def pong() -> bool:
            client = redis.Redis(host=HOST, port=port, socket_connect_timeout=1)
            try:
                return bool(client.ping())
            except redis.exceptions.RedisError:
                return False
            finally:
                client.close()

        def exited() -> str | None:
            if process.poll() is None:
                return None
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            return f"redis-server exited with {process.returncode}: {err.strip()}"

        try:
            wait_until(pong, timeout_s=_READY_TIMEOUT_S, what=f"RedisServer on port {self.port}",
                       alive=exited)
        except WireError as e:
            raise WireError(f"{e}\n--- server log ---\n{log_tail(self._log)}") from None


def _find_binary(binary: str | os.PathLike[str] | None) -> Path | None:
    if binary is not None:
        path = Path(binary)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    env = os.environ.get("WIRE_REDIS_SERVER")
    if env:
        return _find_binary(env)
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return Path(on_path)
    fallback = Path("/usr/bin/redis-server")
    return fallback if fallback.is_file() and os.access(fallback, os.X_OK) else None
