import dataclasses
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest

from wire.errors import ConfigError, WireError
from wire.sinks import webhook_sink as webhook_module
from wire.sinks.webhook_sink import WebhookSink, webhook

OPEN = {"flow_id": "flights", "sink_id": "hook", "checkpoint_id": "ckpt-1"}


@dataclass
class Receiver:
    """What the test server saw, and how it should answer."""

    fail_first: int = 0
    fail_status: int = 503
    retry_after: str | None = "0"
    requests: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def accepted(self) -> list[dict]:
        return [r for r in self.requests if r["status"] == 200]


def make_handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with receiver.lock:
                failing = len(receiver.requests) < receiver.fail_first
                status = receiver.fail_status if failing else 200
                receiver.requests.append(
                    {
                        "status": status,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(body),
                    }
                )
            self.send_response(status)
            if failing and receiver.retry_after is not None:
                self.send_header("Retry-After", receiver.retry_after)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Receiver]]:
    receiver = Receiver()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(receiver))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/hook", receiver
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    waited: list[float] = []
    monkeypatch.setattr(webhook_module, "_sleep", waited.append)
    return waited


def rows(n: int, epoch: int = 3) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "ts": pa.array([1357035300123 + i for i in range(n)], pa.timestamp("ms", "UTC")),
            "x": pa.array([float("nan") if i == 1 else i / 2 for i in range(n)], pa.float64()),
            "name": pa.array([None if i == 2 else f"n{i}" for i in range(n)], pa.string()),
            "epoch": pa.array([epoch] * n, pa.int64()),
        }
    )


def opened(url: str, **kwargs) -> WebhookSink:
    sink = webhook(url, **kwargs)
    sink.open(**OPEN)
    return sink


