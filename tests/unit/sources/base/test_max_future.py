"""``BoundedOutOfOrderness(max_future=...)`` (issue 11): a future-dated event is a dead letter
and does not move the watermark, judged against the processing time in the epoch's offset.

Readers are driven directly (no Spark) with a fixed clock at 2026-01-01T00:00:00Z; every
expected watermark and reason is derived by hand.
"""

from __future__ import annotations

import doctest
import json
import socket
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

import wire
import wire.core.watermarks as watermarks
import wire.sources.file_source.formats as file_readers
import wire.sources.file_source.reader as file_stream
from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy, future_limit, future_reason, human_duration, iso_ms
from wire.errors import ConfigError
from wire.sources.base.offsets import partitions_of
from wire.sources.file_source.source import FileSource, SourceBinding, WireFileStreamReader, files
from wire.sources.http_source.config import IngestBinding
from wire.sources.http_source.reader import HttpIngestReader
from wire.sources.http_source.source import http_ingest
from wire.sources.redis_source.source import RedisBinding, redis_stream

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
Y2100 = 4_102_444_800_000  # 2100-01-01T00:00:00Z
HOUR = 3_600_000
REASON = ("event time 2100-01-01T00:00:00Z is 74y ahead of processing time 2026-01-01T00:00:00Z, "
          "beyond max_future=1h")
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


def decode(batches):
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    sides = {}
    for r in rows:
        if r["__kind"] == envelope.KIND_SIDE:
            sides.setdefault(r["__port"], []).extend(envelope.decode_table(r["__blob"]).to_pylist())
    metrics: dict[str, int] = {}
    for m in sides.pop(envelope.METRICS_PORT, []):  # counters add up over an epoch's tasks
        if not m["name"].startswith("gauge:"):
            metrics[m["name"]] = metrics.get(m["name"], 0) + m["value"]
    data = [r for r in rows if r["__kind"] == envelope.KIND_DATA]
    marks = sorted({r["__wm"] for r in rows if r["__kind"] == envelope.KIND_WATERMARK})
    return {"data": data, "sides": sides, "metrics": metrics, "marks": marks, "batches": batches}


# ------------------------------------------------------------------------------ config


def test_max_future_is_a_duration_off_by_default():
    assert wire.BoundedOutOfOrderness("5s").max_future_ms is None
    assert wire.BoundedOutOfOrderness("5s", max_future="1h").max_future_ms == HOUR
    assert wire.BoundedOutOfOrderness(0, max_future=timedelta(minutes=2)).max_future_ms == 120_000
    assert wire.BoundedOutOfOrderness(0, max_future=0).max_future_ms == 0
    assert wire.BoundedOutOfOrderness("5s", max_future="1h") != wire.BoundedOutOfOrderness("5s")


@pytest.mark.parametrize("bad", [-1, "soon", True, 1.5, "-1h"])
def test_invalid_max_future_is_a_config_error_naming_it(bad):
    with pytest.raises(ConfigError, match=r"invalid max_future=.*accepted: a non-negative duration"):
        wire.BoundedOutOfOrderness("5s", max_future=bad)


def test_bindings_validate_max_future_ms(tmp_path):
    src = files(str(tmp_path), format="csv", schema=SCHEMA)
    with pytest.raises(ConfigError, match="max_future_ms=-1"):
        SourceBinding("s", src, SCHEMA, "ts", WatermarkPolicy(0, max_future_ms=-1), 10, 1)
    ingest = http_ingest(port=8089, wal_dir=str(tmp_path), schema=SCHEMA)
    with pytest.raises(ConfigError, match="max_future_ms='1h'"):
        IngestBinding("s", ingest, ingest.schema, "ts", WatermarkPolicy(0, max_future_ms="1h"), 10, 1)
    red = redis_stream("redis://127.0.0.1:1/0", "s", group="g", schema=SCHEMA)
    with pytest.raises(ConfigError, match="max_future_ms=True"):
        RedisBinding("s", red, SCHEMA, "ts", WatermarkPolicy(0, max_future_ms=True), 10, 1)
    binding = SourceBinding("s", src, SCHEMA, "ts", WatermarkPolicy(0, max_future_ms=HOUR), 10, 1)
    assert SourceBinding.from_json(binding.to_json(), FileSource).watermark.max_future_ms == HOUR


def test_watermark_helpers_by_hand():
    assert doctest.testmod(watermarks).failed == 0
    assert future_limit(NOW, HOUR) == NOW + HOUR and future_limit(NOW, None) is None
    assert future_limit(None, HOUR) is None
    assert [human_duration(ms) for ms in (0, 999, 1000, 90_000, HOUR, 36 * HOUR)] == [
        "0ms", "999ms", "1s", "1.5m", "1h", "1.5d"]
    assert iso_ms(NOW + 1) == "2026-01-01T00:00:00.001Z" and iso_ms(2**62) == f"{2**62} ms"
    assert future_reason(Y2100, NOW, HOUR) == REASON


