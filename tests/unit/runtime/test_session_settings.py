"""The settings of a session Wire creates, so that a long run's JVM does not grow (issue 26 item 15).

The soak (bench/soak.py) found the JVM's committed heap growing with Java's default G1
sizing (GCTimeRatio=12, Min/MaxHeapFreeRatio=40/70) while its live data stayed small, and
the live heap growing with the status store's 1,000 retained SQL executions (UI off).
Since issue 25 the collector is the parallel one (less CPU in a short run, a smaller heap
in the soak), with the same sizing flags.
"""

from __future__ import annotations

import time

import pytest

from wire.runtime import arrow_memory
from wire.runtime.session import DEFAULT_CONF, session_settings

KEY = "spark.driver.extraJavaOptions"
COLLECTOR = ["-XX:+UseParallelGC", "-XX:AdaptiveSizePolicyWeight=90"]
WIRE_FLAGS = [*COLLECTOR, "-XX:GCTimeRatio=4", "-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=30",
              "-XX:Tier4InvocationThreshold=20000", "-XX:Tier4MinInvocationThreshold=2400",
              "-XX:Tier4CompileThreshold=60000", "-XX:Tier4BackEdgeThreshold=160000"]


def test_wire_sets_the_collector_and_its_heap_sizing_flags():
    assert session_settings()[KEY].split() == WIRE_FLAGS


@pytest.mark.parametrize("chosen", ["-XX:+UseG1GC", "-XX:+UseSerialGC", "-XX:+UseZGC"])
def test_a_collector_the_caller_chooses_replaces_wires(chosen):
    flags = session_settings({KEY: f"-Dwire.test=1 {chosen}"})[KEY].split()
    assert flags == [*WIRE_FLAGS[len(COLLECTOR):], "-Dwire.test=1", chosen]


def test_the_callers_java_options_come_after_wires_so_they_win():
    settings = session_settings({KEY: "-Dwire.test=1 -XX:GCTimeRatio=9"})
    assert settings[KEY].split() == [*WIRE_FLAGS, "-Dwire.test=1", "-XX:GCTimeRatio=9"]


def test_the_class_archive_options_come_first_and_the_callers_last():
    settings = session_settings({KEY: "-Dwire.test=1"}, archive="-XX:SharedArchiveFile=/a.jsa")
    assert settings[KEY].split() == ["-XX:SharedArchiveFile=/a.jsa", *WIRE_FLAGS, "-Dwire.test=1"]


def test_other_settings_are_the_defaults_overridden_by_the_caller():
    settings = session_settings({"spark.driver.memory": "2g", "spark.x": "y"})
    assert settings["spark.driver.memory"] == "2g" and settings["spark.x"] == "y"
    pool = f"spark.executorEnv.{arrow_memory.ENV}"  # tests/unit/runtime/test_arrow_memory.py
    assert {k: v for k, v in settings.items() if k not in (KEY, "spark.driver.memory", "spark.x", pool)} == {
        **{k: v for k, v in DEFAULT_CONF.items() if k != "spark.driver.memory"}, **RETENTION}


RETENTION = {"spark.sql.ui.retainedExecutions": "50", "spark.ui.retainedJobs": "50",
             "spark.ui.retainedStages": "50", "spark.ui.retainedTasks": "1000",
             "spark.ui.dagGraph.retainedRootRDDs": "50"}


def test_with_the_ui_off_the_status_store_keeps_little():
    assert DEFAULT_CONF["spark.ui.enabled"] == "false"
    settings = session_settings()
    assert {k: settings[k] for k in RETENTION} == RETENTION


def test_the_callers_retention_wins_and_with_the_ui_on_sparks_defaults_stay():
    key = "spark.sql.ui.retainedExecutions"
    assert session_settings({key: "7"})[key] == "7"
    with_ui = session_settings({"spark.ui.enabled": "true"})
    assert not set(RETENTION) & set(with_ui)


@pytest.mark.spark
def test_the_started_jvm_runs_with_them(spark):
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    flags = {name: bean.getVMOption(name).getValue() for name in
             ("GCTimeRatio", "MinHeapFreeRatio", "MaxHeapFreeRatio", "UseG1GC", "UseParallelGC",
              "TieredStopAtLevel", "Tier4InvocationThreshold", "Tier4CompileThreshold")}
    assert flags == {"GCTimeRatio": "4", "MinHeapFreeRatio": "10", "MaxHeapFreeRatio": "30",
                     "UseG1GC": "false", "UseParallelGC": "true",  # the collector (PARALLEL_GC)
                     "TieredStopAtLevel": "4",  # the JVM's JIT: C2 (docs/architecture.md)
                     "Tier4InvocationThreshold": "20000", "Tier4CompileThreshold": "60000"}  # later C2


@pytest.mark.spark
def test_the_status_store_keeps_at_most_50_sql_executions(spark):
    store = spark._jsparkSession.sharedState().statusStore()
    for i in range(120):  # 120 SQL executions, each recorded by the status listener
        spark.range(i + 1).count()
    deadline = time.monotonic() + 30
    while store.executionsCount() > 50 and time.monotonic() < deadline:
        time.sleep(0.2)  # the store trims asynchronously
    assert 0 < store.executionsCount() <= 50


@pytest.mark.spark
def test_one_worker_daemon_serves_rdd_sql_and_stateful_stages(spark, small_window_flow, tmp_path,
                                                              jvm_children):
    """Spark keys its Python daemons by the workers' environment; Wire's makes them all equal.

    Without ``SPARK_SIMPLIFIED_TRACEBACK`` in the executors' environment, an RDD job and a
    ``transformWithStateInPandas`` stage each got a daemon apart from the SQL stages' one.
    """
    spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: None)  # an RDD job's workers
    summary = small_window_flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)  # every kind of stage
    assert summary.rows_written
    assert len(jvm_children(spark, "-m wire.runtime.daemon")) == 1
