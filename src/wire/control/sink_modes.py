"""REST routes of self-correcting sinks (SPEC §8): their status, and the read-only / write switch.

* ``GET /v1/flows/{id}/sinks/{sink}``: the sink's mode and counters.
* ``PATCH /v1/flows/{id}/sinks/{sink}`` ``{"mode": "write" | "read_only"}``: switch
  it (needs the bearer token). The switch is written to the flow's control file
  (``"sinks": {sink: {"mode": ...}}``, :func:`wire.core.control_file.set_sink_mode`);
  the sink reads it at its next epoch, so a standby replica takes over at its next
  epoch. A restarted flow goes back to the sink's build-time mode.

The counters are those of :mod:`wire.sinks.self_correcting_sink`, read from the
run summary (``sc_corrections``, ``sc_drift_rows``, ``sc_cas_conflicts``,
``sc_epochs_behind``, ``sc_parts``) and its gauges (``sc_read_only``, ``sc_distance``,
``sc_corrections_last_epoch``, ``sc_table_upper``). The flow's status ``GET
/v1/flows/{id}`` carries the same under ``self_correcting.<sink>``; ``/metrics``
exports them as ``wire_step_events_total`` / ``wire_step_gauge`` with ``step`` = the
sink step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Path
from pydantic import BaseModel, Field

from wire.control.models import SelfCorrectingState
from wire.control.status import FlowHandle, counters_of, self_correcting_sinks, self_correcting_state
from wire.core.control_file import set_sink_mode

SinkMode = Literal["write", "read_only"]
SinkId = Annotated[str, Path(description="a self-correcting sink step of the flow")]


class SinkModeChange(BaseModel):
    """``PATCH /v1/flows/{id}/sinks/{sink}`` body."""

    mode: SinkMode = Field(description="'write' (append corrections) or 'read_only' (compute, write nothing)")


class SelfCorrectingStatus(SelfCorrectingState):
    """One self-correcting sink's mode and counters (this run), with its flow and step."""

    id: str = Field(description="the flow's id")
    sink: str = Field(description="the sink step")


def _self_correcting(flow: FlowHandle, flow_id: str, sink: str) -> Any:
    found = self_correcting_sinks(flow)
    if sink not in found:
        raise HTTPException(404, f"flow {flow_id!r} has no self-correcting sink step {sink!r}; "
                            f"self-correcting sinks: {sorted(found)}")
    return found[sink]


def _status(flow_id: str, flow: FlowHandle, sink: str, obj: Any) -> SelfCorrectingStatus:
    state = self_correcting_state(counters_of(flow.summary), sink, obj)
    return SelfCorrectingStatus(id=flow_id, sink=sink, **state.model_dump())


def add_sink_mode_routes(app: FastAPI, plane: Any, authorized: Callable[..., None], reads: list[Any],
                         responses: dict[int | str, dict[str, Any]]) -> None:
    """Add the two routes (module docstring) to ``app`` serving ``plane``'s flows."""
    @app.get("/v1/flows/{flow_id}/sinks/{sink}", response_model=SelfCorrectingStatus, responses=responses,
             tags=["sinks"], dependencies=reads)
    def get_sink(flow_id: str, sink: SinkId) -> SelfCorrectingStatus:
        """A self-correcting sink's mode, corrections, drift, CAS conflicts and distance."""
        flow, _ = plane.get(flow_id)
        return _status(flow_id, flow, sink, _self_correcting(flow, flow_id, sink))

    @app.patch("/v1/flows/{flow_id}/sinks/{sink}", response_model=SelfCorrectingStatus, responses=responses,
               tags=["sinks"], dependencies=[Depends(authorized)])
    def patch_sink(flow_id: str, sink: SinkId, body: SinkModeChange) -> SelfCorrectingStatus:
        """Switch a self-correcting sink to `write` or `read_only` from its next epoch on."""
        flow, _ = plane.get(flow_id)
        obj = _self_correcting(flow, flow_id, sink)
        if not flow.is_active():
            raise HTTPException(409, f"flow {flow_id!r} is stopped")
        with plane.control_lock:
            set_sink_mode(flow.control_file, sink, body.mode)
        return _status(flow_id, flow, sink, obj)
