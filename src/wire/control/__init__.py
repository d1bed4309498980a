"""The REST control plane of running flows (SPEC §9) and a client for it.

``ControlPlane`` serves status, pause / resume and Prometheus metrics over HTTP;
``wire.control.client`` has the calls the CLI makes (``status``, ``pause``, ``resume``).
The server needs the pip extra ``wire[control]`` (FastAPI, uvicorn, prometheus-client):
it is imported when ``ControlPlane`` or ``create_app`` is first asked for, which raises
:class:`wire.errors.MissingExtraError` without the extra. The client needs only httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wire.errors import ControlPlaneError, require_extra
from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire.control import client
    from wire.control.server import ControlPlane, create_app

_SERVER = ("ControlPlane", "create_app")
_LAZY: LazyTable = {"client": ("wire.control.client", None),
                    **{n: ("wire.control.server", n) for n in _SERVER}}
_load, __dir__ = lazy_names(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    if name in _SERVER:
        require_extra("control", f"wire.control.{name}")
    return _load(name)


__all__ = ["ControlPlane", "ControlPlaneError", "client", "create_app"]
