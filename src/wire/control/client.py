"""Calls to a running control plane (used by ``wire status`` / ``wire pause --url``).

Each function makes one HTTP request with ``httpx`` and returns the decoded JSON
answer; a failure raises :class:`ControlPlaneError` with the HTTP status.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from wire.errors import ControlPlaneError

DEFAULT_TIMEOUT_S = 10.0


def _path(*parts: str) -> str:
    return "/".join(quote(p, safe="") for p in parts)


def _request(
    method: str, url: str, path: str, *, token: str | None = None, body: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    target = url.rstrip("/") + path
    try:
        response = httpx.request(method, target, json=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise ControlPlaneError(f"{method} {target}: no answer from the control plane: {e}") from e
    if response.is_success:
        return response.json()
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    raise ControlPlaneError(
        f"{method} {target}: HTTP {response.status_code}: {detail}", status_code=response.status_code
    )


def status(
    url: str, flow_id: str | None = None, *, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Any:
    """Every flow's summary (a list), or one flow's full status (a dict) when ``flow_id`` is given.

    ``token`` is sent as ``Authorization: Bearer <token>`` when given: a control plane
    bound to a non-loopback address requires it on reads too (on loopback it is not
    needed).

    Raises
    ------
    ControlPlaneError
        On no answer or an HTTP error (401: missing or wrong token on a remote plane,
        404: no such flow).
    """
    path = "/v1/flows" if flow_id is None else "/v1/flows/" + _path(flow_id)
    return _request("GET", url, path, token=token, timeout_s=timeout_s)


def _set(url: str, token: str, flow_id: str, connector: str | None, value: str, timeout_s: float) -> Any:
    path = "/v1/flows/" + _path(flow_id) + ("" if connector is None else "/connectors/" + _path(connector))
    return _request("PATCH", url, path, token=token, body={"status": value}, timeout_s=timeout_s)


def pause(
    url: str, token: str, flow_id: str, connector: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Any:
    """Pause a flow (or one of its source steps); return the flow's status after the change.

    Raises
    ------
    ControlPlaneError
        On no answer or an HTTP error (401: bad token, 404: no such flow or source,
        409: the flow is stopped).
    """
    return _set(url, token, flow_id, connector, "paused", timeout_s)


def resume(
    url: str, token: str, flow_id: str, connector: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Any:
    """Resume a paused flow (or one of its source steps); return the flow's status.

    Raises
    ------
    ControlPlaneError
        As :func:`pause`.
    """
    return _set(url, token, flow_id, connector, "running", timeout_s)


def set_sink_mode(
    url: str, token: str, flow_id: str, sink: str, mode: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Any:
    """Switch a self-correcting sink step to ``"write"`` or ``"read_only"``; return its status.

    Raises
    ------
    ControlPlaneError
        On no answer or an HTTP error (401: bad token, 404: no such flow or
        self-correcting sink, 409: the flow is stopped, 422: unknown mode).
    """
    path = "/v1/flows/" + _path(flow_id) + "/sinks/" + _path(sink)
    return _request("PATCH", url, path, token=token, body={"mode": mode}, timeout_s=timeout_s)
