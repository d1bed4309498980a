"""Redis Streams source and sink against a real redis-server, without Spark."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from wire.core import envelope
from wire.core.control_file import set_paused
from wire.core.watermarks import NO_WATERMARK, WatermarkPolicy
from wire.errors import ConfigError, WireError
from wire.sinks.redis_sink import redis_stream_sink
from wire.sources.base.offsets import positions_of
from wire.sources.redis_source.reader import (
    BEGIN,
    RedisStreamReader,
    decode_entries,
    id_before,
    parse_id,
)
from wire.sources.redis_source.source import RedisBinding, RedisStreamSource, redis_stream
from wire.testing.redis import RedisServer

redis = pytest.importorskip("redis")

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64())])


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


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


def reader(server, *, delay=0, max_events=50, key_groups=2, encoding="json", control=None,
           clock=None, idle_timeout=None, consumer="wire", start="earliest", schema=SCHEMA):
    src = redis_stream(server.url, "events", group="g", consumer=consumer, schema=schema,
                       field_encoding=encoding, idle_timeout=idle_timeout, start=start)
    binding = RedisBinding(step="src", source=src, payload_schema=schema, event_time="t",
                           watermark=WatermarkPolicy(delay), max_events_per_epoch=max_events,
                           key_groups=key_groups, control_file=control)
    return RedisStreamReader(binding, clock=clock or Clock())


def last_id(offset, stream="events"):
    """The id of the last entry an offset admitted (its stream's position)."""
    return positions_of(offset)[stream]


def add(client, events, stream="events"):
    return [client.xadd(stream, {"data": json.dumps(e)}).decode() for e in events]


def pending(client, stream="events"):
    return client.xpending(stream, "g")["pending"]


def run_epoch(r, start, end):
    """partitions + read, split into (data table, {port: table}, watermark rows)."""
    batches = [b for p in r.partitions(start, end) for b in r.read(p)]
    if not batches:
        return None, {}, []
    t = pa.Table.from_batches(batches)
    kind = t.column(envelope.KIND).to_pylist()
    data = t.filter(pa.array([k == 0 for k in kind]))
    side = {}
    for row in t.filter(pa.array([k == 2 for k in kind])).to_pylist():
        side[row[envelope.PORT]] = envelope.decode_table(row[envelope.BLOB])
    wm = t.filter(pa.array([k == 1 for k in kind]))
    return data, side, list(zip(wm.column(envelope.KG).to_pylist(), wm.column(envelope.WM).to_pylist(),
                                strict=True))


def test_server_starts_on_a_free_port_and_stops_by_pid(tmp_path):
    ok, reason = RedisServer.available()
    if not ok:
        pytest.skip(reason)
    s = RedisServer(base_dir=tmp_path).start()
    pid, root = s.pid, s.root
    assert redis.Redis.from_url(s.url).ping()
    assert Path(root).is_dir() and not list(Path(root).glob("*.rdb"))
    s.stop()
    s.stop()  # twice is fine
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not Path(root).exists()
    with pytest.raises(WireError, match="before start"):
        _ = s.url
    assert RedisServer.available(tmp_path / "nope")[0] is False


def test_stream_ids():
    assert parse_id("17-3") == (17, 3)
    assert id_before("17-3") == "17-2"
    assert id_before("17-0") == f"16-{2**64 - 1}"
    assert id_before("0-1") == BEGIN


def test_initial_offset_creates_the_group_with_mkstream(server, client):
    r = reader(server)
    off = r.initialOffset()
    assert last_id(off) == BEGIN and off["admitted"] == 0 and off["watermark"] == NO_WATERMARK
    assert client.exists("events") and client.xinfo_groups("events")[0]["name"] == b"g"
    assert r.initialOffset() == off  # BUSYGROUP is fine


def test_start_latest_skips_existing_entries(server, client):
    add(client, [{"t": 1, "k": "a", "v": 1.0}])
    r = reader(server, start="latest")
    off = r.initialOffset()
    assert r.latestOffset(off, ReadMaxRows(50)) == off
    new = add(client, [{"t": 2, "k": "a", "v": 1.0}])
    assert last_id(r.latestOffset(off, ReadMaxRows(50))) == new[0]


def test_admission_is_bounded_per_epoch_and_in_id_order(server, client):
    ids = add(client, [{"t": i, "k": "a", "v": 0.5} for i in range(120)])
    r = reader(server, max_events=50)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(50))
    assert (o1["admitted"], last_id(o1)) == (50, ids[49])
    o2 = r.latestOffset(o1, ReadMaxRows(30))  # Spark's limit below the source's
    assert (o2["admitted"], last_id(o2)) == (80, ids[79])
    o3 = r.latestOffset(o2, ReadMaxRows(50))
    assert (o3["admitted"], last_id(o3)) == (120, ids[119])
    assert r.latestOffset(o3, ReadMaxRows(50)) == o3  # nothing new: no epoch
    data, side, _ = run_epoch(r, o1, o2)
    assert data.column("t").to_pylist() == list(range(50, 80))
    assert data.column(envelope.SEQ).to_pylist() == list(range(50, 80))
    metrics = dict(zip(side[envelope.METRICS_PORT].column("name").to_pylist(),
                       side[envelope.METRICS_PORT].column("value").to_pylist(), strict=True))
    assert metrics["records"] == 30 and metrics["events"] == 30 and metrics["malformed"] == 0


