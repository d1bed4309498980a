"""Source watermarks over partitions: bounded out-of-orderness, idleness, the minimum (SPEC §2).

Pure arithmetic on ints (ms), no I/O and no Spark: the file source's planner calls it
once per ``latestOffset`` with the processing-time clock reading ``now`` and records
every input and result in the epoch's end offset, so a replayed epoch never
recomputes anything.

The rules, for a source with partitions ``p`` and ``max_delay`` ``D``:

* **Partition watermark.** ``W_p = max(W_p, max_et_p - D)``, where ``max_et_p`` is the
  largest event time admitted from ``p`` so far (monotonic; :data:`NO_WATERMARK`
  before ``p`` had an event).
* **Idle partition.** With ``idle_timeout`` ``T`` set, ``p`` is idle when it has no
  record waiting to be admitted and ``now - last_p > T``, where ``last_p`` is the
  planner's wall-clock time when it last admitted a record of ``p`` (valid or
  malformed), or the time the source started if ``p`` never had one. A partition
  whose records wait for admission (back-pressure) is never idle. Without ``T``
  no partition is ever idle. The idle clock restarts with the process: ``last_p``
  is at least ``resumed``, the time this process's planner started, since a flow
  that was down (killed, stopped, restarting) did not hear its partitions and
  cannot call them silent. Without that rule a restart that takes longer than
  ``T`` would make every partition idle at once and move the watermark by the
  downtime, turning the backlog that waited in the meantime into late events.
* **Done partition.** In a bounded source a partition with no record left that
  admitted none in the epoch is done: it will never produce another event, so it no
  longer counts (in the epoch that admits its last records it still counts).
* **Source watermark.** ``W = max(W, candidate)`` (monotonic), where the candidate is
  the minimum of ``W_p`` over the partitions that are neither idle nor done; if every
  remaining partition is idle, the watermark follows processing time from where each
  partition went idle: ``max over p of W_p + (now - max(last_p, resumed) - T)`` (partitions that
  never had an event take no part; if none had one, the candidate is
  :data:`NO_WATERMARK`). The extrapolation starts at ``W_p`` the moment ``p`` turns
  idle, so a single-partition source does not jump when it goes quiet.
* **Idle ticks.** When nothing was admitted but the watermark would still move, the
  source emits an epoch of watermark rows only if the watermark moves by at least
  1 ms and at least ``watermark_interval`` passed since the previous offset was made.
* **Future-dated events** (``max_future`` ``F``, off by default). An event whose event
  time is more than ``F`` ahead of processing time is a malformed record (SPEC §3): it
  goes to the dead-letter output and takes no part in ``max_et_p``. Processing time is
  the planner's clock reading recorded in the epoch's end offset (``at``), never an
  executor's clock, so a replayed epoch rejects the same events
  (:func:`future_limit`, :func:`future_reason`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.errors import ConfigError

_MAX_FINITE = MAX_WATERMARK - 1
"""Largest finite watermark (one below :data:`~wire.core.time.MAX_WATERMARK`)."""


@dataclass(frozen=True)
class WatermarkPolicy:
    """How a source derives its watermark, in ms: the one value every connector uses.

    ``max_delay_ms``: bounded out-of-orderness (``W_p = max_et_p - D``); ``idle_timeout_ms``:
    ``T`` of the idleness rule (None: never idle); ``interval_ms``: least processing time
    between two watermark-only epochs; ``max_future_ms``: ``F`` of the future-dated rule
    (None: off). Users give it as :class:`wire.BoundedOutOfOrderness` (durations, converted
    once) at ``flow.source``; it travels in the source's binding as :meth:`to_json`.
    """

    max_delay_ms: int
    idle_timeout_ms: int | None = None
    interval_ms: int = 200
    max_future_ms: int | None = None

    def to_json(self) -> dict[str, int | None]:
        """The binding form (JSON primitives; a subclass travels as the base class)."""
        return {"max_delay_ms": self.max_delay_ms, "idle_timeout_ms": self.idle_timeout_ms,
                "interval_ms": self.interval_ms, "max_future_ms": self.max_future_ms}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> WatermarkPolicy:
        """Inverse of :meth:`to_json`."""
        return WatermarkPolicy(**d)

    def check(self, step: str | None = None) -> None:
        """Raise ConfigError unless every field holds what the rules take (ints in ms)."""
        for name, value, least, optional in (
            ("max_delay_ms", self.max_delay_ms, 0, False),
            ("idle_timeout_ms", self.idle_timeout_ms, 1, True),
            ("interval_ms", self.interval_ms, 0, False),
        ):
            if optional and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                accepted = f"{'None or ' if optional else ''}an int >= {least} (ms)"
                raise ConfigError(name, value, accepted, step=step)
        check_max_future(step, self.max_future_ms)


@dataclass(frozen=True)
class PartitionState:
    """One partition as recorded in an offset: read position and watermark inputs.

    ``file``/``record``: the current file (``""`` before the first) and the index of
    its next record; ``admitted``: records admitted from the partition so far;
    ``max_event_time``/``watermark``: see the module rules; ``last_arrival``: wall-clock
    ms of the last admission (None: never); ``idle``/``done``: the flags the epoch's
    watermark was computed with.
    """

    file: str = ""
    record: int = 0
    admitted: int = 0
    max_event_time: int | None = None
    watermark: int = NO_WATERMARK
    last_arrival: int | None = None
    idle: bool = False
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the offset form (JSON primitives only)."""
        return asdict(self)

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PartitionState:
        """Inverse of :meth:`to_json`."""
        return PartitionState(**d)


