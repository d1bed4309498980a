"""``Stream.as_table`` / ``Stream.temporal_join``: the plan they record and the errors at build time.

Expected nodes, fingerprints and messages are written by hand from the API's docstrings
and :func:`wire.plan.fingerprint.incompatible_changes` (a temporal join is stateful: its
key, delete column, ``how`` and inputs must not change on a checkpoint).
"""

from __future__ import annotations

import pytest

import wire
from wire.api.joins import VersionedTable
from wire.errors import ConfigError, PlanError
from wire.plan.fingerprint import incompatible_changes, plan_fingerprint
from wire.plan.graph import graph_of, key_of
from wire.plan.nodes import LATE, TemporalJoinNode


def _flow(tmp, how="inner", delete="gone", on="cur"):
    flow = wire.Flow("orders")
    orders = flow.source(wire.sources.files(str(tmp / "orders"), format="jsonl"), event_time="t",
                         name="orders")
    rates = flow.source(wire.sources.files(str(tmp / "rates"), format="jsonl"), event_time="t",
                        name="rates")
    table = rates.as_table(key="currency", delete=delete)
    joined = orders.temporal_join(table, on=on, how=how, name="priced")
    joined.sink(wire.sinks.parquet(str(tmp / "out")), name="out")
    return flow, orders, table, joined


def test_the_join_records_one_node_with_both_inputs(tmp_path):
    flow, _, table, joined = _flow(tmp_path)
    assert isinstance(table, VersionedTable) and not isinstance(table, wire.Stream)
    node = flow.plan().node("priced")
    assert node == TemporalJoinNode("priced", "orders", "rates", "cur", "currency", "gone", "inner")
    assert node.inputs() == ("orders", "rates") and node.side_ports() == (LATE,)
    assert key_of(flow.plan(), "priced") == "cur"
    assert joined.late().ref.port == LATE
    graph = graph_of(flow.plan())
    assert {"step": "priced", "kind": "temporal_join", "detail": "orders x table rates on cur, inner"} \
        in graph["nodes"]
    assert {"source": "rates", "target": "priced", "port": "out"} in graph["edges"]


def test_default_step_id_counts_temporal_joins(tmp_path):
    flow = wire.Flow("f")
    s = flow.source(wire.sources.files(str(tmp_path), format="jsonl"), event_time="t")
    joined = s.temporal_join(s.as_table(key="k"), on="k")
    assert joined.ref.step == "temporal_join_1"


def test_fingerprint_records_the_join_and_refuses_changes(tmp_path):
    fp = plan_fingerprint(_flow(tmp_path)[0].plan())
    assert fp["priced"] == {"kind": "temporal_join", "on": "cur", "table_key": "currency", "delete": "gone",
                            "how": "inner", "stream_sources": ["orders"], "table_sources": ["rates"]}
    changed = plan_fingerprint(_flow(tmp_path, how="left")[0].plan())
    assert incompatible_changes(fp, changed) == ["step 'priced' changed: how inner -> left"]
    changed = plan_fingerprint(_flow(tmp_path, delete=None)[0].plan())
    assert incompatible_changes(fp, changed) == ["step 'priced' changed: delete gone -> None"]


def test_bad_how_names_the_parameter_and_the_accepted_values(tmp_path):
    with pytest.raises(ConfigError, match=r"^invalid how='outer'; accepted: 'inner' or 'left'$"):
        _flow(tmp_path, how="outer")


def test_a_table_of_another_flow_or_a_stream_is_refused(tmp_path):
    _, orders, _, _ = _flow(tmp_path)
    other = wire.Flow("other")
    rates = other.source(wire.sources.files(str(tmp_path), format="jsonl"), event_time="t")
    with pytest.raises(ConfigError, match=r"invalid table=.*a versioned table of the same flow"):
        orders.temporal_join(rates.as_table(key="cur"), on="cur")
    with pytest.raises(ConfigError, match=r"invalid table=.*stream\.as_table"):
        orders.temporal_join(rates, on="cur")  # type: ignore[arg-type]


def test_bad_key_delete_or_on_are_refused(tmp_path):
    flow, orders, table, _ = _flow(tmp_path)
    with pytest.raises(ConfigError, match="invalid key=''"):
        orders.as_table(key="")
    with pytest.raises(ConfigError, match="invalid delete=3; accepted: a column name or None"):
        orders.as_table(key="cur", delete=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid on=None"):
        orders.temporal_join(table, on=None)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="dead-letter output"):
        flow.dead_letters().as_table(key="cur")
