"""The SparkSession Wire runs on, with the settings its compiled flows need."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from wire.errors import WireError
from wire.runtime import arrow_memory, fork_server
from wire.runtime.class_archive import java_options
from wire.runtime.java import java_binary, version_output

if TYPE_CHECKING:
    import pyarrow as pa

SPARK_LOG = "spark.log"
"""The file, in a flow's checkpoint directory, that receives Spark's log and its Python
workers' output when a run starts the SparkSession itself (``Flow.run`` without ``spark``)."""

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

SIMPLIFIED_TRACEBACK = "SPARK_SIMPLIFIED_TRACEBACK"

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "4g",
    "spark.sql.streaming.metricsEnabled": "false",
    "spark.python.daemon.module": "wire.runtime.daemon",
    f"spark.executorEnv.{SIMPLIFIED_TRACEBACK}": "1",
}
"""Defaults: few shuffle partitions (a local machine), no UI, UTC session time zone,
the RocksDB state store (needed by transformWithState, SPEC §10) with changelog
checkpointing: an epoch's commit writes the state changes, not a zipped snapshot of the
whole store (snapshots are taken in the background), which took ~100 ms per state
partition per epoch on this machine. Python workers fork from
:mod:`wire.runtime.daemon`, which has imported Wire once, instead of each importing it.

``SPARK_SIMPLIFIED_TRACEBACK=1`` in every Python worker's environment makes one daemon serve
them all. Spark starts one daemon per distinct worker environment, and SQL's Python runners
(a Python data source's reads, ``mapInArrow``) add that variable (Python tracebacks without
PySpark's own frames, ``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled``) while
``transformWithStateInPandas``'s runner does not: a stateful flow started two daemons, each
importing pandas, pyarrow and Wire's stages (about 1.3 CPU s each on the 2-core
development machine), during the first epoch. Set for every worker, the variable changes
nothing but the tracebacks of the stateful stages, which lose PySpark's frames like the
others."""

JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
C2_THRESHOLDS = ("-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=2400 "
                 "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=160000")
"""The JIT's thresholds for C2 (its optimizing compiler), four times the JVM's defaults.

In a 20 s run of a flow on two cores the JIT's two compiler threads took 12.9 of the JVM's
24 CPU s (C2 9.4, C1 3.5; the executor task threads 1.9), competing with the flow for the
cores. With these thresholds fewer methods reach C2 in the first seconds, while those a flow
keeps hot still do: `bench/peers.py`'s sliding x 5M job 19.2-20.9 -> 17.8-18.5 s (3 A/B pairs),
and Nexmark's steady rates the same or higher for both engines (``docs/architecture.md``).
Stopping the JIT at C1 instead made long runs slower (the same page)."""

PARALLEL_GC = "-XX:+UseParallelGC -XX:AdaptiveSizePolicyWeight=90"
"""The parallel (throughput) collector instead of G1, its heap sized by the free ratios below.

In a short run on two cores G1's concurrent threads and its write barriers cost CPU the
flow needs: `bench/peers.py`'s sliding x 5M job, Wire alone, 4 A/B pairs (2026-12-02):
18.3 -> 16.8 s median wall (0.92x), the JVM's GC threads 3.3 -> 0.5 CPU s. In a 7-minute
soak (`bench/soak.py --rate 10000 --minutes 7`, Nexmark q5) the process tree's RSS grew
+2.8 % from the second tenth to the last against G1's +19.8 % (G1's committed heap 596 ->
900 MB in the last three tenths; the parallel collector's stayed at 363-394 MB), epoch
times alike (``docs/architecture.md``). ``AdaptiveSizePolicyWeight=90`` makes the collector's size
policy follow its latest collections, so the heap shrinks soon after a burst; with
``GCTimeRatio=4`` and ``Min/MaxHeapFreeRatio`` it is the footprint setting OpenJDK's
container images have used for the parallel collector."""

CHOSEN_COLLECTOR = re.compile(r"-XX:\+Use\w+GC\b")
"""A JVM option choosing a garbage collector (``-XX:+UseG1GC``, ``-XX:+UseZGC``, ...)."""

