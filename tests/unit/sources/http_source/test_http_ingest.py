import contextlib
import json
import socket
import time

import httpx
import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from wire.core import envelope
from wire.core.control_file import set_breaker, set_paused, set_stopping
from wire.core.watermarks import NO_WATERMARK, WatermarkPolicy
from wire.errors import ConfigError, WireError
from wire.sources.base.offsets import partitions_of, positions_of
from wire.sources.http_source.config import PAUSED_RETRY_AFTER_S, IngestBinding
from wire.sources.http_source.reader import HttpIngestReader
from wire.sources.http_source.server import parse_body
from wire.sources.http_source.source import HttpIngestSource, http_ingest

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64())])


def seq(offset) -> int:
    """The last log seq an offset admitted (the log partition's position)."""
    return positions_of(offset)["wal"]


def wal(offset):
    """The log partition's watermark inputs in an offset (max event time, idle, ...)."""
    return partitions_of(offset)["wal"].state


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_binding(tmp_path, port, *, max_events=100, max_delay=10, key_groups=2, **source_kw):
    src = http_ingest(port=port, wal_dir=str(tmp_path / "wal"), schema=SCHEMA, **source_kw)
    return IngestBinding("ingest", src, src.schema, "t", WatermarkPolicy(max_delay), max_events, key_groups,
                         str(tmp_path / "ck" / "control.json"))


@pytest.fixture
def open_reader(tmp_path):
    readers = []

    def open_(binding=None, clock=None, **kw):
        binding = binding or make_binding(tmp_path, free_port(), **kw)
        reader = HttpIngestReader(binding, clock=clock or Clock())
        readers.append(reader)
        return reader

    yield open_
    for r in readers:
        r.stop()


def url(reader) -> str:
    src = reader._binding.source
    return f"http://{src.host}:{src.port}{src.path}"


def post(reader, body, **kw) -> httpx.Response:
    if isinstance(body, bytes | str):
        return httpx.post(url(reader), content=body, timeout=10, **kw)
    return httpx.post(url(reader), json=body, timeout=10, **kw)


def rows_of(reader, start, end):
    """Read an epoch like an executor: data rows, side tables per port, watermark rows."""
    data, sides, watermarks = [], {}, []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            t = pa.Table.from_batches([batch])
            for row in t.to_pylist():
                if row["__kind"] == envelope.KIND_DATA:
                    data.append(row)
                elif row["__kind"] == envelope.KIND_SIDE:
                    table = envelope.decode_table(row["__blob"])
                    sides.setdefault(row["__port"], []).extend(table.to_pylist())
                else:
                    watermarks.append((row["__kg"], row["__wm"]))
    return data, sides, watermarks


def test_post_is_acknowledged_after_the_append_then_admitted_read_and_truncated_on_commit(open_reader):
    reader = open_reader()
    start = reader.initialOffset()
    assert seq(start) == 0 and start["watermark"] == NO_WATERMARK
    r = post(reader, [{"t": 100, "k": "a", "v": 1.5}, {"t": 90, "k": "b", "v": 2}])
    assert r.status_code == 202 and r.json() == {"accepted": 2, "seq": [1, 2]}
    assert reader.client.read(0) == [(1, '{"t":100,"k":"a","v":1.5}'), (2, '{"t":90,"k":"b","v":2}')]
    r = post(reader, {"t": 120, "k": "a"})
    assert r.status_code == 202 and r.json() == {"accepted": 1, "seq": [3, 3]}

    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert (seq(end), end["admitted"], wal(end).max_event_time, end["watermark"]) == (3, 3, 120, 110)
    json.dumps(end)  # offsets are JSON
    data, sides, watermarks = rows_of(reader, start, end)
    assert [(d["t"], d["k"], d["v"], d["__et"], d["__seq"]) for d in data] == [
        (100, "a", 1.5, 100, 0), (90, "b", 2.0, 90, 1), (120, "a", None, 120, 2)]  # __seq: arrival order
    assert {d["__wm"] for d in data} == {NO_WATERMARK}  # the epoch's start watermark
    assert watermarks == [(0, 110), (1, 110)]  # one per key group, the end watermark
    metrics = {m["name"]: m["value"] for m in sides[envelope.METRICS_PORT]}
    assert metrics["records"] == 3 and metrics["events"] == 3 and metrics["malformed"] == 0
    assert "ingest.dead_letter" not in sides

    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end  # nothing new: no epoch
    assert reader.client.count() == 3  # not before the commit
    reader.commit(end)
    assert reader.client.count() == 0 and reader.client.max_seq() == 3


