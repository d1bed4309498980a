"""The REST control plane (SPEC §7, §9): status, pause / resume, Prometheus metrics.

``ControlPlane`` serves one FastAPI app with uvicorn in a background thread, bound
to ``127.0.0.1`` by default::

    running = flow.start("ck/orders")
    plane = wire.control.ControlPlane({"orders": running})
    url = plane.start()          # prints the URL and the generated bearer token once
    ...
    plane.stop()

Routes (OpenAPI schema at ``/openapi.json``, docs at ``/docs``):

* ``GET /v1/flows``: every registered flow's id, status, epochs and input events.
* ``GET /v1/flows/{id}``: status (``starting``, ``running``, ``paused``, ``failing``,
  ``stopped``), epochs, input rate, per-operator watermarks, late and malformed counts
  per step, rows written per sink, per source its pause flag, watermark and lag,
  breaker states, the failure if any and Spark's last progress.
* ``PATCH /v1/flows/{id}`` ``{"status": "paused" | "running"}``: pause or resume the
  whole flow; ``PATCH /v1/flows/{id}/connectors/{cid}`` the same for one source step.
  Pausing writes the flow's control file (:mod:`wire.core.control_file`): the sources
  admit nothing, so no new epoch runs while the Spark query, its state and its
  checkpoint stay; resuming lets the next epoch read from where the last one ended.
* ``GET /v1/flows/{id}/history?minutes=N``: the flow's samples of the last ``N``
  minutes (default 15), one array per series (:mod:`wire.control.history`); the plane
  samples every flow every ``history_interval_s`` and keeps ``history_max_samples``.
* ``GET /v1/flows/{id}/graph``: the flow's operator graph (steps and edges) from its plan.
* ``GET /v1/flows/{id}/samples``: the flow's newest dead letters and late events, at most
  50 of each (:mod:`wire.runtime.samples`). They hold record content, so this route
  always needs the token, on loopback too.
* ``GET /v1/flows/{id}/state/{step}?key=K``: key ``K``'s state in a keyed step as of the
  last committed epoch (:mod:`wire.control.state_route`); reads only the key's key group.
  State holds record content, so this route always needs the token, on loopback too.
* ``GET /v1/token``: 200 when the request's bearer token is this plane's, else 401;
  changes nothing (the dashboard checks a typed token with it before keeping it).
* ``GET /metrics``: Prometheus text format (:mod:`wire.control.metrics`).
* ``GET /``: the dashboard, a static page (HTML, JS, CSS and the vendored uPlot, served
  from the package under ``/dashboard/``) over the routes above; see
  ``src/wire/control/dashboard/``.

Authentication: every state-changing call (``PATCH``) needs ``Authorization: Bearer
<token>``; a missing or wrong token answers 401 and changes nothing. On the loopback
interface (the default) reads (``GET /v1/...``, ``/metrics``) are open: they reveal
counters and watermarks, never data (``/v1/flows/{id}/samples``, which shows records,
needs the token everywhere). Binding any other address (e.g. ``0.0.0.0``)
needs ``allow_remote=True`` and an explicit ``token``, and then every read needs the
token too (Prometheus: ``authorization: {credentials: <token>}`` in the scrape config).
The OpenAPI schema and the docs page stay open: they describe the routes, no flow; so do
the dashboard's page and assets, which hold no flow data: the page reads the flows with
the token typed into it (kept in the browser tab's ``sessionStorage``), so bound remotely
it shows nothing without the token, and its pause / resume buttons need it everywhere.
"""

from __future__ import annotations

