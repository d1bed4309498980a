"""CircuitBreaker state machine, driven by a fake clock."""

from __future__ import annotations

import math

import pytest

from wire.delivery import breaker as breaker_module
from wire.delivery.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from wire.errors import ConfigError


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(threshold: int = 3, timeout: float = 5.0, **kw) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker(threshold, timeout, clock=clock, **kw), clock


def test_starts_closed_and_allows():
    b, _ = make()
    assert b.state == CLOSED
    assert b.allow() and b.allow()
    assert b.retry_after_s() == 0.0
    assert b.opened_at is None and b.last_error is None and b.transitions == []


def test_opens_after_threshold_consecutive_failures():
    b, clock = make(threshold=3)
    b.record_failure(OSError("one"))
    b.record_failure(OSError("two"))
    assert b.state == CLOSED and b.allow() and b.failures == 2
    clock.advance(1)
    err = OSError("three")
    b.record_failure(err)
    assert b.state == OPEN
    assert not b.allow()
    assert b.opened_at == 101.0
    assert b.last_error is err
    assert b.transitions == [(101.0, CLOSED, OPEN)]
    assert b.retry_after_s() == 5.0
    clock.advance(2)
    assert b.retry_after_s() == 3.0


def test_success_resets_the_consecutive_count():
    b, _ = make(threshold=3)
    b.record_failure(OSError())
    b.record_failure(OSError())
    b.record_success()
    b.record_failure(OSError())
    b.record_failure(OSError())
    assert b.state == CLOSED and b.failures == 2


def test_half_open_after_timeout_allows_exactly_one_probe():
    b, clock = make(threshold=1, timeout=5.0)
    b.record_failure(OSError())
    clock.advance(4.999)
    assert b.state == OPEN and not b.allow()
    clock.advance(0.001)
    assert b.state == HALF_OPEN
    assert b.retry_after_s() == 0.0
    assert b.allow() is True
    assert b.allow() is False  # the probe is in flight
    assert b.transitions == [(100.0, CLOSED, OPEN), (105.0, OPEN, HALF_OPEN)]


def test_probe_success_closes_and_resets_timeout():
    b, clock = make(threshold=1, timeout=5.0)
    b.record_failure(OSError())
    clock.advance(5)
    assert b.allow()
    b.record_success()
    assert b.state == CLOSED and b.allow()
    assert b.opened_at is None and b.failures == 0 and b.open_timeout_s == 5.0
    assert [t[1:] for t in b.transitions] == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


def test_probe_failure_reopens_with_doubled_timeout_and_keeps_opened_at():
    b, clock = make(threshold=1, timeout=5.0)
    b.record_failure(OSError("down"))
    clock.advance(5)
    assert b.allow()
    b.record_failure(OSError("still down"))
    assert b.state == OPEN and not b.allow()
    assert b.retry_after_s() == 10.0
    assert b.opened_at == 100.0  # the outage began at the first opening
    clock.advance(9.9)
    assert b.state == OPEN
    clock.advance(0.1)
    assert b.state == HALF_OPEN
    assert [t[1:] for t in b.transitions] == [
        (CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, OPEN), (OPEN, HALF_OPEN)]


def test_open_timeout_doubles_up_to_the_cap_and_resets_after_success():
    b, clock = make(threshold=1, timeout=5.0, max_reset_timeout_s=30.0)
    b.record_failure(OSError())
    timeouts = []
    for _ in range(5):
        timeouts.append(b.retry_after_s())
        clock.advance(b.retry_after_s())
        assert b.allow()
        b.record_failure(OSError())
    assert timeouts == [5.0, 10.0, 20.0, 30.0, 30.0]
    clock.advance(30)
    assert b.allow()
    b.record_success()
    b.record_failure(OSError())
    assert b.retry_after_s() == 5.0


def test_default_cap():
    b, clock = make(threshold=1, timeout=20.0)
    b.record_failure(OSError())
    for _ in range(3):
        clock.advance(b.retry_after_s())
        b.allow()
        b.record_failure(OSError())
    assert b.retry_after_s() == breaker_module.DEFAULT_MAX_RESET_TIMEOUT_S == 60.0


def test_success_in_any_state_closes():
    b, _ = make(threshold=1)
    b.record_failure(OSError())
    assert b.state == OPEN
    b.record_success()
    assert b.state == CLOSED


def test_failure_while_open_is_only_counted():
    b, clock = make(threshold=1, timeout=5.0)
    b.record_failure(OSError("a"))
    clock.advance(3)
    late = OSError("late")
    b.record_failure(late)
    assert b.state == OPEN and b.last_error is late and b.failures == 2
    assert b.retry_after_s() == 2.0  # the probe time did not move
    assert len(b.transitions) == 1


def test_transitions_are_bounded(monkeypatch):
    monkeypatch.setattr(breaker_module, "MAX_TRANSITIONS", 4)
    b, _ = make(threshold=1)
    for _ in range(10):
        b.record_failure(OSError())
        b.record_success()
    assert len(b.transitions) == 4
    assert b.transitions[-1][1:] == (OPEN, CLOSED)


@pytest.mark.parametrize("threshold", [0, -1, True, 1.5, "3", None])
def test_bad_threshold(threshold):
    with pytest.raises(ConfigError, match="failure_threshold"):
        CircuitBreaker(threshold)


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, True, "5"])
def test_bad_reset_timeout(timeout):
    with pytest.raises(ConfigError, match="reset_timeout_s"):
        CircuitBreaker(3, timeout)


def test_cap_below_reset_timeout_is_refused():
    with pytest.raises(ConfigError, match="max_reset_timeout_s"):
        CircuitBreaker(3, 10.0, max_reset_timeout_s=5.0)


def test_listeners_hear_every_transition_in_order():
    b, clock = make(threshold=1, timeout=5.0)
    heard = []
    b.add_listener(lambda _br, before, after: heard.append((before, after)))
    b.record_failure(OSError())
    clock.advance(5)
    assert b.allow()  # open -> half_open noticed here
    b.record_success()
    assert heard == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]
    assert b.state == CLOSED and len(heard) == 3  # reading does not repeat them


def test_a_listener_may_read_the_breaker_without_deadlock():
    b, _ = make(threshold=1)
    seen = []
    b.add_listener(lambda br, _before, _after: seen.append((br.state, br.retry_after_s())))
    b.record_failure(OSError())
    assert seen == [(OPEN, 5.0)]


def test_removed_listener_is_not_called():
    b, _ = make(threshold=1)
    heard = []

    def listener(_br, before, after):
        heard.append((before, after))

    b.add_listener(listener)
    b.remove_listener(listener)
    b.remove_listener(listener)  # unknown: ignored
    b.record_failure(OSError())
    assert heard == []
