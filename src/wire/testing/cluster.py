"""A throwaway Spark standalone cluster on this machine, for tests and demos.

:class:`StandaloneCluster` starts one standalone master and ``workers`` workers from
the PySpark installation Wire runs on (``SPARK_HOME`` = the ``pyspark`` package
directory; its ``bin/spark-class`` launcher), every process bound to 127.0.0.1 on
free ports, every worker with its own work and scratch directories in one
temporary directory. Executors start their Python workers with this interpreter
(``PYSPARK_PYTHON`` = ``sys.executable``), so they import the same Wire.

Each daemon is started in its own process group; its executors and their Python
workers inherit that group. :meth:`StandaloneCluster.kill_worker` SIGKILLs one
worker's group (losing a machine), :meth:`StandaloneCluster.stop` all of them.

A driver connects with ``wire.spark(master=cluster.master_url)``. Only one
SparkContext can live in a process, so a test that already holds a local session
runs the cluster driver in a subprocess.

Example::

    with StandaloneCluster(workers=2) as cluster:
        spark = wire.spark(cluster.master_url)
        ...
        cluster.kill_worker(0)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from wire.errors import WireError
from wire.testing.server import HOST, ThrowawayServer, free_port, terminate

__all__ = ["HOST", "StandaloneCluster", "free_port", "spark_home"]


def spark_home() -> Path:
    """The Spark installation inside the ``pyspark`` package (it has ``bin/`` and ``jars/``)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise WireError(f"no Spark distribution (bin/spark-class, jars/) in {home}")
    return home


