"""``Stream.process`` when the flow is built: configuration errors, the plan, fingerprint, graph."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.examples.process_examples import Dedupe
from wire.plan.fingerprint import incompatible_changes, plan_fingerprint
from wire.plan.graph import graph_of
from wire.plan.nodes import LATE, PortRef, ProcessNode

OUT = pa.schema([("k", pa.string()), ("event_time", pa.int64())])


def nothing(ctx, events):
    return None


def source(flow: wire.Flow, key: str | None = "k") -> wire.Stream:
    return flow.source(wire.sources.files("in", format="jsonl"), event_time="t", key=key, name="src")


@pytest.mark.parametrize(("kwargs", "parameter"), [
    ({"on_events": "nope", "schema": OUT}, "on_events"),
    ({"on_events": nothing, "schema": OUT, "on_timer": 3}, "on_timer"),
    ({"on_events": nothing, "schema": pa.schema([("k", pa.string())])}, "schema"),
    ({"on_events": nothing, "schema": pa.schema([("event_time", pa.string())])}, "schema"),
    ({"on_events": nothing, "schema": {"event_time": "int64"}}, "schema"),
    ({"on_events": nothing, "schema": OUT, "state": {"s": pa.int64()}}, "state"),
])
def test_invalid_configuration_names_the_parameter(kwargs, parameter):
    flow = wire.Flow("p")
    with pytest.raises(wire.ConfigError) as e:
        source(flow).process(**kwargs)
    assert e.value.parameter == parameter


def test_an_unkeyed_stream_is_refused_and_key_by_fixes_it():
    flow = wire.Flow("p")
    s = source(flow, key=None)
    with pytest.raises(wire.ConfigError, match="key_by") as e:
        s.process(nothing, schema=OUT)
    assert e.value.parameter == "key"
    keyed = s.key_by("k").process(nothing, schema=OUT, name="proc")
    assert keyed.ref == PortRef("proc")
    assert keyed.late().ref == PortRef("proc", LATE)


def test_plan_fingerprint_and_graph():
    def build(within_ms: int) -> wire.Flow:
        flow = wire.Flow("p")
        fn = Dedupe(within_ms=within_ms)
        out = source(flow).process(fn.on_events, on_timer=fn.on_timer, state=fn.state,
                                   schema=fn.schema(pa.schema([("k", pa.string())])), name="dd")
        out.sink(wire.sinks.parquet("out"), name="sink")
        return flow

    plan = build(10).plan()
    node = plan.node("dd")
    assert isinstance(node, ProcessNode) and node.states[0][0] == "last_seen"
    fp = plan_fingerprint(plan)["dd"]
    assert fp["kind"] == "process" and fp["key"] == "k"
    assert fp["state"] == {"last_seen": "value_state(int64)"}
    assert fp["schema"] == ["k: string", "event_time: int64"]
    assert "within_ms=10" in fp["on_events"]
    changes = incompatible_changes(plan_fingerprint(plan), plan_fingerprint(build(20).plan()))
    assert len(changes) == 1 and changes[0].startswith("step 'dd' changed: on_events")
    kinds = {n["step"]: (n["kind"], n["detail"]) for n in graph_of(plan)["nodes"]}
    assert kinds["dd"] == ("process", "Dedupe.on_events, Dedupe.on_timer; state last_seen")
