"""``JOIN t FOR SYSTEM_TIME AS OF a.ts``: the plan nodes of an event-time temporal join, and its errors."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.plan.nodes import (
    FilterNode,
    LookupJoinNode,
    MapNode,
    SelectNode,
    TemporalJoinNode,
    WindowAggregateNode,
)
from wire.streaming_sql import SqlError
from wire.streaming_sql.relation import event_time_column, known_columns

SCHEMA = pa.schema([("t", pa.int64()), ("kind", pa.string()), ("cur", pa.string()), ("x", pa.float64()),
                    ("gone", pa.bool_())])


@pytest.fixture
def flow(tmp_path) -> wire.Flow:
    flow = wire.Flow("temporal")
    files = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet", schema=SCHEMA)  # never read
    src = flow.source(files, event_time="t", name="input")
    flow.table("orders", src.filter("kind = 'order'", name="orders"))
    flow.table("rates", src.filter("kind = 'rate'", name="rates"))
    return flow


def nodes(flow: wire.Flow, prefix: str, kind: type) -> list:
    return [n for n in flow.plan().nodes if n.step.startswith(prefix) and isinstance(n, kind)]


def only(flow: wire.Flow, prefix: str, kind: type):
    found = nodes(flow, prefix, kind)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(("join", "how"), [("JOIN", "inner"), ("INNER JOIN", "inner"), ("LEFT JOIN", "left"),
                                           ("LEFT OUTER JOIN", "left")])
def test_temporal_join_is_a_temporal_join_node(flow, join, how):
    out = wire.sql(flow, f"""
        SELECT o.t, o.cur, o.x AS amount, r.x AS rate, version_time
        FROM orders AS o {join} rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur""", name="q")
    tj = only(flow, "q", TemporalJoinNode)
    assert (tj.on, tj.table_key, tj.delete, tj.how) == ("cur", "cur", None, how)
    # the stream side: orders, narrowed to the columns the query reads
    stream = flow.plan().node(tj.stream)
    assert isinstance(stream, SelectNode) and stream.upstream == "orders"
    assert stream.columns == ("t", "cur", "x")
    # the versioned table: rates' key, and the columns read, prefixed right_ as every join's right side
    table = flow.plan().node(tj.table)
    assert isinstance(table, SelectNode) and table.upstream == "rates"
    assert table.columns == ("cur", ("right_x", "`x`"))
    sel = flow.plan().node(out.ref.step)
    assert sel.upstream == tj.step
    assert sel.columns == ("t", "cur", ("amount", "`x`"), ("rate", "`right_x`"), "version_time")
    assert out.late_steps == (tj.step,)
    assert out.late().ref.step == tj.step and out.late().ref.port == "late"


def test_unaliased_table_and_bare_columns(flow):
    out = wire.sql(flow, """
        SELECT orders.t, amount, rates.x AS rate FROM (SELECT t, cur, x AS amount FROM orders) AS orders
        JOIN rates FOR SYSTEM_TIME AS OF orders.t ON orders.cur = rates.cur""", name="q")
    tj = only(flow, "q", TemporalJoinNode)
    assert (tj.on, tj.table_key, tj.how) == ("cur", "cur", "inner")
    assert flow.plan().node(out.ref.step).columns == ("t", "amount", ("rate", "`right_x`"))


def test_keys_of_other_names_and_several_equalities_are_one_json_key(flow):
    wire.sql(flow, """
        SELECT o.*, r.x AS rate FROM orders AS o
        JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.kind AND o.kind = r.cur""", name="q")
    tj = only(flow, "q", TemporalJoinNode)
    assert (tj.on, tj.table_key) == ("_sql_key", "_sql_key")
    maps = {m.upstream: dict(m.columns)["_sql_key"] for m in nodes(flow, "q", MapNode)}
    assert maps == {"orders": "to_json(named_struct('k0', `cur`, 'k1', `kind`))",
                    "rates": "to_json(named_struct('k0', `kind`, 'k1', `cur`))"}
    table = flow.plan().node(tj.table)
    assert table.columns[0] == "_sql_key"
    assert ("right_cur", "`cur`") in table.columns and ("right_kind", "`kind`") in table.columns


def test_a_versioned_table_keyword_gives_the_key_and_delete_markers(flow):
    versions = flow.tables()["rates"].as_table(key="cur", delete="gone")
    out = wire.sql(flow, """
        SELECT o.t, o.cur, r.x AS rate FROM orders AS o
        LEFT JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON r.cur = o.cur""", rates=versions, name="q")
    tj = only(flow, "q", TemporalJoinNode)
    assert (tj.on, tj.table_key, tj.delete, tj.how) == ("cur", "cur", "right_gone", "left")
    assert flow.plan().node(tj.table).columns == ("cur", ("right_x", "`x`"), ("right_gone", "`gone`"))
    assert flow.plan().node(out.ref.step).columns == ("t", "cur", ("rate", "`right_x`"))


def test_where_filters_the_stream_before_and_the_joined_rows_after(flow):
    """A term on the versioned table is not pushed into it: the event would meet an older version."""
    wire.sql(flow, """
        SELECT o.t, r.x AS rate FROM orders AS o
        JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur
        WHERE o.x > 10 AND r.x < 2""", name="q")
    tj = only(flow, "q", TemporalJoinNode)
    filters = nodes(flow, "q", FilterNode)
    assert [(f.upstream, f.predicate) for f in filters] == [
        ("orders", "`x` > 10"), (tj.step, "`right_x` < 2")]


def test_inner_join_on_terms_beyond_the_key_filter_the_joined_rows(flow):
    """Time conditions too: they compare the version's columns, they are no interval join."""
    wire.sql(flow, """
        SELECT o.t, r.x AS rate FROM orders AS o
        JOIN rates FOR SYSTEM_TIME AS OF o.t AS r
          ON o.cur = r.cur AND r.x > o.x AND r.t >= o.t - INTERVAL '5' SECOND""", name="q")
    tj = only(flow, "q", TemporalJoinNode)
    f = only(flow, "q", FilterNode)
    assert f.upstream == tj.step
    assert f.predicate == "`right_x` > `x` AND `right_t` >= `t` - INTERVAL '5' SECOND"


