"""Circuit breaker: stop pounding a sink that keeps failing, probe it, close when healthy.

A :class:`CircuitBreaker` watches the outcome of every attempt to deliver to one
downstream system (one sink, or one member of a sink group) and decides whether the
next attempt may go ahead. The rules come from Tremor's runtime (circuit breakers
carried back to the sources by *contraflow*) and SPEC §7: a sink that keeps failing
opens its breaker, the sources that feed it stop admitting input until the sink is
healthy again, a successful delivery closes the breaker, and nothing is lost.

State machine (``state``)::

                failure_threshold consecutive failures
      closed ──────────────────────────────────────────▶ open
        ▲                                                 │ after the open timeout
        │ probe succeeds                                  ▼
        └──────────────────────────────────────────── half_open
                                                          │ probe fails: open again,
                                                          │ timeout doubled (capped)
                                                          ▼
                                                         open

* ``closed`` — every attempt is allowed (:meth:`CircuitBreaker.allow` is True);
  each failure counts, a success resets the count.
* ``open`` — no attempt is allowed until the open timeout has passed. The first
  outage of a series waits ``reset_timeout_s``.
* ``half_open`` — the timeout has passed: exactly one attempt (the *probe*) is
  allowed. Its success closes the breaker and resets the timeout to
  ``reset_timeout_s``; its failure opens the breaker again with the timeout doubled,
  at most ``max_reset_timeout_s`` (default :data:`DEFAULT_MAX_RESET_TIMEOUT_S`).

A success recorded in any state closes the breaker (Tremor: a delivery
acknowledgement is the signal that the downstream system is back). The breaker is a
pure bookkeeping object: it never sleeps and never calls the sink (listeners added
with :meth:`CircuitBreaker.add_listener` hear every transition). Its clock is
injectable, so tests drive it with a fake clock; its methods are thread-safe, so an
HTTP ingest thread may read :meth:`CircuitBreaker.retry_after_s` while the driver
writes an epoch.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

from wire.errors import ConfigError

CLOSED = "closed"
"""Deliveries go ahead; failures are counted."""
OPEN = "open"
"""Deliveries are refused until the open timeout has passed."""
HALF_OPEN = "half_open"
"""The open timeout has passed: one probe delivery is allowed."""

DEFAULT_MAX_RESET_TIMEOUT_S = 60.0
"""Default cap of the open timeout, which doubles after every failed probe."""

Listener = Callable[["CircuitBreaker", str, str], object]
"""``listener(breaker, from_state, to_state)``, see :meth:`CircuitBreaker.add_listener`."""

MAX_TRANSITIONS = 1000
"""How many of the latest transitions :attr:`CircuitBreaker.transitions` keeps."""


class CircuitBreaker:
    """Closed / open / half-open breaker for one downstream system (module docstring).

    Parameters
    ----------
    failure_threshold:
        Consecutive failures (while closed) that open the breaker, an int ≥ 1.
    reset_timeout_s:
        Seconds the breaker stays open before the first probe, > 0.
    max_reset_timeout_s:
        Cap of the open timeout, which doubles after each failed probe; ≥
        ``reset_timeout_s``.
    clock:
        Monotonic seconds (``time.monotonic``); injected by tests.

    Raises
    ------
    ConfigError
        When a parameter is out of range.
    """

    def __init__(
        self,
        failure_threshold: int = 3,
        reset_timeout_s: float = 5.0,
        *,
        max_reset_timeout_s: float = DEFAULT_MAX_RESET_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_threshold("failure_threshold", failure_threshold)
        check_seconds("reset_timeout_s", reset_timeout_s)
        check_seconds("max_reset_timeout_s", max_reset_timeout_s)
        if max_reset_timeout_s < reset_timeout_s:
            raise ConfigError(
                "max_reset_timeout_s", max_reset_timeout_s, f"a number >= reset_timeout_s ({reset_timeout_s})"
            )
        self.failure_threshold = failure_threshold
        self.reset_timeout_s = float(reset_timeout_s)
        self.max_reset_timeout_s = float(max_reset_timeout_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = CLOSED
        self._failures = 0
        self._timeout = self.reset_timeout_s
        self._probe_due: float | None = None
        self._probing = False
        self._opened_at: float | None = None
        self._last_error: BaseException | None = None
        self._transitions: deque[tuple[float, str, str]] = deque(maxlen=MAX_TRANSITIONS)
        self._listeners: list[Listener] = []
        self._unheard: list[tuple[str, str]] = []

    # --- reading ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"`` (open turns half-open when its timeout has passed)."""
        with self._lock:
            self._advance(self._clock())
            state = self._state
        self._notify()
        return state

    @property
    def opened_at(self) -> float | None:
        """Clock time at which the current outage began (closed → open); None while closed.

        A failed probe re-opens the breaker without moving this time, so
        ``clock() - opened_at`` is how long the downstream system has been unusable.
        """
        return self._opened_at

    @property
    def last_error(self) -> BaseException | None:
        """The exception of the latest recorded failure (kept after the breaker closes)."""
        return self._last_error

    @property
    def failures(self) -> int:
        """Consecutive failures since the last success."""
        return self._failures

    @property
    def open_timeout_s(self) -> float:
        """How long the breaker stays open at its next (or current) opening."""
        return self._timeout

    @property
    def transitions(self) -> list[tuple[float, str, str]]:
        """``(clock time, from_state, to_state)`` of the latest :data:`MAX_TRANSITIONS` moves.

        For metrics and tests. The move open → half-open is stamped when it is noticed
        (by :attr:`state`, :meth:`allow`, :meth:`retry_after_s` or a record).
        """
        with self._lock:
            return list(self._transitions)

    def retry_after_s(self) -> float:
        """Seconds until the next probe may go ahead: 0.0 unless the breaker is open.

        An HTTP ingest answers ``503`` with ``Retry-After`` set to this value rounded up
        to whole seconds (at least 1: a half-open breaker's probe is due or running).
        """
        with self._lock:
            now = self._clock()
            self._advance(now)
            wait = 0.0 if self._state != OPEN or self._probe_due is None else max(0.0, self._probe_due - now)
        self._notify()
        return wait

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(breaker, from_state, to_state)`` after every transition.

        For the runtime (status, metrics, pausing sources): it is called in the thread
        that caused the transition, after the breaker's lock is released; an exception
        it raises propagates to that caller.
        """
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (e.g. when the run that added it ends); unknown ones are ignored."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    # --- deciding and recording --------------------------------------------------------

    def allow(self) -> bool:
        """Whether a delivery attempt may go ahead now.

        True while closed; False while open; while half-open, True exactly once (the
        caller then owns the probe and must report it with :meth:`record_success` or
        :meth:`record_failure`).
        """
        with self._lock:
            self._advance(self._clock())
            allowed = self._state == CLOSED or (self._state == HALF_OPEN and not self._probing)
            if self._state == HALF_OPEN and allowed:
                self._probing = True
        self._notify()
        return allowed

    def record_success(self) -> None:
        """Report a successful delivery: the breaker closes (from any state)."""
        with self._lock:
            now = self._clock()
            self._advance(now)
            self._failures = 0
            if self._state != CLOSED:
                self._move(now, CLOSED)
            self._timeout = self.reset_timeout_s
            self._probe_due = None
            self._probing = False
            self._opened_at = None
        self._notify()

    def record_failure(self, exc: BaseException | None = None) -> None:
        """Report a failed delivery (``exc`` is kept as :attr:`last_error`).

        Closed: the count grows; at ``failure_threshold`` the breaker opens for
        ``reset_timeout_s``. Half-open (the probe failed): open again for twice the
        previous timeout, at most ``max_reset_timeout_s``. Open (an attempt begun
        before it opened): only counted.
        """
        with self._lock:
            now = self._clock()
            self._advance(now)
            self._failures += 1
            if exc is not None:
                self._last_error = exc
            if self._state == CLOSED and self._failures >= self.failure_threshold:
                self._timeout = self.reset_timeout_s
                self._opened_at = now
                self._open(now)
            elif self._state == HALF_OPEN:
                self._timeout = min(self._timeout * 2, self.max_reset_timeout_s)
                self._open(now)
        self._notify()

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(state={self.state!r}, failures={self._failures}, "
            f"failure_threshold={self.failure_threshold}, open_timeout_s={self._timeout})"
        )

    # --- internals (called with the lock held) -----------------------------------------

    def _open(self, now: float) -> None:
        self._probe_due = now + self._timeout
        self._probing = False
        self._move(now, OPEN)

    def _advance(self, now: float) -> None:
        if self._state == OPEN and self._probe_due is not None and now >= self._probe_due:
            self._probing = False
            self._move(now, HALF_OPEN)

    def _move(self, now: float, to: str) -> None:
        self._transitions.append((now, self._state, to))
        if self._listeners:
            self._unheard.append((self._state, to))
        self._state = to

    def _notify(self) -> None:
        """Tell the listeners about the transitions made under the lock (called without it)."""
        if not self._unheard:
            return
        with self._lock:
            moves, self._unheard = self._unheard, []
            listeners = list(self._listeners)
        for before, after in moves:
            for listener in listeners:
                listener(self, before, after)


def check_threshold(name: str, value: object) -> int:
    """Validate an int ≥ 1 (bools refused); raise :class:`ConfigError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, value, "an int >= 1")
    return value


def check_seconds(name: str, value: object) -> float:
    """Validate a finite number of seconds > 0 (bools refused); raise :class:`ConfigError` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, value, "a finite number of seconds > 0")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(name, value, "a finite number of seconds > 0")
    return float(value)
