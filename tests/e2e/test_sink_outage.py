"""Contraflow under a sink outage (SPEC §7): stop PostgreSQL for 30 s in the middle of a run.

Two sources feed one guarded PostgreSQL sink (exactly-once append): a Redis stream
and an HTTP ingest. While the database is down the sink's circuit breaker opens, the
HTTP ingest answers 503 with Retry-After, the Redis source stops reading (its consumer
group's lag grows) and nothing is lost: afterwards every event sent is in the table
exactly once. Marked slow (about two minutes).
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import psycopg
import pyarrow as pa
import pytest
import redis

import wire
from wire.core.control_file import control_path, open_breakers
from wire.testing.postgres import PostgresServer
from wire.testing.redis import RedisServer

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("n", pa.int64())])
EVENTS = 600
OUTAGE_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sink_outage_loses_nothing(spark, tmp_path):
    for server in (PostgresServer, RedisServer):
        ok, reason = server.available()
        if not ok:
            pytest.skip(f"{server.__name__} unavailable: {reason}")
    with PostgresServer() as pg, RedisServer() as rs:
        port = _free_port()
        flow = wire.Flow("outage")
        from_redis = flow.source(
            wire.sources.redis_stream(rs.url, "events", group="wire", schema=SCHEMA),
            event_time="t", key="k", max_events_per_epoch=50, name="redis_in")
        from_http = flow.source(
            wire.sources.http_ingest(port=port, wal_dir=str(tmp_path / "wal"), schema=SCHEMA),
            event_time="t", key="k", max_events_per_epoch=50, name="http_in")
        sink = wire.sinks.guarded(wire.sinks.postgres(pg.dsn, table="events"),
                                  failure_threshold=2, reset_timeout_s=1.0)
        from_redis.union(from_http).sink(sink, name="db")
        ck = tmp_path / "ck"
        running = flow.start(str(ck), spark=spark, key_groups=2)

        stats = {"http_202": 0, "http_503": 0, "redis_sent": 0, "breaker_seen": False,
                 "redis_lag_max": 0}
        r = redis.Redis.from_url(rs.url)

        def produce() -> None:
            with httpx.Client(timeout=10) as http:
                for n in range(EVENTS):
                    event = {"t": n * 100, "k": "ab"[n % 2], "n": n}
                    if n % 2:
                        r.xadd("events", {"data": json.dumps(event)})
                        stats["redis_sent"] += 1
                    else:
                        while True:
                            try:
                                resp = http.post(f"http://127.0.0.1:{port}/events", json=event)
                            except httpx.TransportError:
                                time.sleep(0.2)  # the ingest server is not up yet
                                continue
                            if resp.status_code == 202:
                                stats["http_202"] += 1
                                break
                            assert resp.status_code == 503, resp.text
                            stats["http_503"] += 1
                            time.sleep(min(float(resp.headers["Retry-After"]), 2.0))
                    time.sleep(0.07)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        deadline = time.monotonic() + 120
        while running.summary.epochs < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        pg.halt()
        outage_end = time.monotonic() + OUTAGE_S
        while time.monotonic() < outage_end:
            stats["breaker_seen"] |= bool(open_breakers(control_path(ck)))
            groups = r.xinfo_groups("events")
            stats["redis_lag_max"] = max(stats["redis_lag_max"], int(groups[0].get("lag") or 0))
            time.sleep(0.25)
        pg.resume()
        producer.join(timeout=300)
        assert not producer.is_alive()
        with psycopg.connect(pg.dsn) as conn:
            while time.monotonic() < deadline + 240:
                if conn.execute("SELECT count(*) FROM events").fetchone()[0] >= EVENTS:
                    break
                time.sleep(0.5)
            total, distinct = conn.execute("SELECT count(*), count(DISTINCT n) FROM events").fetchone()
        running.stop()
        transitions = list(sink.breaker.transitions)
        opened = [t for t, _, to in transitions if to == "open"]
        closed = [t for t, _, to in transitions if to == "closed"]
        stats.update(events_sent=EVENTS, events_in_sink=total, duplicates=total - distinct,
                     breaker_open_s=round(closed[-1] - opened[0], 1) if opened and closed else None)
        print(f"sink outage: {stats}")
        assert total == EVENTS and distinct == EVENTS
        assert stats["breaker_seen"] and opened and closed
        assert stats["http_503"] > 0
        assert stats["redis_lag_max"] > 0  # the Redis source stopped reading during the outage