def test_offsets_an_earlier_wire_wrote_are_replayed_and_continued(server, client):
    """A checkpoint of the Wire before the partitioned base: its epoch replays, the next follows it."""
    ids = add(client, [{"t": t, "k": "a", "v": 1.0} for t in (100, 300, 200, 400)])
    r = reader(server, delay=50)
    r.initialOffset()
    r.latestOffset(r.initialOffset(), ReadMaxRows(2))  # delivers the first two to the group
    state = {"file": "", "record": 0, "admitted": 2, "max_event_time": 300, "watermark": 250,
             "last_arrival": 1_000_000, "idle": False, "done": False}
    old0 = {"last_id": BEGIN, "admitted": 0, "watermark": NO_WATERMARK, "started": None, "at": None,
            "stream": {**state, "admitted": 0, "max_event_time": None, "watermark": NO_WATERMARK,
                       "last_arrival": None}}
    old1 = {"last_id": ids[1], "admitted": 2, "watermark": 250, "started": 1_000_000, "at": 1_000_000,
            "stream": state}
    data, _, marks = run_epoch(r, old0, old1)
    assert data.column("t").to_pylist() == [100, 300] and {wm for _, wm in marks} == {250}
    new = r.latestOffset(old1, ReadMaxRows(50))
    assert (last_id(new), new["admitted"], new["watermark"]) == (ids[3], 4, 400 - 50)
    assert run_epoch(r, old1, new)[0].column("t").to_pylist() == [200, 400]
    r.commit(old1)
    assert pending(client) == 2  # the old offset acknowledged the first two


def test_watermark_is_max_event_time_minus_delay_and_recorded_in_offsets(server, client):
    add(client, [{"t": t, "k": "a", "v": 1.0} for t in (100, 300, 200, 150)])
    r = reader(server, delay=50, max_events=2, key_groups=3)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(2))
    o2 = r.latestOffset(o1, ReadMaxRows(2))
    assert (o1["watermark"], o2["watermark"]) == (250, 250)  # monotonic: 200-50 < 250
    data, _, wms = run_epoch(r, o0, o1)
    assert data.column(envelope.ET).to_pylist() == [100, 300]
    assert set(data.column(envelope.WM).to_pylist()) == {NO_WATERMARK}  # start watermark
    assert wms == [(0, 250), (1, 250), (2, 250)]
    data, _, wms = run_epoch(r, o1, o2)
    assert set(data.column(envelope.WM).to_pylist()) == {250}
    assert [w for _, w in wms] == [250] * 3


