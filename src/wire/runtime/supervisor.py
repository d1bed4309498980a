"""Supervisor: restart a failed flow from its last completed epoch (SPEC §6).

When a flow's query fails (a sink raised, a task kept failing, the driver's
Spark query died), the supervisor waits with exponential backoff and runs the
flow again on the same checkpoint: Spark restores the state of the last
completed epoch and replays the failed epoch with the same offsets and
watermarks, so a sink error is retried without skipping the epoch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from wire.errors import ConfigError, FlowFailed
from wire.runtime.runner import RunSummary

log = logging.getLogger("wire.supervisor")


@dataclass(frozen=True)
class RestartPolicy:
    """How often and how fast a failed flow is restarted.

    Attempt ``n`` (1-based) waits ``min(initial_backoff_s * multiplier**(n-1),
    max_backoff_s)`` seconds before restarting; after ``max_restarts`` restarts the
    last failure is raised.
    """

    max_restarts: int = 5
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or (
            self.max_restarts < 0
        ):
            raise ConfigError("max_restarts", self.max_restarts, "an int >= 0")
        for name in ("initial_backoff_s", "max_backoff_s"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "a number of seconds >= 0")
        if self.multiplier < 1:
            raise ConfigError("multiplier", self.multiplier, "a number >= 1")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based)."""
        return min(self.initial_backoff_s * self.multiplier ** (attempt - 1), self.max_backoff_s)


def supervise(
    run: Callable[[], RunSummary],
    policy: RestartPolicy,
    *,
    flow_id: str,
    sleep: Callable[[float], None] = time.sleep,
) -> RunSummary:
    """Call ``run`` until it succeeds or ``policy.max_restarts`` restarts failed.

    Returns the combined summary of all attempts (``restarts`` and ``failures`` say
    what happened).

    Raises
    ------
    FlowFailed
        The last failure, once the restarts are used up.
    """
    total: RunSummary | None = None
    failures: list[str] = []
    attempt = 0
    while True:
        try:
            summary = run()
        except FlowFailed as e:
            reason = str(e).splitlines()[0][:500]
            failures.append(reason)
            attempt += 1
            if attempt > policy.max_restarts:
                log.error("flow %s failed %d times; giving up: %s", flow_id, attempt, reason)
                raise
            wait = policy.backoff(attempt)
            log.warning("flow %s failed (%s); restart %d/%d in %.1f s from the last completed "
                        "epoch", flow_id, reason, attempt, policy.max_restarts, wait)
            sleep(wait)
            continue
        total = summary if total is None else total.merge(summary)
        total.restarts = attempt
        total.failures = failures
        return total
