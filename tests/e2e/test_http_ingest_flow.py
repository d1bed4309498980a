"""HTTP ingest end to end: POST → write-ahead log → window count → Parquet, with a crash."""

from __future__ import annotations

import random
import socket
import time

import httpx
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.delivery.wal import WriteAheadLog
from wire.runtime.checkpoint import list_epochs
from wire.sources.http_source.source import http_ingest

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])
WINDOW_MS = 1_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def events(n: int, seed: int = 7) -> list[dict]:
    """``n`` events 10 ms apart, shuffled within blocks of 50 (out of order by < 500 ms)."""
    rng = random.Random(seed)
    out = []
    for block in range(0, n, 50):
        chunk = [{"t": i * 10, "k": f"k{rng.randrange(3)}"} for i in range(block, min(n, block + 50))]
        rng.shuffle(chunk)
        out += chunk
    return out


def build(tmp_path, port: int, max_events: int = 120) -> wire.Flow:
    flow = wire.Flow("http-ingest")
    src = http_ingest(port=port, wal_dir=str(tmp_path / "wal"), schema=SCHEMA, idle_timeout="2s")
    s = flow.source(src, event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(1_000),
                    max_events_per_epoch=max_events, name="ingest")
    w = s.window(wire.Tumbling(WINDOW_MS)).aggregate(n=wire.count(), name="counts")
    w.sink(wire.sinks.parquet(tmp_path / "out"))
    w.late().sink(wire.sinks.parquet(tmp_path / "late"))
    return flow


def post_when_ready(client: httpx.Client, url: str, batch: list[dict], timeout_s: float = 60) -> dict:
    """POST ``batch``; retry while the server is not up yet (the query is starting) or answers 503."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            r = client.post(url, json=batch)
            if r.status_code == 202:
                return r.json()
            assert r.status_code == 503, r.text
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"ingest at {url} never accepted the batch"
        time.sleep(0.1)


def oracle(sent: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(sent)
    df["window_start"] = df["t"] // WINDOW_MS * WINDOW_MS
    return df.groupby(["k", "window_start"]).size().rename("n").reset_index()


def counted(out) -> pd.DataFrame:
    """The window counts written so far: (k, window_start in ms, n)."""
    files = sorted(out.glob("*/*.parquet"))
    if not files:
        return pd.DataFrame({"k": [], "window_start": [], "n": []})
    table = pa.concat_tables([pq.read_table(f) for f in files])
    start = table.column("window_start")
    if pa.types.is_timestamp(start.type):
        start = start.cast(pa.timestamp("ms", "UTC")).cast(pa.int64())
    return pd.DataFrame({"k": table.column("k").to_pylist(), "window_start": start.to_pylist(),
                         "n": table.column("n").to_pylist()})


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    key = ["k", "window_start"]
    a = a.astype({"window_start": "int64", "n": "int64"}).sort_values(key).reset_index(drop=True)
    b = b.astype({"window_start": "int64", "n": "int64"}).sort_values(key).reset_index(drop=True)
    return a.equals(b)


def wait_until_counted(running, out, expected: pd.DataFrame, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not same(counted(out), expected):
        assert running.is_active(), running.last_error
        assert time.monotonic() < deadline, f"not all counted:\n{counted(out)}\nexpected:\n{expected}"
        time.sleep(0.2)


def committed_seq(checkpoint) -> int:
    """The log seq up to which the last committed epoch read."""
    done = [e for e in list_epochs(checkpoint) if e.committed]
    return done[-1].offsets[0]["partitions"]["wal"]["next"]


def test_posted_events_are_counted_exactly_and_the_log_is_truncated(spark, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/events"
    sent = events(500)
    running = build(tmp_path, port).start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        with httpx.Client(timeout=30) as client:
            seqs = [post_when_ready(client, url, sent[i : i + 50])["seq"] for i in range(0, 500, 50)]
        assert seqs == [[i + 1, i + 50] for i in range(0, 500, 50)]
        wait_until_counted(running, tmp_path / "out", oracle(sent))
    finally:
        running.stop()
    assert not list((tmp_path / "late").glob("*/*.parquet"))
    wal = WriteAheadLog(tmp_path / "wal" / "wal.sqlite")
    try:
        assert wal.max_seq() == 500
        last = committed_seq(tmp_path / "ck")
        assert last == 500  # every event was admitted by a committed epoch ...
        assert wal.count() == 0  # ... and the log let go of all of them
    finally:
        wal.close()
    with pytest.raises(httpx.TransportError):  # the server stopped with the query
        httpx.post(url, json={"t": 1, "k": "a"}, timeout=2)


def test_crash_while_events_are_in_flight_loses_nothing_and_duplicates_nothing(spark, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/events"
    sent = events(600, seed=11)
    first, second = sent[:350], sent[350:]
    checkpoint = str(tmp_path / "ck")
    running = build(tmp_path, port, max_events=50).start(checkpoint, spark=spark, key_groups=2)
    try:
        with httpx.Client(timeout=30) as client:
            for i in range(0, len(first), 50):
                post_when_ready(client, url, first[i : i + 50])
        while not any(e.committed and e.offsets[0]["partitions"]["wal"]["next"] > 0
                      for e in list_epochs(checkpoint)):
            assert running.is_active(), running.last_error
            time.sleep(0.05)
    finally:
        running.stop(graceful=False)  # killed with events in the log and an epoch in flight
    committed = committed_seq(checkpoint)
    assert 0 < committed < 350
    wal = WriteAheadLog(tmp_path / "wal" / "wal.sqlite")
    try:  # everything not committed is still in the log (maybe more: truncation lags a commit)
        held = [seq for seq, _ in wal.read(0)]
        assert wal.max_seq() == 350 and set(range(committed + 1, 351)) <= set(held)
    finally:
        wal.close()

    running = build(tmp_path, port).start(checkpoint, spark=spark, key_groups=2)
    try:
        with httpx.Client(timeout=30) as client:
            for i in range(0, len(second), 50):
                post_when_ready(client, url, second[i : i + 50])
        wait_until_counted(running, tmp_path / "out", oracle(sent))
    finally:
        running.stop()
    result = counted(tmp_path / "out")
    assert not result.duplicated(["k", "window_start"]).any()
    assert same(result, oracle(sent))
    assert not list((tmp_path / "late").glob("*/*.parquet"))
    wal = WriteAheadLog(tmp_path / "wal" / "wal.sqlite")
    try:
        assert committed_seq(checkpoint) == 600 and wal.count() == 0
    finally:
        wal.close()
