"""The settings a flow's query starts with (``wire.runtime.query_conf``)."""

from __future__ import annotations

import pytest
from pyspark.errors import SparkNoSuchElementException

from wire.runtime.checkpoint_files import is_local_checkpoint
from wire.runtime.query_conf import (
    ARROW_BATCH_BYTES,
    CHECKPOINT_FILE_MANAGER,
    LOCAL_FILE_MANAGER,
    QUERY_CONF,
    QUERY_DEFAULTS,
    SPARK_DEFAULTS,
    apply_query_conf,
    checkpoint_files_conf,
)


class Conf:
    """A session's ``spark.conf``: the values set, else Spark's default rendering."""

    def __init__(self, **values: str) -> None:
        self.values = {k.replace("_", "."): v for k, v in values.items()}

    def get(self, key: str) -> str | None:
        return self.values.get(key, SPARK_DEFAULTS.get(key))

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class UnsetRaises(Conf):
    """Like PySpark's ``spark.conf.get`` for a setting without a default: unset raises."""

    def get(self, key: str) -> str | None:
        if key not in self.values and key not in SPARK_DEFAULTS:
            raise SparkNoSuchElementException(message=f"[SQL_CONF_NOT_FOUND] {key}")
        return super().get(key)


def test_spark_defaults_become_wires_and_forced_settings_are_set():
    conf = Conf()
    apply_query_conf(conf)
    assert conf.values[ARROW_BATCH_BYTES] == "2147483647"  # Spark's per-row size check off
    for key, value in QUERY_CONF.items():
        assert conf.values[key] == value


def test_a_sessions_own_arrow_batch_limit_is_kept():
    conf = Conf()
    conf.set(ARROW_BATCH_BYTES, "64MB")  # the user's own, even if equal in bytes to Spark's default
    apply_query_conf(conf)
    assert conf.values[ARROW_BATCH_BYTES] == "64MB"


@pytest.mark.usefixtures("spark")
def test_sparks_rendering_of_the_default_is_the_one_expected(spark):
    """If Spark rendered its default differently, Wire's value would silently never apply."""
    for key in QUERY_DEFAULTS:
        spark.conf.unset(key)
        assert spark.conf.get(key) == SPARK_DEFAULTS[key]
    apply_query_conf(spark.conf)
    assert spark.conf.get(ARROW_BATCH_BYTES) == "2147483647"


@pytest.mark.parametrize("path", ["/tmp/ck", "relative/ck", "file:///tmp/ck", "FILE:/tmp/ck", "C:\\ck"])
def test_local_checkpoints(path):
    assert is_local_checkpoint(path)


@pytest.mark.parametrize("path", ["s3a://bucket/ck", "hdfs://nn:8020/ck", "abfss://c@a.dfs.core.windows.net/ck"])
def test_checkpoints_elsewhere(path):
    assert not is_local_checkpoint(path)


def test_a_local_checkpoint_starts_with_renames_and_the_session_gets_its_setting_back():
    conf = UnsetRaises()
    with checkpoint_files_conf(conf, "/tmp/ck"):
        assert conf.values[CHECKPOINT_FILE_MANAGER] == LOCAL_FILE_MANAGER
    assert CHECKPOINT_FILE_MANAGER not in conf.values


def test_the_setting_is_restored_when_the_start_fails():
    conf = UnsetRaises()
    with pytest.raises(RuntimeError), checkpoint_files_conf(conf, "/tmp/ck"):
        raise RuntimeError("start() failed")
    assert CHECKPOINT_FILE_MANAGER not in conf.values


@pytest.mark.parametrize("own", [True, False])
def test_a_sessions_own_manager_or_a_remote_checkpoint_changes_nothing(own):
    conf = UnsetRaises()
    if own:
        conf.set(CHECKPOINT_FILE_MANAGER, "com.example.Mine")
    with checkpoint_files_conf(conf, "/tmp/ck" if own else "s3a://bucket/ck"):
        assert conf.values.get(CHECKPOINT_FILE_MANAGER) == ("com.example.Mine" if own else None)
    assert conf.values.get(CHECKPOINT_FILE_MANAGER) == ("com.example.Mine" if own else None)


@pytest.mark.spark
def test_a_flows_query_commits_its_checkpoint_by_rename_and_the_session_is_left_as_it_was(
        spark, small_window_flow, tmp_path):
    """The offset log of the running query has the manager; the session has no setting after start()."""
    running = small_window_flow.start(str(tmp_path / "ck"), spark=spark)
    try:
        manager = running.query._jsq.streamingQuery().offsetLog().fileManager()
        assert manager.getClass().getName() == LOCAL_FILE_MANAGER
        assert spark.conf.get(CHECKPOINT_FILE_MANAGER, None) is None
        summary = running.await_termination()
    finally:
        running.stop()
    assert summary.rows_written  # the run committed its epochs through that manager
