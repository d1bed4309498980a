"""A throw-away PostgreSQL server for tests: ``initdb`` into a temp dir, start, stop, delete.

Used by Wire's own tests of :func:`wire.sinks.postgres_sink.postgres` and usable by
users' tests the same way::

    ok, reason = PostgresServer.available()
    if not ok:
        pytest.skip(reason)
    with PostgresServer() as server:
        conn = psycopg.connect(server.dsn)

The server listens on ``127.0.0.1`` on a free port, trusts every local connection
(user ``wire``, database ``postgres``), keeps its Unix socket inside its temp dir and
runs with ``fsync=off``: fast, and never for data worth keeping.

Binaries: ``bindir`` if given, else ``$WIRE_PG_BINDIR``, else the directory of
``initdb`` on ``PATH``, else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian
and Ubuntu keep them there, off ``PATH``).

Running as root: ``initdb`` and ``postgres`` refuse to run as root. Then every server
command runs as an unprivileged OS user (``run_as``; default ``postgres`` if that
user exists, else ``nobody``) through ``runuser -u <user> --`` (or ``su`` if there
is no ``runuser``), and the temp dir is handed to that user. Its parent directory
(``base_dir``, default the system temp dir) must be traversable by that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from wire.errors import WireError
from wire.testing.server import HOST, ThrowawayServer, free_port, log_tail, wait_until

__all__ = ["PostgresServer"]

_BINARIES = ("initdb", "pg_ctl", "postgres")
_DEFAULT_RUN_AS = ("postgres", "nobody")
_START_ATTEMPTS = 3
_TIMEOUT_S = 60


class PostgresServer(ThrowawayServer):
    """A throw-away PostgreSQL cluster; a context manager (``start`` / ``stop``).

    Parameters
    ----------
    bindir:
        Directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (see module docstring).
    user:
        The database superuser created by ``initdb`` and used in :attr:`dsn`.
    run_as:
        OS user to run the server as when this process is root (module docstring).
    base_dir:
        Where the temp dir is created; default the system temp dir.
    """

    def __init__(
        self,
        bindir: str | os.PathLike[str] | None = None,
        *,
        user: str = "wire",
        run_as: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(base_dir=base_dir)
        self._requested_bindir = bindir
        self.bindir = _find_bindir(bindir)
        self.user = user
        self.run_as = run_as
        self.port: int | None = None

    prefix = "wire-pg-"

    # --- availability ---------------------------------------------------------------

    @classmethod
    def available(
        cls, bindir: str | os.PathLike[str] | None = None, *, run_as: str | None = None
    ) -> tuple[bool, str]:
        """Whether a server can be started here: ``(True, "")`` or ``(False, reason)``.

        Checks that the binaries exist and, when running as root, that an unprivileged
        user and ``runuser`` or ``su`` are there. It does not start anything.
        """
        found = _find_bindir(bindir)
        if found is None:
            where = os.fspath(bindir) if bindir is not None else _search_description()
            return False, f"PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {where}"
        missing = [name for name in _BINARIES if not os.access(found / name, os.X_OK)]
        if missing:
            return False, f"PostgreSQL binaries {', '.join(missing)} missing or not executable in {found}"
        if os.geteuid() == 0:
            try:
                _run_as_user(run_as)
            except WireError as e:
                return False, str(e)
            if shutil.which("runuser") is None and shutil.which("su") is None:
                return False, "running as root, and neither runuser nor su is on PATH to drop privileges"
        return True, ""

    # --- lifecycle ------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The libpq connection string of the running server (TCP on 127.0.0.1)."""
        if self.port is None:
            raise WireError("PostgresServer: dsn asked before start()")
        return f"host={HOST} port={self.port} user={self.user} dbname=postgres connect_timeout=10"

    def start(self) -> PostgresServer:
        """``initdb`` a new cluster in a temp dir and start it; return when it accepts connections.

        Raises
        ------
        WireError
            When the binaries are missing or the server does not start; the message
            carries the tail of the server's log.
        """
        ok, reason = self.available(self._requested_bindir, run_as=self.run_as)
        if not ok or self.bindir is None:
            raise WireError(f"PostgresServer: cannot start: {reason}")
        return super().start()

    def _launch(self) -> None:
        assert self.root is not None
        self._give_to_server_user(self.root)
        self._run(
            "initdb", "-D", str(self._data), "-U", self.user, "--auth=trust",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        self._start_on_free_port()

    def _shutdown(self) -> None:
        """``pg_ctl stop -m fast``, else kill the postmaster by its PID."""
        self.port = None
        if self.root is None:
            return
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "stop", "-D", str(data), "-m", "fast", "-w", "-t", "30")
            except (WireError, subprocess.TimeoutExpired):
                _kill_postmaster(data / "postmaster.pid")

    def halt(self) -> None:
        """Stop the server but keep its data and port (an outage); :meth:`resume` restarts it."""
        if self.root is None:
            raise WireError("PostgresServer: halt() before start()")
        self._run("pg_ctl", "stop", "-D", str(self._data), "-m", "fast", "-w", "-t", "30")

    def resume(self) -> None:
        """Start a halted server again on the same port; return when it accepts connections."""
        if self.root is None:
            raise WireError("PostgresServer: resume() before start()")
        self._run("pg_ctl", "start", "-D", str(self._data), "-l", str(self._log), "-w", "-t", "30")
        self._wait_ready()

    # --- internals ------------------------------------------------------------------

    @property
    def _data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def _log(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    def _start_on_free_port(self) -> None:
        assert self.root is not None
        sock_dir = self.root / "sock"
        sock_dir.mkdir()
        self._give_to_server_user(sock_dir)
        # libpq/Unix socket paths are limited to ~107 bytes: fall back to TCP only.
        sockets = str(sock_dir) if len(str(sock_dir)) < 90 else ""
        base_conf = (self._data / "postgresql.conf").read_text(encoding="utf-8")
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = free_port()
            settings = {
                "listen_addresses": HOST,
                "port": str(port),
                "unix_socket_directories": sockets,
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "max_connections": "30",
                "shared_buffers": "16MB",
                "TimeZone": "UTC",
            }
            extra = "".join(f"{k} = '{v.replace(chr(39), chr(39) * 2)}'\n" for k, v in settings.items())
            conf = base_conf + "\n# wire.testing.postgres\n" + extra
            (self._data / "postgresql.conf").write_text(conf, "utf-8")
            try:
                self._run("pg_ctl", "start", "-D", str(self._data), "-l", str(self._log), "-w", "-t", "30")
            except WireError:
                if attempt < _START_ATTEMPTS and "could not bind" in log_tail(self._log):
                    continue  # the free port was taken meanwhile: try another one
                raise
            self.port = port
            self._wait_ready()
            return

    def _wait_ready(self) -> None:
        import psycopg

        def connects() -> bool:
            try:
                psycopg.connect(self.dsn).close()
            except psycopg.OperationalError:
                return False
            return True

        wait_until(connects, timeout_s=30, what="PostgresServer: not accepting connections")

    def _give_to_server_user(self, path: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(_run_as_user(self.run_as))
            os.chown(path, entry.pw_uid, entry.pw_gid)
            path.chmod(0o700)

    def _run(self, binary: str, *args: str) -> None:
        assert self.bindir is not None
        cmd = [str(self.bindir / binary), *args]
        if os.geteuid() == 0:
            user = _run_as_user(self.run_as)
            if shutil.which("runuser") is not None:
                cmd = ["runuser", "-u", user, "--", *cmd]
            else:
                cmd = ["su", "-s", "/bin/sh", user, "-c", shlex.join(cmd)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        done = subprocess.run(
            cmd, env=env, cwd=self.root, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            raise WireError(
                f"PostgresServer: {binary} {' '.join(args[:1])} failed (exit {done.returncode}): "
                f"{output}\n--- server log ---\n{log_tail(self._log)}"
            )


def _find_bindir(bindir: str | os.PathLike[str] | None) -> Path | None:
    if bindir is not None:
        path = Path(bindir)
        return path if (path / "initdb").exists() else None
    env = os.environ.get("WIRE_PG_BINDIR")
    if env:
        return _find_bindir(env)
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).parent
    candidates = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()]
    if not candidates:
        return None

    def version(p: Path) -> tuple[int, ...]:
        name = p.parent.name
        return tuple(int(x) for x in name.split(".") if x.isdigit())

    return max(candidates, key=version)


def _search_description() -> str:
    return "$WIRE_PG_BINDIR, PATH (initdb) or /usr/lib/postgresql/*/bin"


def _run_as_user(run_as: str | None) -> str:
    """The unprivileged OS user to run server commands as (root only)."""
    names = (run_as,) if run_as is not None else _DEFAULT_RUN_AS
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid == 0:
            raise WireError(f"running as root, and run_as user {name!r} is root too; initdb refuses root")
        return name
    raise WireError(
        f"running as root (initdb refuses root), and no unprivileged OS user to run the server as: "
        f"tried {', '.join(repr(n) for n in names)}; create one or pass run_as=<user>"
    )


def _kill_postmaster(pid_file: Path) -> None:
    """Last resort: SIGQUIT (immediate shutdown), then SIGKILL, the PID in ``postmaster.pid``."""
    try:
        pid = int(pid_file.read_text(encoding="utf-8").splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig, wait_s in ((signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
