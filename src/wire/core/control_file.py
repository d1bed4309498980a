"""Flow control shared between the driver and the sources' planner process.

The planner methods of Python data sources run in a separate Python process on
the driver host (SPEC §10), so the driver steers them through a small JSON file
in the flow's checkpoint directory, ``<checkpoint>/control.json``::

    {"paused": false, "connectors": {"flights": {"paused": true}},
     "breakers": {"orders_db": {"open": true, "retry_at": 1795000000.0}}}

Before planning each epoch, a source reads it (:func:`is_paused`); a paused
source admits nothing (``latestOffset`` returns its start offset), so no new
epoch runs while the Spark query, its state and its checkpoint stay as they are
(SPEC §5, §7: pause without losing state). An open circuit breaker of a sink holds
the sources the same way (contraflow, SPEC §7) and is recorded under ``breakers``
(kept apart from ``paused`` so that closing a breaker never resumes a flow a user
paused). Writes are atomic (rename).

:func:`check_bind` is the rule the two servers a flow may open (the HTTP ingest, the
REST control plane) share: a loopback address needs nothing; any other address needs
a token and an explicit ``allow_remote=True``.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from wire.errors import ConfigError

CONTROL_FILE = "control.json"


def control_path(checkpoint: str | os.PathLike[str]) -> str:
    """The control file of the flow whose checkpoint is ``checkpoint``."""
    return str(Path(checkpoint) / CONTROL_FILE)


def read_control(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The control document (an empty one when the file does not exist)."""
    if path is None:
        return {}
    try:
        doc: dict[str, Any] = json.loads(Path(path).read_text())
        return doc
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def is_paused(path: str | os.PathLike[str] | None, connector: str | None = None) -> bool:
    """True when the flow, or the given connector (step id), is paused."""
    doc = read_control(path)
    if doc.get("paused") or doc.get("stopping") or doc.get("breakers"):
        return True
    if connector is None:
        return False
    return bool(doc.get("connectors", {}).get(connector, {}).get("paused"))


def write_control(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Replace the control document atomically."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, p)


def set_paused(path: str | os.PathLike[str], paused: bool, connector: str | None = None) -> None:
    """Pause or resume the whole flow, or one connector."""
    doc = read_control(path)
    if connector is None:
        doc["paused"] = paused
    else:
        doc.setdefault("connectors", {}).setdefault(connector, {})["paused"] = paused
    write_control(path, doc)


def set_stopping(path: str | os.PathLike[str], stopping: bool) -> None:
    """Mark a graceful stop in progress (sources admit nothing more)."""
    doc = read_control(path)
    doc["stopping"] = stopping
    write_control(path, doc)


def set_breaker(
    path: str | os.PathLike[str], sink: str, is_open: bool, retry_at: float | None = None
) -> None:
    """Record that ``sink``'s circuit breaker opened or closed.

    ``retry_at`` is the wall time of its next probe (seconds since the Unix epoch).
    """
    doc = read_control(path)
    breakers = doc.setdefault("breakers", {})
    if is_open:
        breakers[sink] = {"open": True, "retry_at": retry_at}
    else:
        breakers.pop(sink, None)
    write_control(path, doc)


def open_breakers(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The open circuit breakers: sink step → ``{"open": True, "retry_at": ...}``."""
    return dict(read_control(path).get("breakers", {}))


def is_loopback(host: str) -> bool:
    """True when ``host`` is ``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``).

    Any other name, and the wildcard addresses ``0.0.0.0`` and ``::``, count as remote:
    a name is not resolved (what it resolves to may change).
    """
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def check_bind(host: str, *, token: str | None, allow_remote: bool, server: str) -> None:
    """Refuse to bind ``server`` to a non-loopback ``host`` without a token and ``allow_remote``.

    Raises
    ------
    ConfigError
        On ``allow_remote`` not a bool; for a non-loopback ``host``: ``allow_remote``
        not True, or ``token`` None (named in the error, with the accepted values).
    """
    if not isinstance(allow_remote, bool):
        raise ConfigError("allow_remote", allow_remote, "True or False")
    if is_loopback(host):
        return
    if not allow_remote:
        raise ConfigError(
            "allow_remote", allow_remote,
            f"True, to bind the {server} to the non-loopback host {host!r} (reachable from other "
            "machines; a token is required too), or a loopback host such as '127.0.0.1'",
        )
    if token is None:
        raise ConfigError(
            "token", token,
            f"a non-empty string: the {server} bound to the non-loopback host {host!r} requires "
            "'Authorization: Bearer <token>' on every request",
        )


def set_sink_mode(path: str | os.PathLike[str], sink: str, mode: str) -> None:
    """Switch a self-correcting sink step to ``"write"`` or ``"read_only"`` (SPEC §8)."""
    doc = read_control(path)
    doc.setdefault("sinks", {}).setdefault(sink, {})["mode"] = mode
    write_control(path, doc)


def sink_mode(path: str | os.PathLike[str] | None, sink: str) -> str | None:
    """The mode a sink step was switched to (``"write"`` / ``"read_only"``), None if never."""
    mode = read_control(path).get("sinks", {}).get(sink, {}).get("mode")
    return mode if isinstance(mode, str) else None