def test_admission_is_bounded_per_epoch_and_the_watermark_is_monotonic(open_reader):
    reader = open_reader(max_events=10, max_delay=5)
    offset = reader.initialOffset()
    times = [50 + i for i in range(20)] + [10] * 5  # the last ones are out of order
    assert post(reader, [{"t": t, "k": "a"} for t in times]).status_code == 202
    sizes, seqs, marks = [], [], []
    while True:
        end = reader.latestOffset(offset, reader.getDefaultReadLimit())
        if end == offset:
            break
        data, _, wms = rows_of(reader, offset, end)
        sizes.append(len(data))
        seqs += [d["__seq"] for d in data]
        marks.append(wms[0][1])
        reader.commit(end)
        offset = end
    assert sizes == [10, 10, 5]
    assert seqs == list(range(25))
    assert marks == [59 - 5, 69 - 5, 69 - 5]  # W = max event time - max delay, never backwards
    assert reader.latestOffset(offset, ReadMaxRows(0)) == offset
    assert post(reader, [{"t": 1, "k": "a"}] * 3).status_code == 202
    assert seq(reader.latestOffset(offset, ReadAllAvailable())) == 28


def test_records_that_do_not_fit_the_schema_are_dead_letters(open_reader):
    reader = open_reader()
    start = reader.initialOffset()
    body = [{"t": 5, "k": "a", "v": 1}, {"t": 7, "k": "b", "v": "x"}, {"k": "c"}, {"t": "soon"}, {"t": 9}]
    assert post(reader, body).status_code == 202
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert wal(end).max_event_time == 9  # dead letters do not move the watermark
    data, sides, _ = rows_of(reader, start, end)
    assert [d["__seq"] for d in data] == [0, 4]  # log seqs 1 and 5
    dead = sides["ingest.dead_letter"]
    assert [(d["step"], d["location"]) for d in dead] == [
        ("ingest", "wal:2"), ("ingest", "wal:3"), ("ingest", "wal:4")]
    assert "field v" in dead[0]["reason"] and dead[0]["record"] == '{"t":7,"k":"b","v":"x"}'
    assert "event time missing" in dead[1]["reason"]
    assert "field t" in dead[2]["reason"]
    metrics = {m["name"]: m["value"] for m in sides[envelope.METRICS_PORT]}
    assert (metrics["records"], metrics["events"], metrics["malformed"]) == (5, 2, 3)


@pytest.mark.parametrize("body", [b"{bad", b"[1, 2]", b'"text"', b"[{}, 3]", b'{"t": NaN}', b""])
def test_invalid_body_is_400_and_nothing_is_stored(open_reader, body):
    reader = open_reader()
    reader.initialOffset()
    r = post(reader, body)
    assert r.status_code == 400 and "invalid body" in r.json()["error"]
    assert reader.client.max_seq() == 0


def test_empty_array_is_accepted_with_nothing_stored(open_reader):
    reader = open_reader()
    reader.initialOffset()
    r = post(reader, [])
    assert r.status_code == 202 and r.json() == {"accepted": 0, "seq": None}
    assert reader.client.max_seq() == 0


