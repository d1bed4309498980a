"""What a query compiles to: the plan nodes the Python API would record (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.core.time import INT64_MAX, INT64_MIN
from wire.plan.nodes import (
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    SelectNode,
    UnionNode,
    WindowAggregateNode,
)

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64()), ("w", pa.float64())])


@pytest.fixture
def flow(tmp_path) -> wire.Flow:
    flow = wire.Flow("compile")
    files = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet", schema=SCHEMA)  # never read
    src = flow.source(files, event_time="t", name="input")
    flow.table("a", src)
    flow.table("b", src.filter("v > 0", name="positive"))
    return flow


def nodes(flow: wire.Flow, prefix: str) -> list:
    return [n for n in flow.plan().nodes if n.step.startswith(prefix)]


def only(flow: wire.Flow, prefix: str, kind: type):
    found = [n for n in nodes(flow, prefix) if isinstance(n, kind)]
    assert len(found) == 1, found
    return found[0]


def test_select_where_is_filter_then_select(flow):
    out = wire.sql(flow, "SELECT k, v * 2 AS v2 FROM a WHERE v > 3 AND k <> 'x'", name="q")
    f = only(flow, "q", FilterNode)
    s = only(flow, "q", SelectNode)
    assert f.predicate == "`v` > 3 AND `k` <> 'x'"
    assert s.columns == ("k", ("v2", "`v` * 2"))
    assert out.ref.step == s.step and out.late_steps == ()


def test_union_all(flow):
    out = wire.sql(flow, "SELECT k, v FROM a UNION ALL SELECT k, v FROM b", name="q")
    u = only(flow, "q", UnionNode)
    assert out.ref.step == u.step and len(u.upstreams) == 2


@pytest.mark.parametrize(("tvf", "window"), [
    ("TUMBLE(TABLE a, DESCRIPTOR(t), INTERVAL '10' SECOND)", wire.Tumbling(10_000)),
    ("HOP(TABLE a, DESCRIPTOR(t), INTERVAL '2' SECOND, INTERVAL '1' MINUTE)", wire.Sliding(60_000, 2_000)),
    ("SESSION(TABLE a, DESCRIPTOR(t), INTERVAL '500' MILLISECOND)", wire.Session(500)),
])
def test_group_by_window_tvf(flow, tvf, window):
    out = wire.sql(flow, f"""
        SELECT k, COUNT(*) AS n, SUM(v) AS s, AVG(w) AS m, MAX_BY(v, w) AS best, window_start, window_end
        FROM TABLE({tvf}) GROUP BY k, window_start, window_end""", allowed_lateness="5s", emit="update",
                   name="q")
    key = only(flow, "q", KeyByNode)
    win = only(flow, "q", WindowAggregateNode)
    assert key.key == "k"
    assert win.window == window and win.allowed_lateness_ms == 5_000 and win.emit == "update"
    aggs = dict(win.aggregations)
    assert [type(a).__name__ for a in aggs.values()] == ["Count", "Sum", "Mean", "ByRow"]
    sel = only(flow, "q", SelectNode)
    computed = dict(c for c in sel.columns if isinstance(c, tuple))
    assert computed["best"] == "`_sql_a3`.`v`"  # max_by(w, columns=[v]).v
    assert out.late_steps == (win.step,)
    assert out.late().ref.port == "late" and out.late().ref.step == win.step


def test_group_by_two_columns_uses_one_json_key(flow):
    wire.sql(flow, """SELECT k, v, COUNT(*) AS n, window_start, window_end
        FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(t), INTERVAL '1' SECOND))
        GROUP BY k, v, window_start, window_end""",
             name="q")
    assert only(flow, "q", KeyByNode).key == "_sql_key"
    win = only(flow, "q", WindowAggregateNode)
    assert {n: type(a).__name__ for n, a in win.aggregations} == {
        "_sql_a0": "Count", "_sql_g0": "First", "_sql_g1": "First"}


@pytest.mark.parametrize(("on", "lower", "upper"), [
    ("y.t BETWEEN x.t - INTERVAL '1' SECOND AND x.t + INTERVAL '2' SECOND", -1_000, 2_000),
    ("y.t >= x.t AND y.t <= x.t + INTERVAL '20' SECOND", 0, 20_000),
    ("x.t < y.t AND x.t + INTERVAL '5' SECOND > y.t", 1, 4_999),  # strict bounds on int ms
    ("x.t >= y.t - INTERVAL '3' SECOND", INT64_MIN, 3_000),  # right.t <= left.t + 3 s
    ("y.t = x.t", 0, 0),
    ("x.v < y.v", INT64_MIN, INT64_MAX),  # no time bound: a regular join
])
def test_join_time_bounds(flow, on, lower, upper):
    wire.sql(flow, f"SELECT x.k, x.v, y.v AS v2 FROM a AS x JOIN b AS y ON x.k = y.k AND {on}", name="q")
    join = only(flow, "q", IntervalJoinNode)
    assert (join.lower_ms, join.upper_ms) == (lower, upper)


def test_join_where_terms_of_one_side_filter_that_side_before_the_join(flow):
    out = wire.sql(flow, """SELECT x.k, y.v FROM a AS x JOIN b AS y ON x.v = y.v
                            WHERE x.k = 'p' AND y.w > 1.5 AND x.w < y.w""", name="q")
    join = only(flow, "q", IntervalJoinNode)
    filters = {n.step: n for n in nodes(flow, "q") if isinstance(n, FilterNode)}
    plan = flow.plan()

    def upstream_filters(step: str) -> list[str]:
        found = []
        while step in {n.step for n in plan.nodes}:
            node = plan.node(step)
            if isinstance(node, FilterNode):
                found.append(node.predicate)
            step = getattr(node, "upstream", None) or ""
        return found

    assert upstream_filters(join.left) == ["`k` = 'p'"]
    assert upstream_filters(join.right) == ["`w` > 1.5", "v > 0"]  # then the table's own filter
    after = [f.predicate for f in filters.values() if f.upstream == join.step]
    assert after == ["`w` < `right_w`"]
    assert out.late_steps == (join.step,)


def test_top_n_is_top_k_in_the_window(flow):
    wire.sql(flow, """SELECT k, v, window_start FROM (
        SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY v DESC) AS rn
        FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(t), INTERVAL '10' SECOND))) WHERE rn <= 3""", name="q")
    win = only(flow, "q", WindowAggregateNode)
    (_, top), = win.aggregations
    assert (top.column, top.k, top.ties, top.largest) == ("v", 3, "first", True)
    assert set(top.columns) == {"k", "v"}  # only what the outer query reads


def test_late_of_a_query_without_window_or_with_several(flow):
    plain = wire.sql(flow, "SELECT k FROM a")
    with pytest.raises(wire.PlanError, match="no window or join"):
        plain.late()
    two = wire.sql(flow, """SELECT k, COUNT(*) AS n, window_start, window_end FROM TABLE(TUMBLE(TABLE (
        SELECT k, COUNT(*) AS c, window_start AS s
        FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(t), INTERVAL '1' SECOND))
        GROUP BY k, window_start, window_end), DESCRIPTOR(s), INTERVAL '10' SECOND))
        GROUP BY k, window_start, window_end""")
    with pytest.raises(wire.PlanError, match="several"):
        two.late()
    assert wire.sql_late(two, step=two.late_steps[0]).ref.step == two.late_steps[0]


def test_a_query_result_registered_as_a_table_keeps_its_event_time(flow):
    """Chained queries: a windowed result's rows have event time window_start, renamed or not."""
    first = wire.sql(flow, """SELECT k, COUNT(*) AS n, window_start AS ws
        FROM TABLE(TUMBLE(TABLE a, DESCRIPTOR(t), INTERVAL '1' SECOND))
        GROUP BY k, window_start, window_end""")
    flow.table("per_second", first)
    wire.sql(flow, """SELECT k, SUM(n) AS n, window_start, window_end
        FROM TABLE(TUMBLE(TABLE per_second, DESCRIPTOR(ws), INTERVAL '1' MINUTE))
        GROUP BY k, window_start, window_end""", name="q")
    assert only(flow, "q", WindowAggregateNode).window == wire.Tumbling(60_000)
    with pytest.raises(wire.streaming_sql.SqlError, match="DESCRIPTOR"):
        wire.sql(flow, """SELECT COUNT(*) AS c, window_start, window_end
            FROM TABLE(TUMBLE(TABLE per_second, DESCRIPTOR(n), INTERVAL '1' MINUTE))
            GROUP BY window_start, window_end""")


