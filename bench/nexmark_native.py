"""The Nexmark queries written with plain PySpark Structured Streaming's own operators (bench/nexmark.py).

``withWatermark``, ``window()``, ``session_window()`` and stream-stream joins, over the
stream(s) a caller's ``read()`` returns; the watermark delay is :data:`DELAY`.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from wire.examples import nexmark_queries

DELAY = "5 seconds"
"""The watermark delay of every native query (Wire's flows use the same)."""


def only(df: DataFrame, predicate: str) -> DataFrame:
    """``df`` filtered on ``predicate``, kept above ``withWatermark``.

    Spark's optimizer pushes a filter conjunct below ``withWatermark`` unless it refers to
    the event-time column, which would drop the end marker before the watermark sees it;
    ``OR t IS NULL`` (``t`` is never null here) makes the predicate refer to ``t``.
    """
    return df.filter(f"({predicate}) OR t IS NULL")


def native_query(read: Callable[[], DataFrame], query: str) -> DataFrame:
    """``query`` with Spark's own operators over the stream(s) that ``read()`` returns.

    Windowed queries put ``withWatermark`` before the kind filter, so that the end
    marker row advances the watermark before it is filtered out (see :func:`only`).
    """
    cols = ["auction_id", "bidder", "price", "channel", "url", "date_time"]
    if query in ("q0", "q1", "q2"):
        bids = read().filter("kind = 'bid'")
        if query == "q0":
            return bids.select(*cols)
        if query == "q1":
            return bids.withColumn("price", F.expr("(price * 908) div 1000")).select(*cols)
        return bids.filter("auction_id % 123 = 0").select("auction_id", "price")
    if query == "q3":
        # unbounded inner stream-stream join, no time condition: no watermark needed
        persons = (read().filter("kind = 'person' AND state IN ('OR', 'ID', 'CA')")
                   .select("person_id", "name", "city", "state"))
        auctions = read().filter("kind = 'auction' AND category = 10").select("auction_id", "seller")
        return persons.join(auctions, F.expr("person_id = seller")).select(
            "name", "city", "state", "auction_id")

    def timed() -> DataFrame:
        return read().withColumn("t", F.timestamp_millis("date_time")).withWatermark("t", DELAY)

    if query == "q4":
        return native_q4(timed)
    if query == "q8":
        both = (only(timed(), "kind IN ('person', 'auction')")
                .withColumn("id", F.expr("CASE WHEN kind = 'person' THEN person_id ELSE seller END")))
        agg = both.groupBy(F.window("t", "10 seconds"), "id").agg(
            F.sum(F.expr("CASE WHEN kind = 'person' THEN 1 ELSE 0 END")).alias("persons"),
            F.sum(F.expr("CASE WHEN kind = 'auction' THEN 1 ELSE 0 END")).alias("auctions"),
            F.max("name").alias("name"))
        return agg.filter("persons > 0 AND auctions > 0").select(
            "id", "name", F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"))
    bids = only(timed(), "kind = 'bid'")
    if query == "q5":
        # two chained streaming aggregations (Spark >= 3.5 in append mode): bids per
        # auction per sliding window, then per window (keyed by window_time(window) = window
        # end - 1 us, one 2 s window per sliding one) every auction with the most bids: the
        # max and the list of (auction, bids), filtered to the max and exploded into rows
        counts = bids.groupBy(F.window("t", "10 seconds", "2 seconds"), "auction_id").agg(
            F.count(F.lit(1)).alias("bids"))
        scored = counts.select(F.window_time("window").alias("wt"), "auction_id", "bids")
        best = scored.groupBy(F.window("wt", "2 seconds")).agg(
            F.max("bids").alias("maxn"), F.collect_list(F.struct("auction_id", "bids")).alias("all"))
        hot = F.explode(F.filter("all", lambda a: a["bids"] >= F.col("maxn"))).alias("hot")
        return best.select("window", hot).select("window", "hot.auction_id", "hot.bids")
    if query == "q7":
        # every bid with the window's highest price: the max and the list of bids, filtered
        bid = F.struct(*nexmark_queries.Q7_COLUMNS)
        top = bids.groupBy(F.window("t", "10 seconds")).agg(
            F.max("price").alias("maxprice"), F.collect_list(bid).alias("all"))
        best = F.explode(F.filter("all", lambda b: b["price"] == F.col("maxprice"))).alias("bid")
        return top.select("window", best).select("window", "bid.*")
    if query == "q11":
        return bids.groupBy(F.session_window("t", "10 seconds"), "bidder").agg(
            F.count(F.lit(1)).alias("bids"))
    raise ValueError(query)


def native_q4(timed: Callable[[], DataFrame]) -> DataFrame:
    """Average closing price per category, natively.

    auctions ⋈ bids on the auction id with ``auction.t <= bid.t <= auction.expires`` (plus
    the redundant ``bid.t <= auction.t + 20 s``: expires is < 20 s after the auction, and
    Spark needs a bound on the watermarked columns to drop join state); then per auction
    a session window (gap 20 s) on the bid time: the max price, one row per auction whose
    session starts at its earliest bid.

    Spark refuses the direct last stage, ``window(session_window.start, "10 seconds")``:
    the session's start loses the watermark, so the second aggregation is "without
    watermark" and append mode is rejected. It only accepts chaining on
    ``window_time(session_window)`` = session end - 1 us = last bid + 20 s - 1 us. So the
    last stage keys each auction by the 10 s bucket of its earliest bid (a plain key,
    ``bucket``) and aggregates it in sliding windows of 50 s every 10 s of
    ``window_time``, keeping the window that starts at ``bucket``: all auctions of one
    bucket fall in that window (earliest bid in [b, b + 10 s), so last bid < b + 30 s and
    the session end in [b + 20 s, b + 50 s)), hence its average is exact.
    """
    auctions = (only(timed(), "kind = 'auction'")
                .select(F.col("auction_id").alias("a_id"), "category", F.col("t").alias("a_t"),
                        F.timestamp_millis("expires").alias("a_exp")))
    bids = (only(timed(), "kind = 'bid'")
            .select(F.col("auction_id").alias("b_id"), "price", F.col("t").alias("b_t")))
    joined = auctions.join(bids, F.expr(
        "b_id = a_id AND b_t BETWEEN a_t AND a_exp AND b_t <= a_t + INTERVAL 20 SECONDS"))
    winners = joined.groupBy(F.session_window("b_t", "20 seconds"), "a_id", "category").agg(
        F.max("price").alias("price"))
    keyed = winners.select(
        F.window_time("session_window").alias("wt"), "category", "price",
        F.expr("timestamp_seconds(floor(unix_seconds(session_window.start) / 10) * 10)").alias("bucket"))
    per_window = keyed.groupBy(F.window("wt", "50 seconds", "10 seconds"), "category", "bucket").agg(
        F.avg("price").alias("price"))
    return per_window.filter("window.start = bucket").select(
        "category", F.col("bucket").alias("window_start"),
        (F.col("bucket") + F.expr("INTERVAL 10 SECONDS")).alias("window_end"), "price")
