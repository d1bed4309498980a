"""Sink groups: a circuit breaker in front of a sink, and a round-robin group of sinks.

Both wrappers are sinks themselves (:class:`wire.delivery.sink.Sink`) and keep the
runtime's contract: the runtime calls ``write_epoch`` on the driver, once per epoch,
inside Spark's ``foreachBatch`` and **before** Spark marks the epoch complete. They
implement SPEC §7 (contraflow, circuit breakers, guaranteed delivery), after Tremor's
runtime:

* A failing delivery is retried with the **same epoch's rows** until it is accepted;
  no epoch is skipped and no row is dropped.
* Failures feed a :class:`~wire.delivery.breaker.CircuitBreaker`. While it is open,
  ``write_epoch`` waits for the half-open probe instead of pounding the sink. Because
  the call blocks inside ``foreachBatch``, Spark plans no new epoch and the sources
  admit nothing more: backpressure by construction (SPEC §5). The ``on_open`` /
  ``on_close`` callbacks are the contraflow signal for what lives outside the epoch
  loop (pausing sources through the control file, an HTTP ingest answering ``503``
  with ``Retry-After`` = :meth:`CircuitBreaker.retry_after_s`).
* ``max_open_s`` bounds the wait: the call then raises :class:`~wire.errors.WireError`,
  the epoch fails, and the supervisor restarts the flow, which replays the epoch.

:func:`guarded` wraps one sink; :func:`round_robin` spreads each epoch over several
sinks, takes a failing one out of rotation, and opens its own breaker only when all
members are failing (Tremor's ``qos::roundrobin``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from wire.delivery.breaker import CLOSED, OPEN, CircuitBreaker, check_seconds
from wire.delivery.sink import Guarantee, Sink
from wire.errors import ConfigError, WireError

BreakerCallback = Callable[[CircuitBreaker], object]
"""``on_open`` / ``on_close``: called on the driver with the breaker that moved."""

MIN_WAIT_S = 0.05
"""Shortest sleep while a breaker is open (no busy loop when a probe is just due)."""


@dataclass(frozen=True, kw_only=True)
class _Breakered:
    """The circuit-breaker settings and runtime state of :class:`GuardedSink` and :class:`RoundRobinSink`.

    Keyword-only fields (see :func:`guarded`). ``breaker`` and the interrupt event are
    runtime state, excluded from equality.
    """

    failure_threshold: int = 3
    reset_timeout_s: float = 5.0
    max_open_s: float | None = None
    on_open: BreakerCallback | None = field(default=None, compare=False)
    on_close: BreakerCallback | None = field(default=None, compare=False)
    sleep: Callable[[float], object] | None = field(default=None, compare=False, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)
    breaker: CircuitBreaker = field(init=False, compare=False, repr=False)
    _interrupted: threading.Event = field(init=False, compare=False, repr=False)

    def _start_breaker(self, threshold: int) -> None:
        """Check ``max_open_s`` and create the breaker (``threshold`` failures open it)."""
        _check_max_open(self.max_open_s)
        object.__setattr__(self, "breaker", CircuitBreaker(threshold, self.reset_timeout_s, clock=self.clock))
        object.__setattr__(self, "_interrupted", threading.Event())

    def interrupt(self) -> None:
        """Make a ``write_epoch`` that waits on the open breaker raise now (graceful stop)."""
        self._interrupted.set()

    def _settings(self) -> str:
        """``failure_threshold=3 reset_timeout_s=5.0[ max_open_s=...]``, for ``describe``."""
        limit = "" if self.max_open_s is None else f" max_open_s={self.max_open_s}"
        return f"failure_threshold={self.failure_threshold} reset_timeout_s={self.reset_timeout_s}{limit}"


@dataclass(frozen=True)
class GuardedSink(_Breakered, Sink):
    """One sink behind a circuit breaker, retrying each epoch until accepted; built by :func:`guarded`.

    ``breaker`` is runtime state: it is kept across :meth:`open` calls (a restart
    after ``max_open_s`` resumes the same outage) and excluded from equality.
    """

    inner: Sink

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time and create the breaker."""
        if not isinstance(self.inner, Sink):
            raise ConfigError("sink", self.inner, "a wire Sink (e.g. wire.sinks.parquet(...))")
        self._start_breaker(self.failure_threshold)

    @property
    def guarantee(self) -> Guarantee:  # type: ignore[override]
        """The inner sink's guarantee: every retry repeats the same epoch id and rows."""
        return self.inner.guarantee

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Starting over: hand the inner sink to the new checkpoint (:meth:`Sink.supersede`)."""
        self.inner.supersede(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Open the inner sink (run start, driver, before the first or replayed epoch)."""
        self._interrupted.clear()
        self.inner.open(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Deliver the epoch through the inner sink, retrying until it is accepted.

        Called on the driver once per epoch, before the epoch commits; returns only
        when ``inner.write_epoch(epoch, table)`` returned, so the epoch commits with its
        rows delivered. Every failure (any ``Exception``) is recorded in
        :attr:`breaker`. While it is closed the call is repeated at once; once it opens
        (``failure_threshold`` consecutive failures) ``on_open`` is called and the call
        sleeps until the half-open probe, which repeats the same call: success closes
        the breaker and calls ``on_close``; failure re-opens it for twice as long.

        Raises
        ------
        WireError
            When the breaker has been open for ``max_open_s`` (the last error is
            chained), or after :meth:`interrupt`. The epoch then fails; a restart
            replays it.
        """
        breaker = self.breaker
        while True:
            if not breaker.allow():
                _wait_for_probe(self, breaker)
                continue
            before = breaker.state
            try:
                self.inner.write_epoch(epoch, table)
            except Exception as exc:
                breaker.record_failure(exc)
                if before == CLOSED and breaker.state == OPEN and self.on_open is not None:
                    self.on_open(breaker)
                continue
            breaker.record_success()
            if before != CLOSED and self.on_close is not None:
                self.on_close(breaker)
            return

    def close(self) -> None:
        """Close the inner sink (run end, driver)."""
        self.inner.close()

    def describe(self) -> str:
        """E.g. ``"guarded[parquet out/x (exactly_once)] failure_threshold=3 reset_timeout_s=5.0"``."""
        return f"guarded[{self.inner.describe()}] {self._settings()} ({self.guarantee})"


@dataclass(frozen=True)
class RoundRobinSink(_Breakered, Sink):
    """Each epoch spread over member sinks, failing members out of rotation; built by :func:`round_robin`.

    ``breaker`` (the group's) and ``member_breakers`` (one per member, same order) are
    runtime state, excluded from equality.
    """

    guarantee: ClassVar[Guarantee] = "at_least_once"

    members: tuple[Sink, ...]
    member_breakers: tuple[CircuitBreaker, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Validate the members and configuration at flow-build time; create the breakers."""
        members = tuple(self.members)
        if not members:
            raise ConfigError("sinks", members, "one or more wire Sinks")
        for member in members:
            if not isinstance(member, Sink):
                raise ConfigError("sinks", member, "wire Sinks (e.g. wire.sinks.webhook(...))")
            if member.guarantee == "exactly_once":
                raise ConfigError(
                    "sinks",
                    member.describe(),
                    "members whose guarantee is 'at_least_once' or 'idempotent': a member may be "
                    "handed another member's slice after a failover or a replay, which an "
                    "exactly-once sink would skip as already written",
                )
        if len({id(m) for m in members}) != len(members):
            raise ConfigError("sinks", [m.describe() for m in members], "distinct sink objects")
        object.__setattr__(self, "members", members)
        object.__setattr__(
            self, "member_breakers",
            tuple(CircuitBreaker(self.failure_threshold, self.reset_timeout_s, clock=self.clock)
                  for _ in members),
        )
        self._start_breaker(1)  # the group's: open once no member accepts

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Starting over: hand every member ``<sink_id>.<i>`` to the new checkpoint."""
        for i, member in enumerate(self.members):
            member.supersede(flow_id=flow_id, sink_id=f"{sink_id}.{i}", checkpoint_id=checkpoint_id)

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Open every member as ``<sink_id>.<i>`` (run start, driver); undo on failure."""
        self._interrupted.clear()
        opened: list[Sink] = []
        try:
            for i, member in enumerate(self.members):
                member.open(flow_id=flow_id, sink_id=f"{sink_id}.{i}", checkpoint_id=checkpoint_id)
                opened.append(member)
        except BaseException:
            for member in opened:
                member.close()
            raise

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Deliver the epoch's rows, slice by slice, each to one member that accepts it.

        Called on the driver once per epoch, before the epoch commits; returns when
        every row was accepted by some member. The table is cut into
        ``len(members)`` contiguous slices of near-equal size; slice ``j`` goes to the
        ``(j + epoch) % k``-th of the ``k`` members in rotation (those whose breaker is
        not open), so the assignment rotates with the epoch. A member receives slice
        ``j`` as ``write_epoch(epoch * len(members) + j, slice)``: the id is unique per
        slice, so a member that also takes over another slice of the same epoch is not
        mistaken for a replay (the rows keep their ``epoch`` column).

        A member's failure is recorded in its breaker and the slice goes at once to the
        next member in rotation; a member whose breaker opens leaves the rotation and
        returns through its own half-open probe. When no member can take the slice,
        the group's breaker opens (``on_open``) and the call waits like
        :class:`GuardedSink`: at each half-open probe the slice is offered to every
        member once; the first to accept closes the group's breaker (``on_close``).

        Raises
        ------
        WireError
            When the group's breaker has been open for ``max_open_s``, or after
            :meth:`interrupt`. The epoch fails; a restart replays it.
        """
        n = len(self.members)
        rows = table.num_rows
        if rows == 0:
            return
        rotation = [i for i, b in enumerate(self.member_breakers) if b.state != OPEN] or list(range(n))
        for j in range(n):
            start, stop = j * rows // n, (j + 1) * rows // n
            if stop > start:
                first = rotation[(j + epoch) % len(rotation)]
                self._deliver(epoch * n + j, table.slice(start, stop - start), first)

    def close(self) -> None:
        """Close every member (run end, driver); the first error is raised after all are closed."""
        error: BaseException | None = None
        for member in self.members:
            try:
                member.close()
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error

    def describe(self) -> str:
        """E.g. ``"round_robin[webhook a (at_least_once), webhook b (at_least_once)] ..."``."""
        inner = ", ".join(m.describe() for m in self.members)
        return f"round_robin[{inner}] {self._settings()} ({self.guarantee})"

    def _deliver(self, slice_id: int, rows: pa.Table, first: int) -> None:
        n = len(self.members)
        group = self.breaker
        at = first
        while True:
            if group.state == CLOSED:
                member = self._next_allowed(at)
                if member is None:
                    group.record_failure(self._latest_error())
                    if self.on_open is not None:
                        self.on_open(group)
                    continue
                if self._try(member, slice_id, rows):
                    return
                at = (member + 1) % n
                continue
            if not group.allow():
                _wait_for_probe(self, group)
                continue
            for offset in range(n):  # the group's probe: every member once, whatever its own breaker
                if self._try((at + offset) % n, slice_id, rows):
                    group.record_success()
                    if self.on_close is not None:
                        self.on_close(group)
                    return
            group.record_failure(self._latest_error())
            at = (at + 1) % n

    def _next_allowed(self, at: int) -> int | None:
        n = len(self.members)
        for offset in range(n):
            member = (at + offset) % n
            if self.member_breakers[member].allow():
                return member
        return None

    def _try(self, member: int, slice_id: int, rows: pa.Table) -> bool:
        breaker = self.member_breakers[member]
        try:
            self.members[member].write_epoch(slice_id, rows)
        except Exception as exc:
            breaker.record_failure(exc)
            return False
        breaker.record_success()
        return True

    def _latest_error(self) -> BaseException | None:
        errors = [b.last_error for b in self.member_breakers if b.last_error is not None]
        return errors[-1] if errors else None


def guarded(
    sink: Sink,
    *,
    failure_threshold: int = 3,
    reset_timeout_s: float = 5.0,
    max_open_s: float | None = None,
    on_open: BreakerCallback | None = None,
    on_close: BreakerCallback | None = None,
    sleep: Callable[[float], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> GuardedSink:
    """Put ``sink`` behind a circuit breaker: retry each epoch until accepted, never drop.

    A driver sink: the epoch's rows are brought to the driver, which writes them
    through the inner sink (an executor sink such as Parquet then stages and
    commits on the driver), so that the breaker sees every attempt.

    Input: the epoch's rows for the sink's port, unchanged. State: the breaker
    (:class:`~wire.delivery.breaker.CircuitBreaker`), kept for the life of the sink
    object, never checkpointed (after a process restart it starts closed). Timing: the
    runtime calls ``write_epoch`` on the driver once per epoch, before the epoch
    commits; it returns when the inner sink accepted the epoch's rows, so a sink outage
    holds the epoch (and with it the sources) instead of losing rows. ``open`` and
    ``close`` are forwarded. Guarantee: the inner sink's (every attempt repeats the same
    epoch id and rows).

    Parameters
    ----------
    sink:
        The sink to protect.
    failure_threshold:
        Consecutive failures that open the breaker; retries before that are immediate.
    reset_timeout_s:
        Seconds open before the first probe; doubles after each failed probe, at most
        :data:`~wire.delivery.breaker.DEFAULT_MAX_RESET_TIMEOUT_S`.
    max_open_s:
        None (wait for as long as it takes) or seconds after which an open breaker makes
        ``write_epoch`` raise, handing the flow to the supervisor.
    on_open, on_close:
        Called on the driver with the breaker when an outage starts (closed → open) and
        when it ends (the probe succeeded); an exception they raise fails the epoch.
    sleep, clock:
        Injected by tests; ``sleep=None`` waits on an event that :meth:`GuardedSink.interrupt`
        sets.

    Returns
    -------
    GuardedSink
        With ``.breaker`` for the runtime (state, ``retry_after_s()``, transitions).

    Raises
    ------
    ConfigError
        When ``sink`` is not a Sink or a number is out of range.

    Example
    -------
    >>> from wire.sinks.file_sinks import console
    >>> sink = guarded(console(), failure_threshold=2)
    >>> sink.guarantee, sink.breaker.state
    ('at_least_once', 'closed')
    >>> sink.describe()
    'guarded[console max_rows=20 (at_least_once)] failure_threshold=2 reset_timeout_s=5.0 (at_least_once)'
    """
    return GuardedSink(
        inner=sink,
        failure_threshold=failure_threshold,
        reset_timeout_s=reset_timeout_s,
        max_open_s=max_open_s,
        on_open=on_open,
        on_close=on_close,
        sleep=sleep,
        clock=clock,
    )


def round_robin(
    *sinks: Sink,
    failure_threshold: int = 3,
    reset_timeout_s: float = 5.0,
    max_open_s: float | None = None,
    on_open: BreakerCallback | None = None,
    on_close: BreakerCallback | None = None,
    sleep: Callable[[float], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RoundRobinSink:
    """Spread each epoch's rows over ``sinks``; fail over a failing one; never drop.

    A driver sink: the epoch's rows are brought to the driver to be sliced.

    Input: the epoch's rows for the sink's port, cut into ``len(sinks)`` contiguous
    slices whose assignment rotates with the epoch (:meth:`RoundRobinSink.write_epoch`).
    State: one breaker per member and one for the group, kept for the life of the
    sink object, never checkpointed. Timing: the runtime calls ``write_epoch`` on the
    driver once per epoch, before the epoch commits; it returns when every slice was
    accepted by a member. A member that fails ``failure_threshold`` times in a row leaves
    the rotation until its half-open probe succeeds; its slices go to the next member.
    Only when every member is failing does the group's breaker open; the group then
    waits and probes like :func:`guarded`. ``open`` opens member ``i`` as sink
    ``<sink_id>.<i>``; ``close`` closes them all.

    Guarantee: ``at_least_once``. A member that fails *after* writing part of a slice
    has its whole slice re-sent to another member (the group cannot know which rows
    landed), and a replayed epoch may be sliced onto other members than the first
    attempt. When failures happen before anything is written, every row is delivered
    exactly once. For the same reason exactly-once members are refused: one could
    receive a slice that its own replay detection would skip.

    Parameters
    ----------
    *sinks:
        The members, at least one, ``at_least_once`` or ``idempotent``.
    failure_threshold, reset_timeout_s:
        Of every member's breaker (the group's breaker opens at its first failure and
        uses ``reset_timeout_s`` too); see :func:`guarded`.
    max_open_s, on_open, on_close, sleep, clock:
        For the group's breaker, as in :func:`guarded`.

    Returns
    -------
    RoundRobinSink
        With ``.breaker`` (the group's) and ``.member_breakers``.

    Raises
    ------
    ConfigError
        When there are no sinks, a member is not a Sink, is exactly-once or appears
        twice, or a number is out of range.

    Example
    -------
    >>> from wire.sinks.file_sinks import console
    >>> group = round_robin(console(), console(max_rows=5))
    >>> group.describe()
    'round_robin[console max_rows=20 (at_least_once), console max_rows=5 (at_least_once)] failure_threshold=3 reset_timeout_s=5.0 (at_least_once)'
    """  # noqa: E501
    return RoundRobinSink(
        members=tuple(sinks),
        failure_threshold=failure_threshold,
        reset_timeout_s=reset_timeout_s,
        max_open_s=max_open_s,
        on_open=on_open,
        on_close=on_close,
        sleep=sleep,
        clock=clock,
    )


def _check_max_open(value: object) -> None:
    if value is not None:
        check_seconds("max_open_s", value)


def _wait_for_probe(sink: GuardedSink | RoundRobinSink, breaker: CircuitBreaker) -> None:
    """Sleep until ``breaker``'s half-open probe is due; raise at ``max_open_s`` or on interrupt."""
    last = breaker.last_error
    if sink._interrupted.is_set():
        raise WireError(f"{sink.describe()}: interrupted while its circuit breaker is open; "
                        f"last error: {last!r}") from last
    delay = breaker.retry_after_s()
    if sink.max_open_s is not None and breaker.opened_at is not None:
        open_for = sink.clock() - breaker.opened_at
        if open_for >= sink.max_open_s:
            raise WireError(
                f"{sink.describe()}: circuit breaker open for {open_for:.1f}s, "
                f"max_open_s={sink.max_open_s}; last error: {last!r}"
            ) from last
        delay = min(delay, sink.max_open_s - open_for)
    delay = max(delay, MIN_WAIT_S)
    if sink.sleep is None:
        sink._interrupted.wait(delay)
    else:
        sink.sleep(delay)
