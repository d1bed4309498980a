"""The JVM options of a session Wire creates: G1 heap sizing that does not creep (issue 26 item 15).

The soak (bench/soak.py) found the JVM's committed heap growing with Java's default G1
sizing (GCTimeRatio=12, Min/MaxHeapFreeRatio=40/70) while its live data stayed small.
"""

from __future__ import annotations

import pytest

from wire.runtime.session import DEFAULT_CONF, session_settings

KEY = "spark.driver.extraJavaOptions"
WIRE_FLAGS = ["-XX:GCTimeRatio=4", "-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=30"]


def test_wire_sets_the_g1_heap_sizing_flags():
    assert session_settings()[KEY].split() == WIRE_FLAGS


def test_the_callers_java_options_come_after_wires_so_they_win():
    settings = session_settings({KEY: "-Dwire.test=1 -XX:GCTimeRatio=9"})
    assert settings[KEY].split() == [*WIRE_FLAGS, "-Dwire.test=1", "-XX:GCTimeRatio=9"]


def test_other_settings_are_the_defaults_overridden_by_the_caller():
    settings = session_settings({"spark.driver.memory": "2g", "spark.x": "y"})
    assert settings["spark.driver.memory"] == "2g" and settings["spark.x"] == "y"
    assert {k: v for k, v in settings.items() if k not in (KEY, "spark.driver.memory", "spark.x")} == {
        k: v for k, v in DEFAULT_CONF.items() if k != "spark.driver.memory"}


@pytest.mark.spark
def test_the_started_jvm_runs_with_them(spark):
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    flags = {name: bean.getVMOption(name).getValue() for name in
             ("GCTimeRatio", "MinHeapFreeRatio", "MaxHeapFreeRatio", "UseG1GC")}
    assert flags == {"GCTimeRatio": "4", "MinHeapFreeRatio": "10", "MaxHeapFreeRatio": "30",
                     "UseG1GC": "true"}
