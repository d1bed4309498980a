"""A throw-away Redis server for tests: start on a free port in a temp dir, stop, delete.

Used by Wire's own tests of :mod:`wire.sources.redis_source` and usable by users'
tests the same way::

    ok, reason = RedisServer.available()
    if not ok:
        pytest.skip(reason)
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)

The server listens on ``127.0.0.1`` on a free port, keeps nothing on disk (``--save ""
--appendonly no``) and works in its own temp dir, deleted at :meth:`RedisServer.stop`.
It is stopped through its process id (SIGTERM, then SIGKILL), never by name.

Binary: ``binary`` if given, else ``$WIRE_REDIS_SERVER``, else ``redis-server`` on
``PATH``, else ``/usr/bin/redis-server``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from wire.errors import WireError

__all__ = ["RedisServer"]

_START_ATTEMPTS = 3
_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


class RedisServer:
    """A throw-away Redis server; a context manager (``start`` / ``stop``).

    Parameters
    ----------
    binary:
        Path of ``redis-server`` (see the module docstring for the default).
    base_dir:
        Where the temp dir is created; default the system temp dir.
    """

    def __init__(
        self, binary: str | os.PathLike[str] | None = None, *, base_dir: str | os.PathLike[str] | None = None
    ) -> None:
        self._requested = binary
        self.binary = _find_binary(binary)
        self.base_dir = None if base_dir is None else os.fspath(base_dir)
        self.port: int | None = None
        self.root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._atexit_registered = False

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
        return f"redis://127.0.0.1:{self.port}/0"

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
        if self._process is not None:
            return self
        self.root = Path(tempfile.mkdtemp(prefix="wire-redis-", dir=self.base_dir))
        atexit.register(self.stop)
        self._atexit_registered = True
        try:
            self._start_on_free_port()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM to its PID, SIGKILL after 10 s) and delete its dir.

        Safe to call twice and after a failed start.
        """
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False
        process, self._process, self.port = self._process, None, None
        if process is not None:
            _terminate(process)
        root, self.root = self.root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- internals ------------------------------------------------------------------

    @property
    def _log(self) -> Path:
        assert self.root is not None
        return self.root / "redis.log"

    def _start_on_free_port(self) -> None:
        assert self.root is not None and self.binary is not None
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            cmd = [
                str(self.binary), "--port", str(port), "--bind", "127.0.0.1",
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
                _terminate(process)
                if attempt < _START_ATTEMPTS and "Address already in use" in self._log_tail():
                    continue  # the free port was taken meanwhile: try another one
                raise

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        import redis

        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise WireError(
                    f"RedisServer: redis-server exited with {process.returncode}: {err.strip()}\n"
                    f"--- server log ---\n{self._log_tail()}"
                )
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
            try:
                if client.ping():
                    return
            except redis.exceptions.RedisError as e:
                if time.monotonic() > deadline:
                    raise WireError(
                        f"RedisServer: not answering PING on port {self.port}: {e}\n"
                        f"--- server log ---\n{self._log_tail()}"
                    ) from e
                time.sleep(0.05)
            finally:
                client.close()

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace")
        except (OSError, AssertionError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's PID, then SIGKILL it if it has not exited in time."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(timeout=_STOP_TIMEOUT_S)
    if process.stderr is not None:
        process.stderr.close()