def fair_split(demands: Sequence[int], budget: int | None, first: int = 0) -> list[int]:
    """Split an admission ``budget`` over partitions with ``demands`` (max-min fair).

    Every partition gets ``min(demand, fair share)``; what a partition leaves unused is
    shared by the others. A remainder smaller than the number of partitions still
    wanting records goes one record each, in order starting at index ``first`` (rotate
    it per epoch for round-robin). ``budget=None`` grants every demand.

    >>> fair_split([10, 1, 10], 9)
    [4, 1, 4]
    >>> fair_split([5, 5, 5], 2, first=1)
    [0, 1, 1]
    """
    if budget is None:
        return list(demands)
    n = len(demands)
    alloc = [0] * n
    order = [(first + k) % n for k in range(n)]
    wanting = [i for i in order if demands[i] > 0]
    left = budget
    while left > 0 and wanting:
        share = left // len(wanting)
        if share == 0:
            for i in wanting[:left]:
                alloc[i] += 1
            break
        still = []
        for i in wanting:
            give = min(share, demands[i] - alloc[i])
            alloc[i] += give
            left -= give
            if alloc[i] < demands[i]:
                still.append(i)
        wanting = still
    return alloc


def is_idle(
    *,
    pending: bool,
    last_arrival: int | None,
    started: int,
    now: int,
    idle_timeout_ms: int | None,
    resumed: int | None = None,
) -> bool:
    """Whether a partition is idle at ``now`` (see the module rules).

    ``resumed`` (ms): when this process's planner started; silence before it (a flow that
    was down) does not count. None: no restart to account for.
    """
    if idle_timeout_ms is None or pending:
        return False
    last = started if last_arrival is None else last_arrival
    return now - _silent_since(last, resumed) > idle_timeout_ms


def _silent_since(last: int, resumed: int | None) -> int:
    """Where a partition's idle clock starts: its last admission, not before this process started."""
    return last if resumed is None else max(last, resumed)


def advance_partition(
    prev: PartitionState,
    *,
    file: str,
    record: int,
    taken: int,
    max_event_time: int | None,
    pending: bool,
    bounded: bool,
    now: int,
    started: int,
    policy: WatermarkPolicy,
    resumed: int | None = None,
) -> PartitionState:
    """Return the partition after admitting ``taken`` records ending at ``(file, record)``.

    ``max_event_time`` is the largest event time among the admitted records (None: no
    valid record); ``pending`` says whether records are left to admit now; ``resumed``
    is when this process's planner started (:func:`is_idle`).
    """
    max_et = prev.max_event_time
    if max_event_time is not None:
        max_et = max_event_time if max_et is None else max(max_et, max_event_time)
    watermark = prev.watermark
    if max_et is not None:
        watermark = max(watermark, max_et - policy.max_delay_ms)
    last = now if taken else prev.last_arrival
    idle = is_idle(
        pending=pending, last_arrival=last, started=started, now=now, idle_timeout_ms=policy.idle_timeout_ms,
        resumed=resumed,
    )
    return replace(
        prev,
        file=file,
        record=record,
        admitted=prev.admitted + taken,
        max_event_time=max_et,
        watermark=watermark,
        last_arrival=last,
        idle=idle,
        done=bounded and not pending and taken == 0,
    )


