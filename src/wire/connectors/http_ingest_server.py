"""The HTTP side of :mod:`wire.connectors.http_ingest`: the endpoint and its server thread.

``POST <path>`` appends the events to the write-ahead log and answers 202 once they
are durable; 503 with ``Retry-After`` while the flow is paused or a sink's breaker is
open (SPEC §7); 400 for a body that is not JSON objects; 401 without the token. One
uvicorn server runs per planner process and address, in a daemon thread.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import socket
import threading
import time
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from wire.connectors.wal import WriteAheadLog
from wire.errors import WireError
from wire.runtime.control import is_paused, open_breakers

if TYPE_CHECKING:
    from wire.connectors.http_ingest import IngestBinding

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest accepted request body; a larger one is answered 413."""
PAUSED_RETRY_AFTER_S = 5
"""``Retry-After`` (s) while the flow is paused or stopping, or the log cannot be written."""


class _Gate:
    """What the endpoint checks and where it stores: the log, control file, step, token."""

    def __init__(self, binding: IngestBinding, wal: WriteAheadLog) -> None:
        self.binding = binding
        self.wal = wal

    def refusal(self, authorization: str | None) -> tuple[int, dict[str, str], str] | None:
        """Why a request is refused now (status, headers, message), or None."""
        token = self.binding.source.token
        if token is not None:
            expected = f"Bearer {token}".encode()
            if authorization is None or not hmac.compare_digest(authorization.encode(), expected):
                return 401, {"WWW-Authenticate": "Bearer"}, "missing or wrong bearer token"
        control = self.binding.control_file
        breakers = open_breakers(control)
        if breakers:
            now = time.time()
            retry_at = [b.get("retry_at") for b in breakers.values()]
            waits = [r - now for r in retry_at if isinstance(r, int | float)]
            wait = max(waits) if len(waits) == len(retry_at) else PAUSED_RETRY_AFTER_S
            names = ", ".join(sorted(breakers))
            return 503, {"Retry-After": str(max(1, math.ceil(wait)))}, f"circuit breaker open: {names}"
        if is_paused(control, self.binding.step):
            return 503, {"Retry-After": str(PAUSED_RETRY_AFTER_S)}, "flow or source paused (or stopping)"
        return None


def parse_body(body: bytes) -> list[str]:
    """The events of a request body as compact JSON object texts.

    Raises
    ------
    ValueError
        When the body is not JSON, or not an object or an array of objects.
    """

    def reject_constant(name: str) -> None:
        raise ValueError(f"{name} is not valid JSON")

    doc = json.loads(body, parse_constant=reject_constant)
    items = doc if isinstance(doc, list) else [doc]
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            where = f"item {i}" if isinstance(doc, list) else "body"
            raise ValueError(f"{where}: expected a JSON object, got {type(item).__name__}")
    return [json.dumps(item, separators=(",", ":"), ensure_ascii=False) for item in items]


def create_app(gate: _Gate) -> FastAPI:
    """The ASGI app serving ``POST <path>`` for ``gate`` (see the module docstring)."""
    app = FastAPI(title="Wire HTTP ingest", openapi_url=None, docs_url=None, redoc_url=None)

    @app.post(gate.binding.source.path, status_code=202)
    async def ingest(request: Request) -> JSONResponse:
        refused = gate.refusal(request.headers.get("authorization"))
        if refused is not None:
            status, headers, message = refused
            return JSONResponse({"error": message}, status_code=status, headers=headers)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return JSONResponse({"error": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
        try:
            events = parse_body(body)
        except (ValueError, RecursionError) as e:
            return JSONResponse({"error": f"invalid body: {e}"}, status_code=400)
        try:
            first, last = await run_in_threadpool(gate.wal.append, events)
        except Exception as e:  # nothing stored (rolled back): the client retries
            headers = {"Retry-After": str(PAUSED_RETRY_AFTER_S)}
            return JSONResponse({"error": f"write-ahead log: {e}"}, status_code=503, headers=headers)
        seq = [first, last] if events else None
        return JSONResponse({"accepted": len(events), "seq": seq}, status_code=202)

    return app


class _Server:
    """One uvicorn server in a daemon thread."""

    def __init__(self, gate: _Gate, timeout_s: float = 10.0) -> None:
        src = gate.binding.source
        self.gate = gate
        family = socket.AF_INET6 if ":" in src.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((src.host, src.port))
        except OSError as e:
            sock.close()
            where = f"{src.host}:{src.port}"
            raise WireError(f"http ingest {gate.binding.step!r} cannot bind {where}: {e}") from e
        sock.listen(512)
        config = uvicorn.Config(create_app(gate), log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name=f"wire-http-ingest-{src.port}", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.server.should_exit = True
                self.thread.join(1.0)
                sock.close()
                raise WireError(f"http ingest {gate.binding.step!r} did not start on {src.host}:{src.port}")
            time.sleep(0.01)
        self._sock = sock

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
        with contextlib.suppress(OSError):
            self._sock.close()


_SERVERS: dict[tuple[str, int], _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _serve(binding: IngestBinding, wal: WriteAheadLog) -> _Server:
    """Start the server of ``binding`` in this process, or return the one already running.

    A second reader of the same address and log shares the running server; whichever
    reader stops first stops it.
    """
    src = binding.source
    key = (src.host, src.port)
    with _SERVERS_LOCK:
        running = _SERVERS.get(key)
        if running is not None and running.thread.is_alive():
            if running.gate.binding.source.wal_path != src.wal_path:
                raise WireError(f"http ingest {binding.step!r}: {src.host}:{src.port} already serves "
                                f"another write-ahead log ({running.gate.binding.source.wal_path})")
            running.gate.binding = binding
            return running
        server = _Server(_Gate(binding, wal))
        _SERVERS[key] = server
        return server


def _unserve(server: _Server) -> None:
    key = (server.gate.binding.source.host, server.gate.binding.source.port)
    with _SERVERS_LOCK:
        if _SERVERS.get(key) is server:
            del _SERVERS[key]
    server.stop()


# ---------------------------------------------------------------------------- Spark source
