"""The ``foreachBatch`` handler of a flow's query: :class:`EpochDispatcher`.

Per epoch (Spark micro-batch) it runs one Spark job over the epoch's rows in which the
executors split them by port and stage every executor sink's rows
(:mod:`wire.runtime.dataplane`); it then commits each executor sink with the tasks'
receipts, writes each driver sink, and folds the epoch's counters into the run's
:class:`~wire.runtime.summary.RunSummary`, all before Spark marks the epoch complete.
The run around it is :mod:`wire.runtime.runner`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from wire.compiler.branches import source_scans
from wire.compiler.call_sites import without_call_sites
from wire.compiler.plan_compiler import CompiledFlow
from wire.compiler.sink_fusion import TASK_WRITER, epoch_writer_text
from wire.core.envelope import ET, KG, SEQ, WM, metrics_table
from wire.delivery.sink import ExecutorSink
from wire.plan.nodes import OUT, PortRef, SinkNode
from wire.runtime.dataplane import RESULT_TYPE, EpochResult, PartitionWriter, Route, with_epoch
from wire.runtime.epoch_log import EpochLog
from wire.runtime.progress import ProgressReporter
from wire.runtime.summary import RunSummary

WRITER_UNUSED = frozenset({ET, WM, KG, SEQ})
"""Envelope columns the partition writer never reads (:func:`wire.runtime.ports.split_ports` drops
them): left in the JVM, so that Spark does not convert four columns of every row to Arrow for it."""


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
        self.task_writer = compiled.task_writer
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
            result = EpochResult.from_table(self.run_writer(batch, writer))
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
        events_before = self.summary.input_events
        if result.metrics is not None:
            self.summary.add_metrics(result.metrics)
        self.summary.epoch_events.append(self.summary.input_events - events_before)
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

    def run_writer(self, batch: DataFrame, writer: PartitionWriter) -> pa.Table:
        """Run the epoch's job: ``writer`` over the epoch's rows; its result rows (:data:`RESULT_SCHEMA`).

        When the source's tasks run the writer (sink fusion, :mod:`wire.compiler.sink_fusion`),
        the epoch's rows already are its result: the job carries the writer to them as a Spark
        local property of this thread, set for this job only.
        """
        if not self.task_writer:
            with without_call_sites():  # Wire's call sites, no user's (wire.compiler.call_sites)
                used = batch.select(*[c for c in batch.columns if c not in WRITER_UNUSED])
                job = used.mapInArrow(writer, RESULT_TYPE)
            return job.toArrow()
        context = batch.sparkSession.sparkContext
        context.setLocalProperty(TASK_WRITER, epoch_writer_text(writer))
        try:
            return batch.toArrow()
        finally:
            context.setLocalProperty(TASK_WRITER, None)  # type: ignore[arg-type]

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
