"""The local SPARK_HOME: the installed pyspark, without the zips Spark puts on workers' paths."""

from __future__ import annotations

import os

import pyspark

from wire.runtime.session import local_spark_home


def test_local_spark_home_links_the_installed_pyspark_without_the_python_zips(tmp_path):
    real = os.path.dirname(os.path.abspath(pyspark.__file__))
    home = local_spark_home(str(tmp_path))
    assert home is not None and home.startswith(str(tmp_path))
    for name in ("bin", "jars"):
        assert os.path.realpath(os.path.join(home, name)) == os.path.realpath(os.path.join(real, name))
    assert os.path.isfile(os.path.join(home, "bin", "spark-submit"))
    assert os.listdir(os.path.join(home, "python", "lib")) == []
    assert os.path.isfile(os.path.join(real, "python", "lib", "pyspark.zip"))  # the install is untouched
    assert local_spark_home(str(tmp_path)) == home  # made once, then reused
    assert [p for p in os.listdir(tmp_path) if p != os.path.basename(home)] == []  # nothing half-made left


def test_no_local_spark_home_without_the_zips(tmp_path, monkeypatch):
    fake = tmp_path / "pyspark"
    (fake / "jars").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.setattr(pyspark, "__file__", str(fake / "__init__.py"))
    assert local_spark_home(str(tmp_path / "cache")) is None


def test_a_running_session_keeps_the_worker_interpreter_for_later_sessions(spark, monkeypatch, tmp_path):
    """``spark_session`` with a context running (e.g. ``wire.read_state`` inside a flow) returns it and
    leaves ``PYSPARK_PYTHON`` alone: the fork server's launcher stays for a later new local session."""
    from wire.runtime import fork_server
    from wire.runtime.session import spark_session

    ours = str(tmp_path / "wire-fork-1-abc" / "python")
    monkeypatch.setattr(fork_server, "launcher", lambda: ours)
    monkeypatch.setenv("PYSPARK_PYTHON", ours)
    assert spark_session("local[2]") is spark
    assert os.environ["PYSPARK_PYTHON"] == ours


def test_a_context_wire_creates_stops_without_waiting_for_the_accumulator_server(spark):
    from wire.runtime.session import PromptStop

    assert isinstance(spark.sparkContext._accumulatorServer, PromptStop)


def test_prompt_stop_flags_the_server_and_leaves_the_wait_to_a_daemon_thread():
    import threading

    from wire.runtime.session import PromptStop

    release, ended = threading.Event(), threading.Event()

    class Server:
        server_shutdown = False
        server_address = ("localhost", 1234)

        def shutdown(self):  # PySpark's waits for the request loop; this one until released
            release.wait(10)
            ended.set()

    server = Server()
    prompt = PromptStop(server)
    assert prompt.server_address == ("localhost", 1234)
    prompt.shutdown()  # returns although the server's shutdown has not
    assert server.server_shutdown and not ended.is_set()
    release.set()
    assert ended.wait(10)


def test_the_accumulator_server_still_ends_after_a_prompt_stop():
    """PySpark's real server, with a connection polled as the JVM's is: the port closes soon after."""
    import socket
    import time

    from pyspark import accumulators

    from wire.runtime.session import PromptStop

    server = accumulators._start_update_server("token", False)
    host, port = server.server_address
    jvm = socket.create_connection((host, port))
    jvm.sendall(b"token" + (0).to_bytes(4, "big"))  # authenticated, no updates: its handler now polls
    assert jvm.recv(1) == b"\x01"
    PromptStop(server).shutdown()
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            break  # closed
        assert time.monotonic() < deadline, "the accumulator server did not end"
        time.sleep(0.05)
    jvm.close()


def test_load_rocksdb_links_the_state_stores_native_library(spark):
    from wire.runtime.session import load_rocksdb

    assert load_rocksdb(spark)
    jvm = spark.sparkContext._jvm
    field = jvm.java.lang.Class.forName("org.rocksdb.RocksDB").getDeclaredField("libraryLoaded")
    field.setAccessible(True)
    assert str(field.get(None).get()) == "LOADED"


def test_load_rocksdb_calls_rocksdbs_loader_and_survives_its_failure():
    from types import SimpleNamespace

    from wire.runtime.session import load_rocksdb

    calls = []

    def loaded():
        calls.append("loadLibrary")

    def fails():
        raise RuntimeError("no native library for this platform")

    def session(load):
        rocksdb = SimpleNamespace(RocksDB=SimpleNamespace(loadLibrary=load))
        jvm = SimpleNamespace(org=SimpleNamespace(rocksdb=rocksdb))
        return SimpleNamespace(sparkContext=SimpleNamespace(_jvm=jvm))

    assert load_rocksdb(session(loaded)) and calls == ["loadLibrary"]
    assert not load_rocksdb(session(fails))