def test_the_result_has_the_events_time_and_a_window_can_follow(flow):
    out = wire.sql(flow, """
        SELECT cur, COUNT(*) AS n, MAX(rate) AS top, window_start, window_end
        FROM TABLE(TUMBLE(TABLE (
            SELECT o.t, o.cur, r.x AS rate FROM orders AS o
            JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur),
          DESCRIPTOR(t), INTERVAL '10' SECOND))
        GROUP BY cur, window_start, window_end""", name="q")
    tj = only(flow, "q", TemporalJoinNode)
    win = only(flow, "q", WindowAggregateNode)  # DESCRIPTOR(t) is accepted: t is the rows' event time
    assert out.late_steps == (tj.step, win.step)


def test_temporal_join_node_columns_and_time_are_known(flow):
    versions = flow.tables()["rates"].select("cur", ("rate", "x"), "gone").as_table(key="cur", delete="gone")
    joined = flow.tables()["orders"].select("t", "cur", ("amount", "x")).temporal_join(versions, on="cur")
    assert known_columns(joined) == ("cur", "t", "amount", "rate", "version_time")
    assert event_time_column(joined) == "t"


def at(query: str, needle: str) -> tuple[int, int]:
    """The 1-based (line, column) of ``needle`` in ``query`` (hand-derived)."""
    offset = query.index(needle)
    return query.count("\n", 0, offset) + 1, offset - (query.rfind("\n", 0, offset) + 1) + 1


JOIN = "SELECT o.t, r.x AS rate FROM orders AS o\n"
CASES = [
    # (query, the text the error points at, words of the problem, words of what is supported)
    (JOIN + "JOIN rates FOR SYSTEM_TIME AS OF o.x AS r ON o.cur = r.cur", "o.x",
     "not the left table's event time (which is 't')", "only the event-time temporal join"),
    (JOIN + "JOIN rates FOR SYSTEM_TIME AS OF r.t AS r ON o.cur = r.cur", "r.t",
     "not a column of the left table", "only the event-time temporal join"),
    (JOIN + "JOIN rates FOR SYSTEM_TIME AS OF o.t + 1 AS r ON o.cur = r.cur", "o.t + 1",
     "not a column", "only the event-time temporal join"),
    (JOIN + "JOIN rates FOR SYSTEM_TIME AS OF NOW() AS r ON o.cur = r.cur", "NOW()",
     "only the event-time temporal join (AS OF the left's event-time column) and the lookup join",
     "event-time temporal join"),
    (JOIN + "JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.x < r.x", "o.x < r.x",
     "no equality between a column of each side", "ON a.k = r.k"),
    (JOIN + "LEFT JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur AND r.x > 1", "r.x > 1",
     "a condition other than the key equality in the ON of a LEFT temporal join", "ON <equalities"),
    (JOIN + "RIGHT JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur", "RIGHT",
     "RIGHT JOIN ... FOR SYSTEM_TIME AS OF", "an inner or LEFT join"),
    (JOIN + "FULL OUTER JOIN rates FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur", "FULL",
     "FULL OUTER JOIN", "an inner or LEFT join"),
    ("SELECT x FROM rates FOR SYSTEM_TIME AS OF t_now", "t_now", "FOR SYSTEM_TIME AS OF outside a JOIN",
     "a temporal join"),
    (JOIN + "JOIN rates VERSION AS OF 3 AS r ON o.cur = r.cur", "3", "VERSION AS OF",
     "event-time temporal join"),
    (JOIN + "JOIN nope FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur", "nope", "unknown table 'nope'",
     "rates"),
]


