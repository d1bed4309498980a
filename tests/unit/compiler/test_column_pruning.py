"""Column pruning into sources: which columns each compiled source produces, and equal outputs."""

from __future__ import annotations

import functools
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.compiler.plan_compiler import compile_plan
from wire.compiler.window_stage import window_input_columns, window_spec
from wire.examples.nexmark_source import SCHEMA, nexmark
from wire.runtime import runner
from wire.testing import MemorySink

pytestmark = pytest.mark.spark


def nexmark_flow(**source_options) -> tuple[wire.Flow, wire.Stream]:
    flow = wire.Flow("pruning")
    events = flow.source(nexmark(events=1000), event_time="date_time", name="events", **source_options)
    return flow, events


def columns_of(flow: wire.Flow, spark) -> dict[str, tuple[str, ...] | None]:
    return compile_plan(flow.plan(), spark, 2).source_columns


def test_q2_like_flow_reads_four_columns(spark):
    flow, events = nexmark_flow()
    out = events.filter("kind = 'bid'").filter("auction_id % 123 = 0").select("auction_id", "price")
    out.sink(MemorySink())
    assert columns_of(flow, spark) == {"events": ("kind", "date_time", "auction_id", "price")}


def test_unpruned_compilation_and_same_schema(spark):
    flow, events = nexmark_flow()
    events.filter("kind = 'bid'").select("auction_id", "price").sink(MemorySink())
    full = compile_plan(flow.plan(), spark, 2, prune_columns=False)
    pruned = compile_plan(flow.plan(), spark, 2)
    assert full.source_columns == {"events": None}
    assert pruned.source_columns == {"events": ("kind", "date_time", "auction_id", "price")}
    assert pruned.dataframe.schema == full.dataframe.schema


def test_windowed_flow_reads_key_and_aggregated_columns(spark):
    flow, events = nexmark_flow()
    counts = (events.filter("kind = 'bid'").key_by("auction_id").window(wire.Tumbling("10s"))
              .aggregate(bids=wire.count(), top=wire.max("price"), name="counts"))
    counts.sink(MemorySink())
    assert columns_of(flow, spark) == {"events": ("kind", "date_time", "auction_id", "price")}


def test_map_then_window_reads_the_mapped_inputs(spark):
    flow, events = nexmark_flow()
    top = (events.filter("kind = 'bid'").map(all="0", cents="price * 100").key_by("all")
           .window(wire.Tumbling("10s")).aggregate(top=wire.max("cents"), name="q7"))
    top.select("window_start", "top").sink(MemorySink())
    assert columns_of(flow, spark) == {"events": ("kind", "date_time", "price")}


def test_source_key_is_always_produced(spark):
    flow, events = nexmark_flow(key="bidder")
    events.filter("kind = 'bid'").select("price").sink(MemorySink())
    assert columns_of(flow, spark) == {"events": ("kind", "date_time", "bidder", "price")}


def test_collect_reads_only_its_column(spark):
    flow, events = nexmark_flow()
    (events.filter("kind = 'bid'").key_by("auction_id").window(wire.Tumbling("10s"))
     .aggregate(prices=wire.collect("price"), name="w")).sink(MemorySink())
    assert columns_of(flow, spark) == {"events": ("kind", "date_time", "auction_id", "price")}


def test_user_aggregator_of_one_column_reads_it(spark):
    flow, events = nexmark_flow()
    agg = wire.aggregate(create=list, add=lambda acc, v: [*acc, v], merge=lambda a, b: a + b,
                         result=len, column="bidder", result_type=pa.int64())
    (events.filter("kind = 'bid'").key_by("auction_id").window(wire.Tumbling("10s"))
     .aggregate(n=agg, name="w")).sink(MemorySink())
    assert columns_of(flow, spark) == {"events": ("kind", "date_time", "auction_id", "bidder")}


@pytest.mark.parametrize("variant", ["whole-event aggregator", "callback", "late port"])
def test_windows_that_see_whole_events_keep_every_column(spark, variant):
    flow, events = nexmark_flow()
    keyed = events.filter("kind = 'bid'").key_by("auction_id")
    if variant == "whole-event aggregator":
        agg = wire.aggregate(create=list, add=lambda acc, e: [*acc, e["url"]], merge=lambda a, b: a + b,
                             result=len, result_type=pa.int64())
        w = keyed.window(wire.Tumbling("10s")).aggregate(n=agg, name="w")
    elif variant == "callback":
        w = keyed.window(wire.Tumbling("10s"), after_update=lambda agg, ev: [False] * ev.num_rows).aggregate(
            n=wire.count(), name="w")
    else:
        w = keyed.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="w")
        w.late().sink(MemorySink())
    w.sink(MemorySink())
    assert columns_of(flow, spark) == {"events": None}


def test_overflow_port_keeps_every_column(spark):
    flow, events = nexmark_flow()
    throttled = events.filter("kind = 'bid'").throttle(10, mode="overflow")
    throttled.select("price").sink(MemorySink())
    throttled.overflow().sink(MemorySink())
    assert columns_of(flow, spark) == {"events": None}


def test_union_prunes_each_source_separately(spark):
    flow = wire.Flow("pruning-union")
    a = flow.source(nexmark(events=100), event_time="date_time", name="a").filter("kind = 'bid'")
    b = flow.source(nexmark(events=100), event_time="date_time", name="b").filter("category = 10")
    a.union(b).select("price").sink(MemorySink())
    assert columns_of(flow, spark) == {
        "a": ("kind", "date_time", "price"),
        "b": ("date_time", "category", "price"),
    }


def test_every_column_read_means_no_pruning(spark):
    flow, events = nexmark_flow()
    events.filter("kind = 'bid'").sink(MemorySink())
    assert columns_of(flow, spark) == {"events": None}