def test_join_sides_keep_only_the_columns_the_query_reads(flow):
    """A join keeps its inputs' columns in state: each side is narrowed first (as q3 in Python selects)."""
    wire.sql(flow, "SELECT x.k, y.w FROM a AS x JOIN b AS y ON x.v = y.v WHERE x.k <> 'z'", name="q")
    narrowed = {n.upstream: n.columns for n in nodes(flow, "q_columns") if isinstance(n, SelectNode)}
    assert sorted(narrowed.values()) == [("t", "k", "v"), ("t", "v", "w")]  # + the event time column
    wire.sql(flow, "SELECT x.*, y.w AS w2 FROM a AS x JOIN b AS y ON x.v = y.v", name="star")
    assert not [n for n in nodes(flow, "star_columns")]  # '*' reads everything


def test_with_names_queries_compiled_once_where_read(flow):
    """A CTE read twice is one branch of operators; a CTE read by none records none."""
    out = wire.sql(flow, """
        WITH pos AS (SELECT * FROM a WHERE v > 0),
             renamed(key, value, time) AS (SELECT k, v, t FROM pos),
             unused AS (SELECT k FROM a WHERE v = 42)
        SELECT key, value FROM renamed WHERE value > 10
        UNION ALL
        SELECT k, v FROM pos WHERE v < 3""", name="q")
    filters = [n.predicate for n in nodes(flow, "q") if isinstance(n, FilterNode)]
    assert sorted(filters) == ["`v` < 3", "`v` > 0", "`value` > 10"]  # `v` > 0 once, `v` = 42 never
    rename = [n for n in nodes(flow, "q") if isinstance(n, SelectNode) and ("time", "`t`") in n.columns]
    assert len(rename) == 1 and rename[0].columns == (("key", "`k`"), ("value", "`v`"), ("time", "`t`"))
    assert isinstance(flow.plan().node(out.ref.step), UnionNode)


