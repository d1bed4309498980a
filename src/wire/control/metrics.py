"""Prometheus metrics of the registered flows, read at scrape time (no background thread).

Every sample carries a ``flow`` label. Counters are for the current run of each flow.

=============================================  ======================================================
``wire_epochs_total{flow}``                    epochs completed
``wire_input_events_total{flow}``              well-formed events admitted by the sources
``wire_late_events_total{flow,step}``          events sent to a step's late port
``wire_malformed_events_total{flow,step}``     records sent to a step's dead-letter port
``wire_step_events_total{flow,step,counter}``  every per-step counter (events, records, late, ...)
``wire_rows_written_total{flow,sink}``         rows written per sink step
``wire_driver_rows_total{flow}``               data rows that reached the driver (0: executors write)
``wire_driver_bytes_total{flow}``              bytes of the epochs' job results that reached the driver
``wire_windows_emitted_total{flow,emit}``      window results by emission (early, final, update)
``wire_restarts_total{flow}``                  supervisor restarts
``wire_watermark_ms{flow,step,kind}``          latest watermarks (``-Inf``: none yet, ``+Inf``: end)
``wire_step_gauge{flow,step,name}``            other per-step gauges, e.g. ``open_windows``
``wire_flow_paused{flow}``                     1 when the whole flow is paused
``wire_connector_paused{flow,connector}``      1 when a source is paused (alone or with the flow)
``wire_flow_status{flow,status}``              1 for the flow's current status, 0 for the others
``wire_source_lag_ms{flow,step}``              max event time - watermark, when the source reports it
``wire_breaker_state{flow,sink,state}``        1 for each breaker's current state
=============================================  ======================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from wire.control.models import FlowState
from wire.control.status import (
    MAX_EVENT_TIME_GAUGE,
    FlowHandle,
    breakers_of,
    counters_of,
    flow_error,
    flow_state,
    source_lag,
    source_steps,
)
from wire.core.control_file import read_control
from wire.core.time import MAX_WATERMARK, NO_WATERMARK

STATES: tuple[str, ...] = get_args(FlowState)
BREAKER_STATES = ("closed", "open", "half_open")


def _watermark_value(ms: int) -> float:
    if ms == NO_WATERMARK:
        return -math.inf
    if ms == MAX_WATERMARK:
        return math.inf
    return float(ms)


class FlowCollector(Collector):
    """A custom collector over the flows that ``flows()`` returns (id → handle) at scrape time."""

    def __init__(self, flows: Callable[[], Mapping[str, FlowHandle]]) -> None:
        self._flows = flows

    def describe(self) -> list[Metric]:
        """Nothing: the metric families depend on the flows (skips the registration check)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Build every family from the flows registered now."""
        epochs = CounterMetricFamily("wire_epochs", "Epochs completed by the flow's run.", labels=["flow"])
        inputs = CounterMetricFamily(
            "wire_input_events", "Well-formed events admitted by the sources.", labels=["flow"]
        )
        late = CounterMetricFamily("wire_late_events", "Events sent to a step's late port.",
                                   labels=["flow", "step"])
        malformed = CounterMetricFamily("wire_malformed_events", "Records sent to the dead-letter port.",
                                        labels=["flow", "step"])
        step_events = CounterMetricFamily("wire_step_events", "Per-step counters.",
                                          labels=["flow", "step", "counter"])
        written = CounterMetricFamily("wire_rows_written", "Rows written per sink.", labels=["flow", "sink"])
        driver_rows = CounterMetricFamily("wire_driver_rows", "Data rows that reached the driver.",
                                          labels=["flow"])
        driver_bytes = CounterMetricFamily("wire_driver_bytes", "Bytes of epoch results that reached "
                                           "the driver.", labels=["flow"])
        emitted = CounterMetricFamily("wire_windows_emitted", "Window results by emission.",
                                      labels=["flow", "emit"])
        restarts = CounterMetricFamily("wire_restarts", "Supervisor restarts.", labels=["flow"])
        watermark = GaugeMetricFamily(
            "wire_watermark_ms", "Latest watermark in event-time ms (-Inf: none yet, +Inf: end of input).",
            labels=["flow", "step", "kind"],
        )
        gauges = GaugeMetricFamily("wire_step_gauge", "Other per-step gauges.",
                                   labels=["flow", "step", "name"])
        paused = GaugeMetricFamily("wire_flow_paused", "1 when the flow is paused.", labels=["flow"])
        conn_paused = GaugeMetricFamily("wire_connector_paused", "1 when a source step is paused.",
                                        labels=["flow", "connector"])
        status = GaugeMetricFamily("wire_flow_status", "1 for the flow's current status.",
                                   labels=["flow", "status"])
        lag = GaugeMetricFamily("wire_source_lag_ms", "Source max event time minus its watermark (ms).",
                                labels=["flow", "step"])
        breakers = GaugeMetricFamily("wire_breaker_state", "1 for each circuit breaker's current state.",
                                     labels=["flow", "sink", "state"])
        for fid, flow in sorted(self._flows().items()):
            c = counters_of(flow.summary)
            control = read_control(flow.control_file)
            current = flow_state(flow, c, control, flow_error(flow))
            epochs.add_metric([fid], c.epochs)
            inputs.add_metric([fid], c.input_events)
            for (step, name), value in sorted(c.metrics.items()):
                step_events.add_metric([fid, step, name], value)
                if name == "late":
                    late.add_metric([fid, step], value)
                elif name == "malformed":
                    malformed.add_metric([fid, step], value)
            for sink, n in sorted(c.rows_written.items()):
                written.add_metric([fid, sink], n)
            driver_rows.add_metric([fid], c.driver_rows_total)
            driver_bytes.add_metric([fid], c.driver_bytes_total)
            for emit, n in sorted(c.emitted.items()):
                emitted.add_metric([fid, emit], n)
            restarts.add_metric([fid], int(getattr(flow.summary, "restarts", 0)))
            for (step, name), value in sorted(c.gauges.items()):
                if "watermark" in name:
                    watermark.add_metric([fid, step, name], _watermark_value(value))
                elif name != MAX_EVENT_TIME_GAUGE:
                    gauges.add_metric([fid, step, name], value)
            paused.add_metric([fid], 1.0 if control.get("paused") else 0.0)
            connectors = control.get("connectors", {})
            for step in source_steps(flow):
                on = control.get("paused") or connectors.get(step, {}).get("paused")
                conn_paused.add_metric([fid, step], 1.0 if on else 0.0)
                step_lag = source_lag(c, step)
                if step_lag is not None:
                    lag.add_metric([fid, step], step_lag)
            for s in STATES:
                status.add_metric([fid, s], 1.0 if s == current else 0.0)
            for sink, state in sorted(breakers_of(flow).items()):
                for s in sorted({*BREAKER_STATES, state}):
                    breakers.add_metric([fid, sink, s], 1.0 if s == state else 0.0)
        yield from (epochs, inputs, late, malformed, step_events, written, driver_rows, driver_bytes,
                    emitted, restarts,
                    watermark, gauges, paused, conn_paused, status, lag, breakers)
