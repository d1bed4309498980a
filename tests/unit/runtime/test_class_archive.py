"""The class-data-sharing archive of a local session's JVM (wire.runtime.class_archive, issue 25)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wire.runtime import class_archive as ca
from wire.runtime.java import version_output
from wire.runtime.session import local_spark_home


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WIRE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(ca.ENV_SWITCH, raising=False)
    return tmp_path / "cache"


def fake_home(root: Path, jars: dict[str, int]) -> str:
    (root / "jars").mkdir(parents=True)
    for name, size in jars.items():
        (root / "jars" / name).write_bytes(b"x" * size)
    return str(root)


def test_the_archive_is_per_spark_installation_and_in_the_cache_dir(cache, tmp_path):
    a = fake_home(tmp_path / "a", {"spark-core.jar": 10, "scala.jar": 5})
    b = fake_home(tmp_path / "b", {"spark-core.jar": 10, "scala.jar": 5})
    c = fake_home(tmp_path / "c", {"spark-core.jar": 11, "scala.jar": 5})
    pa, pb, pc = (ca.archive_path(h) for h in (a, b, c))
    assert pa is not None and pa.parent == cache and pa.suffix == ".jsa"
    assert len({pa, pb, pc}) == 3  # another home, or a jar of another size: another archive
    assert ca.archive_path(a) == pa


def test_launcher_options_do_not_change_the_archive(cache, tmp_path, monkeypatch):
    home = fake_home(tmp_path / "h", {"x.jar": 1})
    before = ca.archive_path(home)
    version_output.cache_clear()
    monkeypatch.setenv("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    try:
        assert ca.archive_path(home) == before
    finally:
        version_output.cache_clear()


def test_an_existing_archive_is_used_quietly(cache, tmp_path, monkeypatch):
    home = fake_home(tmp_path / "h", {"x.jar": 1})
    path = ca.archive_path(home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    started = []
    monkeypatch.setattr(ca, "start_builder", lambda *a: started.append(a))
    opts = ca.java_options(home).split()
    assert opts[0] == f"-XX:SharedArchiveFile={path}" and "-Xlog:cds=off" in opts
    assert started == []


def test_a_missing_archive_starts_one_builder_and_uses_nothing_now(cache, tmp_path, monkeypatch):
    home = fake_home(tmp_path / "h", {"x.jar": 1})
    started = []
    monkeypatch.setattr(ca, "start_builder", lambda path, h: started.append((path, h)))
    assert ca.java_options(home) == ""
    assert started == [(ca.archive_path(home), home)]
    assert ca.java_options(home, build=False) == "" and len(started) == 1


@pytest.mark.parametrize("value", ["off", "0", "false", "NO"])
def test_the_switch_turns_use_and_build_off(cache, tmp_path, monkeypatch, value):
    home = fake_home(tmp_path / "h", {"x.jar": 1})
    path = ca.archive_path(home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    monkeypatch.setenv(ca.ENV_SWITCH, value)
    monkeypatch.setattr(ca, "start_builder", lambda *a: pytest.fail("no build when off"))
    assert ca.java_options(home) == ""
    assert ca.java_options(None) == ""


def test_the_lock_admits_one_builder_and_is_taken_over_when_its_process_is_gone(cache):
    path = cache / "spark-x.jsa"
    assert ca.take_lock(path)
    assert not ca.take_lock(path)  # held by this (live) process
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ca._hand_lock(path, dead.pid)
    assert ca.take_lock(path)  # its builder died: taken over
    ca.release_lock(path)
    assert not ca._lock(path).exists()


def test_an_old_lock_is_stale_even_if_its_pid_lives(cache):
    path = cache / "spark-y.jsa"
    assert ca.take_lock(path)
    old = time.time() - ca.LOCK_STALE_S - 5
    os.utime(ca._lock(path), (old, old))
    assert ca.take_lock(path)
    ca.release_lock(path)


@pytest.mark.skipif(local_spark_home() is None, reason="needs a pip-installed pyspark")
def test_a_built_archive_is_accepted_by_a_jvm_on_sparks_class_path(tmp_path):
    """Build a real archive in a fresh process (its own JVM), then map it with -Xshare:on.

    ``-Xshare:on`` makes the JVM fail rather than run without the archive, so this fails
    if the archive is missing, truncated, or does not match Spark's class path.
    """
    cache = tmp_path / "cache"
    env = {**os.environ, "WIRE_CACHE_DIR": str(cache), ca.ENV_SWITCH: "on"}
    script = textwrap.dedent("""
        import sys
        from wire.runtime import class_archive as ca
        from wire.runtime.session import local_spark_home
        home = local_spark_home()
        path = ca.archive_path(home)
        ok = ca.build(path, lambda spark: spark.range(100).selectExpr("sum(id)").collect())
        print(path if ok else "FAILED")
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240)
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.stat().st_size > 1_000_000, out.stderr[-2000:]
    assert not list(cache.glob("*.building")) and not list(cache.glob("*.tmp"))
    home = local_spark_home()
    # Spark's own launcher, with its class path: spark-submit passes SPARK_SUBMIT_OPTS to java
    probe = subprocess.run(
        [os.path.join(home, "bin", "spark-submit"), "--version"],
        env={**os.environ, "SPARK_HOME": home,
             "SPARK_SUBMIT_OPTS": f"-XX:SharedArchiveFile={path} -Xshare:on"},
        capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    truncated = tmp_path / "truncated.jsa"
    truncated.write_bytes(path.read_bytes()[:1_000_000])
    assert ca.verified(path, home) and not ca.verified(truncated, home)


@pytest.mark.slow
@pytest.mark.skipif(local_spark_home() is None, reason="needs a pip-installed pyspark")
def test_the_background_builder_runs_a_wire_flow_and_puts_a_verified_archive_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("WIRE_CACHE_DIR", str(tmp_path / "cache"))
    home = local_spark_home()
    path = ca.archive_path(home)
    proc = ca.start_builder(path, home)
    assert proc is not None and ca.start_builder(path, home) is None  # one builder at a time
    log = path.with_name(path.name + ".log")
    assert proc.wait(timeout=ca.BUILD_TIMEOUT_S + 60) == 0, log.read_text()[-3000:]
    assert path.is_file() and ca.verified(path, home)
    assert not ca._lock(path).exists() and not list(path.parent.glob("*.tmp"))
    assert ca.java_options(home).startswith(f"-XX:SharedArchiveFile={path} ")
