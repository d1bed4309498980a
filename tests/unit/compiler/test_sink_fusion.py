"""Which flows write their sinks in their source's tasks (``wire.compiler.sink_fusion``), with what.

The rules are the module's: one source with the capability, ``source → (filter | select of
names)*`` in one chain, sinks on the chain's end only (side ports do not count), filters that
translate exactly. The results of fused flows are checked against unfused runs and a pandas
oracle in ``tests/e2e/test_sink_fused_flow.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.compiler.plan_compiler import compile_plan
from wire.compiler.sink_fusion import SourceTaskWriter, find_sink_fusion
from wire.core.envelope import BLOB, KIND, KIND_DATA, KIND_WATERMARK, PORT
from wire.examples.nexmark_source import NexmarkSource
from wire.runtime.dataplane import RESULT_SCHEMA, RESULT_TYPE
from wire.testing import MemorySink

pytestmark = pytest.mark.spark


class _Uncapable(NexmarkSource):
    """The Nexmark generator without the ``pre_stage`` capability (as a connector that lacks it)."""

    capabilities = frozenset({"columns", "predicate"})

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("n", pa.int32()), ("v", pa.float64()),
                    ("at", pa.timestamp("us", tz="UTC")), ("note", pa.string())])


def _flow(tmp_path, schema: pa.Schema = SCHEMA, key: str | None = "k"):
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "a.csv").write_text(",".join(schema.names) + "\n")
    flow = wire.Flow("sink-fusion")
    source = wire.sources.files(str(tmp_path / "in" / "*.csv"), format="csv", schema=schema)
    return flow, flow.source(source, event_time="t", key=key, name="events")


def test_filters_and_projections_are_one_exact_predicate_and_the_last_projection(spark, tmp_path):
    flow, events = _flow(tmp_path)
    kept = events.filter("v > 0", name="f1").select("v", "k", "t", "n", name="s1")
    kept.filter("k IN ('a', 'b') AND n IS NOT NULL", name="f2").select("k", "v", name="s2") \
        .sink(MemorySink(), name="out")
    flow.dead_letters().sink(MemorySink(), name="dead")  # side ports do not count
    fusion = find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA)
    assert fusion is not None
    assert (fusion.source, fusion.steps, fusion.terminal) == ("events", ("f1", "s1", "f2", "s2"), "s2")
    assert fusion.predicate == [
        "and", ["cmp", ">", ["col", "v"], ["lit", 0.0]],
        ["and", ["in", ["col", "k"], ["a", "b"]], ["isnotnull", ["col", "n"]]]]
    assert fusion.columns == ("k", "v")
    assert fusion.produced == ("t", "k", "n", "v")  # the projection, the predicate's, event time and key
    assert fusion.writer_input.names == ["k", "v", KIND, PORT, BLOB]


def test_a_source_straight_into_its_sinks_is_fused_with_every_column(spark, tmp_path):
    flow, events = _flow(tmp_path)
    events.sink(MemorySink(), name="out")
    fusion = find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA)
    assert fusion is not None and fusion.terminal == "events" and fusion.steps == ()
    assert fusion.columns == tuple(SCHEMA.names) and fusion.produced is None and fusion.predicate is None


def test_the_writer_gets_the_types_spark_would_give_it(spark, tmp_path):
    """The session's time zone on timestamps, and Arrow's large string types when Spark uses them."""
    flow, events = _flow(tmp_path)
    events.select("k", "at").sink(MemorySink())
    zone = spark.conf.get("spark.sql.session.timeZone")
    fusion = find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA)
    assert fusion is not None
    assert fusion.writer_input.field("at").type == pa.timestamp("us", tz=zone)
    spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    try:
        fusion = find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")
    assert fusion is not None and fusion.writer_input.field("k").type == pa.large_string()


@pytest.mark.parametrize("branch", [
    "a map calling a function",
    "a map of a decimal",
    "a division",
    "a filter after a map",
    "a narrowing cast",
    "a filter that does not translate",
    "a sink on a step before the end",
    "a second reader of the source",
    "a window",
    "two sources",
])
def test_what_stops_a_sink_fusion(spark, tmp_path, branch):
    flow, events = _flow(tmp_path)
    if branch == "a map calling a function":
        events.map(k2="upper(k)").sink(MemorySink())
    elif branch == "a map of a decimal":
        events.map(v2="v * 2.5BD").sink(MemorySink())
    elif branch == "a division":
        events.select("k", ("v2", "v / 2")).sink(MemorySink())
    elif branch == "a filter after a map":
        events.map(n="n + 1").filter("n > 2").sink(MemorySink())
    elif branch == "a narrowing cast":
        events.map(m="cast(t AS int)").sink(MemorySink())
    elif branch == "a filter that does not translate":
        events.filter("upper(k) = 'A'").sink(MemorySink())
    elif branch == "a sink on a step before the end":
        kept = events.filter("v > 0", name="f")
        kept.select("k").sink(MemorySink())
        kept.sink(MemorySink(), name="raw")
    elif branch == "a second reader of the source":
        events.filter("v > 0").sink(MemorySink())
        events.filter("v < 0").sink(MemorySink(), name="neg")
    elif branch == "a window":
        events.window(wire.Tumbling(10)).aggregate(name="win", c=wire.count()).sink(MemorySink())
    else:
        other = flow.source(wire.sources.files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA),
                            event_time="t", key="k", name="other")
        events.union(other).sink(MemorySink())
    assert find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA) is None


def test_maps_and_computed_projections_are_value_expressions_typed_as_spark_types_them(spark, tmp_path):
    """Spark's analysis makes every implicit conversion a cast; the task computes on data rows."""
    flow, events = _flow(tmp_path)
    events.filter("v > 0").map(p="(t * 908) div 1000", m="-n + 1").select("k", ("w", "m * 2"), "p") \
        .sink(MemorySink())
    fusion = find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA)
    assert fusion is not None and fusion.columns == ("k", "w", "p")
    times = ["arith", "*", ["col", "t"], ["cast", ["lit", 908, "int32"], "int64"], True]
    assert fusion.operations == (
        ("map", (("p", ["arith", "div", times, ["cast", ["lit", 1000, "int32"], "int64"], True], pa.int64()),
                 ("m", ["arith", "+", ["neg", ["col", "n"], True], ["lit", 1, "int32"], True], pa.int32()))),
        ("select", (("k", None, pa.string()), ("w", ["arith", "*", ["col", "m"], ["lit", 2, "int32"], True],
                                                  pa.int32()), ("p", None, pa.int64()))))
    assert fusion.produced == ("t", "k", "n", "v")  # read by the maps, the projection, the filter
    assert [f.type for f in fusion.writer_input][:3] == [pa.string(), pa.int32(), pa.int64()]


