"""Recent history of each registered flow, sampled by the control plane (for the dashboard).

Every ``interval_s`` seconds a :class:`HistorySampler` thread reads every registered
flow (the same reads as ``GET /v1/flows/{id}``, without Spark's progress) into one
:class:`Sample` and appends it to that flow's :class:`HistoryBuffer`, a ring buffer of at
most ``max_samples`` samples: the oldest sample is dropped when a new one comes. Memory
is therefore bounded by ``max_samples`` samples per flow, each a few small dicts sized
by the flow's number of steps (about 2 kB for a ten-step flow: 3600 samples, the
default, one hour at one sample a second, are a few MB).

``GET /v1/flows/{id}/history?minutes=N`` serves :meth:`HistoryBuffer.columns`: one array
per series, aligned on ``t``. Units: times (``t``) and watermarks are milliseconds since
the Unix epoch; a watermark is ``null`` before any event and ``9223372036854775807``
(``2**63 - 1``) at the end of input; durations end in ``_ms``; rates are per second.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wire.control.status import (
    Counters,
    FlowHandle,
    breakers_of,
    counters_of,
    flow_error,
    flow_state,
    source_lag,
    source_steps,
)
from wire.core.control_file import read_control
from wire.core.time import NO_WATERMARK
from wire.errors import ConfigError

DEFAULT_INTERVAL_S = 1.0
DEFAULT_MAX_SAMPLES = 3600
"""Samples kept per flow: one hour at the default interval of one second."""


@dataclass(frozen=True)
class Sample:
    """One flow read at one moment. Counters are cumulative for the flow's current run."""

    t_ms: int
    """Processing time of the read, ms since the Unix epoch."""
    status: str
    epochs: int
    input_events: int
    rows_out: int
    """Rows written by every sink (kept side ports included)."""
    epoch_ms: float | None
    """Mean wall time of the epochs completed since the previous sample (ms); None if none."""
    watermarks: Mapping[str, Mapping[str, int | None]]
    """Per step, its watermark gauges (ms; None before any event), e.g. ``watermark:p0``."""
    lag_ms: Mapping[str, int | None]
    """Per source step, its max event time minus its watermark (None if not reported)."""
    late: Mapping[str, int]
    malformed: Mapping[str, int]
    breakers: Mapping[str, str]
    paused: Mapping[str, bool]
    """Per source step, whether it is paused (alone or with the flow)."""


def _wm(value: int | None) -> int | None:
    return None if value is None or value == NO_WATERMARK else int(value)


def sample_of(flow: FlowHandle, *, now_ms: int, epochs_before: int | None = None) -> Sample:
    """Read ``flow`` now; ``epochs_before`` is the epoch count of the previous sample."""
    counters = counters_of(flow.summary)
    control = read_control(flow.control_file)
    state = flow_state(flow, counters, control, flow_error(flow))
    connectors = control.get("connectors", {})
    epoch_ms = None
    if epochs_before is not None and counters.epochs > epochs_before:
        # each epoch's own duration: not the time the flow waited, paused, before it
        # a RunSummary's RecentEpochs: the newest epochs' values only
        walls = flow.summary.epoch_seconds.since(epochs_before, counters.epochs)
        if walls:
            epoch_ms = 1000.0 * sum(walls) / len(walls)
    paused = {step: bool(control.get("paused") or connectors.get(step, {}).get("paused"))
              for step in source_steps(flow)}
    return sample_from(counters, now_ms=now_ms, status=state, epoch_ms=epoch_ms,
                       breakers=breakers_of(flow), paused=paused)


def sample_from(
    counters: Counters,
    *,
    now_ms: int,
    status: str,
    epoch_ms: float | None,
    breakers: Mapping[str, str] | None = None,
    paused: Mapping[str, bool] | None = None,
) -> Sample:
    """A sample of ``counters`` (a live flow's, or an epoch record's for ``wire report``)."""
    return Sample(
        t_ms=now_ms,
        status=status,
        epochs=counters.epochs,
        input_events=counters.input_events,
        rows_out=sum(counters.rows_written.values()),
        epoch_ms=epoch_ms,
        watermarks={s: {k: _wm(v) for k, v in marks.items()} for s, marks in counters.watermarks().items()},
        lag_ms={step: source_lag(counters, step) for step in counters.source_steps},
        late=counters.per_step("late"),
        malformed=counters.per_step("malformed"),
        breakers=dict(breakers or {}),
        paused=dict(paused or {}),
    )


