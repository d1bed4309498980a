"""The settings a flow's query starts with: set on the session just before its ``start()``.

Spark clones the session into the query when it starts, so what is set here reaches the
query. :func:`apply_query_conf` sets :data:`QUERY_CONF`, and each :data:`QUERY_DEFAULTS`
setting the session left at Spark's default; :func:`checkpoint_files_conf` gives a query on a
local checkpoint :data:`LOCAL_FILE_MANAGER` for its start only. The runner
(:mod:`wire.runtime.runner`) calls both; ``docs/operating.md`` says what each gives up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from pyspark.errors import SparkNoSuchElementException

from wire.errors import ConfigError
from wire.runtime.checkpoint_files import is_local_checkpoint

ARROW_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
SPARK_DEFAULTS = {ARROW_BATCH_BYTES: "67108864b"}
"""Spark's default of each :data:`QUERY_DEFAULTS` setting as ``spark.conf.get`` renders it."""

QUERY_CONF = {"spark.sql.adaptive.streaming.stateless.enabled": "false"}
"""Set on the session before a flow's query starts (Spark clones the session into the query).

Spark 4.1+ runs the epochs of a stateless query adaptively, materializing a plan's shuffle
stages in parallel threads. Two scans of one Python data source (a replayable source read
once per branch, :mod:`wire.compiler.branches`) then ask the source's one planner process for
their partitions at once, over its one socket: the replies interleave and the query hangs
or fails ("Function call id not recognized by stream reader"). Without adaptive execution
the scans are planned one after the other. Only stateless streaming queries are affected
(Spark never runs a stateful one adaptively); batch queries keep ``spark.sql.adaptive.enabled``.
"""

QUERY_DEFAULTS = {ARROW_BATCH_BYTES: "2147483647"}
"""Set on the session before a flow's query starts, unless the session has its own value.

``spark.sql.execution.arrow.maxBytesPerBatch`` (Spark's default 64 MB) closes the Arrow batch
the JVM sends to a Python stage (each ``mapInArrow``, ``transformWithStateInPandas``) when its
bytes reach the limit: to know them Spark asks the batch's writer for its size after **every
row** (``ArrowWriter.sizeInBytes``, which walks every column vector), unless the limit is
2,147,483,647, which switches the check off. In tumbling × 5M synthetic events that check
was 25 % of the executors' JVM samples (Java Flight Recorder; ``docs/architecture.md``).
Batches stay bounded by ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000 rows). A
session that sets the limit itself keeps it.
"""


CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_FILE_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                      "FileSystemBasedCheckpointFileManager")
"""The checkpoint file manager a flow's query starts with when its checkpoint is local.

Spark's default, ``FileContextBasedCheckpointFileManager``, commits each checkpoint file
(every epoch's offset and commit log entries, each state store partition's RocksDB changelog)
by writing a temporary file and renaming it with Hadoop's ``FileContext.rename``. On the local
file system, without Hadoop's native library (a pip-installed PySpark has none), that rename
asks for the link status of the file and of its checksum file, source and target, and Hadoop
answers each question by running a ``readlink`` process: four processes per file, about 36
per epoch of a flow with one stateful operator over two shuffle partitions (Java Flight
Recorder's ``jdk.ProcessStart`` events: 616 ``readlink`` processes in the 18 epochs of the
flights job). ``FileSystemBasedCheckpointFileManager`` renames with ``FileSystem.rename``, a
``rename(2)`` on the local file system, atomic there as on HDFS. The flights job's steady epoch
went from 1,302 to 901 ms (``docs/architecture.md``). Where a rename is not atomic (object
stores), both managers are alike; Wire sets this one only for a checkpoint on the local file
system, and only for the query's start."""

class SessionConf(Protocol):
    """What :func:`apply_query_conf` uses of a session's ``spark.conf`` (PySpark's ``RuntimeConfig``)."""

    def get(self, key: str) -> str | None:
        """The session's value of ``key`` (raises for a setting with neither a value nor a default)."""

    def set(self, key: str, value: str) -> None:
        """Set ``key`` on the session."""

    def unset(self, key: str) -> None:
        """Give ``key`` back its default."""


@contextlib.contextmanager
def checkpoint_files_conf(conf: SessionConf, checkpoint: str) -> Iterator[None]:
    """Start a query on a local ``checkpoint`` with :data:`LOCAL_FILE_MANAGER` (unless the session set one).

    Spark reads the manager class when the query starts (its offset and commit logs) and from
    the query's clone of the session (each epoch's state stores), so the session gets its
    setting back as soon as ``start()`` returned: a later query of the user's on the session
    is not affected. A session that sets ``spark.sql.streaming.checkpointFileManagerClass``
    itself, or a checkpoint elsewhere than on the local file system, changes nothing.
    """
    if not is_local_checkpoint(checkpoint) or _session_value(conf, CHECKPOINT_FILE_MANAGER) is not None:
        yield
        return
    conf.set(CHECKPOINT_FILE_MANAGER, LOCAL_FILE_MANAGER)
    try:
        yield
    finally:
        conf.unset(CHECKPOINT_FILE_MANAGER)


def _session_value(conf: SessionConf, key: str) -> str | None:
    """``conf.get(key)``, or None for a setting Spark has no value for (it raises then)."""
    try:
        return conf.get(key)
    except SparkNoSuchElementException:
        return None


def apply_query_conf(conf: SessionConf) -> None:
    """Set :data:`QUERY_CONF`, and each :data:`QUERY_DEFAULTS` setting the session left at Spark's default."""
    for key, value in QUERY_CONF.items():
        conf.set(key, value)
    for key, value in QUERY_DEFAULTS.items():
        if conf.get(key) == SPARK_DEFAULTS[key]:
            conf.set(key, value)


FUSION = "spark.wire.fusion.enabled"
"""Session setting: ``"true"`` (the default when unset) or ``"false"``. True: a window that reads
a source through filters only runs its pre-stage in the source's tasks (:mod:`wire.compiler.fusion`);
false: every window compiles to its two Spark stages (the same results; ``docs/operating.md``)."""


def fusion_enabled(conf: SessionConf) -> bool:
    """The session's :data:`FUSION` setting (unset: True).

    Raises
    ------
    ConfigError
        When it is set to anything but ``"true"`` or ``"false"`` (any case).
    """
    value = _session_value(conf, FUSION)
    if value is None:
        return True
    setting = value.strip().lower()
    if setting not in ("true", "false"):
        raise ConfigError(FUSION, value, '"true" or "false"')
    return setting == "true"
