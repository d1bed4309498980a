"""What one run of a flow did: :class:`RunSummary` (counts, per-epoch series, gauges, watermarks).

Filled by the epoch dispatcher (:mod:`wire.runtime.dispatcher`) after every epoch and
returned by ``Flow.run`` / :meth:`wire.runtime.runner.RunningFlow.await_termination`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from wire.core.time import NO_WATERMARK
from wire.plan.nodes import PortRef
from wire.runtime.kept_ports import kept_step
from wire.runtime.recent import RecentEpochs
from wire.runtime.samples import SampleBuffer


@dataclass
class RunSummary:
    """What one ``Flow.run`` did. Counts are for this run only (not earlier runs).

    ``metrics`` maps ``(step, counter)`` to totals, e.g. ``("source_1", "events")``.
    ``epoch_seconds`` is each epoch's duration: from when Spark recorded its offsets (the
    sources had planned it) to its commit on the driver, so without the time the flow
    waited for input, was paused or held by a breaker (the dashboard's and ``wire
    report``'s epoch duration); ``epoch_wall_seconds`` the time between consecutive epoch
    completions (the full epoch latency including Spark's work, and any wait before it).

    The five per-epoch series (``epoch_seconds``, ``epoch_wall_seconds``, ``epoch_events``,
    ``driver_rows``, ``driver_bytes``) are lists of the newest 10,000 epochs' values
    (:class:`~wire.runtime.recent.RecentEpochs`: ``.total`` sums them all, ``.dropped``
    counts the older values let go), so that a run of millions of epochs stays bounded.
    """

    flow_id: str
    epochs: int = 0
    elapsed_s: float = 0.0
    metrics: Counter[tuple[str, str]] = field(default_factory=Counter)
    rows_written: Counter[str] = field(default_factory=Counter)
    emitted: Counter[str] = field(default_factory=Counter)
    epoch_wall_seconds: RecentEpochs = field(default_factory=RecentEpochs)
    epoch_seconds: RecentEpochs = field(default_factory=RecentEpochs)
    epoch_events: RecentEpochs = field(default_factory=RecentEpochs)
    """Per epoch, the well-formed events the sources admitted (the ``events`` counter of every
    source step, as :attr:`input_events` sums it): every event read, also those a filter
    pushed into the source dropped (:mod:`wire.compiler.pushdown`), which Spark's own
    ``numInputRows`` does not count."""
    driver_rows: RecentEpochs = field(default_factory=RecentEpochs)
    """Per epoch, the data rows that reached the driver: zero when every sink is an
    executor sink (Parquet, JSON Lines, Delta, PostgreSQL, SQLite); driver sinks
    (console, webhook, Redis stream, memory, guarded, round_robin) receive theirs there."""
    driver_bytes: RecentEpochs = field(default_factory=RecentEpochs)
    """Per epoch, the bytes of the epoch job's result that reached the driver:
    receipts, metric records, previews of dead letters and late events, and the rows of
    driver sinks."""
    stopped_early: bool = False
    interrupted: bool = False
    """True when Ctrl-C (SIGINT) stopped the run (:meth:`RunningFlow.await_termination`):
    gracefully after the first (the epoch in flight committed), at once after a second
    (that epoch is replayed on the next run). ``stopped_early`` is then True too."""
    source_steps: tuple[str, ...] = ()
    restarts: int = 0
    failures: list[str] = field(default_factory=list)

    kept: dict[str, str] = field(default_factory=dict)
    """Side ports no sink read, kept under the checkpoint: port id -> directory
    (:mod:`wire.runtime.kept_ports`); their rows are counted in ``rows_written`` under
    the step ``kept-<step>-<port>``."""

    spark_log: str | None = None
    """Where Spark's log and its Python workers' output went (``<checkpoint>/spark.log``) when
    the run started the SparkSession itself; None when it ran on a session it was given (or an
    active one), whose output goes wherever that session's JVM writes."""

    gauges: dict[tuple[str, str], int] = field(default_factory=dict)
    """Latest value of each gauge, e.g. ``("hourly", "input_watermark")``.

    Watermarks are the minimum over an operator's key groups, other gauges the sum."""

    source_scans: int | None = None
    """How many times each epoch scans the flow's sources, from Spark's physical plan
    (:func:`wire.compiler.branches.source_scans`): set when the run ends (while it runs:
    :attr:`RunningFlow.source_scans`); None if no epoch ran. A source read by several
    branches is scanned once (:func:`wire.compiler.branches.read_once`), so this is the
    number of sources."""

    samples: SampleBuffer = field(default_factory=SampleBuffer, compare=False, repr=False)
    """The newest dead letters and late events of committed epochs, at most
    ``SAMPLE_SIZE`` (50) of each (:mod:`wire.runtime.samples`); ``samples.newest("late")``."""

    def add_metrics(self, metrics: pa.Table) -> None:
        """Fold one epoch's metric records (counters add up; gauges replace)."""
        epoch_gauges: dict[tuple[str, str], list[int]] = {}
        for step, name, value in zip(
            *(metrics.column(c).to_pylist() for c in ("step", "name", "value")), strict=True
        ):
            if name.startswith("gauge:"):
                epoch_gauges.setdefault((step, name[len("gauge:"):]), []).append(value)
            else:
                self.metrics[(step, name)] += value
        for k, values in epoch_gauges.items():
            self.gauges[k] = min(values) if "watermark" in k[1] else sum(values)

    def watermarks(self) -> dict[str, dict[str, int]]:
        """Per step, its latest watermarks (ms since the Unix epoch, event time).

        A stateful step (window, join, process function) reports ``input_watermark`` and
        ``output_watermark`` (the minimum over its key groups); a source step reports
        ``watermark`` (the source's) and, per partition, ``watermark:<partition>``, where
        ``<partition>`` is the connector's partition name:

        * files: ``all`` (``partition_by=None``), the directory name
          (``partition_by="directory"``) or the file's path relative to the base directory
          (``partition_by="file"``);
        * Kafka: ``<topic>:<partition>``, e.g. ``watermark:orders:0``;
        * Redis Streams: the stream's key; HTTP ingest: ``wal``;
        * the Nexmark generator: ``watermark`` only; a ``wire.testing`` stream: none.

        E.g. ``{"hourly": {"input_watermark": 1700000000000, "output_watermark":
        1699999200000}, "flights": {"watermark": 1700000000000, "watermark:all":
        1700000000000}}``. A watermark that does not exist yet (a partition, source or step
        that has seen no event: internally ``-2**63``) is left out, and so is a step with
        none; after a bounded input's end the watermarks are ``2**63 - 1``
        (:data:`wire.core.envelope.MAX_WATERMARK`).
        """
        out: dict[str, dict[str, int]] = {}
        for (step, name), value in sorted(self.gauges.items()):
            if "watermark" in name and value != NO_WATERMARK:
                out.setdefault(step, {})[name] = value
        return out

    def merge(self, later: RunSummary) -> RunSummary:
        """Fold in ``later``, the summary of a restart of the same flow; return self."""
        self.epochs += later.epochs
        self.elapsed_s += later.elapsed_s
        self.metrics.update(later.metrics)
        self.rows_written.update(later.rows_written)
        self.emitted.update(later.emitted)
        self.epoch_wall_seconds += later.epoch_wall_seconds
        self.epoch_seconds += later.epoch_seconds
        self.epoch_events += later.epoch_events
        self.driver_rows += later.driver_rows
        self.driver_bytes += later.driver_bytes
        self.gauges.update(later.gauges)
        self.kept.update(later.kept)
        self.samples.extend(later.samples)
        self.stopped_early = later.stopped_early
        self.interrupted = self.interrupted or later.interrupted
        return self

    def total(self, counter: str) -> int:
        """Sum of ``counter`` over all steps."""
        return sum(v for (_, name), v in self.metrics.items() if name == counter)

    @property
    def input_events(self) -> int:
        """Well-formed events admitted by the sources."""
        return sum(self.metrics[(step, "events")] for step in self.source_steps)

    def render(self) -> str:
        """A human-readable multi-line summary."""
        rate = self.input_events / self.elapsed_s if self.elapsed_s else 0.0
        lines = [
            f"flow {self.flow_id}: {self.epochs} epochs in {self.elapsed_s:.1f} s",
            f"  input events      {self.input_events:>10,}",
            f"  malformed         {self.total('malformed'):>10,}",
            f"  late events       {self.total('late'):>10,}",
            f"  windows early     {self.emitted['early']:>10,}",
            f"  windows final     {self.emitted['final']:>10,}",
            f"  windows update    {self.emitted['update']:>10,}",
            f"  events per second {rate:>10,.0f}",
        ]
        if self.source_scans is not None and self.source_scans != len(self.source_steps):
            lines.append(f"  source scans      {self.source_scans:>10,} per epoch "
                         f"({len(self.source_steps)} sources)")
        if self.restarts:
            lines.append(f"  restarts          {self.restarts:>10,}")
        if self.interrupted:
            lines.append("  stopped by Ctrl-C; the next run resumes after the last completed epoch")
        for port, path in self.kept.items():
            rows = self.rows_written[kept_step(PortRef(*port.rsplit(".", 1)))]
            lines.append(f"  kept {port} (no sink): {rows:,} rows in {path}")
        if self.spark_log is not None:
            lines.append(f"  Spark's log: {self.spark_log}")
        return "\n".join(lines)
