"""A class-data-sharing archive of Spark's JVM classes, so a local session starts faster.

A local SparkSession's JVM loads, verifies and links about 18,000 classes by the end of
its first job (Spark, Scala, Hadoop, Arrow, RocksDB's JNI wrapper, Jackson ...). Java's
application class-data sharing (JDK 17, JEP 350 "dynamic CDS archives") keeps those
classes pre-parsed in a file that later JVMs map into memory. Measured on the 2-core
development machine (``wire.spark("local[2]")``, then ``spark.range(1000)`` summed):
the session 4.2 s -> 2.6 s, its first job 2.2 s -> 1.2 s (docs/architecture.md, issue 25).

How it works:

* The archive belongs to one Java runtime and one Spark installation: its file name
  carries a hash of ``java -version``, the pyspark version and the Spark home
  (:func:`archive_path`). It lives in Wire's cache directory
  (``$WIRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/wire``, else ``~/.cache/wire``).
* A local session whose archive exists starts its JVM with
  ``-XX:SharedArchiveFile=<archive>`` (:func:`java_options`). The JVM checks the archive
  against its class path and its own build; if anything differs (a jar changed, another
  JDK) it ignores the archive and loads classes as usual. Its messages about that are off
  (``-Xlog:cds=off``): an unusable archive costs only the speed.
* When the archive does not exist, :func:`java_options` starts one detached builder
  process (``python -m wire.cli.class_archive``, at most one per archive: a lock file) and
  the session starts without it. The builder runs a small Wire flow (a file source, a
  filter, a tumbling window, a Parquet sink, dead letters) in a JVM started with
  ``-XX:ArchiveClassesAtExit``, stops it, waits for the JVM to write the archive at its
  exit, then moves it into place (atomic rename): no session ever sees half a file.
  ``make`` builds it at install time (``python -m wire.cli.class_archive``).
* ``WIRE_CLASS_ARCHIVE=off`` turns both the use and the build off. Clusters are untouched:
  only a ``local`` master's driver JVM is Wire's to start.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wire.runtime.java import java_binary, version_output

ENV_SWITCH = "WIRE_CLASS_ARCHIVE"
"""``off`` (or ``0``, ``false``, ``no``): no archive is used or built."""
BUILDER_MODULE = "wire.cli.class_archive"
"""The module the builder process runs (``python -m``). It runs a Wire flow, so it sits in
the CLI layer; this module only names it."""
LOCK_STALE_S = 600.0
"""A builder's lock file older than this is taken to be left by a builder that died."""
BUILD_TIMEOUT_S = 300.0
"""The background builder ends itself after this long (an alarm; its JVM then exits with it),
and :func:`build` waits at most this long for the JVM to write the archive and exit;
either way nothing is put in place."""
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def enabled() -> bool:
    """Whether archives are used and built (``WIRE_CLASS_ARCHIVE`` is not ``off``)."""
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in ("off", "0", "false", "no")


