"""Which windows run their pre-stage in their source's tasks (``wire.compiler.fusion``), with what.

The rules are the module's: ``source → filter* → window``, each read by one step and no
sink, filters that translate exactly, a window that pre-aggregates before the shuffle, a
key Python can hash as Spark does. The results of fused flows are checked against unfused
runs and a pandas oracle in ``tests/e2e/test_fused_window_flow.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.compiler.fusion import find_fusions
from wire.compiler.plan_compiler import compile_plan
from wire.examples.nexmark_source import NexmarkSource
from wire.runtime.rescale import explain, parse_operator_ids
from wire.testing import MemorySink

pytestmark = pytest.mark.spark


class _Uncapable(NexmarkSource):
    """The Nexmark generator without the ``pre_stage`` capability (as a connector that lacks it)."""

    capabilities = frozenset({"columns", "predicate"})

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("n", pa.int32()), ("v", pa.float64()),
                    ("w", pa.float64()), ("note", pa.string())])


def _flow(tmp_path, key: str | None = "k", schema: pa.Schema = SCHEMA):
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "a.csv").write_text(",".join(schema.names) + "\n")
    flow = wire.Flow("fusion")
    source = wire.sources.files(str(tmp_path / "in" / "*.csv"), format="csv", schema=schema)
    return flow, flow.source(source, event_time="t", key=key, name="events")


def _window(stream, **kw):
    return stream.window(wire.Tumbling(10)).aggregate(name="win", c=wire.count(), s=wire.sum("v"), **kw)


def test_a_window_reading_a_source_through_filters_is_fused_with_one_exact_predicate(spark, tmp_path):
    flow, events = _flow(tmp_path)
    _window(events.filter("v > 0", name="f1").filter("k IN ('a', 'b') AND n IS NOT NULL", name="f2")) \
        .sink(MemorySink(), name="out")
    events.dead_letters().sink(MemorySink(), name="dead")  # side ports do not count
    fusion = find_fusions(spark, flow.plan(), 4)["events"]
    assert (fusion.filters, fusion.window) == (("f1", "f2"), "win")
    assert (fusion.key, fusion.key_type) == ("k", "string")
    assert fusion.predicate == [
        "and", ["cmp", ">", ["col", "v"], ["lit", 0.0]],
        ["and", ["in", ["col", "k"], ["a", "b"]], ["isnotnull", ["col", "n"]]]]
    # the late port is kept by the runner, not read by a user sink: only what the window and filters read
    assert fusion.columns == ("t", "k", "n", "v")


def test_a_read_late_port_keeps_every_column(spark, tmp_path):
    flow, events = _flow(tmp_path)
    win = _window(events)
    win.sink(MemorySink(), name="out")
    win.late().sink(MemorySink(), name="late")
    assert find_fusions(spark, flow.plan(), 4)["events"].columns is None


@pytest.mark.parametrize("branch", [
    "a filter that does not translate",
    "an AND translated on one side only",
    "a sink on the filter",
    "a second reader of the source",
    "a projection before the window",
    "a floating point key",
])
def test_what_stops_a_fusion(spark, tmp_path, branch):
    flow, events = _flow(tmp_path, key="v" if branch == "a floating point key" else "k")
    if branch == "a filter that does not translate":
        _window(events.filter("upper(k) = 'A'")).sink(MemorySink())
    elif branch == "an AND translated on one side only":
        _window(events.filter("v > 0 AND upper(k) = 'A'")).sink(MemorySink())
    elif branch == "a sink on the filter":
        kept = events.filter("v > 0", name="f")
        _window(kept).sink(MemorySink())
        kept.sink(MemorySink(), name="raw")
    elif branch == "a second reader of the source":
        _window(events).sink(MemorySink())
        events.filter("v < 0").sink(MemorySink(), name="neg")
    elif branch == "a projection before the window":
        _window(events.select("t", "k", "v")).sink(MemorySink())
    else:
        _window(events).sink(MemorySink())
    assert find_fusions(spark, flow.plan(), 4) == {}


def test_an_unkeyed_window_and_an_integer_key_are_fused(spark, tmp_path):
    flow, events = _flow(tmp_path, key=None)
    _window(events).sink(MemorySink())
    assert find_fusions(spark, flow.plan(), 4)["events"].key_type == "int"
    flow, events = _flow(tmp_path, key="n")
    _window(events).sink(MemorySink())
    assert find_fusions(spark, flow.plan(), 4)["events"].key_type == "int"


def test_key_by_steps_are_followed_and_the_last_ones_column_is_the_key(spark, tmp_path):
    """``filter → key_by → filter → key_by → window``: one fusion, keyed by the last key_by."""
    flow, events = _flow(tmp_path, key=None)
    _window(events.filter("v > 0", name="f1").key_by("n", name="kb1").filter("k = 'a'", name="f2")
            .key_by("k", name="kb2")).sink(MemorySink())
    fusion = find_fusions(spark, flow.plan(), 4)["events"]
    assert (fusion.filters, fusion.key_bys) == (("f1", "f2"), ("kb1", "kb2"))
    assert (fusion.key, fusion.key_type) == ("k", "string")
    compiled = compile_plan(flow.plan(), spark, 4)
    assert compiled.state_keys == {"win": "k"} and compiled.state_key_types == {"win": "string"}
    flow, events = _flow(tmp_path, key=None)  # a key_by on a floating point column: not fused
    _window(events.key_by("v")).sink(MemorySink())
    assert find_fusions(spark, flow.plan(), 4) == {}


def test_maps_before_the_window_are_computed_in_the_source_task(spark, tmp_path):
    """``filter → map → key_by → window``: the map's column is the key (Nexmark q7's shape)."""
    flow, events = _flow(tmp_path, key=None)
    _window(events.filter("v > 0", name="f").map(all="0", w2="w * 2", name="m").key_by("all", name="kb")) \
        .sink(MemorySink())
    fusion = find_fusions(spark, flow.plan(), 4)["events"]
    assert (fusion.filters, fusion.maps, fusion.key_bys, fusion.key, fusion.key_type) == (
        ("f",), ("m",), ("kb",), "all", "int")
    twice = ["arith", "*", ["col", "w"], ["cast", ["lit", 2, "int32"], "double"], True]
    zero = ("all", ["lit", 0, "int32"], pa.int32())
    assert fusion.operations == (("map", (zero, ("w2", twice, pa.float64()))),)
    assert fusion.columns == ("t", "v", "w")  # the window's, the filter's and what the map reads
    for stop in ("v > 1", None):
        flow, events = _flow(tmp_path, key=None)
        mapped = events.map(all="0" if stop else "upper(k)", name="m")
        _window((mapped.filter(stop) if stop else mapped).key_by("all")).sink(MemorySink())
        assert find_fusions(spark, flow.plan(), 4) == {}  # a filter after a map; a function


def test_a_case_when_map_is_computed_in_the_source_task(spark, tmp_path):
    """Nexmark q8's shape: ``filter → map(CASE WHEN ...) → key_by → window``; a CASE whose value
    could raise (checked ``+``) is not computed in the task, so the window is not fused."""
    flow, events = _flow(tmp_path, key=None)
    _window(events.filter("v > 0", name="f").map(c="CASE WHEN k = 'a' THEN w ELSE v END", name="m")
            .key_by("k", name="kb")).sink(MemorySink())
    fusion = find_fusions(spark, flow.plan(), 4)["events"]
    assert (fusion.maps, fusion.key) == (("m",), "k")
    case = ["case", [[["cmp", "=", ["col", "k"], ["lit", "a"]], ["col", "w"]]], ["col", "v"], "double"]
    assert fusion.operations == (("map", (("c", case, pa.float64()),)),)
    flow, events = _flow(tmp_path, key=None)
    _window(events.map(c="CASE WHEN k = 'a' THEN n + 1 ELSE 0 END", name="m").key_by("k")).sink(MemorySink())
    assert find_fusions(spark, flow.plan(), 4) == {}


def test_a_source_without_the_capability_is_not_fused(spark):
    flow = wire.Flow("fusion")
    events = flow.source(_Uncapable(events=100), event_time="date_time", key="kind", name="events")
    events.window(wire.Tumbling(10)).aggregate(name="win", c=wire.count()).sink(MemorySink())
    assert find_fusions(spark, flow.plan(), 4) == {}


def test_the_fused_plan_has_no_pre_stage_and_keeps_its_operator_ids(spark, tmp_path):
    """A window of windows: the first is fused, the second is not; rescale finds both operators."""
    flow, events = _flow(tmp_path)
    per10 = _window(events.filter("v > 0"))
    per10.window(wire.Tumbling(20)).aggregate(name="per20", c=wire.sum("c")).sink(MemorySink())
    fused = compile_plan(flow.plan(), spark, 4)
    plain = compile_plan(flow.plan(), spark, 4, fuse=False)
    fused_text, plain_text = explain(fused.dataframe), explain(plain.dataframe)
    assert fused_text.count("MapInArrow wire_keyed_") == 1  # per20's pre-stage only
    assert plain_text.count("MapInArrow wire_keyed_") == 2
    assert "Filter" not in fused_text.split("TransformWithStateInPySpark")[-1]  # the source applies it
    assert parse_operator_ids(fused_text) == parse_operator_ids(plain_text) == {"win": 1, "per20": 0}
    assert fused.state_keys == plain.state_keys and fused.state_key_types == plain.state_key_types
