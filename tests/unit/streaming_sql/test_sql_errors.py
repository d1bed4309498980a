"""Unsupported or invalid SQL fails when the flow is built, naming line, column and what is supported."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.plan.graph import sinks
from wire.streaming_sql import SqlError

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


@pytest.fixture
def flow(tmp_path) -> wire.Flow:
    flow = wire.Flow("errors")
    files = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet", schema=SCHEMA)  # never read
    flow.table("events", flow.source(files, event_time="t", name="input"))
    return flow


def error(flow: wire.Flow, query: str) -> SqlError:
    with pytest.raises(SqlError) as info:
        wire.sql(flow, query)
    return info.value


def at(query: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """The 1-based (line, column) of the ``nth`` occurrence of ``needle`` in ``query`` (hand-derived)."""
    offset = -1
    for _ in range(nth + 1):
        offset = query.index(needle, offset + 1)
    line = query.count("\n", 0, offset) + 1
    return line, offset - (query.rfind("\n", 0, offset) + 1) + 1


CASES = [
    # (query, the text the error points at, words of the problem, words of what is supported)
    ("SELECT k FROM events WHERE", "WHERE", "syntax error", "SELECT"),
    ("SELECT DISTINCT k FROM events", "DISTINCT", "SELECT DISTINCT of rows that are not in a window",
     "GROUP BY of all"),
    ("SELECT DISTINCT k, window_start\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))", "DISTINCT",
     "SELECT DISTINCT without window_end", "window_start and window_end"),
    ("SELECT DISTINCT k, v + 1 AS w, window_start, window_end\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))", "v + 1",
     "SELECT DISTINCT of an expression", "in a subquery"),
    ("WITH RECURSIVE r AS (SELECT k FROM events)\nSELECT k FROM r", "RECURSIVE", "WITH RECURSIVE",
     "not recursive"),
    ("WITH r AS (SELECT k FROM events), r AS (SELECT k FROM events)\nSELECT k FROM r",
     "r AS (SELECT k FROM events)\n", "the CTE name 'r' twice", "WITH name AS"),
    ("WITH r(a, b) AS (SELECT k FROM events)\nSELECT a FROM r", "r(a, b)", "2 column names for a query of 1",
     "as many names"),
    ("SELECT a.k FROM events AS a\n  RIGHT JOIN events AS b ON a.k = b.k", "RIGHT", "an outer join",
     "inner joins only"),
    ("SELECT a.k FROM events AS a\n  FULL OUTER JOIN events AS b ON a.k = b.k", "FULL", "FULL OUTER JOIN",
     "inner joins only"),
    ("SELECT k, v\nFROM events\nORDER BY v", "ORDER BY", "ORDER BY", "UNION ALL"),
    ("SELECT k FROM events\nLIMIT 3", "LIMIT", "LIMIT", "GROUP BY"),
    ("SELECT k, count(*) AS n\nFROM events\nGROUP BY k", "GROUP BY", "not over a window TVF", "TUMBLE"),
    ("SELECT k, count(DISTINCT v) AS n, window_start, window_end\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))\n"
     "GROUP BY k, window_start, window_end", "count(DISTINCT", "COUNT(DISTINCT", "COUNT(*)"),
    ("SELECT count(*) AS n, window_start, window_end\n"
     "FROM TABLE(CUMULATE(TABLE events, DESCRIPTOR(t), INTERVAL '1' SECOND, INTERVAL '10' SECOND))\n"
     "GROUP BY window_start, window_end", "CUMULATE", "table function CUMULATE", "HOP"),
    ("SELECT a.k FROM events AS a\n  LEFT JOIN events AS b ON a.k = b.k", "LEFT", "LEFT JOIN",
     "inner joins only"),
    ("SELECT k FROM bids", "bids", "unknown table 'bids'", "events"),
    ("SELECT k, w FROM events", "w", "unknown column 'w'", "'t', 'k', 'v'"),
    ("SELECT k, v * 2 FROM events", "v * 2", "has no name", "AS <name>"),
    ("SELECT k FROM events UNION SELECT k FROM events", "UNION", "UNION (distinct)", "UNION ALL"),
    ("SELECT count(*) AS n, window_start\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(v), INTERVAL '10' SECOND))\n"
     "GROUP BY window_start, window_end", "v)", "DESCRIPTOR(v)", "event_time"),
    ("SELECT count(*) AS n, window_start, window_end\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' FORTNIGHT))\n"
     "GROUP BY window_start, window_end", "'10'", "not an interval", "MILLISECOND, SECOND"),
    ("SELECT k, count(*) AS n, window_start\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))\n"
     "GROUP BY k, window_start", "k, window_start", "without window_end", "GROUP BY window_start"),
    ("SELECT k, v, window_start FROM (\n"
     "  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY v DESC) AS rn\n"
     "  FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND)))", "SELECT *",
     "no bound on rn", "rn <= k"),
    ("SELECT a.k FROM events AS a JOIN events AS b ON a.v < b.v", "a.v", "no equality", "<left column> = "),
    ("SELECT k, v + 1 AS w, count(*) AS n, window_start, window_end\n"
     "FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))\n"
     "GROUP BY k, window_start, window_end", "v + 1", "neither in GROUP BY nor aggregated", "aggregates"),
]


@pytest.mark.parametrize(("query", "needle", "problem", "supported"), CASES,
                         ids=[c[2].split("'")[0][:30] for c in CASES])
def test_unsupported_sql_names_its_position_and_what_is_supported(flow, query, needle, problem, supported):
    e = error(flow, query)
    line, column = at(query, needle if needle != "SELECT *" else "SELECT", 1 if needle == "SELECT *" else 0)
    if needle == "SELECT *":  # the position of the unbounded ranking: the subquery
        assert e.line is not None
    else:
        assert (e.line, e.column) == (line, column), str(e)
        assert f"line {line}, column {column}" in str(e)
    assert problem in str(e)
    assert supported in e.accepted
    assert isinstance(e, wire.ConfigError)  # one exception tree: caught as a configuration error


def test_nothing_is_recorded_before_a_later_error_is_found(flow):
    """An error is raised while recording; the SELECT's earlier operators may be recorded, no sink is."""
    error(flow, "SELECT k FROM events WHERE v > 1 ORDER BY k")
    assert not sinks(flow.plan())


def test_options_are_checked(flow):
    with pytest.raises(wire.ConfigError, match="emit"):
        wire.sql(flow, "SELECT k FROM events", emit="sometimes")
    with pytest.raises(wire.ConfigError, match="allowed_lateness"):
        wire.sql(flow, "SELECT k FROM events", allowed_lateness="soon")
    other = wire.Flow("other")
    with pytest.raises(wire.ConfigError, match="same flow"):
        wire.sql(other, "SELECT k FROM x", x=flow.tables()["events"])


def test_flow_table_checks_name_and_stream(flow):
    stream = flow.tables()["events"]
    with pytest.raises(wire.ConfigError, match="registered"):
        flow.table("EVENTS", stream)
    with pytest.raises(wire.ConfigError, match="identifier"):
        flow.table("1x", stream)
    with pytest.raises(wire.ConfigError, match="stream of this flow"):
        wire.Flow("other").table("x", stream)