DEFAULT_JAVA_OPTIONS = f"-XX:GCTimeRatio=4 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30 {C2_THRESHOLDS}"
"""JVM options put before any ``spark.driver.extraJavaOptions`` of the caller (a later option
wins, so the caller's own values of these flags override them), after :data:`PARALLEL_GC`
unless the caller chooses a collector (``-XX:+UseG1GC``, ...: the JVM refuses two): the heap
sizing (below) and :data:`C2_THRESHOLDS`.

Heap sizing: with the collectors' default time ratios (G1 12, parallel 99) the committed
heap grows whenever collections take more than a few percent of the time, and with G1 is
returned only after a concurrent cycle, which a flow whose live heap is small (Wire keeps
state in RocksDB and the Python workers) rarely starts. On a busy machine pauses stretch
(the GC threads wait for a core), so the heap of a long run kept growing towards
``spark.driver.memory`` (4g) while its live data stayed near 60 MB: the soak
(``bench/soak.py``, ``bench/results/soak.md``, then with G1) saw the JVM's committed heap go
374 -> 784 MB in 6 minutes, with "Expand the heap ... pause time ratio 14 %" in the GC
log. ``GCTimeRatio=4`` lets collections take up to 20 % of the time before the heap grows,
and ``Min/MaxHeapFreeRatio=10/30`` shrink it back towards the live data after a
collection that finds it mostly free (the parallel collector applies them to its old
generation)."""


def check_java() -> None:
    """Raise ``WireError`` with one clear line if Java 17+ is not available."""
    java = java_binary()
    if java is None:
        raise WireError("Java 17 or newer is required by Spark and was not found (install a JDK 17+)")
    out = version_output(java)
    try:
        version = out.split('"')[1]
        major = int(version.split(".")[0])
    except (IndexError, ValueError):
        return
    if major < 17:
        raise WireError(f"Java 17 or newer is required by Spark; found Java {version} at {java}")


NO_UI_RETENTION: dict[str, str] = {
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.ui.dagGraph.retainedRootRDDs": "50",
}
"""What the driver's status store keeps when the Spark UI is off (Spark's defaults: 1,000
SQL executions, jobs and stages, 100,000 tasks per stage, every DAG graph).

Spark records every SQL execution, job and stage in the driver's status store whether or
not the UI runs, until the retention limits; a flow runs two or three SQL executions per
epoch, each with its plan description, plan graph and one ``SQLPlanMetric`` per operator
metric. In the soak (``bench/soak.py``) that held about 190,000 ``SQLPlanMetric`` objects and
their strings after 15 minutes, and the JVM's heap after each collection climbed 220 ->
312 MB while it filled. Nothing in Wire reads them (its progress comes from the query and
the epoch log), so with the UI off Wire keeps 50."""


def session_settings(conf: Mapping[str, str] | None = None, *, archive: str = "") -> dict[str, str]:
    """The Spark settings of a session Wire creates: :data:`DEFAULT_CONF` overridden by ``conf``.

    ``spark.driver.extraJavaOptions`` is ``archive`` (a local session's class archive
    options, :func:`wire.runtime.class_archive.java_options`), :data:`PARALLEL_GC` (unless
    the one in ``conf`` chooses a collector), :data:`DEFAULT_JAVA_OPTIONS`, then the one in
    ``conf`` (if any), so the caller's options add to Wire's and win where they repeat a
    flag.
    With the UI off (``spark.ui.enabled`` ``"false"``, Wire's default), the status store's
    retention is :data:`NO_UI_RETENTION` unless ``conf`` sets it; with the UI on, Spark's.
    Every Python worker's environment names Arrow's memory pool
    (:func:`wire.runtime.arrow_memory.backend`; on a cluster, the executors' too).
    """
    pool = {f"spark.executorEnv.{arrow_memory.ENV}": arrow_memory.backend()}
    settings = {**DEFAULT_CONF, **pool, **dict(conf or {})}
    callers = settings.get(JAVA_OPTIONS_KEY, "")
    collector = "" if CHOSEN_COLLECTOR.search(callers) else PARALLEL_GC
    options = [archive, collector, DEFAULT_JAVA_OPTIONS, callers]
    settings[JAVA_OPTIONS_KEY] = " ".join(o for o in options if o)
    if str(settings.get("spark.ui.enabled", "true")).lower() == "false":
        for key, value in NO_UI_RETENTION.items():
            settings.setdefault(key, value)
    return settings