@pytest.mark.parametrize(("query", "needle", "problem", "supported"), CASES,
                         ids=[c[2].split("'")[0][:40] for c in CASES])
def test_unsupported_temporal_joins_name_their_position(flow, query, needle, problem, supported):
    with pytest.raises(SqlError) as info:
        wire.sql(flow, query)
    e = info.value
    line, column = at(query, needle)
    assert (e.line, e.column) == (line, column), str(e)
    assert problem in str(e)
    assert supported in e.accepted


def test_a_versioned_table_is_read_by_a_temporal_join_only(flow):
    versions = flow.tables()["rates"].as_table(key="cur")
    query = "SELECT cur FROM v"
    with pytest.raises(SqlError, match="versioned table 'v' read as a stream") as info:
        wire.sql(flow, query, v=versions)
    assert (info.value.line, info.value.column) == (1, 17)
    query = JOIN + "JOIN v FOR SYSTEM_TIME AS OF o.t AS r ON o.kind = r.kind"
    with pytest.raises(SqlError, match="versioned table's key 'cur'") as info:
        wire.sql(flow, query, v=versions)
    assert (info.value.line, info.value.column) == at(query, "o.kind = r.kind")
    with pytest.raises(SqlError, match="has the key 'currency', not one of its columns"):
        wire.sql(flow, JOIN + "JOIN v FOR SYSTEM_TIME AS OF o.t AS r ON o.cur = r.cur",
                 v=flow.tables()["rates"].as_table(key="currency"))
    with pytest.raises(wire.ConfigError, match="versioned table"):
        wire.sql(wire.Flow("other"), "SELECT 1 AS one FROM v", v=versions)


@pytest.fixture
def customers(tmp_path) -> wire.tables.LookupTable:
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["EUR", "USD"], "tier": ["gold", "silver"], "region": ["eu", "us"]}),
                   tmp_path / "customers.parquet")
    return wire.tables.parquet(tmp_path / "customers.parquet", key="id")


@pytest.mark.parametrize(("join", "how"), [("JOIN", "inner"), ("LEFT JOIN", "left")])
def test_as_of_proctime_of_a_wire_table_is_a_lookup_join(flow, customers, join, how):
    out = wire.sql(flow, f"""
        SELECT o.t, o.cur, c.id, c.tier FROM orders AS o
        {join} customers FOR SYSTEM_TIME AS OF PROCTIME() AS c ON o.cur = c.id
        WHERE o.x > 1""", customers=customers, name="q")
    lj = only(flow, "q", LookupJoinNode)
    assert (lj.table, lj.on, lj.how) == (customers, "cur", how)
    assert only(flow, "q", FilterNode).upstream == "orders"
    # c.id is the left's ON column; the table's columns keep their names (lookup_join has no prefix)
    assert flow.plan().node(out.ref.step).columns == ("t", "cur", ("id", "`cur`"), "tier")
    assert out.late_steps == ()
    star = wire.sql(flow, "SELECT * FROM orders AS o JOIN customers FOR SYSTEM_TIME AS OF PROCTIME() AS c "
                    "ON c.id = o.cur", customers=customers)
    assert known_columns(star) == (*SCHEMA.names, "tier", "region")


def test_lookup_join_errors(flow, customers):
    def fails(query: str, needle: str, problem: str) -> None:
        with pytest.raises(SqlError) as info:
            wire.sql(flow, query, customers=customers)
        assert problem in str(info.value)
        assert (info.value.line, info.value.column) == at(query, needle), str(info.value)

    fails(JOIN + "JOIN customers FOR SYSTEM_TIME AS OF o.t AS c ON o.cur = c.id", "o.t AS c",
          "FOR SYSTEM_TIME AS OF o.t of the wire.tables table 'customers'")
    fails(JOIN + "JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r ON o.cur = r.cur", "PROCTIME()",
          "'rates', which is not a wire.tables table")
    fails(JOIN + "JOIN customers FOR SYSTEM_TIME AS OF PROCTIME() AS c ON o.cur = c.tier", "o.cur = c.tier",
          "ON does not equate a left column with the table's key 'id'")
    fails(JOIN + "LEFT JOIN customers FOR SYSTEM_TIME AS OF PROCTIME() AS c ON o.cur = c.id AND c.tier = 'x'",
          "c.tier = 'x'", "a condition other than the key equality in the ON of a LEFT lookup join")
    fails("SELECT * FROM customers", "customers", "the wire.tables table 'customers' read as a stream")
    clash = wire.tables.parquet(customers.path, key="id", columns=["tier"])
    with pytest.raises(SqlError, match=r"the table's columns \['tier'\] are also the left table's"):
        wire.sql(flow, "SELECT o.t FROM (SELECT t, cur, x AS tier FROM orders) AS o\n"
                 "JOIN c FOR SYSTEM_TIME AS OF PROCTIME() ON o.cur = c.id", c=clash)
