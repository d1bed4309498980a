"""Arrow's memory pool (wire.runtime.arrow_memory): jemalloc, else the system allocator, in the
driver and in Spark's Python workers of a session Wire creates; the user's choice wins."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from wire.runtime import arrow_memory
from wire.runtime.session import session_settings


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


EXPECTED = "jemalloc" if _has_jemalloc() else "system"


def test_the_backend_is_jemalloc_else_system_and_the_users_choice_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(arrow_memory.ENV, raising=False)
    assert arrow_memory.backend() == EXPECTED
    monkeypatch.setenv(arrow_memory.ENV, "mimalloc")
    assert arrow_memory.backend() == "mimalloc"
    before = pa.default_memory_pool()
    assert arrow_memory.use_in_driver() == "mimalloc"  # the user's: nothing changes
    assert pa.default_memory_pool().backend_name == before.backend_name
    assert session_settings()[f"spark.executorEnv.{arrow_memory.ENV}"] == "mimalloc"
    assert session_settings({f"spark.executorEnv.{arrow_memory.ENV}": "system"})[
        f"spark.executorEnv.{arrow_memory.ENV}"] == "system"


def test_without_a_choice_the_driver_sets_the_pool_and_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(arrow_memory.ENV, raising=False)
    before = pa.default_memory_pool()
    try:
        assert arrow_memory.use_in_driver() == EXPECTED
        assert pa.default_memory_pool().backend_name == EXPECTED
        assert os.environ[arrow_memory.ENV] == EXPECTED
    finally:
        pa.set_memory_pool(before)


@pytest.mark.spark
def test_spark_python_workers_of_the_session_allocate_from_the_backend(spark: object) -> None:
    """The session Wire creates (the test session's): its executors' Python workers use the pool."""
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)

    def backends(batches):  # type: ignore[no-untyped-def]
        import pyarrow

        for _ in batches:
            yield pyarrow.RecordBatch.from_pylist([{"b": pyarrow.default_memory_pool().backend_name}])

    got = {r["b"] for r in spark.range(2, numPartitions=2).mapInArrow(backends, "b string").collect()}
    assert got == {EXPECTED}