class StandaloneCluster(ThrowawayServer):
    """A local Spark standalone master with ``workers`` workers, as a context manager.

    Parameters
    ----------
    workers:
        Number of worker daemons (each runs at most one executor per application).
    cores_per_worker, memory_per_worker:
        What each worker offers (``--cores``, ``--memory``). An application's
        ``spark.executor.memory`` (1g by default) must fit in ``memory_per_worker``.
    daemon_memory:
        Heap of the master and worker daemons themselves (``SPARK_DAEMON_MEMORY``).
    start_timeout_s:
        How long to wait for the master and every worker to register.
    keep_dir:
        Keep the temporary directory (daemon logs, executor work dirs) after
        :meth:`stop`, e.g. to read the logs of a failed test.

    Attributes
    ----------
    master_url:
        ``spark://127.0.0.1:<port>``.
    webui_url:
        The master's web UI; ``<webui_url>/json/`` is its state as JSON.
    dir:
        The temporary directory: ``master.log``, ``worker-<i>.log`` and ``worker-<i>/``
        (the worker's work dir: one ``app-*/<executor id>/`` per executor, with its
        ``stdout`` and ``stderr``).
    """

    def __init__(
        self,
        workers: int = 2,
        cores_per_worker: int = 1,
        memory_per_worker: str = "2g",
        *,
        daemon_memory: str = "512m",
        start_timeout_s: float = 90.0,
        keep_dir: bool = False,
    ) -> None:
        if workers < 1:
            raise ValueError("a cluster needs at least one worker")
        super().__init__()
        self.keep_root = keep_dir
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.daemon_memory = daemon_memory
        self.start_timeout_s = start_timeout_s
        self.keep_dir = keep_dir
        self.spark_home = spark_home()
        self.dir: Path | None = None
        self.master_port = 0
        self.webui_port = 0
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        self._worker_webui_ports: list[int] = []
        self._logs: list[Any] = []

    # ------------------------------------------------------------------ lifecycle

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>`` (valid once started)."""
        return f"spark://{HOST}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        """The master's web UI (``/json/`` gives its state)."""
        return f"http://{HOST}:{self.webui_port}"

    @property
    def worker_pids(self) -> list[int]:
        """PIDs of the worker JVMs, in start order (killed ones included)."""
        return [p.pid for p in self._workers]

    @property
    def master_pid(self) -> int | None:
        """PID of the master JVM."""
        return None if self._master is None else self._master.pid

    def start(self) -> StandaloneCluster:
        """Start the master, then the workers; return once all workers are ALIVE."""
        if self._master is not None:
            raise WireError("the cluster is already started")
        return super().start()

    prefix = "wire-cluster-"

    def _launch(self) -> None:
        self.dir = self.root
        assert self.dir is not None
        (self.dir / "conf").mkdir()
        self.master_port, self.webui_port = free_port(), free_port()
        self._master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", HOST, "--port", str(self.master_port), "--webui-port", str(self.webui_port)],
            {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
        )
        self._wait(lambda s: s.get("status") == "ALIVE", "the master to start")
        # the port it bound (Spark moves on to the next port if ours was taken meanwhile)
        self.master_port = int(str(self.state()["url"]).rsplit(":", 1)[1])
        for i in range(self.workers):
            work = self.dir / f"worker-{i}"
            (work / "local").mkdir(parents=True)
            self._worker_webui_ports.append(free_port())
            self._workers.append(self._spawn(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                ["--host", HOST, "--port", "0", "--webui-port", str(self._worker_webui_ports[i]),
                 "--cores", str(self.cores_per_worker), "--memory", self.memory_per_worker,
                 "--work-dir", str(work), self.master_url],
                {"SPARK_LOCAL_DIRS": str(work / "local")},
            ))
        self.wait_for_workers(self.workers)

    def _shutdown(self) -> None:
        """SIGKILL every daemon's process group (executors included); :meth:`stop` removes :attr:`dir`."""
        for p in [*self._workers, *([self._master] if self._master else [])]:
            _kill_group(p)
        for f in self._logs:
            f.close()
        self._logs.clear()
        self._workers.clear()
        self._worker_webui_ports.clear()
        self._master = None

    def kill_worker(self, i: int) -> int:
        """SIGKILL worker ``i`` with its executor and Python workers (a lost machine).

        Returns the worker's PID. The master notices at once (its connection drops),
        and so does the driver, which reschedules the executor's tasks elsewhere.
        """
        p = self._workers[i]
        _kill_group(p)
        return p.pid

    def freeze_worker(self, i: int) -> None:
        """SIGSTOP worker ``i`` with its executor and Python workers (a hung machine).

        Its running tasks can then neither finish nor report; :meth:`thaw_worker`
        resumes them, :meth:`kill_worker` kills them where they stand.
        """
        os.killpg(self._workers[i].pid, signal.SIGSTOP)

    def thaw_worker(self, i: int) -> None:
        """SIGCONT worker ``i``'s process group (undo :meth:`freeze_worker`)."""
        os.killpg(self._workers[i].pid, signal.SIGCONT)

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """The master's state: ``/json/`` of its web UI (workers, apps, status)."""
        return _get_json(f"{self.webui_url}/json/")

    def worker_state(self, i: int) -> dict[str, Any]:
        """Worker ``i``'s state: ``/json/`` of its web UI.

        Its ``"executors"`` lists the running executors (``id``, ``appid``, ...).
        """
        return _get_json(f"http://{HOST}:{self._worker_webui_ports[i]}/json/")

    def executor_ids(self, i: int) -> list[str]:
        """Ids of the executors running on worker ``i`` (as the driver names them)."""
        return [str(e["id"]) for e in self.worker_state(i).get("executors", [])]

    def alive_workers(self) -> int:
        """Workers the master currently counts as ALIVE."""
        return int(self.state().get("aliveworkers", 0))

    def wait_for_workers(self, n: int, timeout_s: float | None = None) -> None:
        """Wait until the master counts exactly ``n`` ALIVE workers."""
        self._wait(lambda s: s.get("aliveworkers") == n, f"{n} alive worker(s)", timeout_s)

    def log(self, name: str = "master") -> str:
        """A daemon's log: ``"master"`` or ``"worker-<i>"``."""
        assert self.dir is not None
        return (self.dir / f"{name}.log").read_text(errors="replace")

    # ------------------------------------------------------------------ internals

    def _spawn(self, name: str, cls: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        assert self.dir is not None
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        full_env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_CONF_DIR": str(self.dir / "conf"),  # empty: no stray spark-defaults/env
            "PYSPARK_PYTHON": sys.executable,
            **env,
        }
        full_env.pop("PYSPARK_DRIVER_PYTHON", None)
        # spark-class execs the JVM, so the PID is the daemon's; a new session makes it a
        # process group that its executors and Python workers join.
        return subprocess.Popen(
            [str(self.spark_home / "bin" / "spark-class"), cls, *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=self.dir, env=full_env, start_new_session=True,
        )

    def _wait(self, ok: Any, what: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        last: object = None
        while time.monotonic() < deadline:
            if self._master is not None and self._master.poll() is not None:
                code = self._master.returncode
                raise WireError(f"the Spark master exited ({code})\n{self._tail('master')}")
            try:
                state = self.state()
                if ok(state):
                    return
                last = {k: state.get(k) for k in ("status", "aliveworkers")}
            except (OSError, ValueError) as e:
                last = e
            time.sleep(0.25)
        names = ["master", *(f"worker-{i}" for i in range(len(self._workers)))]
        tails = "\n".join(self._tail(n) for n in names)
        raise WireError(f"timed out waiting for {what} (last: {last})\n{tails}")

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            text = self.log(name).splitlines()[-lines:]
        except OSError:
            return f"[{name}: no log]"
        return f"[{name}.log]\n" + "\n".join(text)


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group led by ``p`` (by its PID) and reap ``p``."""
    terminate(p, group=True, first=signal.SIGKILL)
