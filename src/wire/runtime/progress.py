"""The console's progress of a run: a rich progress bar on a terminal, plain lines elsewhere.

After every committed epoch the runner hands the run's summary to the flow's reporter:

* :class:`ProgressBar` (a terminal, or a ``rich.console.Console`` given): one bar with
  the records admitted by the sources of the total (when every source knows its total,
  see :func:`total_records`; otherwise the count alone, no ETA), the epochs, the sources'
  watermark as ISO time (UTC) and the ETA;
* :class:`ProgressLines` (``progress=True`` off a terminal): one line per epoch,
  ``epoch <E>: <n> results, <m> late records``.

The bar's figures come from :func:`progress_of`, a pure function of the epoch reports.
"Admitted" counts the sources' ``records`` counter: well-formed events and malformed
records (dead letters) alike, the unit in which the sources know their totals.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.errors import CheckpointError, ConfigError, WireError
from wire.plan.nodes import Plan, SourceNode
from wire.runtime.checkpoint import list_epochs

ACCEPTED = ("'auto' (a bar when stdout is a terminal), True (a bar on a terminal, else one line per "
            "epoch), False (nothing) or a rich.console.Console (a bar drawn on it)")
ETA_WINDOW = 10
"""The ETA's rate is measured over the last this many epochs."""


@dataclass(frozen=True)
class EpochReport:
    """The run's figures after one committed epoch."""

    t_s: float
    """Seconds since the run started."""
    admitted: int
    """Records admitted by the sources so far in this run (events and dead letters)."""
    epochs: int
    """Epochs completed so far in this run."""
    watermark: int | None
    """The sources' watermark (ms; the minimum over the sources), None before every source has one."""


@dataclass(frozen=True)
class RunProgress:
    """What the bar shows (:func:`progress_of`)."""

    completed: int
    total: int | None
    epochs: int
    watermark: int | None
    eta_s: float | None
    """Seconds until ``completed`` reaches ``total`` at the recent rate; None when the total
    is unknown or nothing was admitted in the recent epochs; 0 once reached."""


def progress_of(
    reports: Sequence[EpochReport], total: int | None, *, window: int = ETA_WINDOW
) -> RunProgress:
    """The progress after ``reports`` (oldest first) of a run whose input has ``total`` records.

    The ETA divides the records left by the admission rate between the last ``window + 1``
    reports (the first epoch's start-up cost is left out once two epochs ran); after one
    epoch, the rate since the run's start (t = 0, nothing admitted).
    """
    if not reports:
        return RunProgress(0, total, 0, None, None)
    last = reports[-1]
    eta = None
    if total is not None:
        left = total - last.admitted
        if left <= 0:
            eta = 0.0
        else:
            series = list(reports) if len(reports) >= 2 else [EpochReport(0.0, 0, 0, None), *reports]
            first = series[max(0, len(series) - 1 - window)]
            dt, dn = last.t_s - first.t_s, last.admitted - first.admitted
            if dt > 0 and dn > 0:
                eta = left * dt / dn
    return RunProgress(last.admitted, total, last.epochs, last.watermark, eta)


def format_watermark(ms: int | None) -> str:
    """A watermark (ms) as ISO time in UTC, e.g. ``2013-01-01T05:00:00.000Z``.

    ``-`` for none yet, ``end of input`` for the end-of-input watermark.
    """
    if ms is None or ms == NO_WATERMARK:
        return "-"
    if ms == MAX_WATERMARK:
        return "end of input"
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC)
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"


def format_eta(eta_s: float | None) -> str:
    """``ETA 0:01:05``, ``ETA -`` when unknown."""
    if eta_s is None:
        return "ETA -"
    s = round(eta_s)
    return f"ETA {s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def admitted(summary: Any) -> int:
    """Records admitted by the sources of ``summary`` (a ``RunSummary``)."""
    return sum(summary.metrics.get((step, "records"), 0) for step in summary.source_steps)


def source_watermark(summary: Any) -> int | None:
    """The minimum of the sources' ``watermark`` gauges (ms), None while one has none."""
    marks = [summary.gauges.get((step, "watermark")) for step in summary.source_steps]
    if not marks or any(m is None or m == NO_WATERMARK for m in marks):
        return None
    lowest: int = min(marks)
    return lowest


def total_records(plan: Plan) -> int | None:
    """The records the plan's sources will admit in all, or None if a source does not know.

    A bounded source knows when it has a ``total_records()`` method returning an int
    (e.g. Parquet files, from their footers; :meth:`wire.sources.file_source.FileSource.total_records`).
    An unbounded source, a method returning None or raising ``OSError``, ``ValueError`` or
    ``WireError`` makes the total unknown.
    """
    total = 0
    for node in plan.nodes:
        if not isinstance(node, SourceNode):
            continue
        connector = node.connector
        method = getattr(connector, "total_records", None)
        if not getattr(connector, "bounded", False) or method is None:
            return None
        try:
            n = method()
        except (OSError, ValueError, WireError):
            return None
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return None
        total += n
    return total


