"""Plan fingerprints and the rules for resuming a checkpoint with a changed flow.

Every expected fingerprint and every verdict below is written by hand from the rules
in :func:`wire.plan.fingerprint.incompatible_changes` (state and sink targets must not
change; stateless steps and added/removed sinks may).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

import wire
from wire.plan.fingerprint import incompatible_changes, plan_fingerprint, readable
from wire.plan.nodes import Node, Plan


def _acc_create() -> list:
    return []


def _acc_add(acc: list, v: Any) -> list:
    return [*acc, v]


def _acc_merge(a: list, b: list) -> list:
    return a + b


def _acc_result(acc: list) -> int:
    return len(acc)


def _acc_result_v2(acc: list) -> int:
    return len(set(acc))


def build(
    tmp: Any,
    *,
    window: Any = None,
    lateness: Any = "5s",
    emit: str = "final",
    aggs: dict | None = None,
    key: str = "k",
    predicate: str = "x > 0",
    window_name: str = "hourly",
    out: str = "out",
    sink_name: str = "results",
    late_sink: bool = False,
    extra_map: bool = False,
    second_window: bool = False,
    map_before_sink: bool = False,
) -> Plan:
    flow = wire.Flow("orders")
    s = flow.source(wire.sources.files(str(tmp / "in"), format="jsonl"), event_time="t", key="c",
                    name="orders")
    s = s.filter(predicate, name="positive")
    if extra_map:
        s = s.map(y="x * 2", name="doubled")
    s = s.key_by(key, name="by_key")
    w = s.window(window or wire.Tumbling("10s"), allowed_lateness=lateness, emit=emit).aggregate(
        name=window_name, **(aggs or {"n": wire.count(), "total": wire.sum("x")}))
    if second_window:
        w = w.window(wire.Tumbling("1m")).aggregate(name="per_minute", m=wire.count())
    if map_before_sink:
        w = w.map(n2="n * 2", name="twice")
    w.sink(wire.sinks.parquet(str(tmp / out)), name=sink_name)
    if late_sink:
        w.late().sink(wire.sinks.jsonl(str(tmp / "late")), name="late_out")
    return flow.plan()


def test_fingerprint_records_sources_stateful_steps_and_sinks(tmp_path):
    fp = plan_fingerprint(build(tmp_path), checkpoint=tmp_path / "ck")
    assert fp == {
        "orders": {"kind": "source", "connector": "FileSource"},
        "hourly": {
            "kind": "window",
            "key": "k",
            "window": "Tumbling(size=10000 ms)",
            "allowed_lateness_ms": 5000,
            "emit": "final",
            "aggregations": {"n": "Count(column=None)", "total": "Sum(column='x')"},
            "before_update": None,
            "after_update": None,
        },
        "results": {
            "kind": "sink",
            "reads": "hourly.out",
            "sink": {"kind": "ParquetSink", "guarantee": "exactly_once", "path": str(tmp_path / "out")},
        },
    }
    assert json.loads(json.dumps(fp)) == fp  # plain JSON: stored as is in wire.json
    assert plan_fingerprint(build(tmp_path), checkpoint=tmp_path / "ck") == fp  # stable


def test_windows_joins_and_user_functions_are_readable(tmp_path):
    assert readable(wire.Sliding("10s", "2s")) == "Sliding(size=10000 ms, slide=2000 ms)"
    assert readable(wire.Session("30m")) == "Session(gap=1800000 ms)"
    agg = wire.aggregate(create=_acc_create, add=_acc_add, merge=_acc_merge, result=_acc_result,
                         column="x", result_type=pa.int64())
    mod = __name__
    assert readable(agg) == (
        f"UserAggregator(column='x', create_fn={mod}._acc_create, add_fn={mod}._acc_add, "
        f"merge_fn={mod}._acc_merge, result_fn={mod}._acc_result, result_type=int64)")
    flow = wire.Flow("j")
    a = flow.source(wire.sources.files(str(tmp_path / "a"), format="jsonl"), event_time="t",
                    key="id", name="a")
    b = flow.source(wire.sources.files(str(tmp_path / "b"), format="jsonl"), event_time="t",
                    key="id", name="b")
    a.interval_join(b, lower=-1000, upper="2s", allowed_lateness="1s", name="j").sink(
        wire.sinks.console(), name="show")
    fp = plan_fingerprint(flow.plan())
    assert fp["j"] == {"kind": "interval_join", "left_key": "id", "right_key": "id",
                       "left_sources": ["a"], "right_sources": ["b"], "lower_ms": -1000,
                       "upper_ms": 2000, "allowed_lateness_ms": 1000}
    assert fp["show"]["sink"] == {"kind": "ConsoleSink", "guarantee": "at_least_once"}


def test_paths_inside_the_checkpoint_are_relative_to_it(tmp_path):
    flow = wire.Flow("f")
    s = flow.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t")
    s.sink(wire.sinks.parquet(str(tmp_path / "ck" / "kept" / "x")), name="kept")
    fp = plan_fingerprint(flow.plan(), checkpoint=str(tmp_path / "ck"))
    assert fp["kept"]["sink"]["path"] == "<checkpoint>/kept/x"


REFUSED = {
    "window size": (dict(window=wire.Tumbling("7s")),
                    ["step 'hourly' changed: window Tumbling(size=10000 ms) -> Tumbling(size=7000 ms)"]),
    "window kind": (dict(window=wire.Sliding("10s", "5s")),
                    ["step 'hourly' changed: window Tumbling(size=10000 ms) -> "
                     "Sliding(size=10000 ms, slide=5000 ms)"]),
    "allowed lateness": (dict(lateness="1m"),
                         ["step 'hourly' changed: allowed_lateness_ms 5000 -> 60000"]),
    "emission": (dict(emit="update"), ["step 'hourly' changed: emit final -> update"]),
    "aggregation function": (
        dict(aggs={"n": wire.count(), "total": wire.mean("x")}),
        ["step 'hourly' changed: aggregations 'total' Sum(column='x') -> Mean(column='x')"]),
    "aggregation column": (
        dict(aggs={"n": wire.count(), "total": wire.sum("y")}),
        ["step 'hourly' changed: aggregations 'total' Sum(column='x') -> Sum(column='y')"]),
    "aggregation added": (
        dict(aggs={"n": wire.count(), "total": wire.sum("x"), "hi": wire.max("x")}),
        ["step 'hourly' changed: aggregations 'hi' Max(column='x') added"]),
    "key": (dict(key="j"), ["step 'hourly' changed: key k -> j"]),
    "stateful step renamed": (dict(window_name="hourly2"),
                              ["step 'hourly' (window) was removed or renamed",
                               "step 'results' changed: reads hourly.out -> hourly2.out",
                               "step 'hourly2' (window) is new"]),
    "stateful step added": (dict(second_window=True),
                            ["step 'results' changed: reads hourly.out -> per_minute.out",
                             "step 'per_minute' (window) is new"]),
    "sink path": (dict(out="out2"), None),
}


@pytest.mark.parametrize("change", sorted(REFUSED))
def test_changes_of_state_or_sink_targets_are_refused(tmp_path, change):
    kwargs, expected = REFUSED[change]
    old = plan_fingerprint(build(tmp_path), checkpoint=tmp_path / "ck")
    new = plan_fingerprint(build(tmp_path, **kwargs), checkpoint=tmp_path / "ck")
    if expected is None:  # sink path: absolute paths depend on tmp_path
        expected = [f"step 'results' changed: sink path {tmp_path / 'out'} -> {tmp_path / 'out2'}"]
    assert incompatible_changes(old, new) == expected
    assert incompatible_changes(new, old) != []  # and the way back is refused too


ALLOWED = {
    "filter changed": dict(predicate="x > 10"),
    "map added": dict(extra_map=True),
    "map added before the sink": dict(map_before_sink=True),
    "sink added on the late port": dict(late_sink=True),
}


@pytest.mark.parametrize("change", sorted(ALLOWED))
def test_stateless_changes_and_added_or_removed_sinks_are_allowed(tmp_path, change):
    old = plan_fingerprint(build(tmp_path), checkpoint=tmp_path / "ck")
    new = plan_fingerprint(build(tmp_path, **ALLOWED[change]), checkpoint=tmp_path / "ck")
    assert incompatible_changes(old, new) == []
    assert incompatible_changes(new, old) == []  # removing it again is allowed too


def test_sink_kind_port_and_tuning(tmp_path):
    def plan(sink: Any, port: str = "out") -> dict:
        flow = wire.Flow("f")
        s = flow.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t",
                        key="k", name="src")
        w = s.window(wire.Tumbling(10)).aggregate(n=wire.count(), name="w")
        (w if port == "out" else w.late()).sink(sink, name="to")
        return plan_fingerprint(flow.plan())

    base = plan(wire.sinks.webhook("http://127.0.0.1:9/hook", batch_size=500))
    tuned = plan(wire.sinks.webhook("http://127.0.0.1:9/hook", batch_size=10, timeout_s=1.0))
    assert incompatible_changes(base, tuned) == []
    assert incompatible_changes(base, plan(wire.sinks.webhook("http://127.0.0.1:9/other"))) == [
        "step 'to' changed: sink url http://127.0.0.1:9/hook -> http://127.0.0.1:9/other"]
    assert incompatible_changes(base, plan(wire.sinks.webhook("http://127.0.0.1:9/hook"), "late")) == [
        "step 'to' changed: reads w.out -> w.late"]
    assert incompatible_changes(base, plan(wire.sinks.console())) == [
        "step 'to' changed: sink kind WebhookSink -> ConsoleSink; sink url "
        "http://127.0.0.1:9/hook -> None"]
    db = plan(wire.sinks.sqlite(str(tmp_path / "a.db"), table="t", key=("k",)))
    assert incompatible_changes(db, plan(wire.sinks.sqlite(str(tmp_path / "a.db"), table="t",
                                                           key=("k", "window_start")))) == [
        "step 'to' changed: sink key ['k'] -> ['k', 'window_start']"]


def test_passwords_are_not_recorded():
    sink = wire.sinks.postgres("postgresql://wire:s3cret@db.example:5432/app", table="t")
    assert sink.fingerprint()["dsn"] == "postgresql://wire@db.example:5432/app"
    sink = wire.sinks.postgres("host=db.example password=s3cret dbname=app", table="t")
    assert sink.fingerprint()["dsn"] == "host=db.example dbname=app"


def test_sources_cannot_be_added_or_removed(tmp_path):
    def plan(sources: int) -> dict:
        flow = wire.Flow("f")
        streams = [flow.source(wire.sources.files(str(tmp_path / f"in{i}"), format="jsonl"),
                               event_time="t", key="k", name=f"s{i}") for i in range(sources)]
        s = streams[0].union(*streams[1:], name="u") if sources > 1 else streams[0]
        s.sink(wire.sinks.console(), name="show")
        return plan_fingerprint(flow.plan())

    assert incompatible_changes(plan(1), plan(2)) == [
        "step 'show' changed: reads s0.out -> s0+s1.out", "step 's1' (source) is new"]
    assert incompatible_changes(plan(2), plan(1)) == [
        "step 's1' (source) was removed or renamed", "step 'show' changed: reads s0+s1.out -> s0.out"]


def test_join_bounds_and_sides(tmp_path):
    def plan(lower: int, swap: bool = False) -> dict:
        flow = wire.Flow("j")
        a = flow.source(wire.sources.files(str(tmp_path / "a"), format="jsonl"), event_time="t",
                        key="id", name="a")
        b = flow.source(wire.sources.files(str(tmp_path / "b"), format="jsonl"), event_time="t",
                        key="id", name="b")
        left, right = (b, a) if swap else (a, b)
        left.interval_join(right, lower=lower, upper=0, name="j").sink(wire.sinks.console(), name="o")
        return plan_fingerprint(flow.plan())

    assert incompatible_changes(plan(-1000), plan(-2000)) == [
        "step 'j' changed: lower_ms -1000 -> -2000"]
    assert incompatible_changes(plan(-1000), plan(-1000, swap=True)) == [
        "step 'j' changed: left_sources ['a'] -> ['b']; right_sources ['b'] -> ['a']"]


def test_user_functions_are_compared_by_qualified_name(tmp_path):
    def plan(result: Any) -> dict:
        agg = wire.aggregate(create=_acc_create, add=_acc_add, merge=_acc_merge, result=result,
                             column="x", result_type=pa.int64())
        return plan_fingerprint(build(tmp_path, aggs={"u": agg}))

    assert incompatible_changes(plan(_acc_result), plan(_acc_result)) == []
    [change] = incompatible_changes(plan(_acc_result), plan(_acc_result_v2))
    assert change.startswith("step 'hourly' changed: aggregations 'u' UserAggregator(")
    assert f"result_fn={__name__}._acc_result, " in change
    assert f"result_fn={__name__}._acc_result_v2, " in change


@dataclass(frozen=True)
class ProcessNode(Node):
    """A stateful operator type the fingerprint module does not know (a user state operator)."""

    upstream: str
    fn: Any
    ttl_ms: int


def _count_clicks(state: Any, rows: Any) -> Any:
    return rows


def _count_views(state: Any, rows: Any) -> Any:
    return rows


def test_an_unknown_operator_is_stateful_and_its_function_recorded(tmp_path):
    def plan(fn: Any, ttl: int = 100) -> dict:
        flow = wire.Flow("f")
        flow.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t",
                    name="src")
        return plan_fingerprint(Plan("f", (*flow.plan().nodes, ProcessNode("proc", "src", fn, ttl))))

    fp = plan(_count_clicks)
    assert fp["proc"] == {"kind": "ProcessNode", "upstream": "src",
                          "fn": f"{__name__}._count_clicks", "ttl_ms": 100}
    assert incompatible_changes(fp, plan(_count_views)) == [
        f"step 'proc' changed: fn {__name__}._count_clicks -> {__name__}._count_views"]
    assert incompatible_changes(fp, plan(_count_clicks, 200)) == [
        "step 'proc' changed: ttl_ms 100 -> 200"]


def _windowed(tmp: Any, *, late_sink_first: bool, named: bool) -> Plan:
    schema = pa.schema([("ts", pa.int64()), ("k", pa.string())])
    flow = wire.Flow("f")
    src = flow.source(wire.sources.files(str(tmp / "*.csv"), format="csv", schema=schema),
                      event_time="ts", key="k")
    counts = src.window(wire.Tumbling("1s")).aggregate(n=wire.count(), name="counts")
    if late_sink_first:
        counts.late().sink(wire.sinks.parquet(tmp / "late"), name="late_out" if named else None)
    counts.sink(wire.sinks.parquet(tmp / "out"), name="counts_out" if named else None)
    return flow.plan()


def test_a_sink_added_before_another_renumbers_automatic_ids_and_the_refusal_says_to_name_them(tmp_path):
    before = plan_fingerprint(_windowed(tmp_path, late_sink_first=False, named=False))
    after = plan_fingerprint(_windowed(tmp_path, late_sink_first=True, named=False))
    # sink_1 was the counts sink; with the late sink added first, sink_1 is the late sink
    [change] = incompatible_changes(before, after)
    assert change.startswith("step 'sink_1' changed: reads counts.out -> counts.late")
    assert "automatic step id" in change and "name=" in change


def test_named_sinks_survive_a_sink_added_before_them(tmp_path):
    before = plan_fingerprint(_windowed(tmp_path, late_sink_first=False, named=True))
    after = plan_fingerprint(_windowed(tmp_path, late_sink_first=True, named=True))
    assert incompatible_changes(before, after) == []


def test_a_named_step_gets_no_hint(tmp_path):
    before = plan_fingerprint(build(tmp_path, window=wire.Tumbling("10s")))
    after = plan_fingerprint(build(tmp_path, window=wire.Tumbling("7s")))
    changes = incompatible_changes(before, after)
    assert changes and not any("automatic step id" in c for c in changes)