def test_paused_flow_or_source_answers_503_and_admits_nothing(open_reader):
    reader = open_reader()
    control = reader._binding.control_file
    start = reader.initialOffset()
    assert post(reader, {"t": 1}).status_code == 202
    for pause, resume in [
        (lambda: set_paused(control, True), lambda: set_paused(control, False)),
        (lambda: set_paused(control, True, connector="ingest"),
         lambda: set_paused(control, False, connector="ingest")),
        (lambda: set_stopping(control, True), lambda: set_stopping(control, False)),
    ]:
        pause()
        r = post(reader, {"t": 2})
        assert r.status_code == 503 and r.headers["Retry-After"] == str(PAUSED_RETRY_AFTER_S)
        assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
        resume()
    set_paused(control, True, connector="another_source")
    assert reader.client.max_seq() == 1  # nothing stored while paused
    assert post(reader, {"t": 3}).status_code == 202
    assert seq(reader.latestOffset(start, reader.getDefaultReadLimit())) == 2


def test_open_breaker_answers_503_with_its_retry_after(open_reader):
    reader = open_reader()
    control = reader._binding.control_file
    start = reader.initialOffset()
    set_breaker(control, "orders_db", True, retry_at=time.time() + 42.2)
    r = post(reader, [{"t": 1}])
    assert r.status_code == 503 and "orders_db" in r.json()["error"]
    assert 42 <= int(r.headers["Retry-After"]) <= 43
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start
    set_breaker(control, "orders_db", True, retry_at=time.time() - 5)  # probe due: retry soon
    assert post(reader, [{"t": 1}]).headers["Retry-After"] == "1"
    set_breaker(control, "orders_db", False)
    assert post(reader, [{"t": 1}]).status_code == 202
    assert reader.client.max_seq() == 1


