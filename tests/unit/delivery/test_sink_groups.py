"""guarded() and round_robin(): retries, breakers, failover; fake sinks and a fake clock, no Spark."""

from __future__ import annotations

import doctest
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
import pytest

from wire.delivery import sink_groups
from wire.delivery.breaker import CLOSED, HALF_OPEN, OPEN
from wire.delivery.sink import Sink
from wire.delivery.sink_groups import guarded, round_robin
from wire.errors import ConfigError, WireError


class FakeClock:
    """A clock whose ``sleep`` records the duration and moves time forward."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.now)


@dataclass(frozen=True, eq=False)
class FakeSink(Sink):
    """Records accepted writes. ``fail_next`` calls raise; ``down`` makes every call raise.

    ``partial`` makes a failing call first keep its rows (a write that landed, then an error).
    """

    guarantee: ClassVar[str] = "at_least_once"
    name: str = "fake"
    state: dict = field(default_factory=lambda: {"fail_next": 0, "down": False, "partial": False})
    writes: list[tuple[int, list[int]]] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        self.calls.append(f"open {flow_id} {sink_id} {checkpoint_id}")

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        self.attempts.append(epoch)
        failing = self.state["down"] or self.state["fail_next"] > 0
        if failing:
            self.state["fail_next"] = max(0, self.state["fail_next"] - 1)
            if self.state["partial"]:
                self.writes.append((epoch, table.column("x").to_pylist()))
            raise OSError(f"{self.name} is down")
        self.writes.append((epoch, table.column("x").to_pylist()))

    def close(self) -> None:
        self.calls.append("close")

    def describe(self) -> str:
        return f"fake {self.name} ({self.guarantee})"

    def rows(self) -> list[int]:
        return [x for _, xs in self.writes for x in xs]


@dataclass(frozen=True, eq=False)
class ExactlyOnceFake(FakeSink):
    guarantee: ClassVar[str] = "exactly_once"


def rows(*xs: int) -> pa.Table:
    return pa.table({"x": pa.array(list(xs), pa.int64())})


def events(log: list[str]):
    return (lambda b: log.append(f"open:{b.state}"), lambda b: log.append(f"close:{b.state}"))


# --- guarded -------------------------------------------------------------------------------


def test_guarded_retries_through_an_outage_and_delivers_once():
    clock, inner, log = FakeClock(), FakeSink(), []
    inner.state["fail_next"] = 2
    on_open, on_close = events(log)
    sink = guarded(inner, failure_threshold=2, reset_timeout_s=5.0, on_open=on_open, on_close=on_close,
                   sleep=clock.sleep, clock=clock)
    sink.write_epoch(7, rows(1, 2, 3))
    assert inner.writes == [(7, [1, 2, 3])]
    assert inner.attempts == [7, 7, 7]  # the same epoch every time
    assert log == ["open:open", "close:closed"]
    assert clock.sleeps == [5.0]
    moves = [t[1:] for t in sink.breaker.transitions]
    assert moves == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]
    assert sink.breaker.state == CLOSED


def test_guarded_retries_below_threshold_at_once_without_callbacks():
    clock, inner, log = FakeClock(), FakeSink(), []
    inner.state["fail_next"] = 2
    on_open, on_close = events(log)
    sink = guarded(inner, failure_threshold=3, on_open=on_open, on_close=on_close,
                   sleep=clock.sleep, clock=clock)
    sink.write_epoch(0, rows(1))
    assert inner.writes == [(0, [1])] and inner.attempts == [0, 0, 0]
    assert log == [] and clock.sleeps == []


def test_guarded_failed_probe_waits_twice_as_long():
    clock, inner, log = FakeClock(), FakeSink(), []
    inner.state["fail_next"] = 2
    on_open, on_close = events(log)
    sink = guarded(inner, failure_threshold=1, reset_timeout_s=5.0, on_open=on_open, on_close=on_close,
                   sleep=clock.sleep, clock=clock)
    sink.write_epoch(3, rows(4))
    assert clock.sleeps == [5.0, 10.0]
    assert log == ["open:open", "close:closed"]  # a failed probe is not a new outage
    assert inner.writes == [(3, [4])]
    sink.write_epoch(4, rows(5))
    assert inner.writes == [(3, [4]), (4, [5])] and clock.sleeps == [5.0, 10.0]


def test_guarded_max_open_raises_then_a_replay_recovers():
    clock, inner, log = FakeClock(), FakeSink(), []
    inner.state["down"] = True
    on_open, on_close = events(log)
    sink = guarded(inner, failure_threshold=1, reset_timeout_s=5.0, max_open_s=12.0,
                   on_open=on_open, on_close=on_close, sleep=clock.sleep, clock=clock)
    with pytest.raises(WireError, match=r"max_open_s=12\.0") as info:
        sink.write_epoch(9, rows(1, 2))
    assert isinstance(info.value.__cause__, OSError)
    assert clock.sleeps == [5.0, 7.0]  # probe at 5 failed, then only up to the 12 s limit
    assert inner.writes == [] and log == ["open:open"]
    assert sink.breaker.state == OPEN
    # the supervisor restarts the flow and replays epoch 9 once the sink is back
    inner.state["down"] = False
    clock.sleeps.clear()
    with pytest.raises(WireError):  # still beyond max_open_s: the outage began at t=0
        sink.write_epoch(9, rows(1, 2))
    clock.now += 10.0  # restart backoff; the probe (due at t=15) is now due
    sink.write_epoch(9, rows(1, 2))
    assert inner.writes == [(9, [1, 2])]
    assert log == ["open:open", "close:closed"]


def test_guarded_keeps_the_inner_guarantee_and_forwards_open_close():
    inner = ExactlyOnceFake(name="files")
    sink = guarded(inner)
    assert sink.guarantee == "exactly_once"
    assert guarded(FakeSink()).guarantee == "at_least_once"
    sink.open(flow_id="f", sink_id="out", checkpoint_id="c1")
    sink.close()
    assert inner.calls == ["open f out c1", "close"]
    assert sink.describe() == (
        "guarded[fake files (exactly_once)] failure_threshold=3 reset_timeout_s=5.0 (exactly_once)")


def test_guarded_equality_ignores_runtime_state_and_callbacks():
    inner = FakeSink()
    a = guarded(inner, on_open=print)
    b = guarded(inner)
    a.breaker.record_failure(OSError())
    assert a == b and hash(a) == hash(b)
    assert a.breaker is not b.breaker
    assert a != guarded(inner, failure_threshold=4)
    assert "breaker" not in repr(a)


def test_guarded_interrupt_wakes_a_waiting_write():
    inner = FakeSink()
    inner.state["down"] = True
    sink = guarded(inner, failure_threshold=1, reset_timeout_s=30.0)  # real clock, event-based wait
    timer = threading.Timer(0.1, sink.interrupt)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(WireError, match="interrupted"):
            sink.write_epoch(0, rows(1))
    finally:
        timer.cancel()
    assert time.monotonic() - started < 5.0
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c")  # a new run clears the interrupt
    inner.state["down"] = False
    sink.breaker.record_success()
    sink.write_epoch(1, rows(2))
    assert inner.writes == [(1, [2])]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [({"failure_threshold": 0}, "failure_threshold"), ({"reset_timeout_s": -1}, "reset_timeout_s"),
     ({"max_open_s": 0}, "max_open_s")],
)
def test_guarded_config_errors(kwargs, parameter):
    with pytest.raises(ConfigError, match=parameter):
        guarded(FakeSink(), **kwargs)


def test_guarded_refuses_a_non_sink():
    with pytest.raises(ConfigError, match="a wire Sink"):
        guarded("out.parquet")  # type: ignore[arg-type]


# --- round robin ---------------------------------------------------------------------------


def group_of(n: int = 3, **kw):
    clock = FakeClock()
    members = [FakeSink(name=f"m{i}") for i in range(n)]
    group = round_robin(*members, sleep=clock.sleep, clock=clock, **kw)
    return group, members, clock


def test_round_robin_splits_contiguously_and_rotates_by_epoch():
    group, (m0, m1, m2), _ = group_of()
    group.write_epoch(0, rows(*range(9)))
    assert (m0.writes, m1.writes, m2.writes) == ([(0, [0, 1, 2])], [(1, [3, 4, 5])], [(2, [6, 7, 8])])
    group.write_epoch(1, rows(*range(10, 20)))
    # slice ids are epoch * 3 + slice; slice 0 now goes to m1, slice 1 to m2, slice 2 to m0
    assert m1.writes[1] == (3, [10, 11, 12])
    assert m2.writes[1] == (4, [13, 14, 15])
    assert m0.writes[1] == (5, [16, 17, 18, 19])


def test_round_robin_skips_empty_slices_and_empty_epochs():
    group, members, _ = group_of()
    group.write_epoch(0, rows())
    assert all(m.attempts == [] for m in members)
    group.write_epoch(2, rows(1, 2))  # slices of 0, 1 and 1 rows
    assert [m.writes for m in members] == [[(7, [1])], [(8, [2])], []]


def test_round_robin_failing_member_slice_goes_to_the_next_member_exactly_once():
    group, (m0, m1, m2), clock = group_of(failure_threshold=2)
    m1.state["down"] = True
    group.write_epoch(0, rows(*range(9)))
    assert m1.attempts == [1]
    assert m2.writes == [(1, [3, 4, 5]), (2, [6, 7, 8])]  # m1's slice re-sent to m2
    group.write_epoch(1, rows(*range(10, 19)))  # slice 0 is m1's: fails again, its breaker opens
    assert group.member_breakers[1].state == OPEN
    assert group.breaker.state == CLOSED  # the group stays up
    delivered = sorted(m0.rows() + m2.rows())
    assert delivered == list(range(9)) + list(range(10, 19))  # every row once, none lost
    assert clock.sleeps == []


def test_round_robin_open_member_is_out_of_rotation_until_its_probe():
    group, (m0, m1, m2), clock = group_of(failure_threshold=1, reset_timeout_s=5.0)
    m1.state["down"] = True
    group.write_epoch(0, rows(*range(6)))
    assert group.member_breakers[1].state == OPEN
    attempts = len(m1.attempts)
    group.write_epoch(1, rows(*range(6)))  # rotation is (m0, m2) now: slices alternate between them
    assert len(m1.attempts) == attempts
    assert [w[0] for w in m2.writes][-2:] == [3, 5] and m0.writes[-1][0] == 4
    m1.state["down"] = False
    clock.now += 5.0  # m1's probe is due: it is back in rotation
    group.write_epoch(2, rows(*range(3)))
    assert m1.writes == [(8, [2])]  # epoch 2: slice 2 is m1's (its probe), ids 6..8
    assert group.member_breakers[1].state == CLOSED
    assert clock.sleeps == []


def test_round_robin_partial_failure_is_at_least_once():
    group, (m0, m1, m2), _ = group_of()
    m0.state["fail_next"] = 1
    m0.state["partial"] = True
    group.write_epoch(0, rows(*range(6)))
    everything = sorted(m0.rows() + m1.rows() + m2.rows())
    assert everything == [0, 0, 1, 1, 2, 3, 4, 5]  # m0's slice landed, then failed, and was re-sent
    assert set(everything) == set(range(6))


def test_round_robin_all_failing_opens_the_group_waits_and_recovers_nothing_lost():
    log: list[str] = []
    on_open, on_close = events(log)
    group, members, clock = group_of(failure_threshold=2, reset_timeout_s=5.0,
                                     on_open=on_open, on_close=on_close)
    for m in members:
        m.state["down"] = True

    def heal(now: float) -> None:
        if now >= 15.0:
            members[2].state["down"] = False

    clock.on_sleep = heal
    group.write_epoch(0, rows(*range(9)))
    assert sum(len(m.attempts) for m in members[:3]) >= 6  # every member failed twice before the group opened
    assert log == ["open:open", "close:closed"]
    assert clock.sleeps == [5.0, 10.0]  # first group probe round fails, second one finds m2 back
    assert group.breaker.state == CLOSED
    assert sorted(m for s in members for m in s.rows()) == list(range(9))  # exactly once
    assert members[2].rows() == list(range(9))
    assert [t[1:] for t in group.breaker.transitions] == [
        (CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


def test_round_robin_all_failing_with_max_open_raises():
    group, members, clock = group_of(failure_threshold=1, max_open_s=8.0)
    for m in members:
        m.state["down"] = True
    with pytest.raises(WireError, match=r"round_robin.*max_open_s=8\.0") as info:
        group.write_epoch(0, rows(1, 2, 3))
    assert isinstance(info.value.__cause__, OSError)
    assert clock.sleeps == [5.0, 3.0]
    assert all(m.writes == [] for m in members)


def test_round_robin_open_close_and_describe():
    group, (m0, _, m2), _ = group_of()
    group.open(flow_id="f", sink_id="out", checkpoint_id="c")
    group.close()
    assert m0.calls == ["open f out.0 c", "close"]
    assert m2.calls == ["open f out.2 c", "close"]
    assert group.guarantee == "at_least_once"
    assert group.describe() == (
        "round_robin[fake m0 (at_least_once), fake m1 (at_least_once), fake m2 (at_least_once)] "
        "failure_threshold=3 reset_timeout_s=5.0 (at_least_once)"
    )


@dataclass(frozen=True, eq=False)
class BrokenOpen(FakeSink):
    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        raise OSError("cannot open")

    def close(self) -> None:
        self.calls.append("close")
        raise OSError("cannot close")


def test_round_robin_open_failure_closes_opened_members_and_close_reaches_all():
    ok, broken, last = FakeSink(name="ok"), BrokenOpen(name="broken"), FakeSink(name="last")
    group = round_robin(ok, broken, last)
    with pytest.raises(OSError, match="cannot open"):
        group.open(flow_id="f", sink_id="s", checkpoint_id="c")
    assert ok.calls == ["open f s.0 c", "close"] and last.calls == []
    with pytest.raises(OSError, match="cannot close"):
        group.close()
    assert last.calls == ["close"] and broken.calls == ["close"]


def test_round_robin_refuses_bad_members():
    with pytest.raises(ConfigError, match="one or more"):
        round_robin()
    with pytest.raises(ConfigError, match="exactly-once"):
        round_robin(FakeSink(), ExactlyOnceFake())
    same = FakeSink()
    with pytest.raises(ConfigError, match="distinct"):
        round_robin(same, same)
    with pytest.raises(ConfigError, match="failure_threshold"):
        round_robin(FakeSink(), failure_threshold=0)


def test_docstring_examples():
    assert doctest.testmod(sink_groups).failed == 0
    assert doctest.testmod(sink_groups).attempted > 0
