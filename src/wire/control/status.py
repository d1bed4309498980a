"""Read a running flow's state for the control plane: pure functions, no HTTP.

A flow handle is anything shaped like :class:`wire.RunningFlow` (duck-typed, see
:class:`FlowHandle`), so the tests use a plain fake. The runner updates the flow's
``summary`` from Spark's ``foreachBatch`` thread while the server reads it; every read
here copies the counters first (:func:`counters_of`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from wire.control.models import (
    DriverTraffic,
    FlowSamples,
    FlowState,
    FlowStatus,
    FlowSummary,
    PartitionStatus,
    SelfCorrectingState,
    SourceStatus,
    SparkProgress,
)
from wire.core.control_file import control_path, read_control
from wire.core.time import NO_WATERMARK
from wire.plan.graph import sinks
from wire.plan.nodes import SourceNode

MAX_EVENT_TIME_GAUGE = "max_event_time"
"""A source gauge that, when reported, gives the source's lag: max event time - watermark."""


class FlowHandle(Protocol):
    """What the control plane reads from a running flow (:class:`wire.RunningFlow` fits).

    Optional hooks, used when present: ``breakers() -> Mapping[str, str]`` (per sink, its
    breaker's state), ``last_error: str | None`` (why the last epoch failed) and
    ``summary.samples`` (a :class:`wire.runtime.samples.SampleBuffer`: recent dead letters
    and late events).
    """

    plan: Any
    control_file: str
    summary: Any
    query: Any

    @property
    def flow_id(self) -> str:
        """The flow's id."""
        ...

    def is_active(self) -> bool:
        """True while the Spark query runs."""
        ...


@dataclass(frozen=True)
class Counters:
    """A consistent copy of a run summary's counters and gauges."""

    epochs: int
    metrics: dict[tuple[str, str], int]
    gauges: dict[tuple[str, str], int]
    rows_written: dict[str, int]
    emitted: dict[str, int]
    source_steps: tuple[str, ...]
    driver_rows_last: int | None = None
    """Data rows that reached the driver in the last epoch (0 when every sink is an executor
    sink; None before the first epoch)."""
    driver_rows_total: int = 0
    """Data rows that reached the driver over the run."""
    driver_bytes_last: int | None = None
    """Bytes of the last epoch job's result that reached the driver (None before the first)."""
    driver_bytes_total: int = 0
    """Bytes of the epoch jobs' results that reached the driver over the run."""

    def per_step(self, counter: str) -> dict[str, int]:
        """``{step: value}`` of one counter, e.g. ``"late"``."""
        return {step: v for (step, name), v in sorted(self.metrics.items()) if name == counter}

    @property
    def input_events(self) -> int:
        """Well-formed events admitted by the sources."""
        return sum(self.metrics.get((step, "events"), 0) for step in self.source_steps)

    def watermarks(self) -> dict[str, dict[str, int]]:
        """Per step, its latest watermark gauges (ms), as ``RunSummary.watermarks()``."""
        out: dict[str, dict[str, int]] = {}
        for (step, name), value in sorted(self.gauges.items()):
            if "watermark" in name:
                out.setdefault(step, {})[name] = value
        return out


def _series(summary: Any, name: str) -> dict[str, Any]:
    """``<name>_last`` and ``<name>_total`` of a run summary's per-epoch series.

    Without copying it: a :class:`~wire.runtime.recent.RecentEpochs` knows its total.
    """
    values = getattr(summary, name)
    return {f"{name}_last": values[-1] if values else None, f"{name}_total": int(values.total)}


def counters_of(summary: Any, *, attempts: int = 5) -> Counters:
    """Copy ``summary``'s counters; retry if the epoch thread changed them meanwhile."""
    for attempt in range(attempts):
        try:
            return Counters(
                epochs=int(summary.epochs),
                metrics=dict(summary.metrics),
                gauges=dict(summary.gauges),
                rows_written=dict(summary.rows_written),
                emitted=dict(summary.emitted),
                source_steps=tuple(summary.source_steps),
                **_series(summary, "driver_rows"),
                **_series(summary, "driver_bytes"),
            )
        except RuntimeError:  # "dictionary changed size during iteration"
            if attempt == attempts - 1:
                raise
            time.sleep(0.001)
    raise AssertionError("unreachable")


