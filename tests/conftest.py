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


@pytest.fixture(scope="module")
def pg_server() -> Iterator[object]:
    """A throw-away PostgreSQL server on 127.0.0.1 for one test module (skips if none can start)."""
    from wire.errors import WireError
    from wire.testing_pg import PostgresServer

    ok, reason = PostgresServer.available()
    if not ok:
        pytest.skip(f"no throw-away PostgreSQL server: {reason}")
    server = PostgresServer()
    try:
        server.start()
    except WireError as e:
        pytest.skip(f"throw-away PostgreSQL server did not start: {e}")
    yield server
    server.stop()
