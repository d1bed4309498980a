"""Stream.lookup_join and wire.tables: the plan node, and bad configuration refused when built."""

from __future__ import annotations

import pytest

import wire
from wire.plan.fingerprint import incompatible_changes, plan_fingerprint
from wire.plan.graph import graph_of
from wire.plan.nodes import LookupJoinNode


def orders(flow_id="f"):
    flow = wire.Flow(flow_id)
    return flow, flow.source(wire.sources.files("in/*.parquet", format="parquet"), event_time="t", key="c")


PG = dict(dsn="host=127.0.0.1 port=1 dbname=shop", table="customers", key="id")


def test_the_node_records_the_join_and_the_cache_settings_in_ms():
    flow, s = orders()
    out = s.lookup_join(wire.tables.postgres(**PG), on="c", how="left", cache_ttl="5m", cache_size=10,
                        name="enrich")
    node = flow.plan().node("enrich")
    assert isinstance(node, LookupJoinNode)
    assert (node.on, node.how, node.cache_ttl_ms, node.cache_size) == ("c", "left", 300_000, 10)
    out.sink(wire.sinks.console())
    kinds = {n["step"]: (n["kind"], n["detail"]) for n in graph_of(flow.plan())["nodes"]}
    assert kinds["enrich"] == ("lookup_join", "postgres table 'customers' (host=127.0.0.1 port=1 "
                                              "dbname=shop) on c (left)")
    defaults = s.lookup_join(wire.tables.parquet("t.parquet", key="id"), on="c")
    node = flow.plan().node(defaults.ref.step)
    assert (node.step, node.how, node.cache_ttl_ms, node.cache_size) == ("lookup_join_1", "inner", 60_000,
                                                                         100_000)


def test_a_lookup_join_keeps_no_state_so_a_checkpoint_survives_a_changed_table_or_cache():
    def fingerprint(table, ttl):
        flow, s = orders()
        s.lookup_join(table, on="c", cache_ttl=ttl, name="enrich").window(wire.Tumbling("1m")).aggregate(
            n=wire.count(), name="per_minute").sink(wire.sinks.console(), name="out")
        return plan_fingerprint(flow.plan())

    before = fingerprint(wire.tables.postgres(**PG), "1m")
    after = fingerprint(wire.tables.postgres(**{**PG, "table": "clients"}), "0s")
    assert "enrich" not in before
    assert incompatible_changes(before, after) == []
    assert before["per_minute"]["key"] == "c"  # the join keeps the stream's key


@pytest.mark.parametrize(("kwargs", "parameter", "accepted"), [
    ({"how": "right"}, "how", "'inner' or 'left'"),
    ({"on": ""}, "on", "the name of the stream's column"),
    ({"cache_ttl": "-1s"}, "cache_ttl", "a non-negative duration"),
    ({"cache_size": -1}, "cache_size", "an int >= 0"),
    ({"cache_size": 1.5}, "cache_size", "an int >= 0"),
])
def test_bad_join_settings_name_the_parameter(kwargs, parameter, accepted):
    _, s = orders()
    with pytest.raises(wire.ConfigError, match=rf"invalid {parameter}=.*accepted: .*{accepted}"):
        s.lookup_join(wire.tables.postgres(**PG), **{"on": "c", **kwargs})


@pytest.mark.parametrize("parameter", ["cache_ttl", "cache_size"])
def test_a_snapshot_table_takes_no_cache_settings(parameter):
    _, s = orders()
    with pytest.raises(wire.ConfigError, match=rf"invalid {parameter}=.*None for a snapshot table "
                                               r"\(delta table 'd'"):
        s.lookup_join(wire.tables.delta("d", key="id"), on="c", **{parameter: 5})


def test_the_table_must_come_from_wire_tables():
    _, s = orders()
    with pytest.raises(wire.ConfigError, match=r"invalid table='customers'; accepted: a table from wire"):
        s.lookup_join("customers", on="c")


@pytest.mark.parametrize(("make", "parameter", "accepted"), [
    (lambda: wire.tables.postgres("", "t", key="id"), "dsn", "a libpq connection string"),
    (lambda: wire.tables.postgres("host=x", "a b", key="id"), "table", "a table name, 'name' or 'schema"),
    (lambda: wire.tables.postgres("host=x", "t", key=""), "key", "the name of the table's key column"),
    (lambda: wire.tables.postgres("host=x", "t", key="id", columns="name"), "columns", "None .*or a list"),
    (lambda: wire.tables.postgres("host=x", "t", key="id", columns=["a", "a"]), "columns", "distinct"),
    (lambda: wire.tables.postgres("host=x", "t", key="id", unavailable_timeout=0), "unavailable_timeout",
     "a positive duration"),
    (lambda: wire.tables.parquet("", key="id"), "path", "a path"),
    (lambda: wire.tables.delta("d", key="id", columns=["id"]), "columns", "other than the key 'id'"),
])
def test_bad_table_settings_name_the_parameter(make, parameter, accepted):
    with pytest.raises(wire.ConfigError, match=rf"invalid {parameter}=.*accepted: .*{accepted}"):
        make()


def test_the_postgres_table_repr_and_description_leave_out_the_password():
    t = wire.tables.postgres("host=db port=5432 user=u password=secret dbname=shop", "s.customers", key="id")
    assert "secret" not in repr(t) and "secret" not in t.describe()
    assert t.describe() == "postgres table 's.customers' (host=db port=5432 dbname=shop)"