def cache_dir() -> Path:
    """Wire's cache directory: ``$WIRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/wire``, else ``~/.cache/wire``."""
    explicit = os.environ.get("WIRE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "wire"


def _java_identity(java: str) -> str:
    """The Java runtime's identity: its real path and ``java -version``'s version and build lines.

    Without the launcher's "Picked up JDK_JAVA_OPTIONS: ..." notes and the VM line (it
    names the JIT mode, e.g. "emulated-client"): options do not change the runtime, and a
    JVM started with them uses the same archive.
    """
    text = version_output(java)
    lines = [line for line in text.splitlines() if line.strip() and "Picked up " not in line]
    return "\n".join([os.path.realpath(java), *lines[:2]])


def archive_path(spark_home: str) -> Path | None:
    """The archive for this Java runtime and the Spark installation at ``spark_home``.

    None when no ``java`` is found. The name is ``spark-<hash>.jsa``, the hash over
    ``java -version``, the pyspark version, ``spark_home`` and the names and sizes of its
    jars: another JDK or Spark gets another archive.
    """
    import pyspark

    java = java_binary()
    if java is None:
        return None
    jars_dir = os.path.join(spark_home, "jars")
    try:
        jars = sorted((n, os.path.getsize(os.path.join(jars_dir, n))) for n in os.listdir(jars_dir))
    except OSError:
        return None
    text = "|".join([_java_identity(java), pyspark.__version__, os.path.realpath(spark_home), repr(jars)])
    return cache_dir() / f"spark-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsa"


def java_options(spark_home: str | None, *, build: bool = True) -> str:
    """The driver JVM's options for a local session at ``spark_home`` ("" if none apply).

    With the archive present: use it. Without it, and with ``build``: start the builder
    in the background (once: a lock file) and use nothing this time.
    """
    if spark_home is None or not enabled():
        return ""
    path = archive_path(spark_home)
    if path is None:
        return ""
    if path.is_file():
        return f"-XX:SharedArchiveFile={path} {QUIET}"
    if build:
        start_builder(path, spark_home)
    return ""


def _lock(path: Path) -> Path:
    return path.with_name(path.name + ".building")


def take_lock(path: Path) -> bool:
    """Take the build lock of ``path`` (a file made with ``O_EXCL``, holding the builder's PID).

    A lock whose process is gone, or older than :data:`LOCK_STALE_S`, was left by a
    builder that died (killed with its process tree, say): it is taken over.
    """
    lock = _lock(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(lock):
                return False
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def _stale(lock: Path) -> bool:
    try:
        age = time.time() - lock.stat().st_mtime
        pid = int(lock.read_text().strip() or "0")
    except (FileNotFoundError, ValueError):
        return True
    if age > LOCK_STALE_S:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _hand_lock(path: Path, pid: int) -> None:
    """The lock now names the builder process ``pid`` (it releases it when done)."""
    with contextlib.suppress(OSError):
        _lock(path).write_text(str(pid))


def release_lock(path: Path) -> None:
    """Remove the build lock of ``path`` (if any)."""
    with contextlib.suppress(FileNotFoundError):
        _lock(path).unlink()


def start_builder(path: Path, spark_home: str) -> subprocess.Popen[bytes] | None:
    """Start the detached builder of ``path`` unless one runs (it holds the lock).

    Its output goes to ``<path>.log``.
    """
    if not take_lock(path):
        return None
    env = {**os.environ, "SPARK_HOME": spark_home, ENV_SWITCH: "off"}
    env.pop("JDK_JAVA_OPTIONS", None)
    try:
        with open(path.with_name(path.name + ".log"), "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", BUILDER_MODULE, "--locked", str(path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, close_fds=True,
            )
    except OSError:
        release_lock(path)
        return None
    _hand_lock(path, proc.pid)
    return proc


def verified(archive: Path, spark_home: str | None) -> bool:
    """Whether a JVM on Spark's class path maps ``archive`` (``spark-submit --version`` with ``-Xshare:on``).

    ``-Xshare:on`` makes the JVM fail rather than run without the archive. A truncated or
    damaged archive can crash a JVM that maps it (SIGBUS), whatever ``-Xshare``, so no
    archive is put in place unless this passes.
    """
    if spark_home is None:
        return False
    env = {**os.environ, "SPARK_HOME": spark_home,
           "SPARK_SUBMIT_OPTS": f"-XX:SharedArchiveFile={archive} -Xshare:on"}
    env.pop("JDK_JAVA_OPTIONS", None)
    try:
        with tempfile.TemporaryDirectory(prefix="wire-class-archive-") as cwd:  # a crash's hs_err file
            probe = subprocess.run([os.path.join(spark_home, "bin", "spark-submit"), "--version"], env=env,
                                   cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def build(path: Path, workload: Callable[[Any], None], *, locked: bool = False) -> bool:
    """Build the archive at ``path``: run ``workload(spark)`` in a JVM that dumps its classes at exit.

    ``workload`` gets a local SparkSession (Wire's settings, plus
    ``-XX:ArchiveClassesAtExit``). The session is stopped, its JVM shut down and waited
    for (it writes the archive as it exits), then the file is renamed into place. Returns
    whether the archive was written. ``locked``: the caller holds the build lock already
    (:func:`start_builder`); it is released either way.
    """
    if not locked and not take_lock(path):
        return False
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        from pyspark import SparkContext

        from wire.runtime.session import JAVA_OPTIONS_KEY, spark_session

        conf = {JAVA_OPTIONS_KEY: f"-XX:ArchiveClassesAtExit={tmp} {QUIET}"}
        spark = spark_session("local[2]", conf, app_name="wire:class-archive", use_archive=False)
        gateway = SparkContext._gateway
        try:
            workload(spark)
        finally:
            spark.stop()
        proc = getattr(gateway, "proc", None)
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
        if proc is None:
            return False
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the JVM exits at the end of its standard input
        proc.wait(timeout=BUILD_TIMEOUT_S)
        if not tmp.is_file() or not verified(tmp, os.environ.get("SPARK_HOME")):
            return False
        os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        release_lock(path)
