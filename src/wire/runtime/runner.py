"""Run a compiled flow as one Spark streaming query with one checkpoint (SPEC §6).

Per epoch (Spark micro-batch) the driver's ``foreachBatch`` handler
(:class:`~wire.runtime.dispatcher.EpochDispatcher`) runs one Spark job over the epoch's rows in which the
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
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from wire.compiler.plan_compiler import CompiledFlow, compile_plan
from wire.core.control_file import control_path, set_breaker, set_stopping, write_control
from wire.delivery.sink import Sink
from wire.errors import CheckpointError, ConfigError, FlowFailed
from wire.plan.graph import sinks as plan_sinks
from wire.plan.nodes import Plan, SinkNode
from wire.runtime import arrow_memory
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
from wire.runtime.dataplane import RESULT_SCHEMA
from wire.runtime.dispatcher import EpochDispatcher, StopRequested
from wire.runtime.epoch_log import EpochLog
from wire.runtime.kept_ports import keep_unsunk_ports
from wire.runtime.progress import ProgressReporter
from wire.runtime.query_conf import apply_query_conf, checkpoint_files_conf, fusion_enabled
from wire.runtime.rescale import rescale_checkpoint
from wire.runtime.session import SPARK_LOG, spark_session, warm_up_workers
from wire.runtime.state_layout import record_layout
from wire.runtime.summary import RunSummary
from wire.sources.base.handoff import remove_orphans
from wire.sources.base.source import WarmUp

__all__ = [
    "AWAIT_POLL_S", "END_POLL_S", "PROGRESS_WAIT_S", "EpochDispatcher", "Interrupts", "RunSummary",
    "RunningFlow", "StopRequested", "input_consumed", "run_plan", "start_plan",
]
"""The runner's names; :class:`RunSummary` (:mod:`wire.runtime.summary`) and
:class:`EpochDispatcher`/:class:`StopRequested` (:mod:`wire.runtime.dispatcher`) live in
their own modules and are importable from here too."""

END_POLL_S = 0.1
"""How often (s) a bounded flow's run checks whether its input is consumed."""
PROGRESS_WAIT_S = 1.0
"""How long (s) a bounded flow's end waits for Spark to report its last epoch's progress."""

ERROR_CHARS = 2_000
""":attr:`RunningFlow.last_error` keeps at most this many characters of Spark's message."""


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
        """Writes ``state_layout.json`` (:func:`wire.runtime.state_layout.record_layout`)."""
        self.warm_ups: list[tuple[WarmUp, threading.Thread]] = []
        """The sources' warm-ups (:func:`_warm_up`): joined and closed when the run ends."""
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
                    self._await_progress(log_batches(Path(spark_dir) / "commits")[-1])
                    self.query.stop()
                return
            try:
                if not self.query.isActive:
                    return
            except Py4JError:  # the JVM is gone
                return
            time.sleep(END_POLL_S)

    def _await_progress(self, epoch: int) -> None:
        """Wait until Spark reported the progress of ``epoch`` (at most :data:`PROGRESS_WAIT_S`).

        Spark writes an epoch's commit, then its progress (``StreamingQuery.recentProgress``,
        ``lastProgress``, the listeners' events); stopping the query in between would lose
        the last epoch's progress, which carries the flow's last data when its bounded
        sources end with their last records (:mod:`wire.sources.base.partitioned`).
        """
        deadline = time.monotonic() + PROGRESS_WAIT_S
        while time.monotonic() < deadline:
            last = self.query.lastProgress
            if last is not None and int(last["batchId"]) >= epoch:
                return
            time.sleep(0.01)

    @property
    def flow_id(self) -> str:
        """The flow's id."""
        return self.plan.flow_id

    def watermarks(self) -> dict[str, dict[str, int]]:
        """Per step, its latest watermarks in ms; none yet: left out (see :meth:`RunSummary.watermarks`)."""
        return self.summary.watermarks()

    @property
    def last_error(self) -> str | None:
        """Why the last epoch failed, if it did; None while all is well.

        A sink's exception on the driver (the dispatcher's), else, once the query has
        stopped with an error (e.g. a source failing while it plans an epoch, where no
        sink runs), Spark's message for it (at most :data:`ERROR_CHARS` characters).
        """
        if self._dispatcher.last_error is not None:
            return self._dispatcher.last_error
        if self.query.isActive:
            return None
        failure = self.query.exception()
        if failure is None:
            return None
        message = str(getattr(failure, "desc", None) or failure)
        return message if len(message) <= ERROR_CHARS else message[:ERROR_CHARS] + " ..."

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
            _end_warm_ups(self.warm_ups)
            remove_orphans()  # the hand-over files of planners (ended planners only)
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
    arrow_memory.use_in_driver()  # also with the caller's session: the driver parses (warm-up)

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
        compiled = compile_plan(plan, spark, meta.key_groups, control, seeds=meta.seeds, resume=meta.resume,
                                fuse=fusion_enabled(spark.conf), task_writer=RESULT_SCHEMA)
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
    warm_ups = _warm_up(spark, compiled, fresh=not any((dispatcher.spark_dir / "offsets").glob("*")))
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
        apply_query_conf(compiled.dataframe.sparkSession.conf)  # the query's session is cloned at start()
        dispatcher._last = time.perf_counter()
        if own_progress and progress is not None:
            progress.start()
        with checkpoint_files_conf(compiled.dataframe.sparkSession.conf, checkpoint):
            query = writer.start()
        dispatcher.query = query
    except BaseException:
        for sink in opened:
            sink.close()
        if own_progress and progress is not None:
            progress.stop()
        _end_warm_ups(warm_ups)
        raise
    running = RunningFlow(plan, query, dispatcher, opened, started, checkpoint, own_progress=own_progress,
                          bounded=compiled.bounded)
    running.warm_ups = warm_ups
    running.spark = spark
    # where each keyed step's state is (wire.read_state): from the plan the first epoch executes
    # (explained in milliseconds); state() and the run's end wait for it
    running.layout = threading.Thread(target=record_layout, args=(checkpoint, compiled, query),
                                      name=f"wire-layout-{plan.flow_id}", daemon=True)
    running.layout.start()
    running.watch_breakers(sinks)
    return running


def _warm_up(
    spark: SparkSession, compiled: CompiledFlow, *, fresh: bool
) -> list[tuple[WarmUp, threading.Thread]]:
    """Start each source's warm-up (:meth:`wire.sources.base.source.BindingSource.warm_up`) in a thread.

    Only for a query that starts fresh (no offsets in its Spark checkpoint): a restarted one
    goes on from offsets the warm-up does not know. Started before the sinks open and the query
    starts, so that it runs while Spark starts the query and the sources' planners.
    """
    if not fresh:
        return []
    started = []
    for step, (connector, request) in compiled.source_requests.items():
        hook = getattr(connector, "warm_up", None)
        warm = hook(spark, request) if hook is not None else None
        if warm is not None:
            thread = threading.Thread(target=warm.run, name=f"wire-warm-up-{step}", daemon=True)
            thread.start()
            started.append((warm, thread))
    return started


def _end_warm_ups(warm_ups: list[tuple[WarmUp, threading.Thread]]) -> None:
    """Wait for the warm-ups (at most a minute each) and remove what they left."""
    for warm, thread in warm_ups:
        thread.join(timeout=60)
        warm.close()


def run_plan(plan: Plan, **kwargs: Any) -> RunSummary:
    """Compile and run ``plan`` until it ends; see :meth:`wire.Flow.run`."""
    return start_plan(plan, **kwargs).await_termination()
