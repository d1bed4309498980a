"""Spark's per-query Python processes, forked from an interpreter that has imported them.

For each Python streaming source of a query, and for each ``transformWithStateInPandas``
operator, Spark's driver starts a Python process of its own: ``python -m
pyspark.sql.streaming.python_streaming_source_runner`` (the source's planner, started with
the query, before its first trigger) and ``python -m
pyspark.sql.streaming.transform_with_state_driver_worker`` (run during the first epoch's
query planning, only to learn the operator's state variables). Both are on the critical
path of a flow's start, and each new interpreter imported pyspark, pyarrow and Wire's
sources first: 0.33-0.44 s per process on the 2-core development machine
(``docs/architecture.md``).

In a local session that Wire creates (:func:`wire.runtime.session.spark_session`),
``PYSPARK_PYTHON`` is a launcher script (:func:`start`) and a fork server runs beside the
driver, with those modules imported (:data:`PRELOAD`). Spark runs ``<launcher> -m
<module>``; for a module in :data:`FORKED` the launcher hands its arguments, environment,
working directory and standard streams (file descriptors 0-2, over a Unix socket) to the
fork server, which forks a child that takes them on and runs the module as ``__main__``,
as the interpreter would have. The launcher stays the process Spark knows: it passes
SIGTERM and SIGINT on to the child and exits with the child's exit status (128 + the
signal's number for a child a signal ended). A launcher that starts with SIGINT ignored (as
every process Spark's JVM starts does: PySpark starts the JVM so) passes no SIGINT on, and its
child ignores SIGINT too, as the real interpreter would: the child is in the driver's process
group, which a Ctrl-C at a terminal reaches whole, and a Ctrl-C is the driver's to handle (a
graceful stop, :meth:`wire.runtime.runner.RunningFlow.await_termination`); a source's planner
that took it as a ``KeyboardInterrupt`` failed the epoch in flight. If the launcher is killed,
the fork server kills the child; if the fork server ends first, the launcher stays until the child ends
(then exits with status 1: the status is the server's to know). Anything else (another
module: the executors' worker daemon; no fork server yet, while it still imports; an error
before the fork; a launcher that another driver's JVM started, having inherited this
driver's environment, e.g. a Spark program run as a subprocess of a flow's driver) makes the
launcher exec the real interpreter with the same arguments: nothing changes but the speed. A
launcher is this driver's when the driver is its parent or its parent's parent (the JVM's
processes), so an inherited launcher never forks another program's processes from an
interpreter that imported this driver's Wire.

The fork server exits when the driver does (its standard input is a pipe from the
driver) and removes its directory (the socket and the launcher). ``WIRE_FORK_SERVER=off``
turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

FORKED = (
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
)
"""The modules whose processes the fork server forks (Spark's ``StreamingPythonRunner`` workers)."""

PRELOAD = (
    "pyarrow", "pyspark.sql.datasource", "pyspark.sql.datasource_internal",
    "pyspark.sql.streaming.datasource",
    "pyspark.sql.pandas.serializers", "pyspark.sql.worker.plan_data_source_read", "pyspark.worker",
    "pyspark.sql.streaming.stateful_processor_api_client", "pyspark.sql.streaming.stateful_processor_util",
    "pyspark.sql.streaming.proto.StateMessage_pb2",
    "wire.sources.base.partitioned", "wire.sources.file_source.source", "wire.sources.file_source.reader",
    "wire.examples.nexmark_source", "wire.testing.test_stream", "wire.compiler.deferred_processor",
)
"""What the forked processes import: the two runners' own imports, the state server's
protobuf messages, and the planners of Wire's file, generator and test sources (a source of a
pip extra, e.g. Kafka, is imported by the planner that needs it). Not the runner modules
themselves: a child runs its module afresh as ``__main__``."""

ENV = "WIRE_FORK_SERVER"
"""The fork server's socket path, in the environment the JVM and its processes inherit;
``off`` (set by the user) turns the fork server off."""

_HEADER = struct.Struct("!I")
"""A launcher's request: this length, then the JSON body (the launcher script packs it too)."""
_STATUS = struct.Struct("!i")
"""The server's answers to a launcher: the child's pid, then its exit status."""

LAUNCHER = '''#!{python} -IS
# Wire's launcher for Spark's Python processes (wire.runtime.fork_server); exec'ed as python
import os, sys
REAL = {python!r}
DRIVER = {driver!r}
args = sys.argv[1:]
path = os.environ.get({env!r}, "")
def parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(") ", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
ours = DRIVER in (os.getppid(), parent_of(os.getppid()))  # started by the driver's JVM (or the driver)
if len(args) != 2 or args[0] != "-m" or args[1] not in {forked!r} or not path.startswith("/") or not ours:
    os.execv(REAL, [REAL] + args)
import json, signal, socket, struct
pid = None
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    request = {{"module": args[1], "argv": sys.argv[:1] + args[2:], "env": dict(os.environ),
               "cwd": os.getcwd(), "sigint_ignored": ignored}}
    body = json.dumps(request).encode()
    socket.send_fds(s, [struct.pack({header!r}, len(body)) + body], [0, 1, 2])
    got = s.recv({size}, socket.MSG_WAITALL)
    if len(got) == {size}:
        pid = struct.unpack({status!r}, got)[0]
except OSError:
    pass
if pid is None:
    os.execv(REAL, [REAL] + args)
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except OSError:
        pass
signal.signal(signal.SIGTERM, forward)
if not ignored:
    signal.signal(signal.SIGINT, forward)
got = s.recv({size}, socket.MSG_WAITALL)
if len(got) == {size}:
    sys.exit(struct.unpack({status!r}, got)[0])
# the fork server is gone (its driver ended, or it was killed): stay until the child ends
import time
def running():
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[-1][:1] != "Z"
    except OSError:
        return False
while running():
    time.sleep(0.1)
sys.exit(1)
'''
"""The launcher script (``PYSPARK_PYTHON``): the real interpreter with ``-I -S`` runs it in
about 7 ms; it imports nothing but the standard library."""


@dataclass
class ForkServer:
    """A running fork server: its process, directory, socket and launcher script."""

    process: subprocess.Popen[bytes]
    directory: str
    socket_path: str
    launcher: str
    """The script to use as ``PYSPARK_PYTHON`` (with :data:`ENV` = :attr:`socket_path`)."""

    def ready(self) -> bool:
        """True once the server listens (it has imported :data:`PRELOAD`)."""
        return os.path.exists(self.socket_path)

    def close(self) -> None:
        """End the server (EOF on its standard input) and remove its directory; children keep running."""
        with contextlib.suppress(Exception):
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=5)
        shutil.rmtree(self.directory, ignore_errors=True)


