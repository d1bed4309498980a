"""Shared fixtures: one local SparkSession per test session (it costs ~7-11 s to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from wire.runtime.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="wire-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def pg_server() -> Iterator[object]:
    """A throw-away PostgreSQL server on 127.0.0.1 for one test module (skips if none can start)."""
    from wire.errors import WireError
    from wire.testing.postgres import PostgresServer

    ok, reason = PostgresServer.available()
    if not ok:
        pytest.skip(f"no throw-away PostgreSQL server: {reason}")
    server = PostgresServer()
    try:
        server.start()
    except WireError as e:
        pytest.skip(f"throw-away PostgreSQL server did not start: {e}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def kafka_broker() -> Iterator[object]:
    """A throw-away noida-db Kafka broker on 127.0.0.1 for one test module (skips if none can start)."""
    from wire.testing.kafka import KafkaBroker

    ok, reason = KafkaBroker.available()
    if not ok:
        pytest.skip(f"no throw-away Kafka broker: {reason}")
    broker = KafkaBroker().start()
    yield broker
    broker.stop()


def _run_python(code: str, *, missing: tuple[str, ...] = ()) -> object:
    import json
    import subprocess
    import sys
    import textwrap

    prelude = "import json, sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in missing)
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def run_python() -> object:
    """``run_python(code, missing=(...))``: run ``code`` in a new interpreter where the modules
    ``missing`` cannot be imported (``sys.modules[name] = None``, as if not installed); return
    the JSON of the last line it prints (``json`` and ``sys`` are imported)."""
    return _run_python


def _jvm_children(spark: object, marker: str) -> list[int]:
    import os

    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == jvm_pid and marker in command:
            found.append(int(entry))
    return found


@pytest.fixture
def jvm_children() -> object:
    """``jvm_children(spark, marker)``: the pids of the session JVM's child processes whose command
    line contains ``marker`` (Linux ``/proc``; tests using it skip without ``/proc``)."""
    import os

    if not os.path.isdir("/proc/self"):
        pytest.skip("reads /proc")
    return _jvm_children
