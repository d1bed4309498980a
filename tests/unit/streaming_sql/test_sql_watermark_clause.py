"""``flow.table(..., watermark="WATERMARK FOR ts AS ts - INTERVAL ...")`` is the source's policy.

Checked when the flow is built, errors at the clause's line and column.

The transcripts on the engine (the late table follows the clause's delay) are in
tests/e2e/test_sql_watermark.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.streaming_sql import SqlError

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
CLAUSE = "WATERMARK FOR t AS t - INTERVAL '5' SECOND"


def source(flow: wire.Flow, tmp_path, name: str = "input", **kw) -> wire.Stream:
    files = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet", schema=SCHEMA)  # never read
    return flow.source(files, event_time="t", name=name, **kw)


def at(text: str, needle: str) -> tuple[int, int]:
    offset = text.index(needle)
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


@pytest.mark.parametrize(("clause", "delay"), [
    (CLAUSE, 5_000),
    ("watermark for T as T - interval '250' millisecond", 250),
    ("WATERMARK FOR t AS t", 0),
    ("WATERMARK FOR t AS t - INTERVAL '2' MINUTE", 120_000),
])
def test_a_source_without_a_policy_takes_the_clauses(tmp_path, clause, delay):
    flow = wire.Flow("wm")
    events = source(flow, tmp_path)
    assert flow.table("events", events.filter("v > 0").key_by("k"), watermark=clause) is not None
    policy = flow.plan().node("input").watermark
    assert policy == wire.BoundedOutOfOrderness(delay)
    # now the source has a policy: another table of it must state the same delay
    flow.table("same", events, watermark=clause)
    assert "same" in flow.tables()


def test_a_source_with_the_same_delay_keeps_its_policy(tmp_path):
    flow = wire.Flow("wm")
    policy = wire.BoundedOutOfOrderness("5s", idle_timeout="30s")
    events = source(flow, tmp_path, watermark=policy)
    flow.table("events", events, watermark=CLAUSE)
    assert flow.plan().node("input").watermark is policy


def error(flow: wire.Flow, stream: wire.Stream, clause: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        flow.table("x", stream, watermark=clause)
    assert "x" not in flow.tables()  # nothing registered
    e = info.value
    assert e.parameter == "watermark" and isinstance(e, wire.ConfigError)
    assert "WATERMARK FOR <event-time column>" in e.accepted
    return e


def test_a_source_with_another_delay_is_refused_at_the_delay(tmp_path):
    flow = wire.Flow("wm")
    events = source(flow, tmp_path, watermark=wire.BoundedOutOfOrderness("2s"))
    clause = "WATERMARK FOR t\nAS t - INTERVAL '5' SECOND"
    e = error(flow, events, clause)
    assert (e.line, e.column) == at(clause, "INTERVAL") == (2, 8)
    assert "a delay of 5000 ms" in str(e) and "BoundedOutOfOrderness(2000 ms)" in str(e)
    assert flow.plan().node("input").watermark == wire.BoundedOutOfOrderness("2s")


def test_an_explicit_zero_delay_is_a_policy_too(tmp_path):
    flow = wire.Flow("wm")
    events = source(flow, tmp_path, watermark=wire.BoundedOutOfOrderness(0))
    error(flow, events, CLAUSE)


def test_a_second_clause_with_another_delay_is_refused(tmp_path):
    flow = wire.Flow("wm")
    events = source(flow, tmp_path)
    flow.table("a", events, watermark=CLAUSE)
    e = error(flow, events.filter("v > 1"), "WATERMARK FOR t AS t - INTERVAL '1' SECOND")
    assert "earlier table's clause" in str(e)


@pytest.mark.parametrize(("build", "words"), [
    (lambda s: s.window(wire.Tumbling(10)).aggregate(n=wire.count()), "WindowAggregateNode"),
    (lambda s: s.union(s.filter("v > 0")), "UnionNode"),
    (lambda s: s.key_by("k").join(s.key_by("k")), "IntervalJoinNode"),
])
def test_a_stream_whose_watermark_is_derived_is_refused(tmp_path, build, words):
    flow = wire.Flow("wm")
    events = source(flow, tmp_path)
    e = error(flow, build(events), CLAUSE)
    assert (e.line, e.column) == (1, 1)
    assert words in str(e) and "generated at a source" in str(e)
    assert flow.plan().node("input").watermark == wire.BoundedOutOfOrderness(0)


def test_the_dead_letter_port_is_refused(tmp_path):
    flow = wire.Flow("wm")
    e = error(flow, source(flow, tmp_path).dead_letters(), CLAUSE)
    assert "dead_letter" in str(e)


@pytest.mark.parametrize(("clause", "needle", "words"), [
    ("WATERMARK FOR k AS k - INTERVAL '5' SECOND", "k AS", "the column 't'"),
    ("WATERMARK FOR t AS v - INTERVAL '5' SECOND", "v -", "minus a constant"),
    ("WATERMARK FOR t AS t + INTERVAL '5' SECOND", "t +", "minus a constant"),
    ("WATERMARK FOR t AS t - INTERVAL '5' FORTNIGHT", "INTERVAL", "not a delay"),
    ("WATERMARK FOR t AS t - INTERVAL '1.5' SECOND", "INTERVAL", "not a delay"),
    ("WATERMARK FOR t AS t -\n  ", None, "syntax error"),
    ("t BIGINT, WATERMARK FOR t AS t", "t BIGINT", "does not start with WATERMARK"),
    ("WATERMARK FOR t AS t, k STRING", "WATERMARK", "not one WATERMARK"),
])
def test_a_clause_that_is_not_bounded_out_of_orderness_names_its_position(tmp_path, clause, needle, words):
    flow = wire.Flow("wm")
    e = error(flow, source(flow, tmp_path), clause)
    assert words in str(e)
    assert e.line is not None
    if needle is not None:
        assert (e.line, e.column) == at(clause, needle), str(e)
        assert f"line {e.line}, column {e.column}" in str(e)


def test_a_step_that_drops_or_replaces_the_event_time_is_refused(tmp_path):
    flow = wire.Flow("wm")
    events = source(flow, tmp_path)
    assert "drops" in str(error(flow, events.select("k", "v"), CLAUSE))
    assert "replaces" in str(error(flow, events.map(t="t + 1"), CLAUSE))
    flow.table("renamed_kept", events.select("t", ("w", "v")), watermark=CLAUSE)


def test_a_sql_query_reads_the_table_with_the_clauses_watermark(tmp_path):
    flow = wire.Flow("wm")
    flow.table("events", source(flow, tmp_path).filter("v > 0"), watermark=CLAUSE)
    wire.sql(flow, """SELECT COUNT(*) AS n, window_start, window_end
                      FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
                      GROUP BY window_start, window_end""")
    assert flow.plan().node("input").watermark.max_delay_ms == 5_000
