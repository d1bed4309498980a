"""A lookup join whose PostgreSQL server stops mid-run: the epoch holds and retries, then fails clearly."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from tests.e2e.test_lookup_join_flow import EPOCHS, V0, AfterEpoch, expected, got, script

import wire
from wire.testing.postgres import PostgresServer

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def server():
    ok, reason = PostgresServer.available()
    if not ok:
        pytest.skip(f"no throw-away PostgreSQL server: {reason}")
    pg = PostgresServer().start()
    yield pg
    pg.stop()


def customers(dsn: str) -> str:
    name = f"customers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id int4 PRIMARY KEY, name text, credit numeric(10, 2))")
        for k, (n, c) in V0.items():
            conn.execute(f"INSERT INTO {name} VALUES (%s, %s, %s)", (k, n, c))
    return name


def test_an_outage_shorter_than_the_timeout_holds_the_epoch_and_loses_nothing(spark, server):
    name = customers(server.dsn)
    table = wire.tables.postgres(server.dsn, name, key="id", columns=["name", "credit"],
                                 unavailable_timeout="120s")
    resumed = threading.Event()

    def outage(epoch: int) -> None:
        if epoch == 0:  # the server goes down before epoch 1 reads it, and is back 4 s later
            server.halt()
            threading.Timer(4.0, lambda: (server.resume(), resumed.set())).start()

    out = script().run(lambda orders: (orders.sink(AfterEpoch(hook=outage), name="hook"), orders.lookup_join(
        table, on="customer", how="left", cache_ttl=0, name="enrich"))[1], spark=spark, key_groups=2)
    assert resumed.is_set()
    assert got(out["main"], ["name", "credit"]) == expected([V0] * len(EPOCHS), ["name", "credit"], "left")


def test_an_outage_past_the_timeout_fails_the_flow_naming_the_step_and_the_table(spark, server):
    name = customers(server.dsn)
    table = wire.tables.postgres(server.dsn, name, key="id", unavailable_timeout="3s")

    def outage(epoch: int) -> None:
        if epoch == 0:
            server.halt()

    with pytest.raises(wire.WireError) as failed:
        script().run(lambda orders: (orders.sink(AfterEpoch(hook=outage), name="hook"), orders.lookup_join(
            table, on="customer", cache_ttl=0, name="enrich"))[1], spark=spark, key_groups=2)
    chain, e = [], failed.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    text = "\n".join(chain)
    assert "TableUnavailable" in text
    assert f"lookup join 'enrich': postgres table '{name}' (host=127.0.0.1 port={server.port}" in text
    assert "unavailable for 3000 ms" in text