def source_steps(flow: FlowHandle) -> tuple[str, ...]:
    """The flow's source step ids (its connectors that can be paused), in plan order."""
    return tuple(n.step for n in flow.plan.nodes if isinstance(n, SourceNode))


class StartingFlow:
    """A flow whose run is starting (the SparkSession, the flow's compilation): ``starting``.

    :meth:`wire.Flow.run` registers one with its dashboard's control plane before it
    starts Spark, so the dashboard shows the flow as ``starting`` (with its operator
    graph) from the first second instead of no flow; the running flow then takes its
    place (``ControlPlane.add(..., replace=True)``). It has no query and no counters;
    pause and resume answer 409 until the run replaces it.
    """

    starting = True
    query = None

    def __init__(self, plan: Any, checkpoint: str) -> None:
        from wire.runtime.runner import RunSummary

        self.plan = plan
        self.control_file = control_path(checkpoint)
        self.summary = RunSummary(plan.flow_id, source_steps=tuple(
            n.step for n in plan.nodes if isinstance(n, SourceNode)))

    @property
    def flow_id(self) -> str:
        """The flow's id."""
        return str(self.plan.flow_id)

    def is_active(self) -> bool:
        """True: the run is on its way (its query is not there yet)."""
        return True


def flow_error(flow: FlowHandle) -> str | None:
    """Why the flow is failing: the query's exception or the last epoch's error, else None."""
    hook = getattr(flow, "last_error", None)
    if hook:
        return str(hook)
    query = getattr(flow, "query", None)
    if query is None:
        return None
    try:
        exc = query.exception()
    except Exception as e:  # the Spark session itself is gone
        return f"cannot read the query's state: {e!r}"
    return None if exc is None else str(exc)


def flow_state(
    flow: FlowHandle, counters: Counters, control: Mapping[str, Any], error: str | None
) -> FlowState:
    """The flow's state, the first that holds of these.

    ``failing`` > ``starting`` (its run is starting) > ``stopped`` > ``paused`` >
    ``starting`` (no epoch yet) > ``running``.
    """
    if error is not None:
        return "failing"
    if getattr(flow, "starting", False):
        return "starting"
    if not flow.is_active():
        return "stopped"
    if control.get("paused"):
        return "paused"
    if counters.epochs == 0:
        return "starting"
    return "running"


def _wm(value: int | None) -> int | None:
    return None if value is None or value == NO_WATERMARK else int(value)


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def spark_progress(flow: FlowHandle) -> SparkProgress | None:
    """The query's ``lastProgress`` rates, or None before the first progress report."""
    query = getattr(flow, "query", None)
    try:
        progress = None if query is None else query.lastProgress
    except Exception:
        return None
    if not progress:
        return None
    batch = progress.get("batchId")
    return SparkProgress(
        batch_id=None if batch is None else int(batch),
        input_rows_per_second=_finite(progress.get("inputRowsPerSecond")),
        processed_rows_per_second=_finite(progress.get("processedRowsPerSecond")),
    )


def breakers_of(flow: FlowHandle) -> dict[str, str]:
    """Per sink, its circuit breaker's state, from the flow's ``breakers()`` hook (else ``{}``)."""
    hook = getattr(flow, "breakers", None)
    if hook is None:
        return {}
    return {str(k): str(v) for k, v in dict(hook()).items()}