def test_bad_entries_become_dead_letters_with_stream_id_location(server, client):
    good = add(client, [{"t": 1, "k": "a", "v": 1.0}])
    bad = [
        client.xadd("events", {"data": "{not json"}).decode(),
        client.xadd("events", {"data": "[1, 2]"}).decode(),
        client.xadd("events", {"other": "x"}).decode(),
        client.xadd("events", {"data": json.dumps({"t": "soon", "k": "a"})}).decode(),
        client.xadd("events", {"data": json.dumps({"k": "a"})}).decode(),
        client.xadd("events", {"data": json.dumps({"t": 5, "k": "a", "v": "heavy"})}).decode(),
    ]
    good += add(client, [{"t": 7, "k": "b", "v": 2.0}])
    r = reader(server)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(50))
    assert o1["admitted"] == 8 and o1["watermark"] == 7
    data, side, _ = run_epoch(r, o0, o1)
    assert data.column("k").to_pylist() == ["a", "b"]
    assert data.column(envelope.SEQ).to_pylist() == [0, 7]  # rejected entries keep their place
    dead = side["src.dead_letter"]
    assert dead.schema == envelope.DEAD_LETTER_SCHEMA
    assert dead.column("location").to_pylist() == [f"events:{i}" for i in bad]
    reasons = dead.column("reason").to_pylist()
    assert "invalid JSON" in reasons[0] and "expected a JSON object" in reasons[1]
    assert "no 'data' field" in reasons[2] and "field t" in reasons[3]
    assert "event time missing" in reasons[4] and "field v" in reasons[5]
    assert json.loads(dead.column("record").to_pylist()[0]) == {"data": "{not json"}
    assert set(dead.column("step").to_pylist()) == {"src"}


def test_fields_encoding_one_field_per_column(server, client):
    client.xadd("events", {"t": "10", "k": "a", "v": "1.5"})
    client.xadd("events", {"t": "x", "k": "b"})
    client.xadd("events", {"t": "12", "k": "c"})
    r = reader(server, encoding="fields")
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(50))
    data, side, _ = run_epoch(r, o0, o1)
    assert data.select(["t", "k", "v"]).to_pylist() == [
        {"t": 10, "k": "a", "v": 1.5}, {"t": 12, "k": "c", "v": None}]
    assert side["src.dead_letter"].num_rows == 1


def test_decode_entries_iso_timestamps():
    schema = pa.schema([("t", pa.timestamp("ms", "UTC")), ("k", pa.string())])
    d = decode_entries([("1-0", {"data": json.dumps({"t": "2024-01-01T00:00:01", "k": "a"})})],
                       schema=schema, event_time="t", field_encoding="json", stream="s")
    assert d.event_times.tolist() == [1704067201000] and not d.dead


def test_entries_are_acknowledged_only_at_commit(server, client):
    add(client, [{"t": i, "k": "a", "v": 0.0} for i in range(80)])
    r = reader(server)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(50))
    assert pending(client) == 50  # delivered while planning
    run_epoch(r, o0, o1)
    assert pending(client) == 50  # read, not yet committed
    r.commit(o1)
    assert pending(client) == 0
    o2 = r.latestOffset(o1, ReadMaxRows(50))
    assert pending(client) == 30
    r.commit(o2)
    assert pending(client) == 0
    assert client.xinfo_groups("events")[0]["last-delivered-id"].decode() == last_id(o2)


def test_replaying_the_same_offsets_gives_identical_batches(server, client):
    add(client, [{"t": i * 3, "k": "ab"[i % 2], "v": i / 2} for i in range(40)])
    client.xadd("events", {"data": "oops"})
    r = reader(server, delay=5)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(50))
    first = [b for p in r.partitions(o0, o1) for b in r.read(p)]
    r.commit(o1)  # acknowledged entries are still read by id range
    other = reader(server, delay=5)  # e.g. an executor after a restart
    again = [b for p in other.partitions(o0, o1) for b in other.read(p)]
    assert pa.Table.from_batches(first).equals(pa.Table.from_batches(again))