def spark_session(
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    *,
    app_name: str = "wire",
    log_file: str | os.PathLike[str] | None = None,
    use_archive: bool = True,
) -> SparkSession:
    """Get or create the SparkSession with Wire's defaults, overridden by ``conf``.

    Python workers run the interpreter running Wire (``PYSPARK_PYTHON``), so the
    Python data sources and stateful processors see the same packages; in a new local
    session through the fork server's launcher (:func:`worker_python`). With
    ``log_file``, the JVM's stderr (Spark's log and its Python workers' chatter)
    goes to that file instead of the terminal; this process's stderr is unchanged.

    Arrow allocates through jemalloc (else the system allocator) in this process and the
    processes it starts, unless ``ARROW_DEFAULT_MEMORY_POOL`` is set
    (:mod:`wire.runtime.arrow_memory`).

    A ``local`` master's JVM maps the class-data-sharing archive of Spark's classes
    (:mod:`wire.runtime.class_archive`; built in the background the first time, unless
    ``use_archive`` is False or ``WIRE_CLASS_ARCHIVE=off``): about 1.5 s less for the
    session and 1 s less for its first job on the 2-core development machine.
    """
    local = master.startswith("local")
    arrow_memory.use_in_driver()  # before the JVM and the fork server start: they inherit it
    active = SparkSession.getActiveSession()
    if active is None and SparkContext._active_spark_context is None:  # a new context reads it at its start
        worker_python(local=local)
    else:  # the running context's interpreter is fixed: a later local session keeps its fork server
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if active is not None:
        return active
    check_java()
    if local and "SPARK_HOME" not in os.environ:
        home = local_spark_home()
        if home is not None:
            os.environ["SPARK_HOME"] = home
    builder = SparkSession.builder.master(master).appName(app_name)
    archive = java_options(os.environ.get("SPARK_HOME")) if local and use_archive else ""
    settings = session_settings(conf, archive=archive)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate() if log_file is None else _with_stderr_to(log_file, builder.getOrCreate)
    spark.sparkContext.setLogLevel("ERROR")
    skip_data_source_lookup(spark)
    stop_promptly(spark.sparkContext)
    return spark


class PromptStop:
    """PySpark's accumulator server, stopped without waiting for its request loop (:func:`stop_promptly`).

    Every attribute but :meth:`shutdown` is the server's.
    """

    def __init__(self, server: Any) -> None:
        self.server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)

    def shutdown(self) -> None:
        """Flag the server to stop and let a daemon thread wait for its loop to end."""
        self.server.server_shutdown = True
        threading.Thread(target=self.server.shutdown, name="wire-accumulator-stop", daemon=True).start()


def stop_promptly(sc: SparkContext) -> bool:
    """Make ``sc.stop()`` return without waiting up to 1 s for the accumulator server; True if it took.

    ``SparkContext.stop()`` stops the JVM's context (about 0.1 s), then shuts down the
    driver's accumulator server and waits for it: the server's one request handler (the
    JVM's connection) polls its socket with a 1 s timeout before it looks at the shutdown
    flag (``pyspark.accumulators.UpdateRequestHandler``), so the wait is up to 1 s, 0.75 s
    measured at the end of a flow on the 2-core development machine. With this the flag is
    set and the wait happens in a daemon thread: the server still ends within 1 s (its
    port or Unix socket closed by then), a new context gets a server of its own, and an
    interpreter that exits meanwhile does not wait for it. Applied to the contexts Wire
    creates (:func:`spark_session`); any failure leaves PySpark's server as it is.
    """
    server = getattr(sc, "_accumulatorServer", None)
    if server is None or isinstance(server, PromptStop) or not callable(getattr(server, "shutdown", None)):
        return False
    sc._accumulatorServer = PromptStop(server)  # type: ignore[assignment]
    return True


