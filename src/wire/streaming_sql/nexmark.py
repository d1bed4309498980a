"""The Nexmark queries q0-q5, q7, q8 and q11 in SQL, over the tables ``bids``, ``auctions``, ``persons``.

Each query computes what its Python version in :mod:`wire.examples.nexmark_queries`
computes, with the same output columns (``tests/e2e/test_sql_nexmark.py`` checks that
both give the same rows on the same input). :func:`build` makes a whole flow as
``nexmark_queries.build`` does: one Nexmark source, its events registered as the three
tables (each a ``filter`` on ``kind``), the query, a sink.

Where the SQL differs from Flink's / RisingWave's Nexmark SQL, it is to say what Wire's
windowed semantics compute (no unbounded, updating aggregations):

* q4: the winning bid of an auction is the highest bid within its lifetime, found by an
  interval join and a session window per auction; the average is per 10 s tumbling
  window of the sessions' start.
* q5: the hottest auctions per sliding window are a window top-N (``RANK() ... <= 1``
  over the windowed counts) instead of a join with a ``max`` subquery.
* q7: the highest bids per window are a window top-N (``RANK() ... <= 1``).
* q8: persons and auctions are aggregated per 10 s window and joined on the key and
  the window start (an interval join with bounds [0, 0] on the rows' event time).
"""

from __future__ import annotations

import re
from typing import Any

import wire
from wire.examples import nexmark_queries

BIDS = ", ".join(nexmark_queries.BID_COLUMNS)

QUERIES: dict[str, str] = {
    "q0": f"SELECT {BIDS} FROM bids",
    "q1": "SELECT auction_id, bidder, (price * 908) DIV 1000 AS price, channel, url, date_time FROM bids",
    "q2": "SELECT auction_id, price FROM bids WHERE auction_id % 123 = 0",
    "q3": """
        SELECT p.name, p.city, p.state, a.auction_id
        FROM auctions AS a JOIN persons AS p ON a.seller = p.person_id
        WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')""",
    "q4": """
        SELECT category, window_start, window_end, AVG(final) AS price
        FROM TABLE(TUMBLE(TABLE (
            SELECT auction_id, MAX(category) AS category, MAX(price) AS final, window_start AS t
            FROM TABLE(SESSION(TABLE (
                SELECT a.auction_id, a.category, b.price, event_time
                FROM auctions AS a JOIN bids AS b
                  ON a.auction_id = b.auction_id
                 AND b.date_time BETWEEN a.date_time AND a.date_time + INTERVAL '20' SECOND
                WHERE b.date_time <= a.expires),
              DESCRIPTOR(event_time), INTERVAL '20' SECOND))
            GROUP BY auction_id, window_start, window_end),
          DESCRIPTOR(t), INTERVAL '10' SECOND))
        GROUP BY category, window_start, window_end""",
    "q5": """
        SELECT window_start, window_end, auction_id, bids FROM (
            SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY bids DESC) AS rk
            FROM (SELECT auction_id, COUNT(*) AS bids, window_start, window_end
                  FROM TABLE(HOP(TABLE bids, DESCRIPTOR(date_time),
                                 INTERVAL '2' SECOND, INTERVAL '10' SECOND))
                  GROUP BY auction_id, window_start, window_end))
        WHERE rk <= 1""",
    "q7": """
        SELECT window_start, window_end, auction_id, bidder, price, date_time FROM (
            SELECT *, RANK() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) AS rk
            FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '10' SECOND)))
        WHERE rk <= 1""",
    "q8": """
        SELECT p.id, p.name, p.starttime AS window_start, p.endtime AS window_end
        FROM (SELECT person_id AS id, name, window_start AS starttime, window_end AS endtime
              FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
              GROUP BY person_id, name, window_start, window_end) AS p
        JOIN (SELECT seller, window_start AS starttime
              FROM TABLE(TUMBLE(TABLE auctions, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
              GROUP BY seller, window_start, window_end) AS a
          ON p.id = a.seller AND p.starttime = a.starttime""",
    "q11": """
        SELECT bidder, window_start, window_end, COUNT(*) AS bids
        FROM TABLE(SESSION(TABLE bids, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
        GROUP BY bidder, window_start, window_end""",
}
"""Query name -> SQL text."""


