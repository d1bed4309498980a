"""The shared base of Wire's throw-away servers (PostgreSQL, Redis, a Spark cluster).

A :class:`ThrowawayServer` owns what every such helper repeats: a temp dir (deleted at
:meth:`~ThrowawayServer.stop`), a stop at interpreter exit, free ports on ``127.0.0.1``,
waiting until a port accepts connections, stopping a process through its PID (never by
name) and the tail of a log file for error messages. A subclass implements
:meth:`~ThrowawayServer._launch` (start its processes, return when they are ready) and
:meth:`~ThrowawayServer._shutdown` (stop them); it is then a context manager::

    with RedisServer() as server:
        ...
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from wire.errors import WireError

HOST = "127.0.0.1"
"""Every throw-away server listens here only."""


def free_port() -> int:
    """A TCP port on :data:`HOST` that is free now (another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def accepts(port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``HOST:port`` now."""
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=timeout_s):
        return True
    return False


def wait_until(ready: Callable[[], bool], *, timeout_s: float, what: str, interval_s: float = 0.05,
               alive: Callable[[], str | None] = lambda: None) -> None:
    """Poll ``ready()`` until it is true; WireError after ``timeout_s`` or when ``alive()`` says why.

    ``alive()`` returns None while the server's process runs, else why it stopped.
    """
    deadline = time.monotonic() + timeout_s
    while not ready():
        died = alive()
        if died is not None:
            raise WireError(f"{what}: {died}")
        if time.monotonic() > deadline:
            raise WireError(f"{what}: not ready after {timeout_s:g} s")
        time.sleep(interval_s)


def terminate(process: subprocess.Popen[bytes], *, timeout_s: float = 10.0,
              group: bool = False, first: signal.Signals = signal.SIGTERM) -> None:
    """Stop ``process`` through its PID: ``first`` (SIGTERM), then SIGKILL after ``timeout_s``.

    ``group``: signal its process group (a process started with ``start_new_session``).
    """
    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(process.pid, sig)
            else:
                os.kill(process.pid, sig)

    if process.poll() is None:
        send(first)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            process.wait(timeout=timeout_s)
    elif group:
        send(signal.SIGKILL)  # the leader exited; its children may not have
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def log_tail(path: Path | None, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, or ``"(no log)"``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path is not None else None
    except OSError:
        text = None
    return "(no log)" if text is None else "\n".join(text.splitlines()[-lines:])


class ThrowawayServer:
    """Temp dir, stop at exit and context manager for a server started by a subclass."""

    prefix = "wire-server-"
    """Prefix of the temp dir's name."""
    keep_root = False
    """Keep the temp dir at :meth:`stop` (to read the logs afterwards)."""

    def __init__(self, *, base_dir: str | os.PathLike[str] | None = None) -> None:
        self.base_dir = None if base_dir is None else os.fspath(base_dir)
        self.root: Path | None = None
        self._atexit_registered = False

    def start(self) -> Self:
        """Create the temp dir and start the server (:meth:`_launch`); stop it all on failure."""
        if self.root is not None:
            return self
        self.root = Path(tempfile.mkdtemp(prefix=self.prefix, dir=self.base_dir))
        atexit.register(self.stop)
        self._atexit_registered = True
        try:
            self._launch()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (:meth:`_shutdown`) and delete its temp dir; safe to call twice."""
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False
        try:
            self._shutdown()
        finally:
            root, self.root = self.root, None
            if root is not None and not self.keep_root:
                shutil.rmtree(root, ignore_errors=True)

    def _launch(self) -> None:
        """Start the server's processes in :attr:`root`; return once it accepts clients."""
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Stop the server's processes (by PID); also called after a failed start."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
