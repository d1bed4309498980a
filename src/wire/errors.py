"""Wire's exception hierarchy: one base class, a few typed subclasses.

Messages say what was wrong, the value received and what is accepted.
"""

from __future__ import annotations


class WireError(Exception):
    """Base class of every error Wire raises on purpose."""


class ConfigError(WireError, ValueError):
    """Invalid configuration, raised when a flow is built (before anything runs).

    The message names the parameter, the value received and the accepted values.
    """

    def __init__(self, parameter: str, value: object, accepted: str, *, step: str | None = None) -> None:
        self.parameter = parameter
        self.value = value
        self.accepted = accepted
        self.step = step
        where = f"step {step!r}: " if step else ""
        super().__init__(f"{where}invalid {parameter}={value!r}; accepted: {accepted}")


class PlanError(WireError):
    """The flow's shape cannot be compiled (duplicate step id, unsupported topology, ...)."""


class CheckpointError(WireError):
    """A checkpoint or an output location belongs to a different flow or plan."""


class FlowFailed(WireError):
    """The Spark query running a flow failed; the cause is chained."""


class ControlPlaneError(WireError):
    """A control-plane call failed; ``status_code`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)
