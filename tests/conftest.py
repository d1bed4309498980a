"""Shared fixtures: one local SparkSession per test session (it costs ~7-11 s to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from wire.runtime.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="wire-tests")
    yield session
    session.stop()
