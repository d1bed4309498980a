"""Flows that use every plan node kind and topology, built with the public API only.

Pinned by ``test_graph_compat.py``: what the graph queries and the plan fingerprint
said of each flow before the graph moved to :mod:`wire.plan.graph` (issue 27) must not
change. Public API only, so the same flows build under the code before the move.
"""

from __future__ import annotations

import pyarrow as pa

import wire
from wire.examples.flights_job import flights_flow
from wire.examples.nexmark_queries import QUERIES, build
from wire.examples.process_examples import BurstAlert, Dedupe

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("x", pa.int64()),
                    ("tags", pa.list_(pa.string()))])


def _files(path: str = "/data/in") -> wire.sources.Source:
    return wire.sources.files(path, format="jsonl", schema=SCHEMA)


def _windows() -> wire.Flow:
    """Every window kind, emission modes, callbacks, a window of windows, late ports."""
    flow = wire.Flow("windows")
    s = flow.source(_files(), event_time="t", key="k", watermark=wire.BoundedOutOfOrderness("5s"), name="in")
    t = s.window(wire.Tumbling("10s"), allowed_lateness="1m").aggregate(n=wire.count(), total=wire.sum("x"),
                                                                        name="tumbling")
    t.late().sink(wire.sinks.parquet("/data/late"), name="late_out")
    sl = s.window(wire.Sliding("10s", "2s"), emit="update").aggregate(m=wire.max("x"), name="sliding")
    se = s.window(wire.Session("30s")).aggregate(first=wire.first("x"), name="session")
    sl.sink(wire.sinks.jsonl("/data/sliding"), name="sliding_out")
    se.late().drop(name="session_late_dropped")
    se.window(wire.Tumbling("1m")).aggregate(sessions=wire.count(), name="of_sessions").sink(
        wire.sinks.parquet("/data/sessions"), name="sessions_out")
    t.sink(wire.sinks.console(), name="tumbling_out")
    return flow


def _stateless_chain() -> wire.Flow:
    """filter, map, select (plain names, computed, dropping the key), explode, key_by, throttles."""
    flow = wire.Flow("chain")
    s = flow.source(_files(), event_time="t", name="in")
    keyed = (s.filter("x > 0", name="positive").map(y="x * 2", name="doubled")
             .explode("tags", name="per_tag").key_by("tags", name="by_tag"))
    paused = keyed.throttle(1_000, mode="pause", name="paced")
    paused.window(wire.Tumbling("1m")).aggregate(n=wire.count(), name="per_tag_count").sink(
        wire.sinks.parquet("/data/tags"), name="tags_out")
    over = s.key_by("k", name="by_k").throttle(500, mode="overflow", name="capped")
    over.select("k", "t", ("z", "x + 1"), name="projected").window(wire.Tumbling("1m")).aggregate(
        z=wire.sum("z"), name="z_sum").sink(wire.sinks.parquet("/data/z"), name="z_out")
    over.overflow().sink(wire.sinks.jsonl("/data/overflow"), name="overflow_out")
    s.select("t", "x", name="unkeyed").window(wire.Tumbling("1m")).aggregate(
        n=wire.count(), name="global_count").sink(wire.sinks.console(), name="global_out")
    second = flow.source(_files("/data/in2"), event_time="t", key="k", name="in2")
    second.throttle(200, mode="pause", name="slow2").sink(wire.sinks.console(), name="raw2")
    return flow


def _joins_unions_process() -> wire.Flow:
    """Interval and regular joins, unions (same key / different keys), process steps, branches."""
    flow = wire.Flow("joins")
    a = flow.source(_files("/data/a"), event_time="t", key="k", name="a")
    b = flow.source(_files("/data/b"), event_time="t", key="k", name="b")
    c = flow.source(_files("/data/c"), event_time="t", name="c")
    j = a.interval_join(b, lower=-5_000, upper=5_000, allowed_lateness="1s", name="ab")
    j.late().sink(wire.sinks.parquet("/data/ab_late"), name="ab_late_out")
    reg = a.join(b, within="1m", name="ab_within")
    u = a.union(b, name="a_or_b")
    mixed = u.union(c, name="mixed")
    mixed.key_by("k", name="mixed_by_k").window(wire.Session("1m")).aggregate(
        n=wire.count(), name="mixed_sessions").sink(wire.sinks.console(), name="mixed_out")
    dedupe = Dedupe(within_ms=10_000)
    dd = u.process(dedupe.on_events, on_timer=dedupe.on_timer, state=dedupe.state,
                   schema=dedupe.schema(pa.schema([("k", pa.string()), ("x", pa.int64())])), name="dedupe")
    burst = BurstAlert(count=3, within_ms=60_000)
    alerts = dd.process(burst.on_events, state=burst.state, schema=burst.schema("k", pa.string()),
                        name="bursts")
    unkeyed = dd.process(burst.on_events, state=burst.state,
                         schema=pa.schema([("event_time", pa.int64()), ("n", pa.int64())]), name="no_key_out")
    alerts.window(wire.Tumbling("1m")).aggregate(n=wire.count(), name="alerts_per_minute").sink(
        wire.sinks.parquet("/data/alerts"), name="alerts_out")
    unkeyed.sink(wire.sinks.console(), name="unkeyed_out")
    dd.late().sink(wire.sinks.console(), name="dedupe_late")
    j.sink(wire.sinks.parquet("/data/ab"), name="ab_out")
    reg.filter("x > 1", name="reg_filtered").sink(wire.sinks.console(), name="reg_out")
    flow.dead_letters().sink(wire.sinks.parquet("/data/dlq"), name="dlq")
    return flow


def _dead_letters_per_source() -> wire.Flow:
    flow = wire.Flow("dlq")
    s = flow.source(_files(), event_time="t", key="k", name="in")
    s.dead_letters().sink(wire.sinks.console(), name="in_dlq")
    s.sink(wire.sinks.console(), name="raw")
    return flow


def flows() -> dict[str, wire.Flow]:
    """Per name, a flow (nothing runs)."""
    out = {
        "windows": _windows(),
        "chain": _stateless_chain(),
        "joins": _joins_unions_process(),
        "dlq": _dead_letters_per_source(),
        "flights": flights_flow("/data/flights/*.parquet", "/data/flights_out"),
    }
    for query in sorted(set(QUERIES) - {"q5"}):  # q5 builds a Spark Column: needs a SparkContext
        out[f"nexmark_{query}"] = build(query, wire.sinks.console(), events=10,
                                        late_sink=wire.sinks.parquet("/data/nexmark_late"))
    return out