def register(flow: wire.Flow, events: wire.Stream, query: str | None = None, *, prefix: str = "") -> None:
    """Register ``bids``, ``auctions`` and ``persons``: the events of each kind.

    ``query``: register only the tables it names (a stream no query reads would end
    without a sink, which a flow refuses). ``prefix``: of the filter steps' ids.
    """
    for table, kind in (("bids", "bid"), ("auctions", "auction"), ("persons", "person")):
        if query is None or re.search(rf"\b{table}\b", query, re.IGNORECASE):
            flow.table(table, events.filter(f"kind = '{kind}'", name=prefix + table))


def build(
    query: str,
    sink: Any,
    *,
    events: int,
    first_event_rate: int = 10_000,
    seed: int = 1,
    out_of_order_ms: int = 0,
    max_delay: Any = "5s",
    max_events_per_epoch: int = 100_000,
    late_sink: Any = None,
    partitions: int = 1,
    connector: Any = None,
) -> wire.Flow:
    """A flow running the SQL ``query`` over a Nexmark source, as ``nexmark_queries.build``.

    ``late_sink``: receives the late table of the query's last window or join (the
    others' late events are kept under the checkpoint).
    """
    if query not in QUERIES:
        raise wire.ConfigError("query", query, f"one of {sorted(QUERIES)}")
    flow = wire.Flow(f"nexmark-sql-{query}")
    # the generator as nexmark_queries imports it, wherever the generator's module lives
    gen = (
        connector
        if connector is not None
        else nexmark_queries.nexmark(  # type: ignore[attr-defined]
            events=events,
            first_event_rate=first_event_rate,
            seed=seed,
            out_of_order_ms=out_of_order_ms,
            partitions=partitions,
        )
    )
    source = flow.source(
        gen,
        event_time="date_time",
        watermark=wire.BoundedOutOfOrderness(max_delay),
        max_events_per_epoch=max_events_per_epoch,
        name="events",
    )
    register(flow, source, QUERIES[query])
    result = wire.sql(flow, QUERIES[query], name=query)
    result.sink(sink)
    if late_sink is not None and result.late_steps:
        wire.sql_late(result, step=result.late_steps[-1]).sink(late_sink)
    return flow


def plan_differences(query: str) -> list[str]:
    """Where the SQL ``query``'s plan differs from its Python twin's (``[]``: nowhere that matters).

    Step ids differ (the SQL compiler numbers its own), so the stateful steps (windows,
    joins: what a checkpoint keeps) are compared by their fingerprints
    (:func:`wire.plan.fingerprint.plan_fingerprint`) in plan order, without the
    aggregations' output names (``_sql_a0`` in SQL); stateless steps (filters, maps,
    selects) are counted by kind. Each difference is one string, e.g.
    ``"window 2 key: all / _sql_key"`` (Python / SQL) or ``"stateless Map: 1 / 0"``.
    The Python flow of q5 builds a Spark ``Column``, so a SparkSession must be active.
    """
    from wire.plan.fingerprint import plan_fingerprint
    from wire.plan.nodes import IntervalJoinNode, WindowAggregateNode

    def shape(builder: Any) -> tuple[list[dict[str, Any]], dict[str, int]]:
        plan = builder(query, wire.sinks.parquet("out/unused"), events=1_000).plan()
        fp = plan_fingerprint(plan)
        stateful: list[dict[str, Any]] = []
        stateless: dict[str, int] = {}
        for n in plan.nodes:
            if isinstance(n, WindowAggregateNode | IntervalJoinNode):
                step = dict(fp[n.step])
                if isinstance(step.get("aggregations"), dict):
                    step["aggregations"] = sorted(map(str, step["aggregations"].values()))
                stateful.append(step)
            elif getattr(n, "stateless", False):
                stateless[type(n).__name__] = stateless.get(type(n).__name__, 0) + 1
        return stateful, stateless

    (py, py_kinds), (sql, sql_kinds) = shape(nexmark_queries.build), shape(build)
    out: list[str] = []
    if [s["kind"] for s in py] != [s["kind"] for s in sql]:
        out.append(
            "stateful steps: "
            + " / ".join(", ".join(str(s.get("window") or s["kind"]) for s in side) for side in (py, sql))
        )
    else:
        for i, (a, b) in enumerate(zip(py, sql, strict=True)):
            out += [
                f"{a['kind']} {i + 1} {k}: {a.get(k)} / {b.get(k)}"
                for k in sorted({*a, *b})
                if a.get(k) != b.get(k)
            ]
    for kind in sorted({*py_kinds, *sql_kinds}):
        if py_kinds.get(kind, 0) != sql_kinds.get(kind, 0):
            counts = f"{py_kinds.get(kind, 0)} / {sql_kinds.get(kind, 0)}"
            out.append(f"stateless {kind.removesuffix('Node')}: {counts}")
    return out
