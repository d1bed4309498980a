"""The Nexmark events (persons, auctions, bids), generated deterministically per event id.

The model follows the Nexmark benchmark (Tucker et al.; the Beam / Flink generators):

* Event id ``i`` (0, 1, 2, ...) decides the kind by ``i mod 50``: 0 → person,
  1..3 → auction, 4..49 → bid (proportions 1:3:46).
* Ids are sequential: the person of epoch ``e = i // 50`` is ``1000 + e``, its auctions
  are ``1000 + 3e + (i mod 50 - 1)``.
* Event time: ``date_time = BASE_TIME_MS + i * 1000 // first_event_rate`` plus, when
  ``out_of_order_ms > 0``, a deterministic pseudo-random displacement in
  ``[0, out_of_order_ms)`` so arrival (id) order and event-time order differ.
* Every random choice is a pure function of ``(seed, id, field)`` (a splitmix64 hash),
  so any id range can be generated on its own, vectorized with numpy, and the result
  does not depend on how the range is split into epochs or partitions.

Simplifications of the reference generator (documented, deliberate):

* Hot items use the reference's default ratios: a bid goes to the current hot auction
  (the latest auction id rounded down to a multiple of 100) with probability 1/2
  (``hotAuctionRatio = 2``), a bid comes from a hot bidder (latest person id rounded
  down to a multiple of 100, plus 1) with probability 3/4 (``hotBiddersRatio = 4``),
  and an auction is sold by a hot seller (latest person rounded down to a multiple of
  100) with probability 3/4 (``hotSellersRatio = 4``). Otherwise the id is uniform
  over the 100 latest auctions / 1,000 latest persons. There is no id "lead": bids only
  reference auctions and persons that already exist.
* Prices are log-uniform in cents: ``round(10 ** (6u) * 100)``, 1 $ to 1,000,000 $.
  ``reserve = initial_bid + another such price``.
* ``expires = date_time + uniform [2 s, 20 s)`` (the reference scales auction length
  with the event rate; a fixed range keeps the queries' time scales readable).
* Names, cities and states come from the reference's small lists; ``email`` is derived
  from the name, ``item_name`` is ``"item-<auction_id>"``, ``channel`` is one of four
  channels and ``url`` is fixed per channel; ``extra`` / ``description`` are omitted.

All kinds share one flat schema (:data:`SCHEMA`): ``kind`` and ``date_time`` are always
set; the other columns are null unless they belong to the row's kind. A flow that reads
few columns gets only those: :func:`generate`'s ``columns`` limits what is computed, so no
time goes into the others. The Wire source over these events is
:mod:`wire.examples.nexmark_source`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError
from wire.sources.base.source import check_columns, select_columns

BASE_TIME_MS = 1_436_918_400_000
"""2015-07-15T00:00:00Z, the reference generator's base time."""
PROPORTION_DENOMINATOR = 50
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO = 2
HOT_BIDDER_RATIO = 4
HOT_SELLER_RATIO = 4
HOT_ROUNDING = 100
RECENT_AUCTIONS = 100
RECENT_PERSONS = 1000

FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
             "Seattle", "Kent", "Cheyenne"]
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
CHANNEL_URLS = [f"https://www.nexmark.com/{c.lower()}/item.htm?query=1&channel_id={k}"
                for k, c in enumerate(CHANNELS)]

SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("date_time", pa.int64(), nullable=False),
        pa.field("person_id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("email", pa.string()),
        pa.field("city", pa.string()),
        pa.field("state", pa.string()),
        pa.field("auction_id", pa.int64()),
        pa.field("item_name", pa.string()),
        pa.field("seller", pa.int64()),
        pa.field("category", pa.int64()),
        pa.field("initial_bid", pa.int64()),
        pa.field("reserve", pa.int64()),
        pa.field("expires", pa.int64()),
        pa.field("bidder", pa.int64()),
        pa.field("price", pa.int64()),
        pa.field("channel", pa.string()),
        pa.field("url", pa.string()),
    ]
)
"""The flat event schema: ``kind`` is ``"person"``, ``"auction"`` or ``"bid"``."""

# ------------------------------------------------------------------------------ generator

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, vectorized over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class _Rand:
    """Independent pseudo-random streams per (seed, field), indexed by event id."""

    def __init__(self, ids: np.ndarray, seed: int) -> None:
        self.ids = ids.astype(np.uint64)
        self.seed = seed

    def bits(self, salt: int) -> np.ndarray:
        key = _mix(np.array([(self.seed * 1_000_003 + salt) & (2**64 - 1)], dtype=np.uint64))
        return _mix(self.ids ^ key[0])

    def uniform(self, salt: int) -> np.ndarray:
        """Floats in [0, 1)."""
        return (self.bits(salt) >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)

    def below(self, salt: int, n: np.ndarray | int) -> np.ndarray:
        """Ints in [0, n) (n >= 1)."""
        return (self.bits(salt) % np.asarray(n, dtype=np.uint64)).astype(np.int64)


