"""Nexmark queries written with Wire's public API (q0, q1, q2, q3, q4, q5, q7, q8, q11).

Each ``qN(events)`` takes the stream of a :func:`wire.examples.nexmark_source.nexmark`
source (all kinds, no key) and returns the query's output stream; :func:`build`
makes a whole flow (source, query, sink). Wire flows cannot branch yet, so each query
is its own flow.

* q0 pass-through: the bids (``auction_id, bidder, price, channel, url, date_time``).
* q1 currency conversion: ``price`` (dollar cents) to euro cents,
  ``(price * 908) div 1000``, i.e. ``floor(price * 0.908)`` in exact integer
  arithmetic (prices are positive, so truncation = floor).
* q2 selection: ``auction_id, price`` of bids with ``auction_id % 123 = 0``.
* q5 hot items: bids per auction in sliding windows of 10 s every 2 s, then per window
  every auction with the most bids (all tied auctions, one row each, as the reference
  q5's join on ``num >= maxn``). The second stage is a window of windows: a 2 s
  tumbling window over the count rows (whose event time is their ``window_start``, a
  multiple of 2 s, so one tumbling window = one sliding window), keyed by a constant,
  keeping ``top_k("bids", 1, ties="all")`` and exploding it into rows.
  :func:`q5_counts` is the first stage alone.
* q7 highest bid: per tumbling 10 s window, every bid with the highest price (all tied
  bids, as the reference q7's join on ``price = maxprice``): ``window_start,
  window_end, auction_id, bidder, price, date_time`` (the bid's columns; the
  reference's ``extra`` is not generated).
* q8 monitor new users: persons who opened an auction in the same tumbling 10 s window
  in which they registered (a windowed join, as one keyed window over both kinds).
* q11 user sessions: bids per bidder per session, gap 10 s.

* q3 local item suggestion: persons in Oregon, Idaho or California (``state IN ('OR',
  'ID', 'CA')``) joined with the auctions of category 10 they sell (``person_id =
  seller``), a regular (unbounded) stream-stream join: ``name, city, state, auction_id``.
* q4 average closing price per category: auctions ⋈ bids on the auction id with the
  bid between the auction's ``date_time`` and ``expires`` (an interval join, ``[0,
  20 s]``: the generator's auctions last less than :data:`MAX_AUCTION_MS`, then a
  filter on ``expires``); the winning price of an auction is its highest such bid (a
  session window of gap 20 s per auction holds exactly one auction's bids, so each
  session is one auction, and its event time is its first bid); then the mean winning
  price per category in tumbling 10 s windows of that event time (the windowed form of
  Beam's Query4; Flink's SQL q4 is an unwindowed updating average):
  ``category, window_start, window_end, price``.

q3 and q4 read two streams; a Wire flow does not branch yet, so :func:`build` gives
them two Nexmark sources with the same configuration (the same events, generated
twice), one per side of the join.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wire
from wire.examples.nexmark_source import nexmark

MAX_AUCTION_MS = 20_000
"""Upper bound of ``expires - date_time`` of the generator's auctions (ms)."""

BID_COLUMNS = ("auction_id", "bidder", "price", "channel", "url", "date_time")
Q7_COLUMNS = ("auction_id", "bidder", "price", "date_time")
"""The bid's columns q7 returns."""


def bids(events: wire.Stream) -> wire.Stream:
    """The bid events only."""
    return events.filter("kind = 'bid'", name="bids")


def q0(events: wire.Stream) -> wire.Stream:
    """Pass-through of the bids."""
    return bids(events).select(*BID_COLUMNS, name="q0")


def q1(events: wire.Stream) -> wire.Stream:
    """Bids with ``price`` converted from dollar cents to euro cents (x 0.908, floored)."""
    return bids(events).map(price="(price * 908) div 1000", name="q1").select(*BID_COLUMNS)