def test_restart_readmits_delivered_but_uncommitted_entries(server, client):
    ids = add(client, [{"t": i, "k": "a", "v": 0.0} for i in range(70)])
    r1 = reader(server)
    o0 = r1.initialOffset()
    o1 = r1.latestOffset(o0, ReadMaxRows(50))  # planned, then the driver dies
    assert pending(client) == 50
    r2 = reader(server)
    again = r2.initialOffset()  # epoch 0 replayed from the start: same range
    assert last_id(again) == id_before(ids[0])
    o1b = r2.latestOffset(again, ReadMaxRows(20))
    assert (o1b["admitted"], last_id(o1b)) == (20, ids[19])  # from the pending range
    o2b = r2.latestOffset(o1b, ReadMaxRows(40))
    assert (o2b["admitted"], last_id(o2b)) == (60, ids[59])  # 30 pending + 10 new
    data, _, _ = run_epoch(r2, o1b, o2b)
    assert data.column("t").to_pylist() == list(range(20, 60))
    assert last_id(o1) == ids[49]


def test_restart_acknowledges_a_committed_epoch_whose_xack_was_lost(server, client):
    ids = add(client, [{"t": i, "k": "a", "v": 0.0} for i in range(60)])
    r1 = reader(server)
    o1 = r1.latestOffset(r1.initialOffset(), ReadMaxRows(50))
    # the epoch committed in the checkpoint, then the process died before commit(end)
    assert pending(client) == 50
    r2 = reader(server)
    o2 = r2.latestOffset(o1, ReadMaxRows(50))  # Spark restarts from the committed offset
    assert (o2["admitted"], last_id(o2)) == (60, ids[59])  # nothing read twice
    assert pending(client) == 10  # the lost XACKs were made up for
    r2.commit(o2)
    assert pending(client) == 0


def test_paused_source_admits_nothing(server, client, tmp_path):
    add(client, [{"t": 1, "k": "a", "v": 0.0}])
    control = str(tmp_path / "control.json")
    r = reader(server, control=control)
    o0 = r.initialOffset()
    set_paused(control, True, "src")
    assert r.latestOffset(o0, ReadMaxRows(50)) == o0
    assert pending(client) == 0
    set_paused(control, False, "src")
    assert r.latestOffset(o0, ReadMaxRows(50))["admitted"] == 1


def test_idle_stream_advances_the_watermark_with_processing_time(server, client):
    clock = Clock(10_000)
    add(client, [{"t": 500, "k": "a", "v": 0.0}])
    r = reader(server, delay=100, clock=clock, idle_timeout="1s")
    o1 = r.latestOffset(r.initialOffset(), ReadMaxRows(50))
    assert o1["watermark"] == 400
    clock.now += 500
    assert r.latestOffset(o1, ReadMaxRows(50)) == o1  # not idle yet
    clock.now += 1_000
    o2 = r.latestOffset(o1, ReadMaxRows(50))
    assert o2["watermark"] == 400 + 500 and o2["admitted"] == 1
    data, _, wms = run_epoch(r, o1, o2)
    assert data.num_rows == 0 and {w for _, w in wms} == {900}


def test_entries_trimmed_before_ack_are_reported(server, client):
    ids = add(client, [{"t": i, "k": "a", "v": 0.0} for i in range(5)])
    r = reader(server)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, ReadMaxRows(50))
    client.xdel("events", ids[1], ids[2])
    data, side, _ = run_epoch(r, o0, o1)
    assert data.column("t").to_pylist() == [0, 3, 4]
    assert "2 admitted entries are gone" in side["src.dead_letter"].column("reason")[0].as_py()


def test_source_rejects_bad_configuration(server):
    with pytest.raises(ConfigError, match="url"):
        redis_stream("http://x", "s", group="g", schema=SCHEMA)
    with pytest.raises(ConfigError, match="field_encoding"):
        redis_stream(server.url, "s", group="g", schema=SCHEMA, field_encoding="xml")
    with pytest.raises(ConfigError, match="group"):
        redis_stream(server.url, "s", group="", schema=SCHEMA)
    with pytest.raises(ConfigError, match="start"):
        redis_stream(server.url, "s", group="g", schema=SCHEMA, start="middle")
    src = redis_stream(server.url, "s", group="g", schema=SCHEMA)
    with pytest.raises(ConfigError, match="event_time"):
        RedisBinding("src", src, SCHEMA, "k2", WatermarkPolicy(0), 10, 2)
    b = RedisBinding("src", src, SCHEMA, "t", WatermarkPolicy(0), 10, 2, "/tmp/c.json")
    assert RedisBinding.from_json(b.to_json(), RedisStreamSource) == b