# ------------------------------------------------------------------------------ file source


def csv_reader(tmp_path, rows, *, max_future, per_epoch=3, clock=NOW, fmt="csv"):
    path = tmp_path / f"events.{fmt}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        path.write_text("id,ts\n" + "".join(f"{i},{t}\n" for i, t in rows))
    elif fmt == "jsonl":
        path.write_text("\n\n".join(json.dumps({"id": i, "ts": t}) for i, t in rows) + "\n")
    else:
        pq.write_table(pa.table({"id": [i for i, _ in rows], "ts": [t for _, t in rows]}), path)
    src = files(str(path), format=fmt, schema=SCHEMA)
    binding = SourceBinding("src", src, SCHEMA, "ts", WatermarkPolicy(5000, max_future_ms=max_future),
                            per_epoch, 1)
    return WireFileStreamReader(binding, clock=lambda: clock), path


def drain(reader):
    start, epochs = reader.initialOffset(), []
    while True:
        end = reader.latestOffset(start, ReadMaxRows(reader._binding.max_events_per_epoch))
        if end == start:
            return epochs
        json.dumps(end)
        batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
        epochs.append((start, end, decode(batches)))
        start = end


ROWS = [(1, NOW - 10_000), (2, NOW - 9_000), (3, Y2100), (4, NOW - 8_000), (5, NOW - 7_000), (6, NOW - 6_000)]


def test_a_future_dated_event_is_a_dead_letter_and_does_not_move_the_watermark(tmp_path):
    reader, path = csv_reader(tmp_path, ROWS, max_future=HOUR)
    epochs = drain(reader)
    # epoch 0 admits ids 1-3: 3 is 74y ahead -> dead letter; W = (NOW - 9000) - 5000
    # epoch 1 admits ids 4-6, the last records: the bounded source ends with it (W = the
    # maximal watermark; its partition's own is (NOW - 6000) - 5000)
    assert [e["watermark"] for _, e, _ in epochs] == [NOW - 14_000, envelope.MAX_WATERMARK]
    assert [p["watermark"] for p in epochs[1][1]["partitions"].values()] == [NOW - 11_000]
    assert [e["max_event_time"] for _, e, _ in epochs] == [NOW - 9_000, NOW - 6_000]
    assert [[r["id"] for r in out["data"]] for *_, out in epochs] == [[1, 2], [4, 5, 6]]
    assert [r["__seq"] for r in epochs[0][2]["data"]] == [0, 1]
    dead = epochs[0][2]["sides"]["src.dead_letter"]
    assert [(d["location"], d["reason"], d["record"]) for d in dead] == [(f"{path}:4", REASON, f"3,{Y2100}")]
    assert epochs[0][2]["metrics"] == {"records": 3, "events": 2, "malformed": 1, "future": 1}
    # no normal event is late: each is at or after the watermark its epoch starts with
    late = [r["id"] for _, _, out in epochs for r in out["data"] if r["__et"] < r["__wm"]]
    assert late == []


def test_without_max_future_the_2100_event_moves_the_watermark_as_before(tmp_path):
    reader, _ = csv_reader(tmp_path, ROWS, max_future=None)
    epochs = drain(reader)
    assert epochs[0][1]["watermark"] == Y2100 - 5000
    late = [r["id"] for _, _, out in epochs for r in out["data"] if r["__et"] < r["__wm"]]
    assert late == [4, 5, 6]
    assert "src.dead_letter" not in epochs[0][2]["sides"]


def test_replay_judges_against_the_recorded_processing_time_not_the_clock(tmp_path, monkeypatch):
    reader, _ = csv_reader(tmp_path, ROWS, max_future=HOUR)
    epochs = drain(reader)
    assert epochs[0][1]["at"] == NOW
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(4))
    later = WireFileStreamReader(reader._binding, clock=lambda: Y2100 + HOUR)  # a clock past 2100
    for start, end, out in epochs:
        assert [b for p in later.partitions(start, end) for b in later.read(p)] == out["batches"]