def test_webhook_sink_is_a_frozen_at_least_once_value():
    sink = webhook("https://example.com/hook", headers={"Authorization": "Bearer t"})
    assert isinstance(sink, WebhookSink)
    assert sink.guarantee == "at_least_once"
    assert sink.headers == (("Authorization", "Bearer t"),)
    assert sink == webhook("https://example.com/hook", headers={"Authorization": "Bearer t"})
    assert hash(sink) == hash(webhook("https://example.com/hook", headers={"Authorization": "Bearer t"}))
    assert sink.describe() == "webhook https://example.com/hook batch_size=500 (at_least_once)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        sink.url = "http://elsewhere"


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"url": "ftp://example.com"}, "url"),
        ({"url": "example.com/hook"}, "url"),
        ({"url": ""}, "url"),
        ({"url": 3}, "url"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": 1.5}, "batch_size"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"backoff_s": -0.1}, "backoff_s"),
        ({"headers": {"Idempotency-Key": "x"}}, "headers"),
        ({"headers": {"content-type": "text/plain"}}, "headers"),
        ({"headers": {"X-N": 1}}, "headers"),
        ({"headers": ["X-N"]}, "headers"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs, parameter):
    args = {"url": "http://example.com/hook", **kwargs}
    url = args.pop("url")
    with pytest.raises(ConfigError) as info:
        webhook(url, **args)
    assert info.value.parameter == parameter


def test_batches_keys_and_payload(server, sleeps):
    url, receiver = server
    sink = opened(url, batch_size=2, headers={"Authorization": "Bearer t"})
    sink.write_epoch(3, rows(5))
    sink.close()

    assert [r["status"] for r in receiver.requests] == [200, 200, 200]
    assert [r["headers"]["Idempotency-Key"] for r in receiver.requests] == [
        "flights/hook/3/0",
        "flights/hook/3/1",
        "flights/hook/3/2",
    ]
    for r in receiver.requests:
        assert r["path"] == "/hook"
        assert r["headers"]["Content-Type"] == "application/json"
        assert r["headers"]["Authorization"] == "Bearer t"
    assert [len(r["body"]) for r in receiver.requests] == [2, 2, 1]
    posted = [row for r in receiver.requests for row in r["body"]]
    assert posted == [
        {"id": 0, "ts": "2013-01-01T10:15:00.123Z", "x": 0.0, "name": "n0", "epoch": 3},
        {"id": 1, "ts": "2013-01-01T10:15:00.124Z", "x": None, "name": "n1", "epoch": 3},
        {"id": 2, "ts": "2013-01-01T10:15:00.125Z", "x": 1.0, "name": None, "epoch": 3},
        {"id": 3, "ts": "2013-01-01T10:15:00.126Z", "x": 1.5, "name": "n3", "epoch": 3},
        {"id": 4, "ts": "2013-01-01T10:15:00.127Z", "x": 2.0, "name": "n4", "epoch": 3},
    ]
    assert list(posted[0]) == ["id", "ts", "x", "name", "epoch"]
    assert sleeps == []


def test_503_with_retry_after_is_retried_then_accepted(server, sleeps):
    url, receiver = server
    receiver.fail_first, receiver.retry_after = 2, "7"
    sink = opened(url, batch_size=10, backoff_s=0.25)
    sink.write_epoch(0, rows(3, epoch=0))
    assert [r["status"] for r in receiver.requests] == [503, 503, 200]
    assert {r["headers"]["Idempotency-Key"] for r in receiver.requests} == {"flights/hook/0/0"}
    assert all(r["body"] == receiver.requests[0]["body"] for r in receiver.requests)
    assert sleeps == [7.0, 7.0]  # Retry-After replaces the backoff
    sink.close()


def test_without_retry_after_the_backoff_doubles(server, sleeps):
    url, receiver = server
    receiver.fail_first, receiver.fail_status, receiver.retry_after = 3, 429, None
    sink = opened(url, backoff_s=0.5, max_retries=3)
    sink.write_epoch(0, rows(1, epoch=0))
    assert [r["status"] for r in receiver.requests] == [429, 429, 429, 200]
    assert sleeps == [0.5, 1.0, 2.0]


def test_retry_after_is_capped(server, sleeps):
    url, receiver = server
    receiver.fail_first, receiver.retry_after = 1, "86400"
    opened(url).write_epoch(0, rows(1, epoch=0))
    assert sleeps == [webhook_module.MAX_DELAY_S]


def test_exhausted_retries_raise_a_wire_error_naming_url_and_status(server, sleeps):
    url, receiver = server
    receiver.fail_first = 100
    sink = opened(url, max_retries=2)
    with pytest.raises(WireError) as info:
        sink.write_epoch(5, rows(2, epoch=5))
    assert url in str(info.value)
    assert "status 503" in str(info.value)
    assert "3 attempts" in str(info.value)
    assert len(receiver.requests) == 3
    assert receiver.accepted == []


def test_a_client_error_is_not_retried(server, sleeps):
    url, receiver = server
    receiver.fail_first, receiver.fail_status = 1, 400
    with pytest.raises(WireError, match="refused with status 400"):
        opened(url).write_epoch(0, rows(1, epoch=0))
    assert len(receiver.requests) == 1
    assert sleeps == []


def test_connection_errors_are_retried_and_then_raise(sleeps):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook"
    sink = opened(url, max_retries=2, backoff_s=0.1, timeout_s=2)
    with pytest.raises(WireError, match="ConnectError") as info:
        sink.write_epoch(0, rows(1, epoch=0))
    assert url in str(info.value)
    assert sleeps == [0.1, 0.2]
    sink.close()


def test_a_replayed_epoch_is_posted_again_with_the_same_keys(server, sleeps):
    url, receiver = server
    sink = opened(url, batch_size=2)
    sink.write_epoch(3, rows(3))
    sink.close()
    restarted = opened(url, batch_size=2)
    restarted.write_epoch(3, rows(3))
    keys = [r["headers"]["Idempotency-Key"] for r in receiver.requests]
    assert keys == ["flights/hook/3/0", "flights/hook/3/1"] * 2
    assert receiver.requests[0]["body"] == receiver.requests[2]["body"]
    # a receiver that deduplicates by key sees every row once
    unique = {r["headers"]["Idempotency-Key"]: r["body"] for r in receiver.accepted}
    assert sum(len(b) for b in unique.values()) == 3


def test_empty_epoch_sends_nothing_and_write_before_open_fails(server, sleeps):
    url, receiver = server
    sink = webhook(url)
    with pytest.raises(WireError, match="before open"):
        sink.write_epoch(0, rows(1))
    sink.open(**OPEN)
    sink.write_epoch(0, rows(0))
    assert receiver.requests == []
    sink.close()
    sink.close()  # closing twice is harmless


def test_retry_after_parsing():
    parse = webhook_module._retry_after
    assert parse(None) is None
    assert parse("3") == 3.0
    assert parse("-3") == 0.0
    assert parse("soon") is None
    assert parse("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