def spawn(forked: Sequence[str] = FORKED) -> ForkServer | None:
    """Start a fork server for the modules ``forked``; None when this platform cannot.

    It needs Unix sockets with descriptor passing, a socket path under 100 bytes
    (``sockaddr_un``) in the temporary directory, and an interpreter path the launcher's
    ``#!`` line can hold (no white space; the line under 127 bytes, older kernels' limit).
    """
    if os.name != "posix" or not hasattr(socket, "send_fds"):
        return None
    if any(c.isspace() for c in sys.executable) or len(f"#!{sys.executable} -IS".encode()) >= 127:
        return None
    where = tempfile.mkdtemp(prefix=f"wire-fork-{os.getpid()}-")
    path = os.path.join(where, "server.sock")
    if len(path.encode()) > 100:
        shutil.rmtree(where, ignore_errors=True)
        return None
    launcher = os.path.join(where, "python")
    with open(launcher, "w") as f:
        f.write(LAUNCHER.format(python=sys.executable, env=ENV, forked=tuple(forked), header=_HEADER.format,
                                status=_STATUS.format, size=_STATUS.size, driver=os.getpid()))
    os.chmod(launcher, 0o700)
    process = subprocess.Popen(
        [sys.executable, "-m", __name__, path, ",".join(forked)], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    return ForkServer(process, where, path, launcher)


_running: list[ForkServer] = []
"""This process's fork server (:func:`start`)."""


def start() -> str | None:
    """Start this process's fork server (once); return its launcher's path, or None when off.

    :data:`ENV` is set in this process's environment, which the JVM started afterwards
    inherits. Returns None (nothing started) when ``WIRE_FORK_SERVER`` is ``off`` or
    :func:`spawn` cannot. The server ends with this process.
    """
    if _running and _running[0].process.poll() is None:
        return _running[0].launcher
    if os.environ.get(ENV, "").lower() == "off":
        return None
    server = spawn()
    if server is None:
        return None
    _running[:] = [server]
    os.environ[ENV] = server.socket_path
    atexit.register(server.close)
    return server.launcher


def is_launcher(path: str) -> bool:
    """True when ``path`` is a launcher that :func:`spawn` wrote (this process's or another's)."""
    directory = os.path.basename(os.path.dirname(path))
    return os.path.basename(path) == "python" and directory.startswith("wire-fork-")


def launcher() -> str | None:
    """The launcher of this process's fork server (None: none started)."""
    return _running[0].launcher if _running else None


_wake: list[int] = []
"""The fork server's signal wake-up pipe (closed in each child)."""


def serve(path: str, forked: Sequence[str] = FORKED) -> None:
    """The fork server's loop: import :data:`PRELOAD`, then fork a child per launcher until EOF on stdin.

    A launcher may ask only for a module of ``forked``.

    Children are reaped on SIGCHLD and their exit status sent to their launcher; a
    launcher's connection that closes first (the launcher was killed) kills its child.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    for module in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    wake_r, wake_w = os.pipe()
    _wake[:] = [wake_r, wake_w]
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    os.chmod(path + ".new", 0o600)
    listener.listen(64)
    os.rename(path + ".new", path)  # launchers connect only once it listens
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "driver")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    children: dict[int, socket.socket] = {}
    try:
        while True:
            for key, _ in sel.select():
                if _event(key, listener, sel, children, forked, wake_r):
                    return
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _event(key: selectors.SelectorKey, listener: socket.socket, sel: selectors.BaseSelector,
           children: dict[int, socket.socket], forked: Sequence[str], wake_r: int) -> bool:
    """Handle one ready file of the server's loop; True when the driver has gone (the server ends).

    An error handling one event is dropped (that launcher execs, or its child is reaped at the
    next SIGCHLD): ending the server would leave every running child's launcher without its
    child's exit status.
    """
    try:
        if key.data == "accept":
            conn, _ = listener.accept()
            pid = _fork(conn, listener, sel, children, forked)
            if pid is None:
                conn.close()
            else:
                children[pid] = conn
                sel.register(conn, selectors.EVENT_READ, pid)
        elif key.data == "driver":
            return not os.read(sys.stdin.fileno(), 4096)
        elif key.data == "wake":
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            _reap(children, sel)
        else:  # the launcher's connection closed: it was killed, so is its child
            with contextlib.suppress(OSError):
                os.kill(key.data, signal.SIGKILL)
            sel.unregister(key.fileobj)
    except Exception:
        return False
    return False


def _reap(children: dict[int, socket.socket], sel: selectors.BaseSelector) -> None:
    """Collect every ended child; tell its launcher the exit status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):
            conn.sendall(_STATUS.pack(code if code >= 0 else 128 - code))
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        conn.close()