import secrets
import socket
import sys
import threading
import time
from collections.abc import Mapping
from importlib import resources
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from wire.control.history import DEFAULT_INTERVAL_S, DEFAULT_MAX_SAMPLES, HistoryBuffer, HistorySampler
from wire.control.metrics import FlowCollector
from wire.control.models import (
    ErrorBody,
    FlowGraph,
    FlowHistory,
    FlowSamples,
    FlowStatus,
    FlowSummary,
    StatusChange,
    TokenCheck,
)
from wire.control.sink_modes import add_sink_mode_routes
from wire.control.state_route import add_state_route
from wire.control.status import FlowHandle, RateMeter, samples_of, source_steps, status_of, summary_of
from wire.core.control_file import check_bind, is_loopback, set_paused
from wire.errors import ConfigError, WireError
from wire.plan.graph import graph_of

DEFAULT_HOST = "127.0.0.1"

FlowId = Annotated[str, Path(description="the flow's id as registered")]
ConnectorId = Annotated[str, Path(description="a source step id of the flow")]

DASHBOARD_ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "vendor/uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "vendor/uPlot.min.css": "text/css; charset=utf-8",
}
"""The files under ``/dashboard/`` (package data of ``wire.control``), by path: media type."""

_DASHBOARD_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
}

_bearer = HTTPBearer(auto_error=False, description="The control plane's token (ControlPlane.token).")