def worker_python(*, local: bool) -> str:
    """Set ``PYSPARK_PYTHON``, the interpreter of Spark's Python processes, unless the user did; return it.

    ``local``: a new session of a local master is about to start its JVM. Then
    ``PYSPARK_PYTHON`` is the launcher of :mod:`wire.runtime.fork_server` (Spark's per-query
    Python processes fork from an interpreter that has imported them: 0.3-0.4 s less each
    at a flow's start), or this interpreter when the fork server is off. Otherwise it is this
    interpreter (``sys.executable``); a launcher left from an earlier local session is
    replaced, as a cluster's machines do not have it, and so is another process's launcher
    (an environment inherited from a driver that started this one).
    """
    current = os.environ.get("PYSPARK_PYTHON")
    ours = fork_server.launcher()
    if current is not None and current != ours and fork_server.is_launcher(current):
        current = None  # another process's (inherited environment): it ends with that process
    if current is None or (current == ours and not local):
        started = fork_server.start() if local else None
        os.environ["PYSPARK_PYTHON"] = started or sys.executable
    return os.environ["PYSPARK_PYTHON"]


def skip_data_source_lookup(spark: SparkSession) -> bool:
    """Tell Spark that no installed package declares a Python data source; True if it took.

    The first time a session resolves a data source, Spark starts a Python process that
    imports pyspark and scans the installed packages for Python data sources to register
    by name (``pyspark.sql.worker.lookup_data_sources``): 1.5 s on the critical path of
    a flow's start on the 2-core development machine. Wire registers its own sources by
    name (``spark.dataSource.register``), so in a session Wire creates the lookup is set
    to "none found" (``DataSourceManager.dataSourceBuilders``, a public setter of Spark's
    JVM object), unless it already ran. A third-party Python data source is then used by
    registering it, not by its entry point. Any failure leaves Spark's lookup as it is.
    """
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        forname = jvm.java.lang.Class.forName
        manager = forname("org.apache.spark.sql.execution.datasources.DataSourceManager$").getField(
            "MODULE$").get(None)
        if manager.dataSourceBuilders().isEmpty():
            empty = forname("scala.collection.immutable.Map$").getField("MODULE$").get(None).empty()
            getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
        return True
    except Exception:
        return False


def local_spark_home(cache: str | None = None) -> str | None:
    """A ``SPARK_HOME`` for local mode: the pip-installed pyspark without ``python/lib/*.zip``.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip`` first on the
    ``PYTHONPATH`` of every Python process it starts (the workers, and on the driver the
    data source lookup, creation and planner processes and the stateful processors'
    driver worker). Python compiles modules imported from a zip from source every time
    (no bytecode cache), and every task re-reads the 4 MB zip's directory
    (``importlib.invalidate_caches()``). When pyspark is pip-installed, the installed
    package holds the same modules, so a run in local mode points ``SPARK_HOME`` at a
    directory of symbolic links to the installed pyspark (``bin``, ``jars``, ``conf`` ...)
    whose ``python/lib`` has no zips: the processes import pyspark from the site
    directory with its bytecode cache. Without the zips Spark also skips its lookup of
    Python data sources declared by installed packages (a Python process, 1.5 s at
    start-up); Wire's sources are registered by name and do not need it.

    Measured on the flights job: ``docs/architecture.md``. Returns None (nothing
    changes) when pyspark is not a pip install with ``jars`` and the zips. ``cache``:
    where to keep the directory (default: the temporary directory).
    """
    import pyspark

    real = os.path.dirname(os.path.abspath(pyspark.__file__))
    lib = os.path.join(real, "python", "lib")
    if not (os.path.isdir(os.path.join(real, "jars")) and os.path.isfile(os.path.join(lib, "pyspark.zip"))):
        return None
    tag = hashlib.sha256(f"{real}|{pyspark.__version__}".encode()).hexdigest()[:12]
    home = os.path.join(cache or tempfile.gettempdir(), f"wire-spark-home-{os.getuid()}-{tag}")
    if os.path.isdir(os.path.join(home, "jars")):
        return home
    building = tempfile.mkdtemp(prefix=os.path.basename(home) + ".", dir=os.path.dirname(home))
    for name in os.listdir(real):
        if name != "python":
            os.symlink(os.path.join(real, name), os.path.join(building, name))
    os.mkdir(os.path.join(building, "python"))
    for name in os.listdir(os.path.join(real, "python")):
        if name != "lib":
            os.symlink(os.path.join(real, "python", name), os.path.join(building, "python", name))
    os.mkdir(os.path.join(building, "python", "lib"))
    try:
        os.rename(building, home)
    except OSError:  # another process made it first
        shutil.rmtree(building, ignore_errors=True)
    return home