def test_window_input_columns():
    flow, events = nexmark_flow()
    w = events.key_by("auction_id").window(wire.Tumbling("1s")).aggregate(
        n=wire.count(), m=wire.mean("price"), f=wire.first("url"), name="w")
    node = flow.plan().node(w.ref.step)
    spec = window_spec(node, "auction_id")
    payload = SCHEMA.names
    assert window_input_columns(spec, payload, late_read=False) == ["auction_id", "price", "url"]
    assert window_input_columns(spec, payload, late_read=True) == payload


# ---------------------------------------------------------------- outputs with and without pruning

CSV = """ts,user,amount,note,code
1000,a,1.5,x,1
2000,b,2.0,y,2
3000,a,3.0,z,not-a-number
9000,a,4.0,,4
12000,b,1.0,w,5
oops,a,1.0,v,6
25000,a,2.0,u,7
"""
CSV_SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64()),
                        ("note", pa.string()), ("code", pa.int64())])


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for f in sorted(path.glob("*/*.jsonl")) for line in f.read_text().splitlines()]


def run_file_flow(spark, tmp_path, source, *, prune: bool, monkeypatch) -> tuple[dict, dict]:
    seen: dict = {}

    def compile_and_record(*args, **kwargs):
        compiled = compile_plan(*args, **kwargs, prune_columns=prune)
        seen.update(compiled.source_columns)
        return compiled

    monkeypatch.setattr(runner, "compile_plan", compile_and_record)
    flow = wire.Flow("pruning-files")
    events = flow.source(source, event_time="ts", key="user", watermark=wire.BoundedOutOfOrderness("2s"),
                         max_events_per_epoch=3, name="events")
    totals = (events.filter("amount > 1").window(wire.Tumbling("10s"))
              .aggregate(n=wire.count(), total=wire.sum("amount"), name="totals"))
    out = tmp_path / ("pruned" if prune else "full")
    totals.sink(wire.sinks.jsonl(out / "windows"))
    flow.dead_letters().sink(wire.sinks.jsonl(out / "dlq"))
    flow.run(checkpoint=str(out / "ck"), spark=spark)
    rows = {name: read_jsonl(out / name) for name in ("windows", "dlq")}
    return rows, seen


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_file_flow_outputs_equal_with_pruning(spark, tmp_path, monkeypatch, fmt):
    src = tmp_path / "in"
    src.mkdir()
    if fmt == "csv":
        (src / "events.csv").write_text(CSV)
        source = wire.sources.files(str(src / "*.csv"), format="csv", schema=CSV_SCHEMA)
    else:
        # code is stored as strings: a value that is not an int is malformed, read or not
        table = pa.table({
            "ts": pa.array([1000, 2000, 3000, 9000, 12000, None, 25000], pa.int64()),
            "user": ["a", "b", "a", "a", "b", "a", "a"],
            "amount": [1.5, 2.0, 3.0, 4.0, 1.0, 1.0, 2.0],
            "note": ["x", "y", "z", None, "w", "v", "u"],
            "code": ["1", "2", "not-a-number", "4", "5", "6", "7"],
        })
        pq.write_table(table, src / "events.parquet")
        source = wire.sources.files(str(src / "*.parquet"), format="parquet", schema=CSV_SCHEMA)
    full, full_columns = run_file_flow(spark, tmp_path, source, prune=False, monkeypatch=monkeypatch)
    pruned, pruned_columns = run_file_flow(spark, tmp_path, source, prune=True, monkeypatch=monkeypatch)
    assert full_columns == {"events": None}
    assert pruned_columns == {"events": ("ts", "user", "amount")}
    assert pruned == full
    reasons = [r["reason"] for r in pruned["dlq"]]
    assert len(reasons) == 2  # the bad code (a column the flow does not read) and the bad event time
    assert any("code" in r for r in reasons)
    bad_code = next(r["record"] for r in pruned["dlq"] if "code" in r["reason"])
    assert "not-a-number" in bad_code and "z" in bad_code  # the whole record, unread columns included
    assert sorted((r["user"], r["n"], r["total"]) for r in pruned["windows"]) == [
        ("a", 1, 2.0), ("a", 2, 5.5), ("b", 1, 2.0)]


def test_test_stream_outputs_equal_with_pruning(spark, monkeypatch):
    schema = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64()), ("pad", pa.string())])

    def run(prune: bool) -> list[dict]:
        monkeypatch.setattr(runner, "compile_plan", functools.partial(compile_plan, prune_columns=prune))
        ts = wire.testing.TestStream(schema=schema, event_time="t", key="k")
        ts.add_events([{"t": 1, "k": "a", "v": 1, "pad": "p"}, {"t": 5, "k": "b", "v": 2, "pad": "q"}])
        ts.advance_watermark(20)
        ts.add_events([{"t": 30, "k": "a", "v": 3, "pad": "r"}])
        ts.advance_watermark_to_infinity()
        return ts.run(lambda s: s.filter("v > 1").select("k", ("v2", "v * 2")), spark=spark)["main"]

    assert run(True) == run(False) == [
        {"k": "b", "v2": 4, "epoch": 0},
        {"k": "a", "v2": 6, "epoch": 2},
    ]


def test_plan_compiler_keeps_the_binding_columns(spark, tmp_path):
    (tmp_path / "events.csv").write_text(CSV)
    source = wire.sources.files(str(tmp_path / "*.csv"), format="csv", schema=CSV_SCHEMA)
    flow = wire.Flow("pruning-binding")
    flow.source(source, event_time="ts", name="events").select("note").sink(MemorySink())
    assert compile_plan(flow.plan(), spark, 2).source_columns == {"events": ("ts", "note")}
