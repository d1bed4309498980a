"""Nexmark queries in Wire vs the same queries in DuckDB SQL over the generated events."""

from __future__ import annotations

import duckdb
import pytest

import wire
from wire.examples.nexmark_queries import build
from wire.examples.nexmark_source import generate

pytestmark = pytest.mark.spark

EVENTS = 20_000
RATE = 200  # events/s of event time: 20,000 events span 100 s
DISORDER_MS = 2_000
PARAMS = dict(events=EVENTS, first_event_rate=RATE, out_of_order_ms=DISORDER_MS, seed=3)


@pytest.fixture(scope="module")
def db() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    events = generate(0, EVENTS, seed=3, first_event_rate=RATE, out_of_order_ms=DISORDER_MS)
    con.register("events_arrow", events)
    con.execute("CREATE TABLE bids AS SELECT * FROM events_arrow WHERE kind = 'bid'")
    return con


def run(spark, tmp_path, query: str) -> str:
    flow = build(query, wire.sinks.parquet(tmp_path / "out"), max_delay="5s",
                 max_events_per_epoch=10_000, late_sink=wire.sinks.parquet(tmp_path / "late"),
                 **PARAMS)
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
    # one source also for the join queries (both sides branch off it; Spark reads it once per
    # side, but its counts come out once)
    assert summary.input_events == EVENTS
    assert summary.total("late") == 0  # disorder 2 s < watermark delay 5 s
    return f"read_parquet('{tmp_path}/out/*/*.parquet')"


def rows(con, sql: str) -> list[tuple]:
    return con.sql(sql).fetchall()


def test_q0_pass_through(spark, tmp_path, db):
    out = run(spark, tmp_path, "q0")
    cols = "auction_id, bidder, price, channel, url, date_time"
    got = rows(db, f"SELECT {cols} FROM {out} ORDER BY ALL")
    assert len(got) == 46 * EVENTS // 50
    assert got == rows(db, f"SELECT {cols} FROM bids ORDER BY ALL")


def test_q1_currency_conversion(spark, tmp_path, db):
    out = run(spark, tmp_path, "q1")
    got = rows(db, f"SELECT auction_id, bidder, price, date_time FROM {out} ORDER BY ALL")
    expected = rows(db, "SELECT auction_id, bidder, (price * 908) // 1000, date_time FROM bids ORDER BY ALL")
    assert got == expected
    assert len(got) == 46 * EVENTS // 50


def test_q2_selection(spark, tmp_path, db):
    out = run(spark, tmp_path, "q2")
    got = rows(db, f"SELECT auction_id, price FROM {out} ORDER BY ALL")
    expected = rows(db, "SELECT auction_id, price FROM bids WHERE auction_id % 123 = 0 ORDER BY ALL")
    assert len(expected) > 10
    assert got == expected


def test_q5_hot_items(spark, tmp_path, db):
    out = run(spark, tmp_path, "q5")
    got = rows(db, f"""SELECT epoch_ms(window_start), epoch_ms(window_end), auction_id, bids
                       FROM {out} ORDER BY ALL""")
    expected = rows(db, """
        WITH w AS (SELECT auction_id,
                          unnest(range(date_time // 2000 * 2000 - 8000, date_time // 2000 * 2000 + 1,
                                       2000)) AS ws
                   FROM bids),
             c AS (SELECT ws, auction_id, count(*) AS n FROM w GROUP BY ALL),
             m AS (SELECT ws, max(n) AS maxn FROM c GROUP BY ws)
        SELECT c.ws, c.ws + 10000, c.auction_id, c.n
        FROM c JOIN m ON c.ws = m.ws AND c.n >= m.maxn ORDER BY ALL""")
    assert len(expected) >= 50
    assert got == expected


