"""The builder records an immutable plan and rejects bad configuration at build time."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

import wire
from wire.core.time import to_millis
from wire.plan.graph import chain_of, outputs_of, sinks
from wire.plan.nodes import FilterNode, PortRef, SinkNode, SourceNode, WindowAggregateNode


def src() -> wire.sources.FileSource:
    return wire.sources.files("in/*.parquet", format="parquet")


def test_durations_convert_once_to_millis():
    assert to_millis("90m", parameter="x") == 5_400_000
    assert to_millis(timedelta(seconds=1.5), parameter="x") == 1500
    assert to_millis(250, parameter="x") == 250
    assert wire.Tumbling("1h").size_ms == 3_600_000
    assert wire.BoundedOutOfOrderness("30m").max_delay_ms == 1_800_000


@pytest.mark.parametrize("bad", ["5 minutes", "-1s", -3, 1.5, True, "1w"])
def test_bad_durations_name_the_parameter(bad):
    with pytest.raises(wire.ConfigError, match=r"invalid allowed_lateness=.*accepted: .*'5m'"):
        wire.Flow("f").source(src(), event_time="t").window(
            wire.Tumbling("1h"), allowed_lateness=bad)


@pytest.mark.parametrize("bad", ["in/*.parquet", None, wire.sinks.console()])
def test_source_needs_a_connector(bad):
    with pytest.raises(wire.ConfigError, match=r"invalid connector=.*accepted: a Wire source connector"):
        wire.Flow("f").source(bad, event_time="t")


def test_zero_window_size_rejected():
    with pytest.raises(wire.ConfigError, match="invalid size=0; accepted: a positive duration"):
        wire.Tumbling(0)


def test_building_records_an_immutable_plan():
    flow = wire.Flow("flight-delays")
    s = flow.source(src(), event_time="t", key="k", watermark=wire.BoundedOutOfOrderness("1m"),
                    max_events_per_epoch=10)
    w = s.filter("x > 1").window(wire.Tumbling("1h"), allowed_lateness="90m").aggregate(
        n=wire.count(), name="hourly")
    w.sink(wire.sinks.console())
    w.late().sink(wire.sinks.console())
    plan = flow.plan()
    kinds = [type(n) for n in plan.nodes]
    assert kinds == [SourceNode, FilterNode, WindowAggregateNode, SinkNode, SinkNode]
    assert plan.node("hourly").allowed_lateness_ms == 5_400_000
    assert sinks(plan)[1].source == PortRef("hourly", "late")
    with pytest.raises(AttributeError):
        plan.node("hourly").allowed_lateness_ms = 1  # frozen
    assert [n.step for n in chain_of(plan)] == ["source_1", "filter_1", "hourly"]


def test_duplicate_step_ids_rejected():
    flow = wire.Flow("f")
    s = flow.source(src(), event_time="t", name="a")
    with pytest.raises(wire.PlanError, match="step id 'a' is used twice"):
        s.filter("x > 1", name="a")


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [({"max_events_per_epoch": 0}, "max_events_per_epoch"),
     ({"watermark": "30m"}, "watermark"),
     ({"key": ""}, "key")],
)
def test_source_parameters_validated(kwargs, param):
    with pytest.raises(wire.ConfigError, match=f"invalid {param}="):
        wire.Flow("f").source(src(), event_time="t", **kwargs)


def test_admission_defaults_to_the_connectors_own():
    flow = wire.Flow("f")
    files = flow.source(src(), event_time="t", name="files")
    kafka = flow.source(wire.sources.kafka("127.0.0.1:9", "t", group="g", schema=pa.schema(
        [("t", pa.int64())])), event_time="t", name="kafka")
    chosen = flow.source(src(), event_time="t", max_events_per_epoch=7, name="chosen")
    for s in (files, kafka, chosen):
        s.sink(wire.sinks.console())
    plan = flow.plan()
    assert [plan.node(n).max_events_per_epoch for n in ("files", "kafka", "chosen")] == [
        100_000, 250_000, 7]


def test_aggregate_requires_aggregators():
    s = wire.Flow("f").source(src(), event_time="t")
    with pytest.raises(wire.ConfigError, match="invalid n="):
        s.window(wire.Tumbling("1m")).aggregate(n="count")


def test_branches_and_intermediate_sinks_compile_but_a_dangling_stream_is_refused():
    flow = wire.Flow("f")
    s = flow.source(src(), event_time="t", name="s")
    s.filter("a > 1", name="f1").sink(wire.sinks.console())
    s.filter("a > 2", name="f2")
    with pytest.raises(wire.PlanError, match=r"\['f2'\] end without a sink"):
        chain_of(flow.plan())
    flow2 = wire.Flow("g")
    s2 = flow2.source(src(), event_time="t", name="s")
    s2.sink(wire.sinks.console())
    s2.filter("a > 1", name="f1").sink(wire.sinks.console())
    s2.filter("a > 2", name="f2").sink(wire.sinks.console())
    plan = flow2.plan()
    # the main stream is the first terminal a sink reads; the others reach it packed
    assert outputs_of(plan, chain_of(plan)) == ("f1", [("s", True), ("f2", True)])


def test_flow_without_sink_is_rejected():
    flow = wire.Flow("f")
    flow.source(src(), event_time="t")
    with pytest.raises(wire.PlanError, match="no sink"):
        chain_of(flow.plan())


def test_late_only_on_windows():
    s = wire.Flow("f").source(src(), event_time="t")
    with pytest.raises(wire.PlanError, match="not a window aggregation"):
        s.late()


def test_join_bounds_and_validation():
    from wire.plan.nodes import IntervalJoinNode

    flow = wire.Flow("f")
    a = flow.source(src(), event_time="t", key="k", name="a")
    b = flow.source(src(), event_time="t", key="k", name="b")
    a.join(b, name="regular")
    node = flow.plan().node("regular")
    assert isinstance(node, IntervalJoinNode)
    assert (node.lower_ms, node.upper_ms) == (-(2**63), 2**63 - 1)  # no time condition
    flow2 = wire.Flow("g")
    c = flow2.source(src(), event_time="t", key="k", name="c")
    d = flow2.source(src(), event_time="t", key="k", name="d")
    c.join(d, within="5s", name="near")
    near = flow2.plan().node("near")
    assert (near.lower_ms, near.upper_ms) == (-5000, 5000)
    with pytest.raises(wire.ConfigError, match="within"):
        c.join(d, within=-1)
    with pytest.raises(wire.ConfigError, match="other"):
        c.join(a)


def test_source_reads_count_one_read_per_path_from_an_output():
    """Hand-derived: Spark repeats a branched stream's lineage in each branch, one offset-log line each."""
    from wire.plan.graph import source_reads
    from wire.runtime.checkpoint import source_count

    linear = wire.Flow("a")
    linear.source(src(), event_time="t", name="s").filter("a > 1").sink(wire.sinks.console())
    assert source_reads(linear.plan()) == {"s": 1}
    branched = wire.Flow("b")
    s = branched.source(src(), event_time="t", name="s")
    f = s.filter("a > 1", name="f")
    f.sink(wire.sinks.console())  # f's own output: one path to s
    f.filter("a > 2", name="g").sink(wire.sinks.console())  # a branch below f: one more
    s.sink(wire.sinks.console())  # the source itself: one more
    assert source_reads(branched.plan()) == {"s": 3}
    assert source_count(branched.plan()) == 3
    joined = wire.Flow("c")
    e = joined.source(src(), event_time="t", key="k", name="e")
    other = joined.source(src(), event_time="t", key="k", name="o")
    e.join(e.union(other, name="u"), name="j").sink(wire.sinks.console())  # e twice, o once
    assert source_reads(joined.plan()) == {"e": 2, "o": 1}


def test_a_redis_stream_may_branch():
    """It is read once per epoch however many branches read it (compiler.branches.read_once)."""
    import pyarrow as pa

    from wire.plan.graph import source_reads

    red = wire.sources.redis_stream("redis://127.0.0.1:1", "s", group="g",
                                    schema=pa.schema([("t", pa.int64())]))
    flow = wire.Flow("r")
    s = flow.source(red, event_time="t", name="red")
    s.sink(wire.sinks.console())
    s.filter("t > 1").sink(wire.sinks.console())
    chain_of(flow.plan())
    assert source_reads(flow.plan()) == {"red": 2}
