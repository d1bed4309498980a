"""The PySpark worker daemon for compiled flows: Wire imported once, before the forks.

Spark starts one Python daemon per executor (``python -m <spark.python.daemon.module>``)
and forks a worker from it for every Python task that finds no idle worker. The default
daemon (``pyspark.daemon``) forks from a bare interpreter, so every worker imports on its
own what it needs to unpickle a flow's Python stages (the file source's reader, the window
pre-stage, the stateful processors, the epoch's partition writer): the ``wire`` package
and with it pyarrow, pandas and every connector. That took 2.7 s of CPU per worker on the
2-core development machine, and the first epoch of a stateful flow starts four to eight
workers. This daemon imports all of it once, then runs ``pyspark.daemon``'s manager, so
the forked workers start with the modules loaded (:data:`wire.runtime.session.DEFAULT_CONF`
selects it with ``spark.python.daemon.module``).

``pyspark.daemon`` imports the worker module only after the fork because pandas and
pyarrow start threads when imported (jemalloc's background thread, the BLAS pool); both
libraries register fork handlers and are routinely forked after import (multiprocessing's
fork start method), and a forked worker uses neither thread.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import zipfile

PRELOAD = (
    "pandas", "pyarrow", "pyarrow.compute", "pyarrow.csv", "pyarrow.json", "pyarrow.parquet",
    "pyspark.worker", "pyspark.sql.pandas.serializers", "pyspark.sql.streaming.stateful_processor",
    "pyspark.sql.streaming.stateful_processor_api_client", "pyspark.sql.streaming.proto.StateMessage_pb2",
    "pyspark.sql.worker.plan_data_source_read",
    "wire.compiler.branches", "wire.compiler.join_stage", "wire.compiler.keyed",
    "wire.compiler.process_stage", "wire.compiler.throttle", "wire.compiler.window_stage",
    "wire.runtime.dataplane", "wire.sources.file_source.source", "wire.sources.file_source.reader",
    "wire.examples.nexmark_source",
    "wire.testing.test_stream", "wire.sinks.file_sinks", "wire.sinks.sqlite_sink",
)
"""What the workers of a compiled flow unpickle and run, imported once by the daemon.

The stages (window, join and process stages, throttle, branches), the epoch's partition
writer, the file and generator sources and the file sinks, with pyarrow, pandas and
pyspark's worker modules (also those PySpark imports inside functions: the state server's
protobuf messages, which every ``transformWithStateInPandas`` worker imported after its fork,
13-45 ms each, and the data source planning worker's module; ``python -X importtime`` across
a Nexmark q3 run, 2026-12-02). Not the connectors of pip extras (Kafka, Redis, HTTP ingest,
PostgreSQL, Delta, the self-correcting sink): a flow that uses one imports it in the
workers that run it, and a flow that does not never pays for it (psycopg, deltalake and
confluent-kafka took about 0.6 s of the daemon's start, on the critical path of the
first epoch). Not the driver's modules (the API, the runner, the control plane)."""


def preload() -> None:
    """Import :data:`PRELOAD`, each one whose import fails skipped (a worker then imports it)."""
    for module in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def drop_spark_zips(path: list[str]) -> list[str]:
    """``path`` without Spark's ``pyspark.zip`` / ``py4j-*-src.zip`` when the same packages are installed.

    Spark puts ``$SPARK_HOME/python/lib/*.zip`` first on a worker's ``PYTHONPATH``.
    Python never caches bytecode for modules imported from a zip, so each worker
    process compiled the pyspark modules it imported from source, and every task
    re-read the 4 MB zip's directory (``importlib.invalidate_caches()`` in
    ``pyspark.worker_util.setup_spark_files``): py-spy put both at about 1 s of CPU per
    run of the flights job (``docs/architecture.md``). When pyspark is pip-installed the
    zips sit inside the installed package (``<site>/pyspark/python/lib/``) and hold the
    same code as ``<site>/pyspark`` and ``<site>/py4j``, so they are dropped and the
    site directory's copy, with its ``__pycache__``, is imported. A zip anywhere else
    (a Spark distribution on a cluster) keeps its place.
    """
    entries = [os.path.abspath(p) if p else p for p in path]
    dropped = set()
    for p in entries:
        lib = os.path.dirname(p)
        site = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
        name = os.path.basename(p)
        package = "pyspark" if name == "pyspark.zip" else "py4j" if name.startswith("py4j-") else None
        if (package and name.endswith(".zip") and lib.endswith(os.path.join("pyspark", "python", "lib"))
                and site in entries and os.path.isfile(os.path.join(site, package, "__init__.py"))):
            dropped.add(p)
    return [p for p in entries if p not in dropped]


def drop_class_jars(path: list[str]) -> list[str]:
    """``path`` without the ``.jar`` files that hold no Python module (``.py``, ``.pyc``).

    Spark 4 puts its ``spark-core`` jar (about 6,000 entries, none of them Python) on a
    worker's ``PYTHONPATH``. Python imports from it as from a zip, and the
    ``importlib.invalidate_caches()`` Spark's worker calls at every task
    (``pyspark.worker_util.setup_spark_files``) makes Python re-read the jar's whole
    directory, in pure Python: 0.7 CPU s of a tumbling run over 5,000,000 events
    (py-spy, ``docs/architecture.md``). A jar that cannot be read as a zip stays.
    """
    kept = []
    for p in path:
        if p.endswith(".jar") and os.path.isfile(p):
            try:
                with zipfile.ZipFile(p) as jar:
                    if not any(n.endswith((".py", ".pyc")) for n in jar.namelist()):
                        continue
            except (OSError, zipfile.BadZipFile):
                pass
        kept.append(p)
    return kept


def main() -> None:
    """Preload (a failure only costs the speed-up), then serve forks like ``pyspark.daemon``."""
    kept = drop_class_jars(drop_spark_zips(sys.path))
    for p in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(p, None)
    sys.path[:] = kept
    preload()
    gc.collect()
    gc.freeze()  # the preloaded objects stay shared with the forks (no copy on GC)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