def _rates(ts: list[int], counts: list[int]) -> list[float | None]:
    """Per sample, the count's increase per second since the previous one (None: first, reset)."""
    out: list[float | None] = [None]
    for i in range(1, len(ts)):
        dt, dn = ts[i] - ts[i - 1], counts[i] - counts[i - 1]
        out.append(1000.0 * dn / dt if dt > 0 and dn >= 0 else None)
    return out[: len(ts)]


def _watermarks_of(step: str) -> Callable[[Sample], Mapping[str, int | None]]:
    """Reads ``step``'s watermark gauges from a sample (none when it reported none)."""
    return lambda s: s.watermarks.get(step, {})


def _column(samples: list[Sample], get: Callable[[Sample], Mapping[str, Any]]) -> dict[str, list[Any]]:
    keys = sorted({k for s in samples for k in get(s)})
    return {k: [get(s).get(k) for s in samples] for k in keys}


class HistoryBuffer:
    """A ring buffer of one flow's samples (at most ``max_samples``; oldest dropped first)."""

    def __init__(self, *, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 2:
            raise ConfigError("history_max_samples", max_samples, "an int >= 2")
        self.max_samples = max_samples
        self._samples: deque[Sample] = deque(maxlen=max_samples)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._samples)

    def append(self, sample: Sample) -> None:
        """Keep ``sample``, dropping the oldest one when the buffer is full."""
        with self._lock:
            self._samples.append(sample)

    def last(self) -> Sample | None:
        """The newest sample, or None."""
        with self._lock:
            return self._samples[-1] if self._samples else None

    def samples(self, *, since_ms: int | None = None) -> list[Sample]:
        """The kept samples, oldest first; only those at or after ``since_ms`` if given."""
        with self._lock:
            kept = list(self._samples)
        return kept if since_ms is None else [s for s in kept if s.t_ms >= since_ms]

    def columns(self, *, since_ms: int | None = None) -> dict[str, Any]:
        """The samples as aligned arrays (see the module docstring for units)."""
        samples = self.samples(since_ms=since_ms)
        ts = [s.t_ms for s in samples]
        steps = sorted({step for s in samples for step in s.watermarks})
        return {
            "t": ts,
            "status": [s.status for s in samples],
            "epochs": [s.epochs for s in samples],
            "input_events": [s.input_events for s in samples],
            "rows_out": [s.rows_out for s in samples],
            "events_in_per_s": _rates(ts, [s.input_events for s in samples]),
            "rows_out_per_s": _rates(ts, [s.rows_out for s in samples]),
            "epoch_ms": [s.epoch_ms for s in samples],
            "watermarks": {
                step: _column(samples, _watermarks_of(step)) for step in steps
            },
            "lag_ms": _column(samples, lambda s: s.lag_ms),
            "late": _column(samples, lambda s: s.late),
            "malformed": _column(samples, lambda s: s.malformed),
            "breakers": _column(samples, lambda s: s.breakers),
            "paused": _column(samples, lambda s: s.paused),
        }


class HistorySampler:
    """A daemon thread that samples every flow ``flows()`` returns every ``interval_s``."""

    def __init__(
        self,
        flows: Callable[[], Mapping[str, FlowHandle]],
        history: Callable[[str], HistoryBuffer | None],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        if isinstance(interval_s, bool) or not isinstance(interval_s, int | float) or not interval_s > 0:
            raise ConfigError("history_interval_s", interval_s, "a number of seconds > 0")
        self.interval_s = float(interval_s)
        self._flows = flows
        self._history = history
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> None:
        """Append one sample of every registered flow to its history.

        A flow that cannot be read now (e.g. its Spark session is gone) is skipped this time.
        """
        now = self._clock_ms()
        for fid, flow in self._flows().items():
            history = self._history(fid)
            if history is None:
                continue
            last = history.last()
            try:
                sample = sample_of(flow, now_ms=now, epochs_before=None if last is None else last.epochs)
            except Exception:
                continue
            history.append(sample)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        """Start sampling in a daemon thread (a no-op if already started)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="wire-history", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop sampling; the histories stay."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(5.0)
            self._thread = None