def q2(events: wire.Stream) -> wire.Stream:
    """``auction_id, price`` of the bids on every 123rd auction."""
    return bids(events).filter("auction_id % 123 = 0", name="q2").select("auction_id", "price")


def _keep(windows: list[wire.Stream] | None, stream: wire.Stream) -> wire.Stream:
    if windows is not None:
        windows.append(stream)
    return stream


def q5_counts(events: wire.Stream, windows: list[wire.Stream] | None = None) -> wire.Stream:
    """Bids per auction per sliding window (10 s every 2 s): column ``bids``."""
    return _keep(windows, bids(events).key_by("auction_id")
                 .window(wire.Sliding("10s", "2s")).aggregate(bids=wire.count(), name="q5_counts"))


def q5(events: wire.Stream, windows: list[wire.Stream] | None = None) -> wire.Stream:
    """Hot items per sliding window: ``window_start, window_end, auction_id, bids``.

    One row per auction tied for the most bids in the window. ``windows``, when
    given, receives the window steps (e.g. to sink their late ports).
    """
    counts = q5_counts(events, windows).map(all="0")
    best = _keep(windows, counts.key_by("all").window(wire.Tumbling("2s")).aggregate(
        hot=wire.top_k("bids", 1, columns=["auction_id", "bids"], ties="all"), name="q5"))
    return best.explode("hot").select(
        "window_start", wire_expr("window_start + INTERVAL 10 SECONDS").alias("window_end"),
        ("auction_id", "hot.auction_id"), ("bids", "hot.bids"))


def q7(events: wire.Stream, windows: list[wire.Stream] | None = None) -> wire.Stream:
    """Highest bids per tumbling 10 s window: ``window_start, window_end`` + :data:`Q7_COLUMNS`.

    One row per bid tied for the highest price in the window.
    """
    top = _keep(windows, bids(events).map(all="0").key_by("all").window(wire.Tumbling("10s"))
                .aggregate(bid=wire.top_k("price", 1, columns=list(Q7_COLUMNS), ties="all"), name="q7"))
    return top.explode("bid").select("window_start", "window_end", *[(c, f"bid.{c}") for c in Q7_COLUMNS])


def q11(events: wire.Stream, windows: list[wire.Stream] | None = None) -> wire.Stream:
    """Bids per bidder session (gap 10 s): ``bidder, window_start, window_end, bids``."""
    sessions = _keep(windows, bids(events).key_by("bidder").window(wire.Session("10s"))
                     .aggregate(bids=wire.count(), name="q11"))
    return sessions.select("bidder", "window_start", "window_end", "bids")


def q3(person_events: wire.Stream, auction_events: wire.Stream) -> wire.Stream:
    """Local item suggestion: ``name, city, state, auction_id`` (unbounded join)."""
    persons = (person_events.filter("kind = 'person' AND state IN ('OR', 'ID', 'CA')", name="q3_persons")
               .select("person_id", "name", "city", "state").key_by("person_id"))
    auctions = (auction_events.filter("kind = 'auction' AND category = 10", name="q3_auctions")
                .select(("person_id", "seller"), "auction_id").key_by("person_id"))
    return persons.join(auctions, name="q3").select(
        "name", "city", "state", ("auction_id", "right_auction_id"))


def q4(auction_events: wire.Stream, bid_events: wire.Stream,
       windows: list[wire.Stream] | None = None) -> wire.Stream:
    """Average closing price per category per 10 s: ``category, window_start, window_end, price``."""
    auctions = (auction_events.filter("kind = 'auction'", name="q4_auctions")
                .select("auction_id", "category", "expires").key_by("auction_id"))
    bid_s = (bid_events.filter("kind = 'bid'", name="q4_bids")
             .select("auction_id", "price").key_by("auction_id"))
    in_time = (auctions.interval_join(bid_s, lower=0, upper=MAX_AUCTION_MS, name="q4_join")
               .filter("right_event_time <= expires", name="q4_in_time")
               .select("auction_id", "category", ("price", "right_price")))
    winning = _keep(windows, in_time.window(wire.Session(MAX_AUCTION_MS)).aggregate(
        price=wire.max("price"), category=wire.max("category"), name="q4_winning"))
    average = _keep(windows, winning.key_by("category").window(wire.Tumbling("10s")).aggregate(
        price=wire.mean("price"), name="q4"))
    return average.select("category", "window_start", "window_end", "price")