def test_q7_highest_bid(spark, tmp_path, db):
    out = run(spark, tmp_path, "q7")
    got = rows(db, f"""SELECT epoch_ms(window_start), epoch_ms(window_end), auction_id, bidder, price,
                              date_time FROM {out} ORDER BY ALL""")
    expected = rows(db, """
        WITH m AS (SELECT date_time // 10000 * 10000 AS ws, max(price) AS maxprice FROM bids GROUP BY ws)
        SELECT m.ws, m.ws + 10000, b.auction_id, b.bidder, b.price, b.date_time
        FROM bids b JOIN m ON b.price = m.maxprice AND b.date_time // 10000 * 10000 = m.ws
        ORDER BY ALL""")
    assert len(expected) >= 10
    assert got == expected


def test_q11_user_sessions(spark, tmp_path, db):
    out = run(spark, tmp_path, "q11")
    got = rows(db, f"""SELECT bidder, epoch_ms(window_start), epoch_ms(window_end), bids
                       FROM {out} ORDER BY ALL""")
    expected = rows(db, """
        WITH x AS (SELECT bidder, date_time AS ts,
                          CASE WHEN ts - lag(ts) OVER (PARTITION BY bidder ORDER BY ts) < 10000
                               THEN 0 ELSE 1 END AS brk FROM bids),
             y AS (SELECT *, sum(brk) OVER (PARTITION BY bidder ORDER BY ts
                                            RANGE UNBOUNDED PRECEDING) AS sid FROM x)
        SELECT bidder, min(ts), max(ts) + 10000, count(*) FROM y GROUP BY bidder, sid ORDER BY ALL""")
    assert len(expected) > 100
    assert got == expected


def test_q8_new_users(spark, tmp_path, db):
    out = run(spark, tmp_path, "q8")
    got = rows(db, f"SELECT id, name, epoch_ms(window_start), epoch_ms(window_end) FROM {out} ORDER BY ALL")
    expected = rows(db, """
        SELECT p.person_id, p.name, p.ws, p.ws + 10000
        FROM (SELECT person_id, name, date_time // 10000 * 10000 AS ws
              FROM events_arrow WHERE kind = 'person') p
        JOIN (SELECT DISTINCT seller, date_time // 10000 * 10000 AS ws
              FROM events_arrow WHERE kind = 'auction') a
          ON p.person_id = a.seller AND p.ws = a.ws
        ORDER BY ALL""")
    assert len(expected) >= 5
    assert got == expected


def test_q3_local_item_suggestion(spark, tmp_path, db):
    out = run(spark, tmp_path, "q3")
    got = rows(db, f"SELECT name, city, state, auction_id FROM {out} ORDER BY ALL")
    expected = rows(db, """
        SELECT p.name, p.city, p.state, a.auction_id
        FROM (SELECT * FROM events_arrow WHERE kind = 'auction' AND category = 10) a
        JOIN (SELECT * FROM events_arrow WHERE kind = 'person' AND state IN ('OR', 'ID', 'CA')) p
          ON p.person_id = a.seller
        ORDER BY ALL""")
    assert len(expected) >= 20
    assert got == expected


def test_q4_average_price_per_category(spark, tmp_path, db):
    out = run(spark, tmp_path, "q4")
    got = rows(db, f"""SELECT category, epoch_ms(window_start), epoch_ms(window_end), round(price, 6)
                       FROM {out} ORDER BY ALL""")
    expected = rows(db, """
        WITH a AS (SELECT auction_id, category, date_time, expires FROM events_arrow
                   WHERE kind = 'auction'),
             w AS (SELECT a.auction_id, a.category, max(b.price) AS price, min(b.date_time) AS t
                   FROM a JOIN bids b ON a.auction_id = b.auction_id
                    AND b.date_time BETWEEN a.date_time AND a.expires
                   GROUP BY ALL)
        SELECT category, t // 10000 * 10000 AS ws, ws + 10000, round(avg(price), 6)
        FROM w GROUP BY category, ws ORDER BY ALL""")
    assert len(expected) >= 30
    assert got == expected