class ProgressReporter(Protocol):
    """What the runner calls after each committed epoch, and around the run."""

    def start(self) -> None:
        """Before the first epoch."""
        ...

    def epoch(self, summary: Any, epoch: int, results: int, late: int) -> None:
        """After epoch ``epoch`` committed; ``results``: its main-port rows, ``late``: its late records."""
        ...

    def new_attempt(self) -> None:
        """A restart begins (a new summary counts from zero)."""
        ...

    def stop(self) -> None:
        """After the run (draws the final state)."""
        ...


class ProgressLines:
    """One plain line per epoch on stdout: ``epoch <E>: <n> results, <m> late records``."""

    def start(self) -> None:
        """Nothing to draw."""

    def epoch(self, summary: Any, epoch: int, results: int, late: int) -> None:
        """Print the epoch's line."""
        print(f"epoch {epoch}: {results} results, {late} late records", flush=True)

    def new_attempt(self) -> None:
        """Nothing to keep."""

    def stop(self) -> None:
        """Nothing to close."""


class ProgressBar:
    """A rich progress bar of a run (module docstring), on ``console``.

    Counts add up over restarts (:meth:`new_attempt`): the epochs of a failed attempt that
    committed are not read again.
    """

    def __init__(self, flow_id: str, total: int | None, console: Console, *,
                 clock: Any = time.monotonic) -> None:
        self.flow_id = flow_id
        self.total = total
        self.clock = clock
        self.reports: list[EpochReport] = []
        self._base = (0, 0)  # admitted, epochs of earlier attempts
        self._last = (0, 0)
        self._t0: float | None = None
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[epochs]}"),
            TextColumn("wm {task.fields[watermark]}"),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None

    def _fields(self, p: RunProgress) -> dict[str, Any]:
        count = f"{p.completed:,} records"
        if p.total is not None:
            count = f"{p.completed:,} of {p.total:,} records"
        epochs = f"{p.epochs:,} epoch" + ("" if p.epochs == 1 else "s")
        return {"count": count, "epochs": epochs, "watermark": format_watermark(p.watermark),
                "eta": format_eta(p.eta_s) if p.total is not None else ""}

    def start(self) -> None:
        """Show the bar (0 records admitted)."""
        if self._task is not None:
            return
        self._t0 = self.clock()
        self.progress.start()
        self._task = self.progress.add_task(self.flow_id, total=self.total, completed=0,
                                            **self._fields(progress_of([], self.total)))

    def epoch(self, summary: Any, epoch: int, results: int, late: int) -> None:
        """Advance the bar to the run's counts after ``epoch``."""
        if self._task is None:
            self.start()
        assert self._task is not None and self._t0 is not None
        self._last = (admitted(summary), int(summary.epochs))
        self.reports.append(EpochReport(self.clock() - self._t0, self._base[0] + self._last[0],
                                        self._base[1] + self._last[1], source_watermark(summary)))
        del self.reports[: -(ETA_WINDOW + 1)]  # the model reads only the last ones
        p = progress_of(self.reports, self.total)
        self.progress.update(self._task, completed=p.completed, **self._fields(p))

    def new_attempt(self) -> None:
        """The next summaries count from zero: keep what the last attempt committed."""
        self._base = (self._base[0] + self._last[0], self._base[1] + self._last[1])
        self._last = (0, 0)

    def stop(self) -> None:
        """Draw the final state and stop refreshing."""
        self.progress.stop()


def has_completed_epochs(checkpoint: str) -> bool:
    """True when ``checkpoint`` holds a completed epoch (a run there resumes)."""
    try:
        return any(e.committed for e in list_epochs(checkpoint))
    except CheckpointError:
        return False


def resolve_progress(progress: Any, plan: Plan, *, resumed: bool) -> ProgressReporter | None:
    """The reporter for a run's ``progress`` argument (see :data:`ACCEPTED`).

    ``resumed``: the checkpoint already has completed epochs, so the records still to
    come are unknown and the bar shows no total.

    Raises
    ------
    ConfigError
        If ``progress`` is none of the accepted values (parameter ``progress``).
    """
    if isinstance(progress, Console):
        console = progress
    elif progress is False:
        return None
    elif progress is True or (isinstance(progress, str) and progress == "auto"):
        if not sys.stdout.isatty():
            return ProgressLines() if progress is True else None
        console = Console()
    else:
        raise ConfigError("progress", progress, ACCEPTED)
    return ProgressBar(plan.flow_id, None if resumed else total_records(plan), console)
