"""The Nexmark generator and its stream reader's planning, without Spark."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from wire.core import envelope
from wire.errors import ConfigError
from wire.examples.nexmark_events import (
    BASE_TIME_MS,
    FIRST_AUCTION_ID,
    FIRST_PERSON_ID,
    SCHEMA,
    event_times,
    generate,
)
from wire.examples.nexmark_source import NexmarkStreamReader, _Config, nexmark

N = 50_000


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return generate(0, N, seed=7, first_event_rate=1000, out_of_order_ms=500)


def col(t: pa.Table, name: str) -> np.ndarray:
    return t.column(name).to_numpy(zero_copy_only=False)


def test_schema_and_proportions(table):
    assert table.schema == SCHEMA
    kinds = col(table, "kind")
    assert (kinds == "person").sum() == N // 50
    assert (kinds == "auction").sum() == 3 * N // 50
    assert (kinds == "bid").sum() == 46 * N // 50
    ids = np.arange(N)
    assert (kinds[ids % 50 == 0] == "person").all()
    assert (kinds[(ids % 50 >= 1) & (ids % 50 <= 3)] == "auction").all()


def test_per_kind_columns_are_null_elsewhere(table):
    per_kind = {
        "person": ["person_id", "name", "email", "city", "state"],
        "auction": ["auction_id", "item_name", "seller", "category", "initial_bid", "reserve", "expires"],
        "bid": ["auction_id", "bidder", "price", "channel", "url"],
    }
    for kind, cols in per_kind.items():
        rows = table.filter(pc.equal(table["kind"], kind))
        for name in SCHEMA.names[2:]:
            nulls = rows[name].null_count
            assert nulls == (0 if name in cols else rows.num_rows), (kind, name)


def test_sequential_ids_and_references(table):
    persons = table.filter(pc.equal(table["kind"], "person"))
    auctions = table.filter(pc.equal(table["kind"], "auction"))
    bids = table.filter(pc.equal(table["kind"], "bid"))
    assert col(persons, "person_id").tolist() == list(range(FIRST_PERSON_ID, FIRST_PERSON_ID + N // 50))
    assert col(auctions, "auction_id").tolist() == list(
        range(FIRST_AUCTION_ID, FIRST_AUCTION_ID + 3 * N // 50))
    # bids and sellers only reference auctions / persons that already exist
    ids = np.arange(N)
    bid_ids = ids[ids % 50 >= 4]
    assert (col(bids, "auction_id") <= FIRST_AUCTION_ID + 3 * (bid_ids // 50) + 2).all()
    assert (col(bids, "bidder") <= FIRST_PERSON_ID + bid_ids // 50).all()
    assert (col(bids, "auction_id") >= FIRST_AUCTION_ID).all()
    auction_ids = ids[(ids % 50 >= 1) & (ids % 50 <= 3)]
    assert (col(auctions, "seller") <= FIRST_PERSON_ID + auction_ids // 50).all()
    # hot auctions: about half of the bids go to one auction per 100 (ratio 2)
    hot = (col(bids, "auction_id") - FIRST_AUCTION_ID) % 100 == 0
    assert 0.45 < hot.mean() < 0.6
    assert (col(auctions, "reserve") > col(auctions, "initial_bid")).all()
    assert set(col(auctions, "category")) <= set(range(10, 15))
    prices = col(bids, "price")
    assert prices.min() >= 100 and prices.max() <= 100_000_000
    assert np.median(prices) < 200_000  # log-uniform, not uniform


def test_deterministic_and_independent_of_ranges(table):
    again = generate(0, N, seed=7, first_event_rate=1000, out_of_order_ms=500)
    assert again.equals(table)
    pieces = pa.concat_tables(
        [generate(a, b, seed=7, first_event_rate=1000, out_of_order_ms=500)
         for a, b in [(0, 1), (1, 777), (777, 20_001), (20_001, N)]])
    assert pieces.equals(table)
    other = generate(0, N, seed=8, first_event_rate=1000, out_of_order_ms=500)
    assert not other.equals(table)
    assert col(other, "kind").tolist() == col(table, "kind").tolist()


def test_event_times_and_out_of_order_bounds(table):
    ids = np.arange(N)
    nominal = BASE_TIME_MS + ids * 1000 // 1000
    shift = col(table, "date_time") - nominal
    assert shift.min() >= 0 and shift.max() < 500
    assert shift.std() > 100  # really displaced
    assert (np.diff(col(table, "date_time")) < 0).any()  # out of order in arrival order
    in_order = generate(0, 1000, first_event_rate=10_000)
    assert (np.diff(col(in_order, "date_time")) >= 0).all()
    assert col(in_order, "date_time")[-1] == BASE_TIME_MS + 999 // 10
    assert event_times(5, 10, seed=7, first_event_rate=1000, out_of_order_ms=500).tolist() == (
        col(table, "date_time")[5:10].tolist())


def test_factory_validates():
    assert nexmark(events=10).bounded
    for bad in (dict(events=-1), dict(events=10, first_event_rate=0), dict(events=10, partitions=0),
                dict(events=10, out_of_order_ms=-1)):
        with pytest.raises(ConfigError):
            nexmark(**bad)


def reader(events: int, *, epoch: int = 400, delay: int = 1000, partitions: int = 2) -> NexmarkStreamReader:
    src = nexmark(events=events, first_event_rate=100, out_of_order_ms=300, partitions=partitions)
    cfg = src.to_json(step="src", event_time="date_time", key_groups=3, max_delay_ms=delay,
                      max_events_per_epoch=epoch, control_file=None)
    return NexmarkStreamReader(_Config(cfg))


def test_reader_offsets_watermarks_and_final_epoch():
    r = reader(1000)
    start = r.initialOffset()
    offsets = [start]
    while True:
        end = r.latestOffset(offsets[-1], r.getDefaultReadLimit())
        if end == offsets[-1]:
            break
        json.dumps(end)  # offsets are JSON
        offsets.append(end)
    # the epoch that admits the last events ends the source: no epoch of its own for the end
    assert [o["next"] for o in offsets] == [0, 400, 800, 1000]
    assert [o["ended"] for o in offsets] == [False, False, False, True]
    assert offsets[-1]["watermark"] == envelope.MAX_WATERMARK
    rows = pa.Table.from_batches([b for p in r.partitions(offsets[-2], offsets[-1]) for b in r.read(p)])
    data = rows.filter(pc.equal(rows[envelope.KIND], envelope.KIND_DATA))
    assert data[envelope.SEQ].to_pylist() == list(range(800, 1000))
    assert set(data[envelope.WM].to_pylist()) == {offsets[-2]["watermark"]}  # judged by the start's
    marks = rows.filter(pc.equal(rows[envelope.KIND], envelope.KIND_WATERMARK))
    assert marks[envelope.WM].to_pylist() == [envelope.MAX_WATERMARK] * 3  # one per key group
    times = event_times(0, 1000, seed=1, first_event_rate=100, out_of_order_ms=300)
    for o in offsets[1:-1]:
        assert o["max_event_time"] == times[: o["next"]].max()
        assert o["watermark"] == o["max_event_time"] - 1000
    assert r.latestOffset(offsets[1], ReadMaxRows(10))["next"] == 410


def test_reader_partitions_and_rows():
    r = reader(1000)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, r.getDefaultReadLimit())
    parts = r.partitions(o0, o1)
    assert [(p.lo, p.hi) for p in parts] == [(0, 200), (200, 400)]
    batches = [b for p in parts for b in r.read(p)]
    rows = pa.Table.from_batches(batches)
    kind = rows[envelope.KIND].to_numpy()
    data = rows.filter(pc.equal(rows[envelope.KIND], envelope.KIND_DATA))
    assert data.num_rows == 400
    assert data[envelope.SEQ].to_pylist() == list(range(400))
    assert data[envelope.ET].equals(data["date_time"])
    assert set(data[envelope.WM].to_pylist()) == {o0["watermark"]}
    assert (kind == envelope.KIND_WATERMARK).sum() == 3  # one per key group, once per epoch
    wms = rows.filter(pc.equal(rows[envelope.KIND], envelope.KIND_WATERMARK))
    assert set(wms[envelope.WM].to_pylist()) == {o1["watermark"]}
    assert (kind == envelope.KIND_SIDE).sum() == 1  # metrics
    # an offset at the end that does not say so (an input of no events, an older Wire's
    # checkpoint): one final epoch of watermark rows only, at MAX_WATERMARK
    last = dict(o1, next=1000)
    end = r.latestOffset(last, r.getDefaultReadLimit())
    final = pa.Table.from_batches([b for p in r.partitions(last, end) for b in r.read(p)])
    assert final.num_rows == 3
    assert set(final[envelope.WM].to_pylist()) == {envelope.MAX_WATERMARK}
    assert r.partitions(end, end) == []


def test_paced_reader_admits_only_events_available_by_processing_time(monkeypatch):
    import wire.examples.nexmark_source as nx

    src = nexmark(events=10_000, first_event_rate=100, pace=1000)  # 1,000 events/s
    cfg = src.to_json(step="src", event_time="date_time", key_groups=1, max_delay_ms=0,
                      max_events_per_epoch=5_000, control_file=None)
    r = NexmarkStreamReader(_Config(cfg))
    now = [1_000_000.0]
    monkeypatch.setattr(nx.time, "time", lambda: now[0])
    first = r.latestOffset(r.initialOffset(), r.getDefaultReadLimit())
    assert first["next"] == 0 and first["started_at_ms"] == 1_000_000_000  # the clock starts
    assert r.partitions(r.initialOffset(), first) == []  # ... in an epoch that reads nothing
    now[0] += 0.25
    o1 = r.latestOffset(first, r.getDefaultReadLimit())
    assert o1["next"] == 250 and o1["started_at_ms"] == first["started_at_ms"]
    assert r.latestOffset(o1, r.getDefaultReadLimit()) == o1  # nothing new yet: no epoch
    now[0] += 9.0  # 9,250 available, but an epoch admits at most 5,000
    assert r.latestOffset(o1, r.getDefaultReadLimit())["next"] == 5_250
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError) as info:
            nexmark(events=10, pace=bad)
        assert info.value.parameter == "pace"
