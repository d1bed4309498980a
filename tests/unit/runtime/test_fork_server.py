"""The fork server and its launcher (wire.runtime.fork_server): a launched module behaves as
``python -m module`` would (arguments, environment, working directory, standard streams, exit
status, signals), whether it was forked or the launcher fell back to the real interpreter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wire.runtime import fork_server
from wire.runtime.session import worker_python

CHILD = '''
import json, os, signal, sys, time
line = sys.stdin.readline().strip()
print("to stderr", file=sys.stderr)
sigint = {signal.SIG_IGN: "ignored", signal.default_int_handler: "KeyboardInterrupt"}.get(
    signal.getsignal(signal.SIGINT), "other")
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[1:], "cwd": os.getcwd(),
                  "env": os.environ.get("WIRE_TEST_VALUE"), "stdin": line, "main": __name__,
                  "path0": sys.path[0], "sigint": sigint}), flush=True)
if os.environ.get("WIRE_TEST_SLEEP"):
    time.sleep(float(os.environ["WIRE_TEST_SLEEP"]))
sys.exit(int(os.environ.get("WIRE_TEST_EXIT", "0")))
'''


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[fork_server.ForkServer, Path]]:
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "wire_fork_child.py").write_text(CHILD)
    (mod / "wire_other_child.py").write_text(CHILD)
    srv = fork_server.spawn(forked=("wire_fork_child",))
    assert srv is not None
    deadline = time.monotonic() + 60
    while not srv.ready():
        assert srv.process.poll() is None, "the fork server exited"
        assert time.monotonic() < deadline, "the fork server did not listen within 60 s"
        time.sleep(0.05)
    yield srv, mod
    srv.close()


def launch(srv: fork_server.ForkServer, mod: Path, module: str, cwd: Path, *, socket_path: str | None = None,
           sigint_ignored: bool = False, **env: str) -> subprocess.Popen[str]:
    environ = dict(os.environ, PYTHONPATH=str(mod), WIRE_TEST_VALUE="v=1 ü", **env)
    environ[fork_server.ENV] = srv.socket_path if socket_path is None else socket_path
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    return subprocess.Popen([srv.launcher, "-m", module], cwd=cwd, env=environ, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=ignore)


def test_a_forked_module_runs_as_python_m_would(server: tuple[fork_server.ForkServer, Path],
                                                tmp_path: Path) -> None:
    srv, mod = server
    work = tmp_path / "work"
    work.mkdir()
    p = launch(srv, mod, "wire_fork_child", work, WIRE_TEST_EXIT="3")
    out, err = p.communicate("hello\n", timeout=30)
    got = json.loads(out)
    assert p.returncode == 3
    assert got["ppid"] == srv.process.pid  # forked by the server, not exec'ed by the launcher
    assert got["pid"] != p.pid
    assert got["main"] == "__main__"
    assert got["argv"] == []
    assert got["cwd"] == str(work) == got["path0"]
    assert got["env"] == "v=1 ü"
    assert got["stdin"] == "hello"
    assert "to stderr" in err


@pytest.mark.parametrize("case", ["not forked", "no server"])
def test_the_launcher_falls_back_to_the_real_interpreter(server: tuple[fork_server.ForkServer, Path],
                                                         tmp_path: Path, case: str) -> None:
    srv, mod = server
    module = "wire_other_child" if case == "not forked" else "wire_fork_child"
    sock = str(tmp_path / "missing.sock") if case == "no server" else None
    p = launch(srv, mod, module, tmp_path, socket_path=sock, WIRE_TEST_EXIT="0")
    out, _ = p.communicate("x\n", timeout=30)
    got = json.loads(out)
    assert p.returncode == 0
    assert got["pid"] == p.pid  # the launcher became the interpreter (exec)
    assert got["stdin"] == "x" and got["env"] == "v=1 ü" and got["main"] == "__main__"


@pytest.mark.parametrize("sigint_ignored", [True, False])
def test_the_child_handles_sigint_as_the_real_interpreter_would(server: tuple[fork_server.ForkServer, Path],
                                                               tmp_path: Path, sigint_ignored: bool) -> None:
    """Spark's JVM ignores SIGINT (PySpark starts it so), and so do the processes it starts."""
    srv, mod = server
    seen = {}
    for module in ("wire_fork_child", "wire_other_child"):  # forked; the real interpreter (exec)
        p = launch(srv, mod, module, tmp_path, sigint_ignored=sigint_ignored)
        out, _ = p.communicate("x\n", timeout=30)
        seen[module] = json.loads(out)["sigint"]
    assert seen["wire_fork_child"] == seen["wire_other_child"]
    assert seen["wire_fork_child"] == ("ignored" if sigint_ignored else "KeyboardInterrupt")


