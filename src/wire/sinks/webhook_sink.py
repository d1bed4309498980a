"""Webhook sink: POSTs each epoch's rows as JSON batches over HTTP, at least once (``httpx``).

Every request carries an ``Idempotency-Key`` that is the same when an epoch is
replayed, so a receiver that remembers keys can drop the repeats (SPEC §6).
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import httpx
import pyarrow as pa

from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import Guarantee, Sink
from wire.errors import ConfigError, WireError
from wire.sinks.json_rows import jsonl_lines

MAX_DELAY_S = 60.0
"""Upper bound of one wait between attempts (backoff or ``Retry-After``)."""

_RESERVED_HEADERS = ("content-type", "idempotency-key")

_sleep = time.sleep  # replaced by tests


@dataclass(frozen=True)
class _Run:
    flow_id: str
    sink_id: str
    client: httpx.Client


@dataclass(frozen=True)
class WebhookSink(DriverRunSink[_Run], Sink):
    """At-least-once HTTP POST of each epoch in JSON batches; built by :func:`webhook`."""

    guarantee: ClassVar[Guarantee] = "at_least_once"

    url: str
    batch_size: int = 500
    timeout_s: float = 10.0
    max_retries: int = 5
    headers: tuple[tuple[str, str], ...] = ()
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        """Validate the configuration at flow-build time."""
        object.__setattr__(self, "url", _check_url(self.url))
        _check_int("batch_size", self.batch_size, 1)
        _check_int("max_retries", self.max_retries, 0)
        _check_seconds("timeout_s", self.timeout_s, positive=True)
        _check_seconds("backoff_s", self.backoff_s, positive=False)
        object.__setattr__(self, "headers", _check_headers(self.headers))

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> _Run:
        """``open``: start an HTTP client; called once at run start on the driver."""
        client = httpx.Client(timeout=self.timeout_s, headers=dict(self.headers))
        return _Run(flow_id=flow_id, sink_id=sink_id, client=client)

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """POST the epoch's rows in batches of ``batch_size``, in order, each until accepted.

        Called on the driver once per epoch, before the epoch commits; returns when
        every batch got a 2xx response. Batch ``i`` carries ``Idempotency-Key:
        <flow_id>/<sink_id>/<epoch>/<i>``. Connection errors, timeouts, 5xx and 429
        responses are retried up to ``max_retries`` times with exponential backoff
        (``backoff_s``, doubling, at most :data:`MAX_DELAY_S`), waiting ``Retry-After``
        instead when the response has one. A replayed epoch is posted again with the
        same keys (batches accepted before the crash are sent twice). An empty table
        sends nothing.

        Raises
        ------
        WireError
            Before :meth:`open`; when retries are exhausted or the response is another
            non-2xx status (the message names the URL and the last status or error).
            The runtime then fails the epoch, and a restart replays it.
        """
        run = self._opened(epoch)
        for index, start in enumerate(range(0, table.num_rows, self.batch_size)):
            body = "[" + ",".join(jsonl_lines(table.slice(start, self.batch_size))) + "]"
            key = f"{run.flow_id}/{run.sink_id}/{epoch}/{index}"
            self._post(run.client, body.encode("utf-8"), key)

    def _end_run(self, run: _Run) -> None:
        """``close``: close the HTTP client, at run end; every accepted batch is delivered."""
        run.client.close()

    def describe(self) -> str:
        """E.g. ``"webhook https://example.com/hook batch_size=500 (at_least_once)"``."""
        return f"webhook {self.url} batch_size={self.batch_size} ({self.guarantee})"

    def _post(self, client: httpx.Client, body: bytes, key: str) -> None:
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        last = "no attempt"
        delay = 0.0
        for attempt in range(self.max_retries + 1):
            if attempt:
                _sleep(delay)
            delay = min(self.backoff_s * 2**attempt, MAX_DELAY_S)
            try:
                response = client.post(self.url, content=body, headers=headers)
            except httpx.TransportError as exc:
                last = f"error {type(exc).__name__}: {exc}"
                continue
            if response.is_success:
                return
            last = f"status {response.status_code}"
            if response.status_code != 429 and response.status_code < 500:
                raise WireError(
                    f"{self.describe()}: POST {self.url} (Idempotency-Key {key}) was refused with {last}: "
                    f"{response.text[:200]!r}"
                )
            retry_after = _retry_after(response.headers.get("Retry-After"))
            if retry_after is not None:
                delay = min(retry_after, MAX_DELAY_S)
        raise WireError(
            f"{self.describe()}: POST {self.url} (Idempotency-Key {key}) failed after "
            f"{self.max_retries + 1} attempts; last {last}"
        )


def webhook(
    url: str,
    *,
    batch_size: int = 500,
    timeout_s: float = 10,
    max_retries: int = 5,
    headers: Mapping[str, str] | None = None,
    backoff_s: float = 0.5,
) -> Sink:
    """POST each epoch's rows to an HTTP endpoint as JSON, at least once.

    A driver sink: the epoch's rows are brought to the driver, which posts them
    (one HTTP client per run; batches keep their order).

    Each request's body is a JSON array of row objects (``Content-Type:
    application/json``), at most ``batch_size`` rows, keys in column order, values
    encoded as the ``jsonl`` sink does (timestamps ISO-8601, converted to UTC and
    ending in ``Z`` when the column has a time zone; NaN as ``null``; int64 exact; the
    ``epoch`` column included). Batch ``i`` of an epoch carries the header
    ``Idempotency-Key: <flow_id>/<sink_id>/<epoch>/<i>``, identical on replay, so the
    receiver can deduplicate. A 2xx response accepts the batch.

    Guarantee: ``at_least_once``. ``open`` (driver, run start) starts an HTTP client;
    ``write_epoch`` (driver, once per epoch, before the epoch commits) posts the
    batches in order, retrying connection errors, timeouts, 5xx and 429 up to
    ``max_retries`` times with exponential backoff (``backoff_s``, ``2*backoff_s``, …,
    each wait at most 60 s; a ``Retry-After`` header, seconds or HTTP date, replaces
    the backoff); when retries run out it raises, the epoch fails and is replayed
    after the restart — batches the receiver had accepted are posted again with the
    same keys. ``close`` (run end) closes the client.

    Parameters
    ----------
    url:
        An ``http://`` or ``https://`` URL.
    batch_size:
        Rows per request, ≥ 1.
    timeout_s:
        Timeout of each request (connect, read, write), seconds > 0.
    max_retries:
        Retries per batch after the first attempt, ≥ 0.
    headers:
        Extra request headers, e.g. ``{"Authorization": "Bearer …"}``; not
        ``Content-Type`` or ``Idempotency-Key``.
    backoff_s:
        The wait before the first retry, seconds ≥ 0; doubled for each further retry.

    Returns
    -------
    Sink
        A :class:`WebhookSink`.

    Raises
    ------
    ConfigError
        When a parameter is out of range. At ``write_epoch``: WireError naming the URL
        and the last status when a batch is not accepted.
    """
    return WebhookSink(
        url=url,
        batch_size=batch_size,
        timeout_s=timeout_s,
        max_retries=max_retries,
        headers=_check_headers(headers),
        backoff_s=backoff_s,
    )


# --- helpers --------------------------------------------------------------------------


def _check_url(url: object) -> str:
    accepted = "an http:// or https:// URL"
    if not isinstance(url, str):
        raise ConfigError("url", url, accepted)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigError("url", url, accepted) from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError("url", url, accepted)
    return url


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, value, f"an int >= {minimum}")


def _check_seconds(name: str, value: object, *, positive: bool) -> None:
    accepted = "a finite number of seconds " + ("> 0" if positive else ">= 0")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, value, accepted)
    if value < 0 or (positive and value == 0):
        raise ConfigError(name, value, accepted)


def _check_headers(headers: object) -> tuple[tuple[str, str], ...]:
    accepted = "None or a mapping of header names to str values, without Content-Type or Idempotency-Key"
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        items = tuple(headers.items())
    elif isinstance(headers, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in headers):
        items = headers
    else:
        raise ConfigError("headers", headers, accepted)
    for name, value in items:
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise ConfigError("headers", headers, accepted)
        if name.lower() in _RESERVED_HEADERS:
            raise ConfigError("headers", headers, accepted)
    return tuple((str(n), str(v)) for n, v in items)


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or HTTP date); None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)