class ControlPlane:
    """Serve the REST control plane for a set of running flows.

    Parameters
    ----------
    flows:
        Flows to register at once, by id (the id used in the URLs), e.g.
        ``{running.flow_id: running}``; more can be added with :meth:`add`.
    host:
        Interface to bind; default the loopback ``127.0.0.1``. A non-loopback address
        (anything but ``localhost``, ``127.0.0.0/8`` and ``::1``, e.g. ``0.0.0.0``)
        needs ``allow_remote=True`` and an explicit ``token``; the ``GET`` routes then
        need the token too.
    port:
        TCP port; ``0`` (default) picks a free one (see :attr:`url` after :meth:`start`).
    token:
        Bearer token required by every ``PATCH`` (and, bound remotely, every ``GET``);
        ``None`` generates a random one (``secrets.token_urlsafe(32)``), printed once by
        :meth:`start` (loopback only).
    allow_remote:
        Must be True to bind a non-loopback ``host``; False (default) refuses it.
    history_interval_s:
        Seconds between two samples of each flow's history (default 1), taken while serving.
    history_max_samples:
        Samples kept per flow (default 3600: an hour at one a second); the oldest go first.

    Raises
    ------
    ConfigError
        On an empty host or token, a port out of range, ``allow_remote`` not a bool,
        ``history_interval_s`` not > 0, ``history_max_samples`` not an int >= 2;
        on a non-loopback ``host`` without ``allow_remote=True`` (parameter
        ``allow_remote``) or without an explicit token (parameter ``token``).
    """

    def __init__(
        self,
        flows: Mapping[str, FlowHandle] | None = None,
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        token: str | None = None,
        allow_remote: bool = False,
        history_interval_s: float = DEFAULT_INTERVAL_S,
        history_max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ConfigError("token", "<hidden>", "None (generate one) or a non-empty string")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError("port", port, "an int between 0 and 65535")
        if not isinstance(host, str) or not host:
            raise ConfigError("host", host, "a host name or IP address, e.g. '127.0.0.1'")
        check_bind(host, token=token, allow_remote=allow_remote, server="control plane")
        self.host = host
        self.port = port
        self.remote = not is_loopback(host)
        """True when bound to a non-loopback address: the ``GET`` routes need the token."""
        self._token_generated = token is None
        self.token: str = token if token is not None else secrets.token_urlsafe(32)
        self._flows: dict[str, FlowHandle] = {}
        self._rates: dict[str, RateMeter] = {}
        self._histories: dict[str, HistoryBuffer] = {}
        HistoryBuffer(max_samples=history_max_samples)  # checks the bound before any flow is added
        self.history_max_samples = history_max_samples
        self.sampler = HistorySampler(self.flows, self.history, interval_s=history_interval_s)
        """Samples every registered flow into its history while the plane serves."""
        self._lock = threading.Lock()
        self.control_lock = threading.Lock()
        """Serializes this plane's writes of the flows' control files."""
        for fid, flow in (flows or {}).items():
            self.add(flow, flow_id=fid)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(FlowCollector(self.flows))
        self.app = create_app(self)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    def add(self, flow: FlowHandle, *, flow_id: str | None = None, replace: bool = False) -> str:
        """Register ``flow`` under ``flow_id`` (default its own ``flow_id``); return the id.

        ``replace=True`` registers it in place of the flow registered under that id, if
        any (a restart of the same flow), keeping that id's history.

        Raises
        ------
        ConfigError
            If another flow is registered under that id and ``replace`` is False.
        """
        fid = flow.flow_id if flow_id is None else flow_id
        if not isinstance(fid, str) or not fid:
            raise ConfigError("flow_id", fid, "a non-empty string")
        with self._lock:
            if fid in self._flows and self._flows[fid] is not flow and not replace:
                raise ConfigError("flow_id", fid, f"an id not yet registered ({sorted(self._flows)})")
            self._flows[fid] = flow
            self._rates.setdefault(fid, RateMeter())
            self._histories.setdefault(fid, HistoryBuffer(max_samples=self.history_max_samples))
        return fid

    def remove(self, flow_id: str) -> None:
        """Unregister a flow (it keeps running) and forget its history."""
        with self._lock:
            self._flows.pop(flow_id, None)
            self._rates.pop(flow_id, None)
            self._histories.pop(flow_id, None)

    def history(self, flow_id: str) -> HistoryBuffer | None:
        """The samples kept of the flow registered as ``flow_id``, or None."""
        with self._lock:
            return self._histories.get(flow_id)

    def flows(self) -> dict[str, FlowHandle]:
        """A copy of the registered flows, by id."""
        with self._lock:
            return dict(self._flows)

    def get(self, flow_id: str) -> tuple[FlowHandle, RateMeter]:
        """The flow registered as ``flow_id`` and its rate meter (HTTP 404 if none)."""
        with self._lock:
            flow = self._flows.get(flow_id)
            rate = self._rates.get(flow_id)
        if flow is None or rate is None:
            raise HTTPException(404, f"no flow {flow_id!r}; registered: {sorted(self.flows())}")
        return flow, rate

    def check_token(self, credentials: HTTPAuthorizationCredentials | None) -> None:
        """Accept only ``Authorization: Bearer <token>`` with this plane's token (HTTP 401)."""
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(credentials.credentials.encode(), self.token.encode()):
            raise HTTPException(401, "invalid bearer token", headers={"WWW-Authenticate": "Bearer"})

    def start(self, *, timeout_s: float = 10.0) -> str:
        """Serve in a background thread; return the base URL, e.g. ``http://127.0.0.1:41231``.

        Raises
        ------
        WireError
            If it is already serving, the address cannot be bound, or the server does not
            come up within ``timeout_s``.
        """
        if self._thread is not None:
            raise WireError(f"control plane already serving at {self.url}")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise WireError(f"control plane cannot bind {self.host}:{self.port}: {e}") from e
        sock.listen(128)
        bound_port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name="wire-control-plane", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                thread.join(1.0)
                sock.close()
                raise WireError(f"control plane did not start on {self.host}:{bound_port}")
            time.sleep(0.01)
        self._server, self._thread = server, thread
        host = f"[{self.host}]" if family == socket.AF_INET6 else self.host
        self.url = f"http://{host}:{bound_port}"
        self.sampler.start()
        if self._token_generated:
            print(f"wire control plane and dashboard at {self.url}/ (token: {self.token})",
                  file=sys.stderr, flush=True)
            self._token_generated = False
        return self.url

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Stop serving (the flows keep running); a no-op if not serving."""
        if self._server is None or self._thread is None:
            return
        self.sampler.stop()
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._server = self._thread = None
        self.url = None

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _asset(name: str) -> bytes:
    """A dashboard file from the installed package (``wire/control/dashboard/<name>``)."""
    return resources.files("wire.control").joinpath("dashboard", *name.split("/")).read_bytes()


def create_app(plane: ControlPlane) -> FastAPI:
    """The FastAPI app serving ``plane``'s flows (see the module docstring for the routes)."""
    app = FastAPI(
        title="Wire control plane",
        version="1",
        description="Status, pause / resume and metrics of running Wire flows. "
        "PATCH calls need `Authorization: Bearer <token>`; "
        + ("so do GET calls (the plane is bound to a non-loopback address)." if plane.remote
           else "GET calls are open (the plane listens on loopback)."),
    )

    def authorized(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        plane.check_token(credentials)

    reads = [Depends(authorized)] if plane.remote else []
    read_errors: dict[int | str, dict[str, Any]] = (
        {401: {"model": ErrorBody, "description": "missing or wrong bearer token"}} if plane.remote else {}
    )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI decodes a JSON body before it runs dependencies: answer 401, not 422,
        # to an unauthenticated state-changing call whatever its body.
        if plane.remote or request.method not in ("GET", "HEAD", "OPTIONS"):
            try:
                plane.check_token(await _bearer(request))
            except HTTPException as e:
                return JSONResponse({"detail": e.detail}, status_code=e.status_code, headers=e.headers)
        return await request_validation_exception_handler(request, exc)

    not_found: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody}, **read_errors}
    changes: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorBody, "description": "missing or wrong bearer token"},
        404: {"model": ErrorBody},
        409: {"model": ErrorBody, "description": "the flow is stopped, or still starting"},
    }

    @app.get("/v1/flows", response_model=list[FlowSummary], responses=read_errors, tags=["flows"],
             dependencies=reads)
    def list_flows() -> list[FlowSummary]:
        """Every registered flow: id, status, epochs, input events."""
        return [summary_of(fid, flow) for fid, flow in sorted(plane.flows().items())]

    @app.get("/v1/token", response_model=TokenCheck, tags=["auth"],
             responses={401: {"model": ErrorBody, "description": "missing or wrong bearer token"}},
             dependencies=[Depends(authorized)])
    def check_token() -> TokenCheck:
        """Check a bearer token: 200 when it is this plane's, 401 otherwise; changes nothing.

        The dashboard checks a typed token here before it keeps it.
        """
        return TokenCheck(valid=True)

    @app.get("/v1/flows/{flow_id}", response_model=FlowStatus, responses=not_found, tags=["flows"],
             dependencies=reads)
    def get_flow(flow_id: FlowId) -> FlowStatus:
        """One flow's status, throughput, watermarks, late counts, sources and breakers."""
        flow, rate = plane.get(flow_id)
        return status_of(flow_id, flow, rate)

    def change(flow_id: str, connector: str | None, body: StatusChange) -> FlowStatus:
        flow, rate = plane.get(flow_id)
        if connector is not None and connector not in source_steps(flow):
            raise HTTPException(
                404, f"flow {flow_id!r} has no source step {connector!r}; sources: {list(source_steps(flow))}"
            )
        if getattr(flow, "starting", False):
            raise HTTPException(409, f"flow {flow_id!r} is starting (Spark, its compilation); pause or "
                                     "resume it once it runs")
        if not flow.is_active():
            raise HTTPException(409, f"flow {flow_id!r} is stopped; start it again to pause or resume it")
        with plane.control_lock:  # set_paused reads, changes and rewrites the file
            set_paused(flow.control_file, body.status == "paused", connector)
        return status_of(flow_id, flow, rate)

    @app.patch("/v1/flows/{flow_id}", response_model=FlowStatus, responses=changes, tags=["flows"],
               dependencies=[Depends(authorized)])
    def patch_flow(flow_id: FlowId, body: StatusChange) -> FlowStatus:
        """Pause (`paused`) or resume (`running`) the whole flow; the Spark query and state stay."""
        return change(flow_id, None, body)

    @app.patch("/v1/flows/{flow_id}/connectors/{connector}", response_model=FlowStatus, responses=changes,
               tags=["flows"], dependencies=[Depends(authorized)])
    def patch_connector(
        flow_id: FlowId,
        connector: ConnectorId,
        body: StatusChange,
    ) -> FlowStatus:
        """Pause or resume one source step; the flow's other sources keep running."""
        return change(flow_id, connector, body)

    @app.get("/v1/flows/{flow_id}/history", response_model=FlowHistory, responses=not_found,
             tags=["flows"], dependencies=reads)
    def get_history(
        flow_id: FlowId,
        minutes: Annotated[float, Query(gt=0, le=10_080, description="how far back, in minutes")] = 15.0,
    ) -> FlowHistory:
        """The flow's sampled history of the last `minutes`: watermarks, lag, rates, counts, breakers."""
        plane.get(flow_id)
        history = plane.history(flow_id)
        if history is None:  # removed meanwhile
            raise HTTPException(404, f"no flow {flow_id!r}")
        since = time.time_ns() // 1_000_000 - int(minutes * 60_000)
        return FlowHistory(id=flow_id, interval_s=plane.sampler.interval_s, max_samples=history.max_samples,
                           minutes=minutes, **history.columns(since_ms=since))

    @app.get("/v1/flows/{flow_id}/graph", response_model=FlowGraph, responses=not_found, tags=["flows"],
             dependencies=reads)
    def get_graph(flow_id: FlowId) -> FlowGraph:
        """The flow's operator graph from its plan: steps (sources, operators, sinks) and edges."""
        flow, _ = plane.get(flow_id)
        return FlowGraph.model_validate(graph_of(flow.plan))

    @app.get("/v1/flows/{flow_id}/samples", response_model=FlowSamples, tags=["flows"],
             responses={401: {"model": ErrorBody, "description": "missing or wrong bearer token"},
                        404: {"model": ErrorBody}},
             dependencies=[Depends(authorized)])
    def get_samples(flow_id: FlowId) -> FlowSamples:
        """The flow's newest dead letters and late events (at most 50 of each), newest first.

        Needs `Authorization: Bearer <token>` on every interface: the items hold record
        content. Each item: `kind` (`dead_letter` or `late`), `step`, `reason`, `record`
        (dead letter: the raw record; late: the event's other columns as JSON; at most 300
        characters), `location` (dead letters, e.g. `in/a.jsonl:3`), `event_time` and
        `watermark` (late events: the event's event time and the watermark it was late
        against), `epoch` and `processing_time` (when its epoch committed). Times are ms
        since the Unix epoch. Taken from the epochs this run committed; a restarted flow
        starts a new sample.
        """
        flow, _ = plane.get(flow_id)
        return samples_of(flow_id, flow)

    @app.get("/", include_in_schema=False)
    def dashboard() -> Response:
        """The dashboard's page (no flow data: the page reads the routes above)."""
        return Response(_asset("index.html"), media_type="text/html; charset=utf-8",
                        headers=_DASHBOARD_HEADERS)

    @app.get("/dashboard/{asset:path}", include_in_schema=False)
    def dashboard_asset(asset: str) -> Response:
        """A file of the dashboard (its script, style sheet, the vendored uPlot)."""
        media_type = DASHBOARD_ASSETS.get(asset)
        if media_type is None:
            raise HTTPException(404, f"no dashboard file {asset!r}")
        return Response(_asset(asset), media_type=media_type, headers=_DASHBOARD_HEADERS)

    @app.get("/metrics", tags=["metrics"], response_class=Response, dependencies=reads,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"},
                        **read_errors})
    def metrics() -> Response:
        """Prometheus text exposition of every registered flow's metrics."""
        return Response(generate_latest(plane.registry), media_type=CONTENT_TYPE_LATEST)

    add_sink_mode_routes(app, plane, authorized, reads, changes)  # self-correcting sinks (SPEC §8)
    add_state_route(app, plane, authorized)  # one key's state (issue 29): the token always

    return app
