r"""The HTTP side of :mod:`wire.sources.http_source.source`: the endpoint and its server thread.

``POST <path>`` appends the events to the write-ahead log and answers 202 once they
are durable. Refusals, checked in this order, store nothing:

* 401 without the token (when one is configured);
* 503 with ``Retry-After`` while the flow is paused or stopping or a sink's breaker is
  open (SPEC §7): transient, the client retries the same body;
* 413 for a body over ``max_body_bytes``: from ``Content-Length`` before any of the
  body is read, and for a chunked body as soon as the bytes read pass the limit (the
  rest is not read; never more than the limit is held);
* 400 for a permanently bad body: ``Content-Length`` not a number, not UTF-8, not JSON,
  a number out of the float64 range, nesting too deep, not an object or an array of
  objects, or a string holding a lone UTF-16 surrogate (``"\ud800"``, which no UTF-8
  text can carry). The answer is ``{"error": ..., "errors": [{"item": i, "reason":
  ...}]}`` with one entry per bad item of an array (``item`` null for the body as a
  whole); a batch with a bad item is refused whole, the client resends it without;
* 503 with ``Retry-After`` when the log cannot be written now (SQLite busy, disk full).

Fields that do not fit the source's schema are not checked here: such an event is
stored and becomes a dead letter of the flow (location ``wal:<seq>``). One uvicorn
server runs per planner process and address, in a daemon thread.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import socket
import sqlite3
import threading
import time

from wire.core.control_file import is_paused, open_breakers
from wire.delivery.wal import WriteAheadLog
from wire.errors import WireError, needs_extra
from wire.sources.http_source.config import PAUSED_RETRY_AFTER_S, IngestBinding

with needs_extra("ingest", "wire.sources.http_ingest"):
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool


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


class BodyError(ValueError):
    """A request body that will never be accepted (answered 400).

    ``errors`` lists ``(item, reason)``: the index of each bad item of an array, or
    None when the body as a whole is bad.
    """

    def __init__(self, errors: list[tuple[int | None, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(reason if i is None else f"item {i}: {reason}" for i, reason in errors))


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} out of range for a float64")
    return value


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_body(body: bytes) -> list[str]:
    """The events of a request body as compact JSON object texts (UTF-8 encodable).

    The body must be UTF-8 (RFC 8259; a leading byte order mark is ignored) holding
    one JSON object or an array of objects.

    Raises
    ------
    BodyError
        (a ValueError) When the body is not UTF-8 or not JSON, a number overflows a
        float64, the nesting is too deep, or an item is not an object or holds a lone
        surrogate escape; ``errors`` names every bad item once.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyError([(None, f"not valid UTF-8 (byte {e.start}: {e.reason})")]) from e
    try:
        doc = json.loads(text.removeprefix("\ufeff"), parse_constant=_reject_constant,
                         parse_float=_finite)
    except RecursionError as e:
        raise BodyError([(None, "JSON nested too deeply")]) from e
    except ValueError as e:
        raise BodyError([(None, f"not JSON: {e}")]) from e
    items = doc if isinstance(doc, list) else [doc]
    events: list[str] = []
    errors: list[tuple[int | None, str]] = []
    for i, item in enumerate(items):
        where = i if isinstance(doc, list) else None
        if not isinstance(item, dict):
            errors.append((where, f"expected a JSON object, got {type(item).__name__}"))
            continue
        try:
            event = json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            event.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = event[e.start:e.end].encode("unicode_escape").decode("ascii")
            errors.append((where, f"lone surrogate {bad} in a string (not valid Unicode)"))
            continue
        except RecursionError:
            errors.append((where, "JSON nested too deeply"))
            continue
        events.append(event)
    if errors:
        raise BodyError(errors)
    return events


class _Refusal(Exception):
    """A request answered with ``status`` and nothing stored."""

    def __init__(self, status: int, message: str, errors: list[tuple[int | None, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) before it is read past ``limit`` bytes.

    A ``Content-Length`` over the limit is refused before any byte is read; a body
    without one (chunked) is read chunk by chunk and refused at the first chunk that
    would take it over the limit, so at most ``limit`` bytes are ever held.
    """
    over = f"body over the limit of {limit} bytes (max_body_bytes)"
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise _Refusal(400, f"invalid Content-Length {declared[:40]!r}")
        if int(declared) > limit:
            raise _Refusal(413, f"{over}: Content-Length is {int(declared)}")
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise _Refusal(413, over)
        body += chunk
    return bytes(body)


def _answer(refusal: _Refusal, headers: dict[str, str] | None = None) -> JSONResponse:
    doc: dict[str, object] = {"error": refusal.message}
    if refusal.errors is not None:
        doc["errors"] = [{"item": i, "reason": reason} for i, reason in refusal.errors]
    return JSONResponse(doc, status_code=refusal.status, headers=headers)


def create_app(gate: _Gate) -> FastAPI:
    """The ASGI app serving ``POST <path>`` for ``gate`` (see the module docstring)."""
    app = FastAPI(title="Wire HTTP ingest", openapi_url=None, docs_url=None, redoc_url=None)

    @app.post(gate.binding.source.path, status_code=202)
    async def ingest(request: Request) -> JSONResponse:
        refused = gate.refusal(request.headers.get("authorization"))
        if refused is not None:
            status, headers, message = refused
            return JSONResponse({"error": message}, status_code=status, headers=headers)
        try:
            body = await read_body(request, gate.binding.source.max_body_bytes)
            try:
                events = parse_body(body)
            except BodyError as e:
                raise _Refusal(400, f"invalid body: {e}", e.errors) from e
        except _Refusal as refusal:
            return _answer(refusal)
        try:
            first, last = await run_in_threadpool(gate.wal.append, events)
        except (sqlite3.Error, OSError) as e:  # nothing stored (rolled back): the client retries
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
