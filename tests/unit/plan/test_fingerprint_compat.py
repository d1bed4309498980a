"""Checkpoints written before a module move still resume (issue 13: layout by role).

A checkpoint holds no Python module path: Spark's part holds offsets as JSON and state
as Arrow bytes, and ``wire.json`` holds the plan fingerprint, which names connectors
and sinks by class name (``__qualname__``), never by module. This test pins the
fingerprint of a flow per source and per sink, as recorded by Wire before the
connectors moved from ``wire.connectors`` to ``wire.sources`` / ``wire.sinks`` /
``wire.delivery``: a checkpoint written then must open unchanged now.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

import wire
from wire.examples.nexmark_queries import nexmark
from wire.plan.fingerprint import incompatible_changes, plan_fingerprint

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("x", pa.int64())])
RECORDED = Path(__file__).with_name("fingerprints_before_layout_move.json")


def sources():
    return {
        "files": wire.sources.files("/data/in", format="jsonl", schema=SCHEMA),
        "http_ingest": wire.sources.http_ingest(port=8765, wal_dir="/data/wal", schema=SCHEMA),
        "redis_stream": wire.sources.redis_stream("redis://h:1", "s", group="g", schema=SCHEMA),
        "nexmark": nexmark(events=10),
    }


def sinks():
    return {
        "parquet": wire.sinks.parquet("/data/p"),
        "jsonl": wire.sinks.jsonl("/data/j"),
        "console": wire.sinks.console(),
        "delta": wire.sinks.delta("/data/d", partition_by="k"),
        "postgres": wire.sinks.postgres("postgresql://u:pw@h/db", table="t", mode="upsert", key="k"),
        "sqlite": wire.sinks.sqlite("/data/s.db", table="t", key=["k"]),
        "webhook": wire.sinks.webhook("https://h/hook"),
        "redis_stream_sink": wire.sinks.redis_stream_sink("redis://h:1", "out"),
        "guarded": wire.sinks.guarded(wire.sinks.parquet("/data/g")),
        "round_robin": wire.sinks.round_robin(wire.sinks.webhook("https://a/h"), wire.sinks.console()),
    }


def fingerprints() -> dict:
    """Per flow name, the fingerprint of one flow per source (into Parquet) and per sink."""
    out = {}
    for name, source in sources().items():
        flow = wire.Flow(name)
        event_time = "date_time" if name == "nexmark" else "t"
        flow.source(source, event_time=event_time, name="in").sink(wire.sinks.parquet("/data/o"), name="out")
        out[f"source:{name}"] = plan_fingerprint(flow.plan(), checkpoint="/data/ck")
    for name, sink in sinks().items():
        flow = wire.Flow(name)
        s = flow.source(wire.sources.files("/data/in", format="jsonl", schema=SCHEMA), event_time="t",
                        key="k", name="in")
        s.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="w").sink(sink, name="out")
        out[f"sink:{name}"] = plan_fingerprint(flow.plan(), checkpoint="/data/ck")
    return json.loads(json.dumps(out))


def test_fingerprints_match_those_recorded_before_the_move():
    recorded = json.loads(RECORDED.read_text())
    current = fingerprints()
    assert current.keys() == recorded.keys()
    for flow, fp in recorded.items():
        assert incompatible_changes(fp, current[flow]) == [], flow
        assert current[flow] == fp, flow


def test_no_fingerprint_names_a_wire_module():
    assert "wire." not in json.dumps(fingerprints())
