"""A table's ``WATERMARK FOR ... AS ... - INTERVAL`` clause sets its source's watermark.

One flow, three Nexmark sources over the same events (out of order by up to 8 s), each
registered as a table with its own clause, each with the same SQL window query and its
late table. The sources admit 300 events per epoch, so the watermark in force for the
events of epoch ``e`` is the one the source recorded after epoch ``e - 1``:
``max(date_time of events [0, 300 e)) - delay`` (none for epoch 0, SPEC §2). A pandas
oracle applies the window's rule (late iff ``window_end + allowed_lateness <= watermark``,
SPEC §3) to that transcript: a smaller delay makes more events late, and each late
table holds exactly the oracle's late events.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import wire
from wire.examples.nexmark_source import generate, nexmark
from wire.testing import MemorySink

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # three sources, one run: ~60-90 s on 2 shared cores

EVENTS, RATE, DISORDER_MS, PER_EPOCH, SEED = 3_000, 100, 8_000, 300, 7
SIZE_MS = 5_000
# (source name, flow.source(watermark=...), the table's clause, its delay in ms)
CASES = [
    ("d0", None, "WATERMARK FOR date_time AS date_time", 0),
    ("d2", None, "WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND", 2_000),
    ("d6", wire.BoundedOutOfOrderness("6s"), "WATERMARK FOR date_time\n  AS date_time - INTERVAL '6' SECOND",
     6_000),
]
QUERY = """
SELECT COUNT(*) AS bids, MAX(price) AS top, window_start, window_end
FROM TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(date_time), INTERVAL '5' SECOND))
GROUP BY window_start, window_end"""


def oracle_late(delay_ms: int) -> pd.DataFrame:
    """The bids the transcript makes late for a tumbling 5 s window, allowed lateness 0."""
    events = generate(0, EVENTS, seed=SEED, first_event_rate=RATE, out_of_order_ms=DISORDER_MS).to_pandas()
    events["epoch"] = np.arange(EVENTS) // PER_EPOCH
    max_before = events.groupby("epoch").date_time.max().cummax().shift(1)  # after epoch e - 1
    events["watermark"] = events.epoch.map(max_before) - delay_ms
    bids = events[events.kind == "bid"]
    window_end = bids.date_time // SIZE_MS * SIZE_MS + SIZE_MS
    return bids[bids.watermark.notna() & (window_end <= bids.watermark)]


def test_watermark_clause_sets_the_sources_policy_and_the_late_table_follows_it(spark, tmp_path):
    flow = wire.Flow("sql-watermark")
    sinks: dict[str, MemorySink] = {}
    for name, policy, clause, _ in CASES:
        events = flow.source(nexmark(events=EVENTS, first_event_rate=RATE, seed=SEED,
                                     out_of_order_ms=DISORDER_MS),
                             event_time="date_time", watermark=policy, max_events_per_epoch=PER_EPOCH,
                             name=name)
        flow.table(f"bids_{name}", events.filter("kind = 'bid'"), watermark=clause)
        result = wire.sql(flow, QUERY.format(table=f"bids_{name}"), name=f"q_{name}")
        result.sink(MemorySink(), name=f"out_{name}")
        sinks[name] = MemorySink()
        result.late().sink(sinks[name], name=f"late_{name}")
    for name, _, _, delay in CASES:
        assert flow.plan().node(name).watermark.max_delay_ms == delay
    flow.run(checkpoint=str(tmp_path / "ck"), spark=spark, progress=False)

    late_counts = []
    for name, _, _, delay in CASES:
        expected = oracle_late(delay)
        got = pd.DataFrame(sinks[name].rows())
        # each late bid, with the watermark in force when it arrived
        key = ["date_time", "auction_id", "bidder", "price", "watermark"]
        want = sorted(map(tuple, expected[key].astype("int64").to_numpy().tolist()))
        have = sorted(map(tuple, got[key].astype("int64").to_numpy().tolist())) if len(got) else []
        assert have == want, name
        if len(got):
            assert set(got.reason) == {"window closed: window_end + allowed_lateness <= watermark"}
        late_counts.append(len(want))
    # the smaller the delay, the more events are late; the 6 s delay leaves few but not none
    assert late_counts[0] > late_counts[1] > late_counts[2] > 0
