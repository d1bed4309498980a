"""Run a compiled flow as one Spark streaming query with one checkpoint (SPEC §6).

Per epoch (Spark micro-batch) the driver's ``foreachBatch`` handler
(:class:`EpochDispatcher`) runs one Spark job over the epoch's rows in which the
executors split them by port and stage every executor sink's rows
(:mod:`wire.runtime.dataplane`); the driver then commits each executor sink with
the tasks' receipts and writes each driver sink; only after it returns does Spark
mark the epoch complete in its commit log. A crash before that
replays the epoch with the same offsets, watermarks and state version, so
exactly-once sinks (which skip an epoch they already published) write nothing
twice.

Every query runs with the trigger ``processingTime="0 seconds"``, also a bounded flow's.
Spark's ``availableNow`` trigger ends a query at the first trigger that plans no epoch,
and a paused source (the control file, an open circuit breaker, a graceful stop in
progress) plans none: a pause would end the run with input left. A bounded flow ends
instead once the input is consumed (:func:`input_consumed`: the last completed epoch's
end offsets all say ``"ended": true``, the offset of a bounded source's last epoch,
which carries its final watermark); :class:`RunningFlow` then stops the query. While
paused it waits, its query alive, until resumed or stopped.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from wire.compiler.branches import source_scans
from wire.compiler.plan_compiler import CompiledFlow, compile_plan
from wire.core.control_file import control_path, set_breaker, set_stopping, write_control
from wire.core.envelope import metrics_table
from wire.core.time import NO_WATERMARK
from wire.delivery.sink import ExecutorSink, Sink
from wire.errors import CheckpointError, ConfigError, FlowFailed
from wire.plan.graph import sinks as plan_sinks
from wire.plan.nodes import OUT, Plan, PortRef, SinkNode
from wire.runtime.checkpoint import (
    absolute_checkpoint,
    begin_start_over,
    default_key_groups,
    epochs_settled,
    finish_start_over,
    log_batches,
    open_checkpoint,
    read_spark_log,
    spark_checkpoint,
)
from wire.runtime.dataplane import RESULT_TYPE, EpochResult, PartitionWriter, Route, with_epoch
from wire.runtime.epoch_log import EpochLog
from wire.runtime.kept_ports import keep_unsunk_ports, kept_step
from wire.runtime.progress import ProgressReporter
from wire.runtime.recent import RecentEpochs
from wire.runtime.rescale import rescale_checkpoint
from wire.runtime.samples import SampleBuffer
from wire.runtime.session import SPARK_LOG, spark_session, warm_up_workers
from wire.runtime.state_reader import record_layout


@dataclass
class RunSummary:
    """What one ``Flow.run`` did. Counts are for this run only (not earlier runs).

    ``metrics`` maps ``(step, counter)`` to totals, e.g. ``("source_1", "events")``.
    ``epoch_seconds`` is each epoch's duration: from when Spark recorded its offsets (the
    sources had planned it) to its commit on the driver, so without the time the flow
    waited for input, was paused or held by a breaker (the dashboard's and ``wire
    report``'s epoch duration); ``epoch_wall_seconds`` the time between consecutive epoch
    completions (the full epoch latency including Spark's work, and any wait before it).

    The four per-epoch series (``epoch_seconds``, ``epoch_wall_seconds``, ``driver_rows``,
    ``driver_bytes``) are lists of the newest 10,000 epochs' values
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


END_POLL_S = 0.1
"""How often (s) a bounded flow's run checks whether its input is consumed."""


def input_consumed(spark_dir: str | Path) -> bool:
    """True when the last completed epoch of a Spark checkpoint ended every source.

    That is: the epoch with the highest id in ``<spark_dir>/commits`` recorded, for every
    source, an end offset that is a JSON object with ``"ended": true`` (a bounded source's
    last offset, :mod:`wire.sources.base`). False before any epoch completed, or while a
    source has input left (whether paused or not). Reads two small files.
    """
    spark = Path(spark_dir)
    done = log_batches(spark / "commits")
    if not done:
        return False
    try:
        lines = read_spark_log(spark / "offsets" / str(done[-1]), spark.parent)
    except CheckpointError:
        return False
    offsets = [None if line.strip() == "-" else json.loads(line) for line in lines]
    return bool(offsets) and all(isinstance(o, dict) and o.get("ended") is True for o in offsets)


AWAIT_POLL_S = 0.25
"""How long (s) one wait for the query's end lasts before a Ctrl-C is looked at."""


class Interrupts:
    """Count Ctrl-C (SIGINT) while a run is awaited, doing nothing else in the signal handler.

    PySpark's own SIGINT handler (``SparkContext``) cancels every Spark job through py4j
    from inside the signal handler, on the main thread's py4j connection, which the
    interrupted wait is reading: ``RuntimeError: reentrant call inside
    <_io.BufferedReader>``, logged by py4j with its traceback, then a broken connection
    and more tracebacks on every later call. Inside this context manager (on the main
    thread only: elsewhere it does nothing) the handler only counts; the waiting code
    stops the run itself, between two py4j calls. The previous handler is restored on exit.
    """

    def __init__(self) -> None:
        self.count = 0
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


class StopRequested(Exception):
    """Raised inside ``foreachBatch`` to stop a run before an epoch writes anything."""


class EpochDispatcher:
    """The ``foreachBatch`` handler: route one epoch's ports to their sinks."""

    def __init__(
        self,
        compiled: CompiledFlow,
        sinks: list[SinkNode],
        summary: RunSummary,
        *,
        max_epochs: int | None,
        progress: ProgressReporter | None,
    ) -> None:
        self.main_port = PortRef(compiled.terminal_step, OUT).port_id()
        self.sinks = sinks
        self.summary = summary
        self.max_epochs = max_epochs
        self.progress = progress
        self.stop_requested = False
        self.last_error: str | None = None
        """Why the last epoch failed on the driver (a sink's exception), if it did."""
        self.epoch_log: EpochLog | None = None
        """Where each completed epoch's counters are recorded (``wire report``), if anywhere."""
        self.epoch_base = 0
        """Added to Spark's batch id to make the epoch id sinks and the epoch log see: after a
        rescale the query starts again at batch 0 (:mod:`wire.runtime.rescale`)."""
        self.query: StreamingQuery | None = None
        """The query this handles (set once it started): its plan gives ``source_scans``."""
        self.spark_dir: Path | None = None
        """Spark's checkpoint: when ``offsets/<batch>`` was written, the epoch was planned."""
        self._last = time.perf_counter()

    def __call__(self, batch: DataFrame, epoch: int) -> None:
        """Handle Spark batch ``epoch`` (epoch ``epoch_base + epoch``): stage on executors, commit here."""
        batch_id = epoch
        epoch += self.epoch_base
        if self.max_epochs is not None and self.summary.epochs >= self.max_epochs:
            self.stop_requested = True
            raise StopRequested(f"stopping before epoch {epoch} (max_epochs={self.max_epochs})")
        routes = [
            Route(node.step, node.source,
                  node.sink.prepare_epoch(epoch) if isinstance(node.sink, ExecutorSink) else None)
            for node in self.sinks
        ]
        writer = PartitionWriter(epoch, self.main_port, routes)
        try:
            result = EpochResult.from_table(batch.mapInArrow(writer, RESULT_TYPE).toArrow())
        except Exception as e:
            self.last_error = f"epoch {epoch}: {_staging_cause(e)}"
            raise
        for node in self.sinks:
            try:
                if isinstance(node.sink, ExecutorSink):
                    parts = result.staged.get(node.step, [])
                    node.sink.commit_epoch(epoch, parts)
                    written = sum(p.rows for p in parts)
                else:
                    rows = result.driver_rows.get(node.source.port_id())
                    if rows is None or rows.num_rows == 0:
                        continue
                    node.sink.write_epoch(epoch, with_epoch(rows, epoch))
                    written = rows.num_rows
                report = getattr(node.sink, "epoch_metrics", None)  # the self-correcting sink's
                if report is not None and (counters := report()):
                    self.summary.add_metrics(metrics_table(node.step, counters))
            except Exception as e:
                self.last_error = f"epoch {epoch}: sink {node.step!r} raised {e!r}"
                raise
            self.summary.rows_written[node.step] += written
        self.summary.emitted.update(result.emitted)
        self.summary.driver_rows.append(result.received_rows)
        self.summary.driver_bytes.append(result.received_bytes)
        if result.metrics is not None:
            self.summary.add_metrics(result.metrics)
        self.summary.samples.add(result.samples, epoch=epoch, now_ms=time.time_ns() // 1_000_000)
        self.summary.epochs += 1
        now = time.perf_counter()
        took = self.epoch_duration(batch_id, now)
        self.summary.epoch_wall_seconds.append(now - self._last)
        self.summary.epoch_seconds.append(took)
        if self.epoch_log is not None:
            self.epoch_log.append(self.summary, epoch, took)
            if result.samples:
                self.epoch_log.write_samples(self.summary.samples)
        self._last = now
        if self.progress is not None:
            self.progress.epoch(self.summary, epoch, sum(result.emitted.values()),
                                self.summary_late(result.metrics))

    def epoch_duration(self, batch_id: int, now: float) -> float:
        """Seconds from when Spark planned batch ``batch_id`` (its offset file) to ``now``.

        Never longer than since the previous epoch's commit (or the query's start: a
        replayed epoch's offset file is older than this run); ``now`` is ``perf_counter()``.
        Without the offset file: since the previous commit.
        """
        since_last = now - self._last
        if self.spark_dir is None:
            return since_last
        try:
            planned = (self.spark_dir / "offsets" / str(batch_id)).stat().st_mtime
        except OSError:
            return since_last
        return max(0.0, min(since_last, time.time() - planned))

    def count_scans(self) -> None:
        """Record ``summary.source_scans`` once, from the query's last epoch.

        Called when the run ends (and by :attr:`RunningFlow.source_scans`), never from the
        ``foreachBatch`` thread: explaining the query there would run a Spark command inside
        the epoch's own execution.
        """
        if self.summary.source_scans is None and self.query is not None:
            with contextlib.suppress(Py4JError):  # the JVM is gone (a failed run): nothing to count
                self.summary.source_scans = source_scans(self.query)

    @staticmethod
    def summary_late(metrics: pa.Table | None) -> int:
        """Late records counted in one epoch's metric records."""
        if metrics is None:
            return 0
        late = pc.equal(metrics.column("name"), "late")
        return int(pc.sum(pc.if_else(late, metrics.column("value"), 0)).as_py() or 0)


def _staging_cause(error: Exception) -> str:
    """The stager's own message inside a failed epoch job, or the job's error's first line."""
    text = str(error)
    marker = "StagingFailed: "
    if marker in text:
        return text[text.index(marker) + len(marker):].splitlines()[0]
    first = text.splitlines()[0] if text else repr(error)
    return f"the epoch's Spark job failed: {first}"


class RunningFlow:
    """A flow whose Spark query is running (returned by :meth:`wire.Flow.start`).

    ``summary`` is updated after every epoch; :meth:`watermarks` shows each step's
    latest watermarks while it runs.
    """

    def __init__(self, plan: Plan, query: StreamingQuery, dispatcher: EpochDispatcher,
                 sinks: list[Sink], started: float, checkpoint: str, *, own_progress: bool = False,
                 bounded: bool = False) -> None:
        self.plan = plan
        self.checkpoint = checkpoint
        self.control_file = control_path(checkpoint)
        self.query = query
        self.summary = dispatcher.summary
        self._dispatcher = dispatcher
        self._breakers: dict[str, Any] = {}
        self._listeners: list[tuple[Any, Any]] = []
        self._sinks = sinks
        self._started = started
        self._closed = False
        self._own_progress = own_progress
        self.bounded = bounded
        """Whether every source is bounded: the run ends once the input is consumed."""
        self.spark: SparkSession | None = None
        """The session the query runs in (reads of its state use it: :meth:`state`)."""
        self.layout: threading.Thread | None = None
        """Writes ``state_layout.json`` (:func:`wire.runtime.state_reader.record_layout`)."""
        self.input_consumed = False
        """True once a bounded flow's run ended because its input was consumed."""
        self._end_watch: threading.Thread | None = None
        if bounded:
            self._end_watch = threading.Thread(target=self._watch_end, args=(spark_checkpoint(checkpoint),),
                                               name=f"wire-end-{plan.flow_id}", daemon=True)
            self._end_watch.start()

    def _watch_end(self, spark_dir: str) -> None:
        """Stop a bounded flow's query once its input is consumed (module docstring).

        Runs in its own thread until then, or until the query ends otherwise. A paused
        flow's input is not consumed: its query stays, waiting for the resume.
        """
        while not self._closed:
            if input_consumed(spark_dir):
                self.input_consumed = True
                with contextlib.suppress(Py4JError):
                    self.query.stop()
                return
            try:
                if not self.query.isActive:
                    return
            except Py4JError:  # the JVM is gone
                return
            time.sleep(END_POLL_S)

    @property
    def flow_id(self) -> str:
        """The flow's id."""
        return self.plan.flow_id

    def watermarks(self) -> dict[str, dict[str, int]]:
        """Per step, its latest watermarks in ms; none yet: left out (see :meth:`RunSummary.watermarks`)."""
        return self.summary.watermarks()

    @property
    def last_error(self) -> str | None:
        """Why the last epoch failed on the driver (a sink's exception), if it did."""
        return self._dispatcher.last_error

    @property
    def source_scans(self) -> int | None:
        """How many times an epoch scans the flow's sources (None before the first epoch).

        From the physical plan of the query's last epoch; see ``RunSummary.source_scans``.
        """
        self._dispatcher.count_scans()
        return self.summary.source_scans

    def state(self, step: str, key: object) -> pa.Table:
        """``key``'s state in keyed step ``step`` as of the last committed epoch (issue 29).

        The rows :func:`wire.runtime.state_reader.read_state` returns for that key (their
        shape per operator kind is documented there), read from the checkpoint while the
        flow runs: only the key's key group leaves Spark's state store, nothing in the
        checkpoint is written or locked. ``key`` is cast to the key column's type.

        Raises
        ------
        ConfigError
            If ``step`` is not a keyed step or ``key`` not a value of its key type.
        CheckpointError
            If no epoch has committed yet, or Spark's state reader fails (naming why).
        """
        from wire.runtime.state_reader import read_state

        if self.layout is not None:
            self.layout.join()
        return read_state(self.checkpoint, step, key=key, flow=self.plan, spark=self.spark)

    def breakers(self) -> dict[str, str]:
        """Circuit breaker state per guarded sink step: closed, open or half_open."""
        return {step: b.state for step, b in self._breakers.items()}

    def is_active(self) -> bool:
        """True while the Spark query runs."""
        return bool(self.query.isActive)

    def stop(self, *, graceful: bool = True, timeout_s: float = 120.0) -> RunSummary:
        """Stop the flow.

        Graceful (default): sources admit nothing more, the epoch in flight finishes
        and commits, then the query stops, so nothing is replayed on the next run
        (also while paused: the run then stops without another epoch).
        Otherwise (or after ``timeout_s``) the query stops at once and an epoch in
        flight is replayed on the next run.
        """
        return self._stop(graceful=graceful, timeout_s=timeout_s)

    def _stop(self, *, graceful: bool, timeout_s: float, give_up: Any = None) -> RunSummary:
        """:meth:`stop`; a graceful stop turns abrupt as soon as ``give_up()`` is true."""
        for sink in self._sinks:
            interrupt = getattr(sink, "interrupt", None)
            if interrupt is not None:
                interrupt()  # a write waiting out an open breaker gives up; epoch replayed
        if graceful and self.query.isActive:
            set_stopping(self.control_file, True)
            deadline = time.monotonic() + timeout_s
            # A trigger that began before "stopping" was set may still plan an epoch
            # (its latestOffset ran first); once one moment without an active trigger has
            # been seen, every later trigger sees "stopping" and plans nothing.
            between_triggers = False
            while self.query.isActive and time.monotonic() < deadline:
                if give_up is not None and give_up():
                    break
                between_triggers = between_triggers or not self.query.status["isTriggerActive"]
                if between_triggers and epochs_settled(self.checkpoint):
                    break
                time.sleep(0.02)
        self.query.stop()
        set_stopping(self.control_file, False)
        self.summary.stopped_early = True
        return self._finish()

    def await_termination(self) -> RunSummary:
        """Block until the query ends (bounded input consumed, stop, or failure).

        A bounded flow's query ends only once every source's input is consumed and its
        final watermark committed (:func:`input_consumed`), never because the flow is
        paused: a paused run waits here until it is resumed (REST control plane, ``wire
        resume``, the control file) or stopped.

        Ctrl-C (SIGINT; waiting on the main thread) stops the run gracefully, as
        :meth:`stop` does: the epoch in flight finishes and commits, then the summary is
        returned (``interrupted`` and ``stopped_early`` set), with nothing printed. A
        second Ctrl-C stops the query at once; that epoch is then replayed on the next
        run. ``wire run`` then prints the summary and exits 130.

        Raises
        ------
        FlowFailed
            If the query failed (the cause is chained).
        """
        with Interrupts() as interrupts:
            try:
                # PySpark types the timeout int; it takes seconds as any number (ms to the JVM)
                while not self.query.awaitTermination(cast(int, AWAIT_POLL_S)):
                    if interrupts.count:
                        self.summary.interrupted = True
                        return self._stop(graceful=True, timeout_s=120.0,
                                          give_up=lambda: interrupts.count > 1)
            except StreamingQueryException as e:
                if interrupts.count:  # the epoch failed under Ctrl-C: a stop, replayed next run
                    with contextlib.suppress(Py4JError):
                        self.query.stop()
                    self.summary.stopped_early = self.summary.interrupted = True
                    return self._finish()
                if not self._dispatcher.stop_requested:
                    self._finish()
                    cause = self._dispatcher.last_error or str(e)
                    raise FlowFailed(f"flow {self.flow_id!r} failed: {cause}") from e
                self.summary.stopped_early = True
            except KeyboardInterrupt:  # raised by another handler than Interrupts'
                self.query.stop()
                self.summary.stopped_early = self.summary.interrupted = True
        return self._finish()

    def watch_breakers(self, sinks: list[SinkNode]) -> None:
        """Mirror each guarded sink's circuit breaker into the control file.

        An open breaker holds every source of the flow (contraflow, SPEC §7): inside a
        run a blocked sink already holds the epoch loop; the control file tells what
        sits outside it (an HTTP ingest answering 503, the control plane's status).
        """
        for node in sinks:
            breaker = getattr(node.sink, "breaker", None)
            if breaker is None:
                continue
            self._breakers[node.step] = breaker

            def listener(b: Any, old: str, new: str, step: str = node.step) -> None:
                if new == "open":
                    set_breaker(self.control_file, step, True, time.time() + b.retry_after_s())
                elif new == "closed":
                    set_breaker(self.control_file, step, False)

            breaker.add_listener(listener)
            self._listeners.append((breaker, listener))
            if breaker.state != "closed":
                set_breaker(self.control_file, node.step, True, time.time() + breaker.retry_after_s())

    def _finish(self) -> RunSummary:
        if not self._closed:
            self._closed = True
            if self.layout is not None:
                self.layout.join()
            for breaker, listener in self._listeners:
                breaker.remove_listener(listener)
            for sink in self._sinks:
                sink.close()
            if self._own_progress and self._dispatcher.progress is not None:
                self._dispatcher.progress.stop()
            self.summary.elapsed_s = time.perf_counter() - self._started
            self._dispatcher.count_scans()
        return self.summary


def start_plan(
    plan: Plan,
    *,
    checkpoint: str,
    master: str,
    spark_conf: dict[str, str],
    spark: SparkSession | None,
    key_groups: int | None,
    max_epochs: int | None,
    progress: ProgressReporter | None,
    own_progress: bool = False,
    fresh: bool = False,
) -> RunningFlow:
    """Compile ``plan`` and start its query; see :meth:`wire.Flow.start`.

    ``fresh``: start over (:func:`wire.runtime.checkpoint.begin_start_over`): the old
    checkpoint is set aside, a new one opened, the plan compiled (on failure the old
    checkpoint is restored), every sink handed to the new checkpoint
    (:meth:`wire.delivery.sink.Sink.supersede`), then the old checkpoint deleted.

    ``progress`` is told of every committed epoch (:mod:`wire.runtime.progress`); with
    ``own_progress`` the run starts it and stops it when it ends.
    """
    if key_groups is not None and (
        isinstance(key_groups, bool) or not isinstance(key_groups, int) or not 1 <= key_groups <= 4096
    ):
        raise ConfigError("key_groups", key_groups, "None or an int between 1 and 4096")
    if max_epochs is not None and (not isinstance(max_epochs, int) or max_epochs < 0):
        raise ConfigError("max_epochs", max_epochs, "None or an int >= 0")
    checkpoint = absolute_checkpoint(checkpoint)  # one directory for Spark's JVM and for Python
    plan, kept = keep_unsunk_ports(plan, checkpoint)
    spark_log = None
    sessions: list[SparkSession] = [] if spark is None else [spark]

    def session() -> SparkSession:
        nonlocal spark_log
        if not sessions:
            if SparkSession.getActiveSession() is None:  # Wire starts the JVM: its chatter goes to a file
                spark_log = str(Path(checkpoint) / SPARK_LOG)
            sessions.append(spark_session(master, spark_conf, app_name=f"wire:{plan.flow_id}",
                                          log_file=spark_log))
        return sessions[0]

    control = control_path(checkpoint)
    start_over = begin_start_over(checkpoint) if fresh else None  # sets the old one aside
    try:
        meta = open_checkpoint(
            checkpoint, flow_id=plan.flow_id, key_groups=key_groups, plan=plan,
            new_key_groups=lambda: default_key_groups(session().sparkContext.defaultParallelism),
            rescale=lambda root, doc, groups: rescale_checkpoint(session(), plan, root, doc, groups),
            start_over=fresh,
        )
        write_control(control, {})  # a run starts running: no pause, no stop in progress
        spark = session()
        warm_up_workers(spark)  # the Python workers start while the flow compiles
        compiled = compile_plan(plan, spark, meta.key_groups, control, seeds=meta.seeds, resume=meta.resume)
    except BaseException:
        if start_over is not None:  # no sink was touched: the old checkpoint comes back
            start_over.undo()
        raise
    sinks = list(plan_sinks(plan))
    summary = RunSummary(plan.flow_id, source_steps=compiled.source_steps, kept=kept, spark_log=spark_log)
    dispatcher = EpochDispatcher(compiled, sinks, summary, max_epochs=max_epochs, progress=progress)
    dispatcher.epoch_base = meta.epoch_base
    dispatcher.spark_dir = Path(spark_checkpoint(checkpoint))
    dispatcher.epoch_log = EpochLog(checkpoint)
    dispatcher.epoch_log.write_graph(plan)
    started = time.perf_counter()
    opened: list[Sink] = []
    try:
        for node in sinks:
            bind = getattr(node.sink, "bind_checkpoint", None)  # sinks that keep state under it
            if bind is not None:
                bind(checkpoint)
            if meta.start_over:  # fresh=True: the sink's earlier output gives way to the new run's
                node.sink.supersede(flow_id=plan.flow_id, sink_id=node.step, checkpoint_id=meta.checkpoint_id)
            node.sink.open(flow_id=plan.flow_id, sink_id=node.step, checkpoint_id=meta.checkpoint_id)
            opened.append(node.sink)
        if meta.start_over:
            finish_start_over(checkpoint)  # every sink accepted the new checkpoint
        writer = (
            compiled.dataframe.writeStream.foreachBatch(dispatcher)
            .option("checkpointLocation", spark_checkpoint(checkpoint))
            .queryName(plan.flow_id)
        )
        # never availableNow, also for a bounded flow: it ends at the first trigger a
        # paused source plans nothing (module docstring)
        writer = writer.trigger(processingTime="0 seconds")
        dispatcher._last = time.perf_counter()
        if own_progress and progress is not None:
            progress.start()
        query = writer.start()
        dispatcher.query = query
    except BaseException:
        for sink in opened:
            sink.close()
        if own_progress and progress is not None:
            progress.stop()
        raise
    running = RunningFlow(plan, query, dispatcher, opened, started, checkpoint, own_progress=own_progress,
                          bounded=compiled.bounded)
    running.spark = spark
    # where each keyed step's state is (wire.read_state): from the plan the first epoch executes
    # (explained in milliseconds); state() and the run's end wait for it
    running.layout = threading.Thread(target=record_layout, args=(checkpoint, compiled, query),
                                      name=f"wire-layout-{plan.flow_id}", daemon=True)
    running.layout.start()
    running.watch_breakers(sinks)
    return running


def run_plan(plan: Plan, **kwargs: Any) -> RunSummary:
    """Compile and run ``plan`` until it ends; see :meth:`wire.Flow.run`."""
    return start_plan(plan, **kwargs).await_termination()