def test_the_task_computes_on_data_rows_with_sparks_ansi_arithmetic(monkeypatch):
    """Hand-derived: ``div`` truncates toward zero; control rows get nulls, never an error; an
    overflow on a data row fails the task, as Spark's ANSI mode fails it."""
    import wire.compiler.sink_fusion as sink_fusion

    got: list[pa.Table] = []

    def writer(batches):
        got.append(pa.Table.from_batches(list(batches)))
        return iter(())

    monkeypatch.setattr(sink_fusion, "epoch_writer", lambda: writer)
    div = ["arith", "div", ["col", "t"], ["cast", ["lit", 1000, "int32"], "int64"], True]
    target = pa.schema([("p", pa.int64()), (KIND, pa.int32()), (PORT, pa.string()), (BLOB, pa.binary())])
    operations = (("map", (("p", div, pa.int64()),)), ("select", (("p", None, pa.int64()),)))
    task = SourceTaskWriter(target, operations)
    rows = pa.RecordBatch.from_pydict({
        "t": pa.array([1999, -1999, None, 7], pa.int64()),
        KIND: pa.array([KIND_DATA, KIND_DATA, KIND_WATERMARK, KIND_DATA], pa.int32()),
        PORT: [None, None, "events", None], BLOB: pa.array([None] * 4, pa.binary())})
    list(task(iter([rows])))
    assert got[0].column("p").to_pylist() == [1, -1, 7 // 1000, None]  # data rows first, then control rows
    assert got[0].column(KIND).to_pylist() == [KIND_DATA] * 3 + [KIND_WATERMARK]
    big = ["arith", "*", ["col", "t"], ["lit", 2**62, "int64"], True]
    overflow = SourceTaskWriter(target, (("select", (("p", big, pa.int64()),)),))
    with pytest.raises(pa.ArrowInvalid, match="overflow"):
        list(overflow(iter([rows])))
    wrapping = ["arith", "*", ["col", "t"], ["lit", 2**62, "int64"], False]  # legacy mode: Java's wrap-around
    list(SourceTaskWriter(target, (("select", (("p", wrapping, pa.int64()),)),))(iter([rows])))
    assert got[-1].column("p").to_pylist()[0] == (1999 * 2**62 + 2**63) % 2**64 - 2**63


def test_a_source_without_the_capability_is_not_fused(spark):
    flow = wire.Flow("sink-fusion")
    flow.source(_Uncapable(events=100), event_time="date_time", key="kind", name="events").sink(MemorySink())
    assert find_sink_fusion(spark, flow.plan(), RESULT_SCHEMA) is None


def test_the_compiled_flow_is_the_sources_writer_rows(spark, tmp_path):
    """Fused: the DataFrame is the source's scan of writer rows (no filter or projection in Spark);
    without ``task_writer`` or with ``fuse=False`` the flow compiles as before."""
    flow, events = _flow(tmp_path)
    events.filter("v > 0").select("k", "v").sink(MemorySink())
    fused = compile_plan(flow.plan(), spark, 4, task_writer=RESULT_SCHEMA)
    assert fused.task_writer and fused.dataframe.schema == RESULT_TYPE
    assert fused.source_columns == {"events": ("t", "k", "v")}
    for plain in (compile_plan(flow.plan(), spark, 4), compile_plan(flow.plan(), spark, 4, fuse=False,
                                                                      task_writer=RESULT_SCHEMA)):
        assert not plain.task_writer and KIND in plain.dataframe.columns


def test_the_task_writer_casts_to_the_writers_types_and_hands_it_every_row(monkeypatch):
    """Data, side and watermark rows reach the epoch's writer, with the writer's columns and types."""
    import wire.compiler.sink_fusion as sink_fusion

    got: list[pa.Table] = []

    def writer(batches):
        got.append(pa.Table.from_batches(list(batches)))
        yield pa.RecordBatch.from_pylist([], schema=RESULT_SCHEMA)

    monkeypatch.setattr(sink_fusion, "epoch_writer", lambda: writer)
    target = pa.schema([("k", pa.large_string()), ("at", pa.timestamp("us", tz="Europe/Paris")),
                        (KIND, pa.int32()), (PORT, pa.string()), (BLOB, pa.binary())])
    source = pa.RecordBatch.from_pydict({
        "t": [1, None], "k": ["a", None], "at": pa.array([0, None], pa.timestamp("us", tz="UTC")),
        KIND: pa.array([KIND_DATA, KIND_WATERMARK], pa.int32()), PORT: [None, "events"],
        BLOB: pa.array([None, None], pa.binary()), "__et": [1, None]})
    out = list(SourceTaskWriter(target)(iter([source, source])))
    assert [b.schema for b in out] == [RESULT_SCHEMA]
    assert got[0].schema == target and got[0].num_rows == 4
    assert got[0].column("k").to_pylist() == ["a", None, "a", None]
    assert list(SourceTaskWriter(target)(iter([]))) == []  # an empty task: no writer call, no rows
    assert len(got) == 1