def test_the_limit_is_inclusive_and_zero_rejects_any_future_event(tmp_path):
    rows = [(1, NOW + HOUR), (2, NOW + HOUR + 1), (3, NOW)]
    reader, _ = csv_reader(tmp_path, rows, max_future=HOUR)
    out = drain(reader)[0][2]
    assert [r["id"] for r in out["data"]] == [1, 3]
    assert [d["reason"] for d in out["sides"]["src.dead_letter"]] == [
        "event time 2026-01-01T01:00:00.001Z is 1h ahead of processing time 2026-01-01T00:00:00Z, "
        "beyond max_future=1h"]
    strict, _ = csv_reader(tmp_path / "z", [(1, NOW), (2, NOW + 1)], max_future=0)
    assert [r["id"] for r in drain(strict)[0][2]["data"]] == [1]


@pytest.mark.parametrize(("fmt", "location", "record"), [
    ("jsonl", ":5", '{"id": 3, "ts": 4102444800000}'),  # blank lines between records
    ("parquet", ":2", '{"id": 3, "ts": 4102444800000}'),  # 0-based row
])
def test_future_dead_letters_locate_the_record_in_every_format(tmp_path, fmt, location, record):
    reader, path = csv_reader(tmp_path / "z", ROWS, max_future=HOUR, fmt=fmt)
    dead = drain(reader)[0][2]["sides"]["src.dead_letter"]
    got = [(d["location"], d["reason"], d["record"]) for d in dead]
    assert got == [(f"{path}{location}", REASON, record)]


# ------------------------------------------------------------------------------ HTTP ingest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("max_future", [HOUR, None])
def test_http_ingest_rejects_future_events_against_the_offsets_processing_time(tmp_path, max_future):
    schema = pa.schema([("t", pa.int64()), ("k", pa.string())])
    src = http_ingest(port=free_port(), wal_dir=str(tmp_path / "wal"), schema=schema)
    binding = IngestBinding("ingest", src, src.schema, "t", WatermarkPolicy(5000,
                            max_future_ms=max_future), 100, 1)
    reader = HttpIngestReader(binding, clock=lambda: NOW)
    try:
        start = reader.initialOffset()
        bodies = [json.dumps({"t": t, "k": "a"}) for t in (NOW - 9_000, Y2100, NOW - 8_000)]
        reader.client.append(bodies)
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        out = decode([b for p in reader.partitions(start, end) for b in reader.read(p)])
        if max_future is None:  # as before: the 2100 event moves the watermark
            assert end["watermark"] == Y2100 - 5000 and len(out["data"]) == 3
            return
        wal = partitions_of(end)["wal"].state
        assert (wal.max_event_time, end["watermark"]) == (NOW - 8_000, NOW - 13_000)
        assert [r["t"] for r in out["data"]] == [NOW - 9_000, NOW - 8_000]
        assert [(d["location"], d["reason"], d["record"]) for d in out["sides"]["ingest.dead_letter"]] == [
            ("wal:2", REASON, bodies[1])]
        assert out["metrics"] == {"records": 3, "events": 2, "malformed": 1, "future": 1}
        replay = HttpIngestReader(binding, clock=lambda: Y2100 + HOUR)  # the offset's `at` decides
        again = decode([b for p in replay.partitions(start, end) for b in replay.read(p)])
        assert again["batches"] == out["batches"]
    finally:
        reader.stop()


# ------------------------------------------------------------------------------ Redis streams


@pytest.fixture(scope="module")
def redis_server():
    pytest.importorskip("redis")
    from wire.testing.redis import RedisServer

    ok, reason = RedisServer.available()
    if not ok:
        pytest.skip(reason)
    with RedisServer() as s:
        yield s


def test_redis_stream_rejects_future_entries(redis_server):
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    schema = pa.schema([("t", pa.int64())])
    src = redis_stream(redis_server.url, "events", group="g", schema=schema)
    binding = RedisBinding("src", src, schema, "t", WatermarkPolicy(5000, max_future_ms=HOUR), 50, 1)
    from wire.sources.redis_source.reader import RedisStreamReader

    reader = RedisStreamReader(binding, clock=lambda: NOW)
    try:
        start = reader.initialOffset()
        ids = [client.xadd("events", {"data": json.dumps({"t": t})}).decode()
               for t in (NOW - 9_000, Y2100, NOW - 8_000)]
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end["watermark"] == NOW - 13_000
        out = decode([b for p in reader.partitions(start, end) for b in reader.read(p)])
        assert [r["t"] for r in out["data"]] == [NOW - 9_000, NOW - 8_000]
        assert [r["__seq"] for r in out["data"]] == [0, 2]
        assert [(d["location"], d["reason"], d["record"]) for d in out["sides"]["src.dead_letter"]] == [
            (f"events:{ids[1]}", REASON, json.dumps({"data": json.dumps({"t": Y2100})}))]
        assert out["metrics"] == {"records": 3, "events": 2, "malformed": 1, "future": 1}
    finally:
        reader.close()
        client.close()