def q8(events: wire.Stream, windows: list[wire.Stream] | None = None) -> wire.Stream:
    """New users: persons who opened an auction in the 10 s tumbling window they joined in.

    A windowed person ⋈ auction join on ``person_id = seller`` within the same window,
    written as one keyed window over both kinds (key = person id or seller), keeping
    the windows that saw both: ``id, name, window_start, window_end``.
    """
    both = (events.filter("kind = 'person' OR kind = 'auction'", name="q8_input")
            .map(id="CASE WHEN kind = 'person' THEN person_id ELSE seller END",
                 is_person="CASE WHEN kind = 'person' THEN 1 ELSE 0 END",
                 is_auction="CASE WHEN kind = 'auction' THEN 1 ELSE 0 END")
            .key_by("id"))
    joined = _keep(windows, both.window(wire.Tumbling("10s")).aggregate(
        persons=wire.sum("is_person"), auctions=wire.sum("is_auction"),
        person_name=wire.max("name"), name="q8"))
    return (joined.filter("persons > 0 AND auctions > 0")
            .select("id", ("name", "person_name"), "window_start", "window_end"))


def wire_expr(sql: str) -> Any:
    """A Spark SQL expression as a Column (for ``select`` with ``.alias``)."""
    from pyspark.sql import functions as F

    return F.expr(sql)


QUERIES: dict[str, Callable[..., wire.Stream]] = {
    "q0": q0, "q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q7": q7, "q8": q8, "q11": q11,
}
WINDOWED = frozenset({"q4", "q5", "q7", "q8", "q11"})
TWO_INPUTS = frozenset({"q3", "q4"})
"""Queries that join two streams of the one source (a branching flow, see :func:`build`)."""


def build(
    query: str, sink: Any, *, events: int, first_event_rate: int = 10_000, seed: int = 1,
    out_of_order_ms: int = 0, max_delay: Any = "5s", max_events_per_epoch: int = 100_000,
    late_sink: Any = None, partitions: int = 1, connector: Any = None,
) -> wire.Flow:
    """A flow running ``query`` over a Nexmark source and writing to ``sink``.

    ``connector``: another source of the same events (e.g. ``wire.sources.files`` over the
    generated events written as Parquet, as ``bench/nexmark.py`` compares engines on the
    same files); None: the generator with ``events``, ``seed``, ``first_event_rate``,
    ``out_of_order_ms`` and ``partitions``.
    """
    if query not in QUERIES:
        raise wire.ConfigError("query", query, f"one of {sorted(QUERIES)}")
    flow = wire.Flow(f"nexmark-{query}")

    def source(name: str) -> wire.Stream:
        gen = connector if connector is not None else nexmark(
            events=events, first_event_rate=first_event_rate, seed=seed,
            out_of_order_ms=out_of_order_ms, partitions=partitions)
        return flow.source(gen, event_time="date_time", watermark=wire.BoundedOutOfOrderness(max_delay),
                           max_events_per_epoch=max_events_per_epoch, name=name)

    events_stream = source("events")
    inputs = [events_stream] * (2 if query in TWO_INPUTS else 1)  # q3, q4: both join sides branch off it
    windows: list[wire.Stream] = []
    out = QUERIES[query](*inputs, windows) if query in WINDOWED else QUERIES[query](*inputs)
    out.sink(sink)
    if late_sink is not None and windows:
        # only the last window's late port (one sink, one directory); the other windows'
        # late events are kept under the checkpoint and counted in the run summary
        windows[-1].late().sink(late_sink)
    return flow