def test_with_scopes_shadow_tables_and_keep_event_time(flow):
    """A CTE shadows a table of the same name; a renamed event-time column still windows."""
    wire.sql(flow, """
        WITH b(kk, tt) AS (SELECT k, t FROM a WHERE v > 5)
        SELECT kk, COUNT(*) AS n, window_start, window_end
        FROM TABLE(TUMBLE(TABLE b, DESCRIPTOR(tt), INTERVAL '1' SECOND))
        GROUP BY kk, window_start, window_end""", name="q")
    assert [n.predicate for n in nodes(flow, "q") if isinstance(n, FilterNode)] == ["`v` > 5"]
    assert only(flow, "q", KeyByNode).key == "kk"
    # the subquery's WITH is not visible outside it
    with pytest.raises(wire.streaming_sql.SqlError, match="unknown table 'inner_q'"):
        wire.sql(flow, "SELECT k FROM (WITH inner_q AS (SELECT k FROM a) SELECT k FROM inner_q) "
                       "UNION ALL SELECT k FROM inner_q")


def test_select_distinct_over_a_window_is_a_group_by_of_its_columns(flow):
    wire.sql(flow, """SELECT DISTINCT k, v, window_start, window_end
        FROM TABLE(HOP(TABLE a, DESCRIPTOR(t), INTERVAL '1' SECOND, INTERVAL '2' SECOND))""", name="q")
    assert only(flow, "q", KeyByNode).key == "_sql_key"  # the JSON key of k and v
    win = only(flow, "q", WindowAggregateNode)
    assert win.window == wire.Sliding(2_000, 1_000)
    assert {n: type(a).__name__ for n, a in win.aggregations} == {"_sql_g0": "First", "_sql_g1": "First"}
    sel = only(flow, "q", SelectNode)
    names = [c if isinstance(c, str) else c[0] for c in sel.columns]
    assert names == ["k", "v", "window_start", "window_end"]
