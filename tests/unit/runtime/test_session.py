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