def source_watermark(
    prev: int,
    partitions: Mapping[str, PartitionState],
    now: int,
    policy: WatermarkPolicy,
    resumed: int | None = None,
) -> int:
    """Return the source watermark after ``prev`` given the partitions' states (monotonic).

    ``resumed`` (ms): when this process's planner started; an all-idle source extrapolates
    from its partitions' last admissions but not from before it (module rules).
    """
    live = [p for p in partitions.values() if not p.done]
    if not live:
        return prev
    active = [p for p in live if not p.idle]
    if active:
        candidate = min(p.watermark for p in active)
    else:
        timeout = policy.idle_timeout_ms or 0
        candidate = max(
            (
                p.watermark + (now - _silent_since(p.last_arrival, resumed) - timeout)
                for p in live
                if p.last_arrival is not None and p.watermark != NO_WATERMARK
            ),
            default=NO_WATERMARK,
        )
    return max(prev, min(candidate, _MAX_FINITE))


def should_tick(prev: int, new: int, last_made: int | None, now: int, policy: WatermarkPolicy) -> bool:
    """Whether a watermark-only epoch is due: ``new`` moved >= 1 ms, not within the interval."""
    if new - prev < 1:
        return False
    return last_made is None or now - last_made >= policy.interval_ms


_UNITS = (("y", 365 * 86_400_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000))


def future_limit(at: int | None, max_future_ms: int | None) -> int | None:
    """The largest event time (ms) admitted as on time at processing time ``at`` (None: no limit).

    ``at`` is the processing time recorded in the epoch's end offset; ``max_future_ms``
    None means the check is off.

    >>> future_limit(1_000, 500), future_limit(1_000, None)
    (1500, None)
    """
    if max_future_ms is None or at is None:
        return None
    return at + max_future_ms


def human_duration(ms: int) -> str:
    """A duration in the largest unit it reaches, to 3 significant digits (``"74y"``, ``"1.5h"``).

    >>> human_duration(3_600_000), human_duration(5_400_000), human_duration(250)
    ('1h', '1.5h', '250ms')
    """
    for unit, size in _UNITS:
        if abs(ms) >= size:
            return f"{ms / size:.3g}{unit}"
    return f"{ms}ms"


def iso_ms(ms: int) -> str:
    """An event time (ms since the Unix epoch) as ISO-8601 UTC text; outside datetime's range: ``"<ms> ms"``.

    >>> iso_ms(4_102_444_800_000)
    '2100-01-01T00:00:00Z'
    """
    try:
        dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms"
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def future_reason(event_time: int, at: int, max_future_ms: int) -> str:
    r"""The dead-letter reason of an event more than ``max_future_ms`` ahead of processing time ``at``.

    >>> print(future_reason(4_102_444_800_000, 1_767_225_600_000, 3_600_000).replace(", ", ",\n"))
    event time 2100-01-01T00:00:00Z is 74y ahead of processing time 2026-01-01T00:00:00Z,
    beyond max_future=1h
    """
    ahead = human_duration(event_time - at)
    return (
        f"event time {iso_ms(event_time)} is {ahead} ahead of processing time {iso_ms(at)}, "
        f"beyond max_future={human_duration(max_future_ms)}"
    )


def check_max_future(step: str | None, max_future_ms: object) -> None:
    """Raise ConfigError unless ``max_future_ms`` is None or an int >= 0 (a source binding's value)."""
    if max_future_ms is None:
        return
    if isinstance(max_future_ms, bool) or not isinstance(max_future_ms, int) or max_future_ms < 0:
        raise ConfigError("max_future_ms", max_future_ms, "None (off) or an int >= 0 (ms)", step=step)
