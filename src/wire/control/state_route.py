"""REST route of a running flow's keyed state, by key (issue 29).

``GET /v1/flows/{id}/state/{step}?key=K``: key ``K``'s state in keyed step ``step``
(window, interval join, process function) as of the flow's last committed epoch, read
by :meth:`wire.RunningFlow.state` from the checkpoint: only ``K``'s key group leaves
Spark's state store, and nothing in the checkpoint is written or locked. ``K`` is the
key as text, cast to the key column's type (``42`` for an integer key). The rows have
the shapes :func:`wire.read_state` documents, as JSON: int64 times in ms, binary values
(e.g. a user aggregator's accumulator) base64, maps as ``[key, value]`` pairs.

The state holds record content, so the route needs ``Authorization: Bearer <token>`` on
every interface, loopback included (as ``/v1/flows/{id}/samples``). Answers: 200; 401
(no or wrong token); 404 (no such flow, or not a keyed step of it); 409 (the flow is not
running, or has no committed epoch yet); 422 (the key is not a value of the key's type).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query
from pydantic import BaseModel, Field

from wire.control.models import ErrorBody
from wire.errors import CheckpointError, ConfigError

StepId = Annotated[str, Path(description="a keyed (stateful) step of the flow: window, join or process")]
Key = Annotated[str, Query(description="the key, as text; cast to the key column's type")]


class KeyState(BaseModel):
    """One key's state in one keyed step, as of the last committed epoch."""

    id: str = Field(description="the flow's id")
    step: str = Field(description="the keyed step")
    kind: str = Field(description="'window', 'interval_join' or 'process'")
    key: str = Field(description="the key as given")
    epoch: int = Field(description="the committed epoch the state is from")
    key_group: int | None = Field(description="the key's key group (null: the key holds no state)")
    input_watermark: int | None = Field(description="the operator's input watermark (ms), min over groups")
    output_watermark: int | None = Field(description="the operator's output watermark (ms), min over groups")
    columns: list[str] = Field(description="the rows' columns (wire.read_state's shape for the kind)")
    rows: list[dict[str, Any]] = Field(description="the key's rows: windows, buffered events or its states")


def jsonable(value: Any) -> Any:
    """A value of ``pyarrow``'s ``to_pylist`` as JSON: bytes base64, maps as pairs, times ISO 8601."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds() * 1000
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _meta(table: Any, name: str) -> str:
    value: bytes = (table.schema.metadata or {}).get(name.encode(), b"")
    return value.decode()


def add_state_route(app: FastAPI, plane: Any, authorized: Callable[..., None]) -> None:
    """Add ``GET /v1/flows/{id}/state/{step}`` (module docstring) to ``app`` serving ``plane``'s flows."""
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorBody, "description": "missing or wrong bearer token"},
        404: {"model": ErrorBody, "description": "no such flow, or not a keyed step of it"},
        409: {"model": ErrorBody, "description": "the flow is not running or has no committed epoch"},
        422: {"model": ErrorBody, "description": "the key is not a value of the key's type"},
    }

    @app.get("/v1/flows/{flow_id}/state/{step}", response_model=KeyState, responses=errors, tags=["flows"],
             dependencies=[Depends(authorized)])
    def get_key_state(flow_id: str, step: StepId, key: Key) -> KeyState:
        """One key's state in a keyed step, as of the last committed epoch.

        Needs `Authorization: Bearer <token>` on every interface: state holds record content.
        Reads only the key's key group; changes nothing.
        """
        flow, _ = plane.get(flow_id)
        read = getattr(flow, "state", None)
        if read is None or not flow.is_active():
            raise HTTPException(409, f"flow {flow_id!r} is not running: read its checkpoint with "
                                "`wire state CHECKPOINT STEP --key K`")
        try:
            table = read(step, key)
        except ConfigError as e:
            raise HTTPException(422 if e.parameter == "key" else 404, str(e)) from None
        except CheckpointError as e:
            raise HTTPException(409, str(e)) from None
        groups = sorted({int(g) for g in table.column("key_group").to_pylist()}) if table.num_rows else []
        wm_in, wm_out = _meta(table, "wire.input_watermark"), _meta(table, "wire.output_watermark")
        return KeyState(
            id=flow_id, step=step, kind=_meta(table, "wire.kind"), key=key,
            epoch=int(_meta(table, "wire.epoch")),
            key_group=groups[0] if groups else None,
            input_watermark=int(wm_in) if wm_in else None, output_watermark=int(wm_out) if wm_out else None,
            columns=table.column_names, rows=[jsonable(r) for r in table.to_pylist()],
        )