def test_token_is_required_when_configured(open_reader, tmp_path):
    reader = open_reader(binding=make_binding(tmp_path, free_port(), token="s3cret"))
    reader.initialOffset()
    assert post(reader, {"t": 1}).status_code == 401
    wrong = post(reader, {"t": 1}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    assert reader.client.max_seq() == 0
    ok = post(reader, {"t": 1}, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 202
    assert "s3cret" not in repr(reader._binding.source)


def test_events_survive_a_restart_and_replayed_epochs_read_the_same_rows(open_reader, tmp_path):
    port = free_port()
    binding = make_binding(tmp_path, port, max_events=4)
    first = open_reader(binding=binding)
    o0 = first.initialOffset()
    assert post(first, [{"t": t, "k": "a"} for t in range(10)]).status_code == 202
    o1 = first.latestOffset(o0, first.getDefaultReadLimit())
    first.commit(o1)  # epoch 1 committed
    o2 = first.latestOffset(o1, first.getDefaultReadLimit())  # epoch 2 planned, not committed
    before_crash = [d["__seq"] for d in rows_of(first, o1, o2)[0]]
    first.stop()  # the planner process goes away with the query
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"http://127.0.0.1:{port}/events", json={"t": 1}, timeout=2)

    second = open_reader(binding=binding)  # restart: Spark replays epoch 2 from its offset log
    assert [d["__seq"] for d in rows_of(second, o1, o2)[0]] == before_crash == [4, 5, 6, 7]
    second.commit(o2)
    assert seq(second.latestOffset(o2, second.getDefaultReadLimit())) == 10  # the server is back
    assert post(second, {"t": 50, "k": "b"}).json()["seq"] == [11, 11]
    o3 = second.latestOffset(o2, second.getDefaultReadLimit())
    assert [d["__seq"] for d in rows_of(second, o2, o3)[0]] == [8, 9, 10]


def test_read_fails_loudly_when_the_log_lost_an_admitted_record(open_reader):
    reader = open_reader()
    start = reader.initialOffset()
    post(reader, [{"t": 1}, {"t": 2}])
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    reader.client.truncate(1)  # deleted before its epoch committed
    with pytest.raises(WireError, match="holds 1 records"):
        rows_of(reader, start, end)


def test_idle_source_advances_the_watermark_with_processing_time(open_reader):
    clock = Clock(10_000)
    reader = open_reader(clock=clock, idle_timeout="1s", max_delay=0)
    start = reader.initialOffset()
    post(reader, {"t": 500})
    o1 = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert o1["watermark"] == 500
    clock.now += 500
    assert reader.latestOffset(o1, reader.getDefaultReadLimit()) == o1  # not idle yet
    clock.now += 1_000
    o2 = reader.latestOffset(o1, reader.getDefaultReadLimit())
    assert wal(o2).idle and o2["watermark"] == 1_000 and seq(o2) == seq(o1)
    assert rows_of(reader, o1, o2)[0] == []  # a watermark-only epoch
    assert rows_of(reader, o1, o2)[2] == [(0, 1_000), (1, 1_000)]
    clock.now += 300
    o3 = reader.latestOffset(o2, reader.getDefaultReadLimit())
    assert o3["watermark"] == 1_300  # follows processing time, 1 ms per ms
    clock.now += 100
    assert reader.latestOffset(o3, reader.getDefaultReadLimit()) == o3  # within watermark_interval
    clock.now += 100
    assert reader.latestOffset(o3, reader.getDefaultReadLimit())["watermark"] == 1_500
    post(reader, {"t": 700})  # an event again: not idle, the watermark holds (never backwards)
    o4 = reader.latestOffset(o3, reader.getDefaultReadLimit())
    assert not wal(o4).idle and o4["watermark"] == 1_300 and wal(o4).max_event_time == 700


def test_executor_reads_do_not_start_the_server(open_reader, tmp_path):
    port = free_port()
    binding = make_binding(tmp_path, port)
    planner = open_reader(binding=binding)
    start = planner.initialOffset()
    post(planner, {"t": 1})
    end = planner.latestOffset(start, planner.getDefaultReadLimit())
    parts = planner.partitions(start, end)
    planner.stop()
    executor = open_reader(binding=binding)
    assert len([b for p in parts for b in executor.read(p)]) == 3  # data, metrics, watermarks
    with socket.socket() as s:  # the port is free: no server in this process
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_one_server_per_address_and_process(open_reader, tmp_path):
    port = free_port()
    a = open_reader(binding=make_binding(tmp_path, port))
    a.initialOffset()
    b = open_reader(binding=make_binding(tmp_path, port))
    b.initialOffset()
    assert a._server is b._server
    other = IngestBinding("other", http_ingest(port=port, wal_dir=str(tmp_path / "w2"), schema=SCHEMA),
                          SCHEMA, "t", WatermarkPolicy(0), 10, 1)
    with pytest.raises(WireError, match="already serves another write-ahead log"):
        open_reader(binding=other).initialOffset()


def test_port_in_use_is_a_clear_error(open_reader, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        reader = open_reader(binding=make_binding(tmp_path, s.getsockname()[1]))
        with pytest.raises(WireError, match="cannot bind"):
            reader.initialOffset()


def test_parse_body():
    assert parse_body(b'{"a": 1}') == ['{"a":1}']
    assert parse_body('[{"a": "é"}, {}]'.encode()) == ['{"a":"é"}', "{}"]
    with pytest.raises(ValueError, match="item 1: expected a JSON object"):
        parse_body(b"[{}, 1]")


def test_config_is_validated_and_serializable(tmp_path):
    src = http_ingest(port=8080, wal_dir=str(tmp_path), schema=SCHEMA, token="x", idle_timeout="2s")
    assert src.idle_timeout == 2000 and src.bounded is False
    assert HttpIngestSource.from_dict(json.loads(json.dumps(src.to_dict()))) == src
    binding = IngestBinding("s", src, src.schema, "t", WatermarkPolicy(0), 5, 2, None)
    assert IngestBinding.from_json(binding.to_json(), HttpIngestSource) == binding
    for kw, param in [({"port": 0}, "port"), ({"path": "events"}, "path"),
                      ({"schema": pa.schema([])}, "schema"), ({"token": ""}, "token")]:
        with pytest.raises(ConfigError, match=param):
            http_ingest(**{"port": 8080, "wal_dir": str(tmp_path), "schema": SCHEMA, **kw})
    with pytest.raises(ConfigError, match="event_time"):
        IngestBinding("s", src, src.schema, "nope", WatermarkPolicy(0), 5, 2)
    with pytest.raises(ConfigError, match="max_events_per_epoch"):
        IngestBinding("s", src, src.schema, "t", WatermarkPolicy(0), 0, 2)


# -- refusals: body limit, permanently bad bodies, transient failures, remote binds -------------


def raw_exchange(reader, head: bytes, chunks=(), *, timeout=5.0) -> bytes:
    """Send a request head, then ``chunks`` while the server has not answered; return the answer."""
    src = reader._binding.source
    with socket.create_connection((src.host, src.port), timeout=timeout) as s:
        s.sendall(head)
        s.settimeout(0.2)
        answer = b""
        for chunk in chunks:
            with contextlib.suppress(TimeoutError):
                answer = s.recv(65536)
            if answer:
                break
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        s.settimeout(timeout)
        while not complete(answer):
            more = s.recv(65536)
            if not more:
                break
            answer += more
        return answer


def complete(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    length = [int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
              if line.startswith(b"content-length:")]
    return bool(sep) and len(body) >= (length[0] if length else 0)


def head(reader, extra: str) -> bytes:
    src = reader._binding.source
    return (f"POST {src.path} HTTP/1.1\r\nHost: {src.host}\r\nContent-Type: application/json\r\n"
            f"{extra}\r\n").encode()


def test_a_declared_body_over_the_limit_is_413_before_any_byte_is_read(open_reader):
    from wire.sources.http_source.config import MAX_BODY_BYTES

    reader = open_reader()
    reader.initialOffset()
    # no body is ever sent: the answer can only come from the Content-Length header
    answer = raw_exchange(reader, head(reader, f"Content-Length: {MAX_BODY_BYTES + 1}\r\n"))
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert f"over the limit of {MAX_BODY_BYTES} bytes".encode() in answer
    assert reader.client.max_seq() == 0


def test_a_chunked_body_is_cut_off_at_the_limit(open_reader):
    reader = open_reader(max_body_bytes=1000)
    reader.initialOffset()
    chunk = b"190\r\n" + b" " * 400 + b"\r\n"  # 400 bytes per chunk, forever
    answer = raw_exchange(reader, head(reader, "Transfer-Encoding: chunked\r\n"), [chunk] * 10_000)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b"over the limit of 1000 bytes" in answer
    ok = post(reader, [{"t": 1, "k": "x" * 900}])  # 915 bytes: under the limit
    assert ok.status_code == 202, ok.text


def test_the_endpoint_stops_reading_a_streamed_body_at_the_limit(open_reader):
    import asyncio

    from wire.sources.http_source.server import _Gate, create_app

    reader = open_reader(max_body_bytes=1000)
    app = create_app(_Gate(reader._binding, reader.client))
    pulled, sent = [], []

    async def receive():
        pulled.append(300)
        return {"type": "http.request", "body": b" " * 300, "more_body": len(pulled) < 100}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/events", "raw_path": b"/events", "query_string": b"",
             "root_path": "", "headers": [(b"transfer-encoding", b"chunked")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413
    assert sum(pulled) <= 1000 + 300  # it never held more than the limit: 4 messages, not 100
    assert reader.client.max_seq() == 0


@pytest.mark.parametrize("body, reason", [
    (rb'{"t": 1, "k": "\ud800"}', "lone surrogate"),
    (rb'[{"t": 1}, {"k": "a\udfffb"}]', "item 1: lone surrogate"),
    (b'{"t": 1, "k": "\xed\xa0\x80"}', "not valid UTF-8"),
    (b'{"t": 1, "k": "\xff"}', "not valid UTF-8"),
    ('{"t": 1}'.encode("utf-16"), "not valid UTF-8"),
    (b'{"t": 1e999}', "out of range"),
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
])
def test_a_permanently_bad_body_is_400_with_its_reason_never_503(open_reader, body, reason):
    reader = open_reader()
    reader.initialOffset()
    r = post(reader, body)
    assert r.status_code == 400, r.text
    assert "Retry-After" not in r.headers
    assert reason in r.json()["error"]
    assert reader.client.max_seq() == 0


def test_every_bad_item_of_a_batch_is_reported_once_and_nothing_is_stored(open_reader):
    reader = open_reader()
    reader.initialOffset()
    r = post(reader, rb'[{"t": 1}, 2, {"t": 3}, {"k": "\ud800"}, [5]]')
    assert r.status_code == 400
    errors = r.json()["errors"]
    assert [e["item"] for e in errors] == [1, 3, 4]
    assert "expected a JSON object, got int" in errors[0]["reason"]
    assert "lone surrogate" in errors[1]["reason"]
    assert reader.client.max_seq() == 0


def test_only_a_transient_log_failure_is_503(open_reader, monkeypatch):
    import sqlite3

    reader = open_reader()
    reader.initialOffset()

    def full(events):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(reader.client, "append", full)
    r = post(reader, {"t": 1})
    assert r.status_code == 503 and r.headers["Retry-After"] == str(PAUSED_RETRY_AFTER_S)
    assert "disk is full" in r.json()["error"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "ingest.example.com"])
def test_a_non_loopback_host_needs_a_token_and_allow_remote(tmp_path, host):
    kw = {"port": 8080, "wal_dir": str(tmp_path), "schema": SCHEMA, "host": host}
    with pytest.raises(ConfigError, match="allow_remote") as e:
        http_ingest(**kw)
    assert "True" in str(e.value) and host in str(e.value)
    with pytest.raises(ConfigError, match="allow_remote"):
        http_ingest(**kw, token="s3cret")
    with pytest.raises(ConfigError, match="token"):
        http_ingest(**kw, allow_remote=True)
    src = http_ingest(**kw, token="s3cret", allow_remote=True)
    assert src.host == host and src.allow_remote
    assert HttpIngestSource.from_dict(json.loads(json.dumps(src.to_dict()))) == src


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost", "::ffff:127.0.0.1"])
def test_a_loopback_host_needs_neither(tmp_path, host):
    src = http_ingest(port=8080, wal_dir=str(tmp_path), schema=SCHEMA, host=host)
    assert src.host == host and src.token is None


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1MB"])
def test_max_body_bytes_is_validated(tmp_path, value):
    with pytest.raises(ConfigError, match="max_body_bytes"):
        http_ingest(port=8080, wal_dir=str(tmp_path), schema=SCHEMA, max_body_bytes=value)


def test_offsets_an_earlier_wire_wrote_are_replayed_and_continued(open_reader):
    """A checkpoint of the Wire before the partitioned base: its epoch replays, the next follows it."""
    reader = open_reader()
    reader.initialOffset()
    post(reader, [{"t": 100, "k": "a"}, {"t": 90, "k": "b"}, {"t": 120, "k": "a"}, {"t": 130, "k": "c"}])
    old0 = {"seq": 0, "admitted": 0, "max_event_time": None, "watermark": NO_WATERMARK,
            "last_arrival": None, "idle": False, "started": None, "at": None}
    old1 = {"seq": 2, "admitted": 2, "max_event_time": 100, "watermark": 90,  # max_delay 10
            "last_arrival": 1_000_000, "idle": False, "started": 1_000_000, "at": 1_000_000}
    data, _, watermarks = rows_of(reader, old0, old1)  # the epoch in flight at the upgrade
    assert [d["t"] for d in data] == [100, 90] and watermarks == [(0, 90), (1, 90)]
    new = reader.latestOffset(old1, reader.getDefaultReadLimit())
    assert (seq(new), new["admitted"], new["watermark"]) == (4, 4, 130 - 10)
    assert [(d["t"], d["__seq"]) for d in rows_of(reader, old1, new)[0]] == [(120, 2), (130, 3)]
    reader.commit(old1)
    assert [s for s, _ in reader.client.read(0)] == [3, 4]  # the old offset acknowledges too
