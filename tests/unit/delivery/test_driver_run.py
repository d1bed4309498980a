"""DriverRunSink: the run a sink holds on the driver between open and close."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
import pytest

from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import Guarantee, Sink
from wire.errors import WireError


@dataclass
class _Conn:
    name: str
    closed: bool = False


@dataclass(frozen=True)
class _Recording(DriverRunSink[_Conn], Sink):
    guarantee: ClassVar[Guarantee] = "at_least_once"

    path: str
    fail_with: list[Exception] = field(default_factory=list, compare=False, repr=False)
    events: list[str] = field(default_factory=list, compare=False, repr=False)

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> _Conn:
        if self.fail_with:
            raise self.fail_with.pop()
        self.events.append(f"start {flow_id}/{sink_id}@{checkpoint_id}")
        return _Conn(f"{flow_id}/{sink_id}")

    def _end_run(self, run: _Conn) -> None:
        run.closed = True
        self.events.append(f"end {run.name}")

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        self._opened(epoch)

    def describe(self) -> str:
        return f"recording {self.path}"


def test_before_open_every_epoch_raises_naming_the_sink():
    sink = _Recording("a")
    with pytest.raises(WireError, match=r"^recording a: epoch 4 written before open$"):
        sink.write_epoch(4, pa.table({"x": [1]}))
    with pytest.raises(WireError, match=r"^recording a: epoch written before open$"):
        sink._opened()


def test_open_keeps_the_run_and_close_releases_it_once():
    sink = _Recording("a")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    run = sink._opened()
    assert run == _Conn("f/s") and sink._run is run
    sink.write_epoch(0, pa.table({"x": [1]}))
    sink.close()
    sink.close()  # a second close has nothing to release
    assert run.closed and sink._run is None
    assert sink.events == ["start f/s@c", "end f/s"]
    with pytest.raises(WireError, match="before open"):
        sink.write_epoch(1, pa.table({"x": [1]}))


def test_open_again_ends_the_held_run_first():
    sink = _Recording("a")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c1")
    first = sink._opened()
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c2")
    assert first.closed and not sink._opened().closed
    assert sink.events == ["start f/s@c1", "end f/s", "start f/s@c2"]


def test_a_failed_start_leaves_no_run_and_raises_its_error():
    sink = _Recording("a")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    held = sink._opened()
    sink.fail_with.append(WireError("recording a: cannot open"))
    with pytest.raises(WireError, match="cannot open"):
        sink.open(flow_id="f", sink_id="s", checkpoint_id="c")
    assert held.closed and sink._run is None
    sink.close()  # nothing held: nothing ended twice
    assert sink.events == ["start f/s@c", "end f/s"]


def test_the_run_is_outside_equality_repr_and_fingerprint():
    a, b = _Recording("a"), _Recording("a")
    a.open(flow_id="f", sink_id="s", checkpoint_id="c")
    assert a == b and hash(a) == hash(b)
    assert "_run" not in repr(a) and "f/s" not in repr(a)
    assert a.fingerprint() == b.fingerprint() == {"kind": "_Recording", "guarantee": "at_least_once",
                                                  "path": "a"}


def test_the_exactly_once_and_connection_sinks_hold_their_run_through_the_base():
    from wire.sinks.delta_sink.sink import DeltaSink
    from wire.sinks.file_sinks import JsonlSink, ParquetSink
    from wire.sinks.postgres_sink.sink import PostgresAppendSink, PostgresUpsertSink
    from wire.sinks.redis_sink import RedisStreamSink
    from wire.sinks.self_correcting_sink.driver import SelfCorrectingSink
    from wire.sinks.sqlite_sink import SqliteSink
    from wire.sinks.webhook_sink import WebhookSink

    for cls in (DeltaSink, ParquetSink, JsonlSink, PostgresAppendSink, PostgresUpsertSink,
                SelfCorrectingSink, WebhookSink, RedisStreamSink, SqliteSink):
        assert issubclass(cls, DriverRunSink), cls
        assert "_run" not in vars(cls).get("__annotations__", {}), cls  # declared once, on the base
        assert "close" not in vars(cls) and "_opened" not in vars(cls), cls