def test_reader_pickles_without_its_connection(server, client):
    import pickle

    r = reader(server)
    r.initialOffset()
    assert r._client is not None
    copy = pickle.loads(pickle.dumps(r))
    assert copy._client is None and last_id(copy.initialOffset()) == BEGIN


# ---------------------------------------------------------------------------- sink


def stream_ids(client, stream="out"):
    return [i.decode() for i, _ in client.xrange(stream)]


def test_sink_writes_epoch_ids_and_json_rows(server, client):
    sink = redis_stream_sink(server.url, "out")
    assert sink.guarantee == "idempotent"
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    sink.write_epoch(0, pa.table({"k": ["a", "b"], "n": [1, 2]}))
    empty = pa.schema([("k", pa.string()), ("n", pa.int64())]).empty_table()
    sink.write_epoch(1, empty)
    sink.write_epoch(2, pa.table({"k": ["c"], "n": [3]}))
    entries = client.xrange("out")
    assert [i.decode() for i, _ in entries] == ["1-0", "1-1", "3-0"]
    assert [json.loads(f[b"data"]) for _, f in entries] == [
        {"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "c", "n": 3}]
    sink.close()


def test_sink_replayed_epoch_adds_nothing(server, client):
    sink = redis_stream_sink(server.url, "out")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    rows = pa.table({"n": list(range(5))})
    sink.write_epoch(4, rows)
    sink.write_epoch(4, rows)  # replay after a crash before the epoch committed
    assert stream_ids(client) == [f"5-{i}" for i in range(5)]
    sink.close()
    again = redis_stream_sink(server.url, "out")  # a restarted run
    again.open(flow_id="f", sink_id="s", checkpoint_id="c")
    again.write_epoch(4, rows)
    again.write_epoch(5, rows)
    assert len(stream_ids(client)) == 10
    again.close()


def test_sink_completes_a_partly_written_epoch(server, client):
    client.xadd("out", {"data": "{}"}, id="3-0")
    client.xadd("out", {"data": "{}"}, id="3-1")
    sink = redis_stream_sink(server.url, "out")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    sink.write_epoch(2, pa.table({"n": [0, 1, 2, 3]}))
    entries = client.xrange("out")
    assert [i.decode() for i, _ in entries] == ["3-0", "3-1", "3-2", "3-3"]
    assert json.loads(entries[3][1][b"data"]) == {"n": 3}
    sink.close()


def test_sink_refuses_a_stream_beyond_its_epoch(server, client):
    client.xadd("out", {"data": "{}"})  # a time-based id from another writer
    sink = redis_stream_sink(server.url, "out", maxlen=100)
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    with pytest.raises(WireError, match="beyond epoch 0"):
        sink.write_epoch(0, pa.table({"n": [1]}))
    sink.close()
    with pytest.raises(WireError, match="before open"):
        sink.write_epoch(0, pa.table({"n": [1]}))
    with pytest.raises(ConfigError, match="maxlen"):
        redis_stream_sink(server.url, "out", maxlen=0)


def test_sink_treats_equal_or_smaller_id_errors_as_written(server, client, monkeypatch):
    sink = redis_stream_sink(server.url, "out")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    rows = pa.table({"n": [0, 1]})
    sink.write_epoch(0, rows)
    # a concurrent replay that slipped past the check: every XADD is rejected
    monkeypatch.setattr(type(sink), "_last_id", lambda self, c: (0, 0))
    sink.write_epoch(0, rows)
    assert stream_ids(client) == ["1-0", "1-1"]
    sink.close()