def warm_up_workers(spark: SparkSession) -> threading.Thread | None:
    """Start the executors' Python worker daemon now, in the background; once per SparkContext.

    Spark starts an executor's Python daemon (:mod:`wire.runtime.daemon`, which imports
    pyarrow, pandas and Wire's stages before it forks) at the first Python task, i.e.
    inside a flow's first epoch, after the driver compiled the flow and the source's planner
    started. A tiny job of one no-op Python task per core, started when a run begins, makes
    the daemon and a worker per core while the driver compiles; the first epoch then forks
    from a loaded daemon or reuses those workers. A local session with the RocksDB state
    store also loads RocksDB's native library meanwhile (:func:`load_rocksdb`, another
    thread). Returns the thread running the job (None: done before in this SparkContext).
    A failure of either changes nothing but the speed.
    """
    sc = spark.sparkContext
    if getattr(sc, "_wire_warmed", False):
        return None
    sc._wire_warmed = True  # type: ignore[attr-defined]
    cores = max(1, sc.defaultParallelism)

    # SQL's Python runners (data source reads, mapInArrow) set SPARK_SIMPLIFIED_TRACEBACK, the
    # others (an RDD's, transformWithStateInPandas's) only when the executors' environment has it
    # (DEFAULT_CONF): Spark keys its daemons by the workers' environment, so in a session without
    # it a flow's first epoch needs a daemon of each kind
    conf = sc.getConf()
    one_daemon = conf.get(f"spark.executorEnv.{SIMPLIFIED_TRACEBACK}") == "1"

    def job() -> None:
        with contextlib.suppress(Exception):
            sc.setJobDescription("wire: start the Python workers")
            if not one_daemon:
                sc.parallelize(range(cores), cores).foreach(_nothing)
            rows = spark.range(0, cores, 1, cores).mapInArrow(_same, "id long")
            rows.write.format("noop").mode("overwrite").save()

    thread = threading.Thread(target=job, name="wire-warm-up", daemon=True)
    thread.start()
    from wire.sources.base.source import is_local  # a run's sources import it already

    rocksdb = conf.get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB_PROVIDER
    if rocksdb and is_local(spark):  # a local session's executors are the driver's JVM
        threading.Thread(target=load_rocksdb, args=(spark,), name="wire-rocksdb", daemon=True).start()
    return thread


def load_rocksdb(spark: SparkSession) -> bool:
    """Load RocksDB's native library into the driver's JVM now; True if it loaded (or was).

    The RocksDB state store loads it when a flow's first stateful task opens its store:
    RocksDB's loader inflates ``librocksdbjni-linux64.so`` (15 MB) from its jar into a
    temporary file and links it, 0.13 s measured on the 2-core development machine, on the
    critical path of the first epoch. :func:`warm_up_workers` calls this in a thread of its
    own while the flow compiles, in a local session (whose executors are the driver's JVM)
    with the RocksDB state store.
    A second load is a no-op; any failure leaves the load to the state store, as before.
    """
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.rocksdb.RocksDB.loadLibrary()
        return True
    except Exception:
        return False


def _nothing(_: object) -> None:
    """The warm-up job's task body."""


def _same(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The warm-up SQL job's task body: its rows, as they came."""
    return batches


def _with_stderr_to(log_file: str | os.PathLike[str], start: Callable[[], SparkSession]) -> SparkSession:
    """Start the JVM with file descriptor 2 pointing at ``log_file`` (it inherits it)."""
    os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        return start()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