def _fork(conn: socket.socket, listener: socket.socket, sel: selectors.BaseSelector,
          children: dict[int, socket.socket], forked: Sequence[str]) -> int | None:
    """Read one launcher's request and fork its child; the child's pid (None: nothing forked)."""
    fds: list[int] = []
    try:
        conn.settimeout(5)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        if len(data) < _HEADER.size or len(fds) != 3:
            raise OSError("short request")
        size = _HEADER.unpack_from(data)[0]
        body = data[_HEADER.size:]
        while len(body) < size:
            more = conn.recv(size - len(body))
            if not more:
                raise OSError("short request")
            body += more
        request = json.loads(body)
        if request.get("module") not in forked:
            raise OSError(f"not a forked module: {request.get('module')!r}")
        conn.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
    except (OSError, ValueError):
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        return None
    if pid == 0:  # the child: never returns
        _child(request, fds, [conn, listener, *children.values()], sel)
    conn.sendall(_STATUS.pack(pid))
    for fd in fds:
        os.close(fd)
    return pid


def _child(request: dict[str, object], fds: list[int], sockets: list[socket.socket],
           sel: selectors.BaseSelector) -> None:
    """Become the launcher's process: its streams, directory, environment and arguments; run the module."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        # as the interpreter the launcher stands for: SIGINT ignored if it was ignored there
        # (Spark's JVM ignores it, and so do the processes it starts), else KeyboardInterrupt
        ignored = bool(request.get("sigint_ignored"))
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
        sel.close()
        for s in sockets:
            s.close()
        for fd in _wake:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        os.chdir(str(request["cwd"]))
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[0:1] = [os.getcwd(), *extra]  # as ``python -m``: the working directory first
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.argv = [str(a) for a in argv]
        module = str(request["module"])
        sys.modules.pop(module, None)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1], tuple(m for m in sys.argv[2].split(",") if m) if len(sys.argv) > 2 else FORKED)
    # serve() cleaned up: end without the interpreter's finalization of the preloaded modules
    # (pandas, pyarrow, pyspark: 0.16 s), which the driver's exit waits for (ForkServer.close)
    os._exit(0)