def event_times(
    start: int, stop: int, *, seed: int = 1, first_event_rate: int = 10_000, out_of_order_ms: int = 0
) -> np.ndarray:
    """Return ``date_time`` (int64 ms) of events ``start..stop-1``."""
    ids = np.arange(start, stop, dtype=np.int64)
    t = BASE_TIME_MS + ids * 1000 // first_event_rate
    if out_of_order_ms > 0:
        t = t + (_Rand(ids, seed).uniform(1) * out_of_order_ms).astype(np.int64)
    return t


def _price(r: _Rand, salt: int) -> np.ndarray:
    return np.round(10.0 ** (r.uniform(salt) * 6.0) * 100.0).astype(np.int64)


def _masked(values: np.ndarray, mask: np.ndarray) -> pa.Array:
    return pa.array(values, pa.int64(), mask=~mask)


def _pick(words: list[str], idx: np.ndarray, mask: np.ndarray) -> pa.Array:
    picked = pa.array(words, pa.string()).take(pa.array(idx))
    return pc.if_else(pa.array(mask), picked, pa.scalar(None, pa.string()))


_NULL_STRING = pa.scalar(None, pa.string())


class _Events:
    """The values shared by several columns of events ``start..stop-1``, each computed once, on use."""

    def __init__(self, start: int, stop: int, seed: int, first_event_rate: int, out_of_order_ms: int) -> None:
        self.start, self.stop = start, stop
        self.seed, self.first_event_rate, self.out_of_order_ms = seed, first_event_rate, out_of_order_ms
        self.ids = np.arange(start, stop, dtype=np.int64)
        self.r = _Rand(self.ids, seed)
        self.off = self.ids % PROPORTION_DENOMINATOR
        self.epoch = self.ids // PROPORTION_DENOMINATOR
        self.last_person = self.epoch  # base-0 id of the newest person (it opens each epoch)
        self.is_person = self.off < PERSON_PROPORTION
        self.is_auction = (self.off >= PERSON_PROPORTION) & (
            self.off < PERSON_PROPORTION + AUCTION_PROPORTION)
        self.is_bid = ~(self.is_person | self.is_auction)

    @cached_property
    def dt(self) -> np.ndarray:
        return event_times(self.start, self.stop, seed=self.seed, first_event_rate=self.first_event_rate,
                           out_of_order_ms=self.out_of_order_ms)

    @cached_property
    def names(self) -> tuple[pa.Array, pa.Array]:
        """First and last names of every id."""
        fn = pa.array(FIRST_NAMES, pa.string()).take(pa.array(self.r.below(2, len(FIRST_NAMES))))
        ln = pa.array(LAST_NAMES, pa.string()).take(pa.array(self.r.below(3, len(LAST_NAMES))))
        return fn, ln

    @cached_property
    def lo_p(self) -> np.ndarray:
        return np.maximum(self.last_person - RECENT_PERSONS + 1, 0)

    @cached_property
    def auction_id(self) -> np.ndarray:
        """The auction's own id (auctions) or the bid's auction (bids), unmasked."""
        own_auction = self.epoch * AUCTION_PROPORTION + (self.off - PERSON_PROPORTION)
        last_auction = self.epoch * AUCTION_PROPORTION + AUCTION_PROPORTION - 1
        hot_auction = (last_auction // HOT_ROUNDING) * HOT_ROUNDING
        lo_a = np.maximum(last_auction - RECENT_AUCTIONS + 1, 0)
        recent_auction = lo_a + self.r.below(12, last_auction - lo_a + 1)
        bid_auction = np.where(self.r.below(13, HOT_AUCTION_RATIO) > 0, hot_auction, recent_auction)
        return np.where(self.is_auction, own_auction, bid_auction) + FIRST_AUCTION_ID

    @cached_property
    def initial_bid(self) -> np.ndarray:
        return _price(self.r, 9)

    @cached_property
    def chan(self) -> np.ndarray:
        return self.r.below(17, len(CHANNELS))


def _kind(e: _Events) -> pa.Array:
    kind = np.where(e.is_person, 0, np.where(e.is_auction, 1, 2))
    return pa.array(["person", "auction", "bid"], pa.string()).take(pa.array(kind))


def _name(e: _Events) -> pa.Array:
    fn, ln = e.names
    return pc.if_else(pa.array(e.is_person), pc.binary_join_element_wise(fn, ln, " "), _NULL_STRING)


def _email(e: _Events) -> pa.Array:
    fn, ln = e.names
    mail = pc.binary_join_element_wise(
        pc.binary_join_element_wise(pc.utf8_lower(fn), pc.utf8_lower(ln), "."),
        pa.scalar("nexmark.example"), "@")
    return pc.if_else(pa.array(e.is_person), mail, _NULL_STRING)


def _seller(e: _Events) -> pa.Array:
    hot_seller = (e.last_person // HOT_ROUNDING) * HOT_ROUNDING
    recent_seller = e.lo_p + e.r.below(6, e.last_person - e.lo_p + 1)
    seller = np.where(e.r.below(7, HOT_SELLER_RATIO) > 0, hot_seller, recent_seller) + FIRST_PERSON_ID
    return _masked(seller, e.is_auction)


def _item_name(e: _Events) -> pa.Array:
    item = pc.binary_join_element_wise(pa.scalar("item"), pc.cast(pa.array(e.auction_id), pa.string()), "-")
    return pc.if_else(pa.array(e.is_auction), item, _NULL_STRING)


def _bidder(e: _Events) -> pa.Array:
    hot_bidder = np.minimum((e.last_person // HOT_ROUNDING) * HOT_ROUNDING + 1, e.last_person)
    recent_bidder = e.lo_p + e.r.below(14, e.last_person - e.lo_p + 1)
    bidder = np.where(e.r.below(15, HOT_BIDDER_RATIO) > 0, hot_bidder, recent_bidder) + FIRST_PERSON_ID
    return _masked(bidder, e.is_bid)


_COLUMNS: dict[str, Callable[[_Events], pa.Array]] = {
    "kind": _kind,
    "date_time": lambda e: pa.array(e.dt, pa.int64()),
    "person_id": lambda e: _masked(e.last_person + FIRST_PERSON_ID, e.is_person),
    "name": _name,
    "email": _email,
    "city": lambda e: _pick(US_CITIES, e.r.below(4, len(US_CITIES)), e.is_person),
    "state": lambda e: _pick(US_STATES, e.r.below(5, len(US_STATES)), e.is_person),
    "auction_id": lambda e: _masked(e.auction_id, e.is_auction | e.is_bid),
    "item_name": _item_name,
    "seller": _seller,
    "category": lambda e: _masked(FIRST_CATEGORY_ID + e.r.below(8, NUM_CATEGORIES), e.is_auction),
    "initial_bid": lambda e: _masked(e.initial_bid, e.is_auction),
    "reserve": lambda e: _masked(e.initial_bid + _price(e.r, 10), e.is_auction),
    "expires": lambda e: _masked(e.dt + 2_000 + e.r.below(11, 18_000), e.is_auction),
    "bidder": _bidder,
    "price": lambda e: _masked(_price(e.r, 16), e.is_bid),
    "channel": lambda e: _pick(CHANNELS, e.chan, e.is_bid),
    "url": lambda e: _pick(CHANNEL_URLS, e.chan, e.is_bid),
}
"""How each column of :data:`SCHEMA` is computed."""


def generate(
    start: int, stop: int, *, seed: int = 1, first_event_rate: int = 10_000, out_of_order_ms: int = 0,
    columns: tuple[str, ...] | list[str] | None = None,
) -> pa.Table:
    """Return events ``start..stop-1`` (in id order) as a table in :data:`SCHEMA`.

    Pure and deterministic: the same id gives the same event for the same ``seed``,
    ``first_event_rate`` and ``out_of_order_ms``, whatever range it is generated in.
    ``columns`` (None: all) restricts the table to those columns of :data:`SCHEMA`, in
    its order; only they are computed, with the same values as in the full table.

    Raises
    ------
    ConfigError
        On an invalid range or rate, or a name in ``columns`` that is not a column.
    """
    if not 0 <= start <= stop:
        raise ConfigError("range", (start, stop), "0 <= start <= stop")
    if first_event_rate <= 0:
        raise ConfigError("first_event_rate", first_event_rate, "a positive int")
    schema = select_columns(SCHEMA, check_columns(None, SCHEMA, columns))
    events = _Events(start, stop, seed, first_event_rate, out_of_order_ms)
    return pa.Table.from_arrays([_COLUMNS[f.name](events) for f in schema], schema=schema)
