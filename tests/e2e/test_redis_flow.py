"""A flow reading a Redis stream through a consumer group: counts, acks, restarts."""

from __future__ import annotations

import json
import random
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.sources.redis_source.source import redis_stream
from wire.testing.redis import RedisServer

pytestmark = pytest.mark.spark
redis = pytest.importorskip("redis")

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
N = 300
WINDOW = 200
BAD = 3


@pytest.fixture(scope="module")
def server():
    ok, reason = RedisServer.available()
    if not ok:
        pytest.skip(reason)
    with RedisServer() as s:
        yield s


@pytest.fixture
def client(server):
    c = redis.Redis.from_url(server.url)
    c.flushall()
    yield c
    c.close()


def produce(client) -> pd.DataFrame:
    """XADD N events (event times out of order by < 50 ms) and BAD malformed entries."""
    rng = random.Random(7)
    events = [{"t": i * 10 + rng.randrange(40), "k": "abc"[rng.randrange(3)], "v": i} for i in range(N)]
    for i, e in enumerate(events):
        client.xadd("events", {"data": json.dumps(e)})
        if i % 100 == 50:
            client.xadd("events", {"data": "{broken"})
    return pd.DataFrame(events)


def oracle(events: pd.DataFrame) -> list[tuple[str, int, int]]:
    start = events.t // WINDOW * WINDOW
    counts = events.assign(start=start).groupby(["k", "start"]).size()
    return sorted((k, int(s), int(n)) for (k, s), n in counts.items())


def build(server, out, dead=None, raw=None):
    flow = wire.Flow("redis_counts")
    src = redis_stream(server.url, "events", group="wire", schema=SCHEMA, idle_timeout="1s")
    s = flow.source(src, event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(50),
                    max_events_per_epoch=50, name="events")
    s.window(wire.Tumbling(WINDOW)).aggregate(n=wire.count(), name="w").sink(wire.sinks.parquet(out))
    if dead is not None:
        flow.dead_letters().sink(wire.sinks.parquet(dead))
    if raw is not None:  # a second branch on the source
        s.filter("v % 2 = 0", name="even").sink(wire.sinks.parquet(raw), name="raw")
    return flow


def read(out) -> pa.Table | None:
    files = sorted(out.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


def counted(out) -> list[tuple[str, int, int]]:
    t = read(out)
    if t is None:
        return []
    starts = t.column("window_start").cast(pa.timestamp("ms", "UTC")).cast(pa.int64()).to_pylist()
    return sorted(zip(t.column("k").to_pylist(), starts, t.column("n").to_pylist(), strict=True))


def wait_for(predicate, timeout_s=180.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def pending(client) -> int:
    return client.xpending("events", "wire")["pending"]


def total(out) -> int:
    return sum(n for *_, n in counted(out))


def test_counts_match_oracle_and_everything_is_acknowledged(spark, server, client, tmp_path):
    events = produce(client)
    out, dead = tmp_path / "out", tmp_path / "dead"
    running = build(server, out, dead).start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        wait_for(lambda: total(out) >= N, what="all events counted")
    finally:
        summary = running.stop()
    assert counted(out) == oracle(events)
    letters = read(dead)
    assert letters is not None and letters.num_rows == BAD
    assert all(loc.startswith("events:") for loc in letters.column("location").to_pylist())
    assert summary.epochs >= (N + BAD) // 50
    assert pending(client) == 0
    group = client.xinfo_groups("events")[0]
    assert group["last-delivered-id"] == client.xinfo_stream("events")["last-generated-id"]


def test_restart_after_lost_acks_reads_nothing_twice(spark, server, client, tmp_path):
    events = produce(client)
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    first = build(server, out).start(ck, spark=spark, key_groups=2)
    try:
        wait_for(lambda: total(out) >= N, what="all events counted")
    finally:
        first.stop()
    assert pending(client) == 0
    # Every epoch committed, but make it look as if no XACK had reached Redis: the
    # group's entries are delivered again and left pending (the state after a crash
    # between the checkpoint's commit and the source's commit()).
    client.xgroup_setid("events", "wire", "0")
    client.xreadgroup("wire", "wire", {"events": ">"})
    assert pending(client) == N + BAD
    second = build(server, out).start(ck, spark=spark, key_groups=2)
    try:
        wait_for(lambda: pending(client) == 0, timeout_s=60, what="lost acks made up for")
        time.sleep(1.5)  # watermark ticks run: a re-read would re-emit windows now
    finally:
        second.stop()
    assert counted(out) == oracle(events)  # no duplicate, no update


def test_crash_mid_run_then_restart_is_exactly_once(spark, server, client, tmp_path):
    events = produce(client)
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    first = build(server, out).start(ck, spark=spark, key_groups=2)
    try:
        wait_for(lambda: first.summary.epochs >= 2, timeout_s=120, what="two epochs")
    finally:
        first.stop(graceful=False)  # may interrupt an epoch: it is replayed
    assert total(out) < N
    second = build(server, out).start(ck, spark=spark, key_groups=2)
    try:
        wait_for(lambda: total(out) >= N, what="all events counted after restart")
    finally:
        second.stop()
    assert counted(out) == oracle(events)
    assert pending(client) == 0


def test_a_branched_flow_reads_and_acknowledges_each_entry_once(spark, server, client, tmp_path):
    """Two branches on one Redis stream: each branch sees every entry once, each entry is
    acknowledged, the dead letters come out once, and Spark scans the stream once per epoch."""
    events = produce(client)
    out, dead, raw = tmp_path / "out", tmp_path / "dead", tmp_path / "raw"
    running = build(server, out, dead, raw).start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        wait_for(lambda: total(out) >= N, what="all events counted")
        wait_for(lambda: read(raw) is not None and read(raw).num_rows >= N // 2, what="raw branch")
    finally:
        summary = running.stop()
    assert counted(out) == oracle(events)
    assert sorted(read(raw).column("v").to_pylist()) == [v for v in events.v if v % 2 == 0]
    assert read(dead).num_rows == BAD
    assert pending(client) == 0
    assert summary.source_scans == 1