def test_a_ctrl_c_at_the_terminal_leaves_a_child_of_spark_running(server: tuple[fork_server.ForkServer, Path],
                                                                   tmp_path: Path) -> None:
    """SIGINT to the launcher and to the child itself (a terminal signals the whole process
    group, which the fork server's children share with the driver): a source's planner that
    died of it failed the epoch in flight of a flow stopping gracefully."""
    srv, mod = server
    p = launch(srv, mod, "wire_fork_child", tmp_path, sigint_ignored=True, WIRE_TEST_SLEEP="60")
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("x\n")
    p.stdin.flush()
    child = int(json.loads(p.stdout.readline())["pid"])
    p.send_signal(signal.SIGINT)
    os.kill(child, signal.SIGINT)
    time.sleep(0.5)
    assert p.poll() is None and alive(child)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM


def test_a_launcher_another_driver_started_runs_the_real_interpreter(
        server: tuple[fork_server.ForkServer, Path], tmp_path: Path) -> None:
    """An environment inherited by a program the driver runs (its own driver, its own JVM): the
    launcher is not the driver's child nor its JVM's, so it forks nothing from this driver's
    server, whose interpreter imported this driver's Wire (another version's classes failed to
    unpickle there)."""
    srv, mod = server
    environ = dict(os.environ, PYTHONPATH=str(mod), WIRE_TEST_VALUE="v=1 ü")
    environ[fork_server.ENV] = srv.socket_path
    hop = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    p = subprocess.run([sys.executable, "-c", hop, sys.executable, "-c", hop, srv.launcher, "-m",
                        "wire_fork_child"], input="x\n", capture_output=True, text=True, env=environ,
                       cwd=tmp_path, timeout=60)
    got = json.loads(p.stdout)
    assert p.returncode == 0 and got["stdin"] == "x"
    assert got["ppid"] != srv.process.pid  # exec'ed by its launcher, not forked by the server


def sleeping_child(srv: fork_server.ForkServer, mod: Path, cwd: Path,
                   sleep: str = "60") -> tuple[subprocess.Popen[str], int]:
    """A launcher whose forked child has started and now sleeps; the launcher and the child's pid."""
    p = launch(srv, mod, "wire_fork_child", cwd, WIRE_TEST_SLEEP=sleep)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("x\n")
    p.stdin.flush()
    return p, int(json.loads(p.stdout.readline())["pid"])


def test_sigterm_reaches_the_child_and_its_status_returns(server: tuple[fork_server.ForkServer, Path],
                                                           tmp_path: Path) -> None:
    p, child = sleeping_child(*server, tmp_path)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    assert not alive(child)


def test_a_killed_launcher_takes_its_child_along(server: tuple[fork_server.ForkServer, Path],
                                                 tmp_path: Path) -> None:
    p, child = sleeping_child(*server, tmp_path)
    p.kill()
    p.wait(timeout=30)
    deadline = time.monotonic() + 30
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its killed launcher"
        time.sleep(0.05)


def test_the_server_ends_with_its_driver_and_removes_its_directory(
        server: tuple[fork_server.ForkServer, Path]) -> None:
    srv, _ = server
    srv.close()
    assert srv.process.returncode == 0
    assert not os.path.exists(srv.directory)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie (not yet reaped) counts as ended
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:  # reaped since (no such file, or no such process while reading)
        return False


def test_worker_python_keeps_the_users_interpreter_and_drops_a_foreign_launcher(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/their/python")
    assert worker_python(local=True) == "/opt/their/python"
    foreign = tmp_path / "wire-fork-1-abc" / "python"
    monkeypatch.setenv("PYSPARK_PYTHON", str(foreign))
    monkeypatch.setenv(fork_server.ENV, "off")
    # another process's launcher is replaced: by this process's own if one runs (the test session's), else,
    # the fork server being off, by this interpreter
    assert worker_python(local=True) == (fork_server.launcher() or sys.executable) != str(foreign)
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert worker_python(local=False) == sys.executable


def test_a_child_outlives_its_fork_server_and_its_launcher_waits_for_it(
        server: tuple[fork_server.ForkServer, Path], tmp_path: Path) -> None:
    """The fork server killed (or crashed) while a child runs: the child goes on, and its launcher
    stays until it ends, then exits with status 1 (the exit status was the server's to know)."""
    srv, mod = server
    p, child = sleeping_child(srv, mod, tmp_path, sleep="2")
    srv.process.kill()
    srv.process.wait(10)
    time.sleep(0.5)
    assert alive(child) and p.poll() is None
    assert p.wait(timeout=30) == 1
    assert not alive(child)


@pytest.mark.parametrize("python", ["/opt/my python/bin/python3", "/" + "x" * 130 + "/python3"])
def test_no_fork_server_for_an_interpreter_path_a_shebang_cannot_hold(monkeypatch: pytest.MonkeyPatch,
                                                                       python: str) -> None:
    monkeypatch.setattr(sys, "executable", python)
    assert fork_server.spawn() is None