class RateMeter:
    """Events/s of one flow from its event count, sampled whenever someone asks.

    Keeps the samples of the last ``window_s`` seconds plus the newest older one, and
    reports the rate between the oldest kept sample and now (None until two samples at
    least ``min_interval_s`` apart exist; reset if the count goes down, e.g. a restart).
    """

    def __init__(
        self,
        *,
        window_s: float = 10.0,
        min_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def observe(self, count: int) -> float | None:
        """Record ``count`` now; return the rate over the window (events/s) or None."""
        now = self.clock()
        with self._lock:
            if self._samples and count < self._samples[-1][1]:
                self._samples.clear()
            self._samples.append((now, count))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()
            t0, n0 = self._samples[0]
            if now - t0 < self.min_interval_s:
                return None
            return (count - n0) / (now - t0)


def summary_of(flow_id: str, flow: FlowHandle) -> FlowSummary:
    """The short form of a flow's status (``GET /v1/flows``)."""
    counters = counters_of(flow.summary)
    control = read_control(flow.control_file)
    state = flow_state(flow, counters, control, flow_error(flow))
    return FlowSummary(id=flow_id, status=state, epochs=counters.epochs, input_events=counters.input_events)


def source_lag(counters: Counters, step: str) -> int | None:
    """A source step's event-time lag (ms): its max event time minus its watermark, if reported."""
    watermark = counters.gauges.get((step, "watermark"))
    max_et = counters.gauges.get((step, MAX_EVENT_TIME_GAUGE))
    if watermark is None or max_et is None or NO_WATERMARK in (watermark, max_et):
        return None
    return max(0, max_et - watermark)


def partitions_of(counters: Counters, step: str) -> dict[str, PartitionStatus]:
    """Per partition of source ``step``: its ``watermark:<p>`` and ``offset_lag:<p>`` gauges."""
    out: dict[str, PartitionStatus] = {}
    for (s, name), value in sorted(counters.gauges.items()):
        gauge, _, part = name.partition(":")
        if s != step or not part or gauge not in ("watermark", "offset_lag"):
            continue
        p = out.setdefault(part, PartitionStatus())
        if gauge == "watermark":
            p.watermark = _wm(value)
        else:
            p.offset_lag = value
    return out


def self_correcting_sinks(flow: FlowHandle) -> dict[str, Any]:
    """The flow's self-correcting sinks by step (the sinks that report ``epoch_metrics``)."""
    return {node.step: node.sink for node in sinks(flow.plan) if hasattr(node.sink, "epoch_metrics")}


def self_correcting_state(counters: Counters, step: str, sink: Any) -> SelfCorrectingState:
    """A self-correcting sink's mode, its ``sc_`` counters (this run) and gauges (last epoch)."""
    def of(values: dict[tuple[str, str], int]) -> dict[str, int]:
        return {n: v for (s, n), v in sorted(values.items()) if s == step and n.startswith("sc_")}

    return SelfCorrectingState(mode=sink.mode(), counters=of(counters.metrics), gauges=of(counters.gauges))


def status_of(flow_id: str, flow: FlowHandle, rate: RateMeter) -> FlowStatus:
    """The full status of a flow (``GET /v1/flows/{id}``)."""
    counters = counters_of(flow.summary)
    control = read_control(flow.control_file)
    error = flow_error(flow)
    state = flow_state(flow, counters, control, error)
    connectors = control.get("connectors", {})
    sources = {}
    for step in source_steps(flow):
        sources[step] = SourceStatus(
            paused=bool(control.get("paused") or connectors.get(step, {}).get("paused")),
            watermark=_wm(counters.gauges.get((step, "watermark"))),
            lag_ms=source_lag(counters, step),
            partitions=partitions_of(counters, step),
        )
    return FlowStatus(
        id=flow_id,
        status=state,
        epochs=counters.epochs,
        input_events=counters.input_events,
        input_rate=rate.observe(counters.input_events),
        watermarks={s: {k: _wm(v) for k, v in marks.items()} for s, marks in counters.watermarks().items()},
        late=counters.per_step("late"),
        malformed=counters.per_step("malformed"),
        rows_written=dict(sorted(counters.rows_written.items())),
        driver=DriverTraffic(
            rows_last_epoch=counters.driver_rows_last,
            bytes_last_epoch=counters.driver_bytes_last,
            rows_total=counters.driver_rows_total,
            bytes_total=counters.driver_bytes_total,
        ),
        sources=sources,
        breakers=breakers_of(flow),
        self_correcting={step: self_correcting_state(counters, step, sink)
                         for step, sink in self_correcting_sinks(flow).items()},
        error=error,
        spark=spark_progress(flow),
    )


def samples_of(flow_id: str, flow: FlowHandle) -> FlowSamples:
    """The flow's newest dead letters and late events (``GET /v1/flows/{id}/samples``).

    Empty lists when the flow's summary keeps no samples (``summary.samples`` missing).
    """
    buffer = getattr(flow.summary, "samples", None)
    if buffer is None:
        return FlowSamples(id=flow_id, size=0, dead_letters=[], late=[])
    return FlowSamples.model_validate({"id": flow_id, **buffer.to_dict()})
