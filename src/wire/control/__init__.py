"""The REST control plane of running flows (SPEC §9) and a client for it.

``ControlPlane`` serves status, pause / resume and Prometheus metrics over HTTP;
``wire.control.client`` has the calls the CLI makes (``status``, ``pause``, ``resume``).
"""

from __future__ import annotations

from wire.control import client
from wire.control.server import ControlPlane, create_app
from wire.errors import ControlPlaneError

__all__ = ["ControlPlane", "ControlPlaneError", "client", "create_app"]
