"""The fluent flow API: ``Flow`` records a plan; ``Stream`` is a handle on one port.

Example (run by the test suite, see ``tests/unit/api/test_flow.py``)::

    import wire
    flow = wire.Flow("flight-delays")
    flights = flow.source(
        wire.sources.files("in/*.parquet", format="parquet"),
        event_time="sched_dep_ms", key="origin",
        watermark=wire.BoundedOutOfOrderness("30m"), max_events_per_epoch=20_000)
    hourly = (flights.filter("dep_delay IS NOT NULL")
              .window(wire.Tumbling("1h"), allowed_lateness="90m")
              .aggregate(departures=wire.count(), mean_dep_delay=wire.mean("dep_delay")))
    hourly.sink(wire.sinks.parquet("out/windows"))
    hourly.late().sink(wire.sinks.parquet("out/late"))
    summary = flow.run(checkpoint="out/_checkpoint")

Building only records immutable nodes (:mod:`wire.plan.nodes`); ``run`` compiles the
plan to one Spark Structured Streaming query with one checkpoint (SPEC §6).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from wire.core.time import INT64_MAX, INT64_MIN, Duration, to_millis
from wire.core.windowing import BoundedOutOfOrderness, Session, Sliding, Tumbling, Window
from wire.delivery.sink import Sink
from wire.errors import ConfigError, PlanError
from wire.plan.fingerprint import key_of
from wire.plan.nodes import (
    ALL_STEPS,
    DEAD_LETTER,
    LATE,
    OUT,
    OVERFLOW,
    DropNode,
    ExplodeNode,
    Expr,
    FilterNode,
    IntervalJoinNode,
    KeyByNode,
    MapNode,
    Node,
    Plan,
    PortRef,
    ProcessNode,
    SelectNode,
    SinkNode,
    SourceNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
)
from wire.state.aggregations import Aggregator
from wire.state.keyed_state import StateSpec
from wire.state.process import OnEvents, OnTimer, declared_states
from wire.state.spec import Callback, Emit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

    from wire.runtime.progress import ProgressReporter
    from wire.runtime.runner import RunningFlow, RunSummary
    from wire.sources.base import Source

_STEP_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")


class Flow:
    """A dataflow under construction: sources → operators → sinks.

    Parameters
    ----------
    flow_id:
        The flow's id: letters, digits, ``_`` and ``-``, starting with a letter.
        It names the flow's checkpoint metadata and its sinks' ownership markers.

    Raises
    ------
    ConfigError
        If ``flow_id`` is not a valid id.
    """

    def __init__(self, flow_id: str) -> None:
        if not isinstance(flow_id, str) or not _STEP_ID.match(flow_id):
            raise ConfigError(
                "flow_id", flow_id, "letters, digits, '_' and '-', starting with a letter"
            )
        self.flow_id = flow_id
        self._nodes: list[Node] = []

    # -- building -------------------------------------------------------------------------
    def _add(self, node: Node) -> None:
        if any(n.step == node.step for n in self._nodes):
            raise PlanError(f"flow {self.flow_id!r}: step id {node.step!r} is used twice")
        self._nodes.append(node)

    def _step_id(self, given: str | None, kind: str) -> str:
        if given is not None:
            if not isinstance(given, str) or not _STEP_ID.match(given):
                raise ConfigError(
                    "name", given, "letters, digits, '_' and '-', starting with a letter"
                )
            return given
        n = sum(1 for s in self._nodes if s.step.startswith(kind + "_")) + 1
        return f"{kind}_{n}"

    def source(
        self,
        connector: Source,
        *,
        event_time: str,
        key: str | None = None,
        watermark: BoundedOutOfOrderness | None = None,
        max_events_per_epoch: int = 100_000,
        target_epoch_duration: Duration | None = None,
        name: str | None = None,
    ) -> Stream:
        """Add a source and return its stream of events.

        Parameters
        ----------
        connector:
            A source connector (:class:`wire.sources.base.Source`), e.g.
            ``wire.sources.files(...)``; anything else is a ``ConfigError`` here.
        event_time:
            The column holding each event's event time: int64 milliseconds since the
            Unix epoch (UTC), a timestamp, or an ISO-8601 string.
        key:
            The key column (routing and state scope); ``None``: one key for all events.
        watermark:
            The source's watermark policy; default ``BoundedOutOfOrderness(0)``.
        max_events_per_epoch:
            Admission control: at most this many records enter one epoch (SPEC §5).
        target_epoch_duration:
            Epoch sizing (SPEC §5): while a backlog lasts, size each epoch so that it
            takes about this long (``"2s"``, ms as int, a ``timedelta``), between 1,000
            events (or ``max_events_per_epoch`` if smaller) and ``max_events_per_epoch``,
            starting from ``max_events_per_epoch``; the size changes by at most x0.25 /
            x2 per epoch (:mod:`wire.sources.epoch_sizing`). ``None`` (default): every
            epoch may admit ``max_events_per_epoch``. Off by default because the epoch
            split then depends on the machine's speed, and with it which events are late;
            without it a run's epochs depend only on its input. Replays are exact either
            way (each epoch's admitted range is in its offset).
        name:
            The step id (default ``source_<n>``).

        Returns
        -------
        Stream
            The source's events: payload columns of the connector's schema. Malformed
            records go to the ``dead_letter`` port (see :meth:`Flow.dead_letters`).

        Raises
        ------
        ConfigError
            On an invalid parameter.
        """
        if not all(callable(getattr(connector, m, None)) for m in ("read_stream", "resolve_schema")):
            raise ConfigError("connector", connector,
                              "a Wire source connector (wire.sources.Source), e.g. wire.sources.files(...)")
        if not isinstance(event_time, str) or not event_time:
            raise ConfigError("event_time", event_time, "a column name (non-empty string)")
        if key is not None and (not isinstance(key, str) or not key):
            raise ConfigError("key", key, "a column name (non-empty string) or None")
        if watermark is None:
            watermark = BoundedOutOfOrderness(0)
        if not isinstance(watermark, BoundedOutOfOrderness):
            raise ConfigError("watermark", watermark, "wire.BoundedOutOfOrderness(max_delay)")
        if (
            isinstance(max_events_per_epoch, bool)
            or not isinstance(max_events_per_epoch, int)
            or max_events_per_epoch <= 0
        ):
            raise ConfigError("max_events_per_epoch", max_events_per_epoch, "a positive int")
        target_ms = None
        if target_epoch_duration is not None:
            target_ms = to_millis(target_epoch_duration, parameter="target_epoch_duration",
                                  allow_zero=False)
        step = self._step_id(name, "source")
        self._add(SourceNode(step, connector, event_time, key, watermark, max_events_per_epoch,
                             target_ms))
        return Stream(self, PortRef(step, OUT))

    def dead_letters(self) -> Stream:
        """The flow's dead-letter output: every malformed record of every step.

        Columns: ``step`` (string), ``location`` (string, e.g. ``"f.csv:17"``),
        ``reason`` (string), ``record`` (string, the raw record), plus ``epoch``
        (int64) when written to a sink.

        A source whose dead letters no sink reads keeps them under
        ``<checkpoint>/kept/<step>.dead_letter/`` (SPEC §3);
        ``flow.dead_letters().drop()`` discards them on purpose.
        """
        return Stream(self, PortRef(ALL_STEPS, DEAD_LETTER))

    def plan(self) -> Plan:
        """The immutable plan recorded so far."""
        return Plan(self.flow_id, tuple(self._nodes))

    def run(
        self,
        checkpoint: str,
        *,
        master: str = "local[*]",
        spark_conf: Mapping[str, str] | None = None,
        spark: SparkSession | None = None,
        key_groups: int | None = None,
        max_epochs: int | None = None,
        progress: bool | str | Console = "auto",
        max_restarts: int = 0,
        restart_backoff_s: float = 1.0,
        dashboard: bool = False,
    ) -> RunSummary:
        """Compile the flow to one Spark streaming query and run it.

        Bounded sources run until their input ends (their final watermark closes every
        window); unbounded ones run until interrupted.

        Parameters
        ----------
        checkpoint:
            The flow's checkpoint directory (Spark offsets, commits and state, plus
            Wire's ``wire.json``). Running again with it resumes after the last
            completed epoch (SPEC §6).
        master, spark_conf:
            Spark master URL and extra Spark settings, used when Wire creates the session.
            A session Wire creates writes Spark's log and its Python workers' output to
            ``<checkpoint>/spark.log`` (``RunSummary.spark_log``), not to the terminal.
        spark:
            An existing SparkSession to use instead (its output goes where its JVM writes;
            ``wire.spark(log_file=...)`` sends it to a file).
        key_groups:
            Keyed state is partitioned into this many key groups (hash of key mod
            ``key_groups``); another number on an existing checkpoint rescales its state
            (:mod:`wire.runtime.rescale`). ``None``: the
            checkpoint's recorded value, or for a new checkpoint
            ``max(8, 2 * spark.sparkContext.defaultParallelism)``
            (:func:`wire.runtime.checkpoint.default_key_groups`).
        max_epochs:
            Stop after this many epochs have completed in this run (the next epoch,
            already planned, is replayed on restart). For tests and demos.
        progress:
            The console's progress of the run (:mod:`wire.runtime.progress`). ``"auto"``
            (default): when stdout is a terminal, a progress bar with the records admitted
            by the sources of their total (when every source knows it: Parquet files, the
            Nexmark generator, ``wire.testing`` streams; otherwise the count alone), the
            epochs, the sources' watermark (ISO time, UTC) and the ETA; nothing otherwise.
            ``True``: the bar on a terminal, else one line per epoch (``epoch <E>: <n>
            results, <m> late records``). ``False``: nothing. A ``rich.console.Console``:
            the bar, drawn on that console (e.g. ``Console(file=f, force_terminal=True)``).
            Resuming a checkpoint that has completed epochs, the bar shows no total.
        max_restarts, restart_backoff_s:
            Supervision (SPEC §6): when the query fails, run it again from the last
            completed epoch after ``restart_backoff_s``, doubling up to 60 s, at most
            ``max_restarts`` times; the failed epoch is replayed, never skipped.
        dashboard:
            Serve the web dashboard and the REST control plane (:class:`wire.control.ControlPlane`)
            on ``127.0.0.1`` (a free port) while the run lasts, and print its URL and the
            token that pause / resume need. For a fixed port or another interface, use
            :meth:`start` and a ``ControlPlane`` of your own. Needs the ``control`` extra
            (``MissingExtraError`` without it).

        Returns
        -------
        RunSummary
            Counts and timings of this run.

        Raises
        ------
        PlanError, ConfigError, CheckpointError, FlowFailed
            ``ConfigError`` (parameter ``progress``) before anything starts, for a
            ``progress`` that is none of the values above.
        """
        from wire.runtime.progress import has_completed_epochs, resolve_progress
        from wire.runtime.supervisor import RestartPolicy, supervise

        reporter = resolve_progress(progress, self.plan(), resumed=has_completed_epochs(checkpoint))
        plane = None
        if dashboard:
            from wire.control import ControlPlane

            plane = ControlPlane()
            plane.start()  # prints the dashboard's URL and the token

        attempts = 0

        def attempt() -> RunSummary:
            nonlocal attempts
            if attempts and reporter is not None:
                reporter.new_attempt()
            attempts += 1
            running = self._start(
                checkpoint,
                master=master,
                spark_conf=spark_conf,
                spark=spark,
                key_groups=key_groups,
                max_epochs=max_epochs,
                progress=reporter,
                own_progress=False,
            )
            if plane is not None:  # a restart replaces the failed run, its history stays
                plane.add(running, flow_id=self.flow_id, replace=True)
            return running.await_termination()

        policy = RestartPolicy(max_restarts=max_restarts, initial_backoff_s=restart_backoff_s)
        if reporter is not None:
            reporter.start()
        try:
            return supervise(attempt, policy, flow_id=self.flow_id)
        finally:
            if reporter is not None:
                reporter.stop()
            if plane is not None:
                plane.stop()

    def start(
        self,
        checkpoint: str,
        *,
        master: str = "local[*]",
        spark_conf: Mapping[str, str] | None = None,
        spark: SparkSession | None = None,
        key_groups: int | None = None,
        max_epochs: int | None = None,
        progress: bool | str | Console = False,
    ) -> RunningFlow:
        """Like :meth:`run`, but return at once with a handle on the running flow.

        The handle's ``watermarks()`` shows every step's latest watermarks,
        ``summary`` the counts so far, ``stop()`` stops it and
        ``await_termination()`` waits for the end.

        ``progress`` takes the values of :meth:`run` (default ``False`` here: nothing is
        drawn while the caller's code runs); a bar stops when the run ends.

        Raises
        ------
        ConfigError
            (parameter ``progress``) before anything starts, for an invalid ``progress``.
        """
        from wire.runtime.progress import has_completed_epochs, resolve_progress

        reporter = resolve_progress(progress, self.plan(), resumed=has_completed_epochs(checkpoint))
        return self._start(checkpoint, master=master, spark_conf=spark_conf, spark=spark,
                           key_groups=key_groups, max_epochs=max_epochs, progress=reporter,
                           own_progress=True)

    def _start(
        self,
        checkpoint: str,
        *,
        master: str,
        spark_conf: Mapping[str, str] | None,
        spark: SparkSession | None,
        key_groups: int | None,
        max_epochs: int | None,
        progress: ProgressReporter | None,
        own_progress: bool,
    ) -> RunningFlow:
        from wire.runtime.runner import start_plan

        return start_plan(
            self.plan(),
            checkpoint=checkpoint,
            master=master,
            spark_conf=dict(spark_conf or {}),
            spark=spark,
            key_groups=key_groups,
            max_epochs=max_epochs,
            progress=progress,
            own_progress=own_progress,
        )


@dataclass(frozen=True)
class Stream:
    """A handle on one port of one step; operators return new streams.

    Expressions (``Expr``) are Spark ``Column`` objects (which need an active
    SparkSession, e.g. ``wire.spark()``) or Spark SQL strings.
    """

    flow: Flow
    ref: PortRef

    def _require_out(self, op: str) -> None:
        if self.ref.step == ALL_STEPS:
            raise PlanError(f"{op}: the flow's dead-letter output can only be sunk")

    def filter(self, predicate: Expr, *, name: str | None = None) -> Stream:
        """Keep events for which ``predicate`` is true; null counts as false.

        Columns are unchanged; stateless (no state, emits per epoch).
        """
        self._require_out("filter")
        step = self.flow._step_id(name, "filter")
        self.flow._add(FilterNode(step, self.ref.step, predicate))
        return Stream(self.flow, PortRef(step))

    def map(self, *, name: str | None = None, **columns: Expr) -> Stream:
        """Add or replace columns, ``name=expression`` each; other columns pass through."""
        self._require_out("map")
        if not columns:
            raise ConfigError("columns", columns, "at least one name=expression")
        step = self.flow._step_id(name, "map")
        self.flow._add(MapNode(step, self.ref.step, tuple(columns.items())))
        return Stream(self.flow, PortRef(step))

    def select(self, *columns: Expr, name: str | None = None) -> Stream:
        """Keep exactly ``columns`` (names or expressions, aliased with ``.alias``)."""
        self._require_out("select")
        if not columns:
            raise ConfigError("columns", columns, "at least one column name or expression")
        step = self.flow._step_id(name, "select")
        self.flow._add(SelectNode(step, self.ref.step, tuple(columns)))
        return Stream(self.flow, PortRef(step))

    def explode(self, column: str, *, name: str | None = None) -> Stream:
        """One event per element of the list column ``column``; the element replaces the list.

        The other columns, the key and the event time are copied to every element's
        event; an event whose list is empty or null gives none. A list of structs (e.g.
        ``wire.top_k``'s result) becomes a struct column: pick its fields with
        ``select`` (``"column.field"``).

        Raises
        ------
        ConfigError
            If ``column`` is not a str; when the flow is compiled, if it is not a list
            column of the stream.
        """
        self._require_out("explode")
        if not isinstance(column, str) or not column:
            raise ConfigError("column", column, "a list column's name (non-empty string)")
        step = self.flow._step_id(name, "explode")
        self.flow._add(ExplodeNode(step, self.ref.step, column))
        return Stream(self.flow, PortRef(step))

    def throttle(
        self, max_events_per_epoch: int, *, mode: str = "pause", name: str | None = None
    ) -> Stream:
        """Flow control (SPEC §5): let at most ``max_events_per_epoch`` events pass per epoch.

        ``mode="pause"`` (default) holds the excess input: the admission per epoch of
        every source feeding this stream is lowered to the limit, so the excess waits
        in the external system and nothing is dropped. ``mode="overflow"`` lets the
        first events of each epoch task pass (per Spark partition of the epoch; one
        partition for a single-partition source) and diverts the rest to
        ``.overflow()``, with their columns unchanged. Columns pass through unchanged.

        Raises
        ------
        ConfigError
            If the limit is not a positive int or the mode is unknown.
        """
        self._require_out("throttle")
        if isinstance(max_events_per_epoch, bool) or not isinstance(max_events_per_epoch, int) or (
            max_events_per_epoch <= 0
        ):
            raise ConfigError("max_events_per_epoch", max_events_per_epoch, "a positive int")
        if mode not in ("pause", "overflow"):
            raise ConfigError("mode", mode, "'pause' or 'overflow'")
        step = self.flow._step_id(name, "throttle")
        self.flow._add(ThrottleNode(step, self.ref.step, max_events_per_epoch, mode))
        return Stream(self.flow, PortRef(step))

    def overflow(self) -> Stream:
        """The overflow port of a ``throttle(..., mode="overflow")`` step."""
        node = self.flow.plan().node(self.ref.step)
        if not isinstance(node, ThrottleNode) or node.mode != "overflow":
            raise PlanError(f"overflow(): step {self.ref.step!r} is not a throttle in overflow mode")
        return Stream(self.flow, PortRef(self.ref.step, OVERFLOW))

    def key_by(self, key: str, *, name: str | None = None) -> Stream:
        """Re-key the stream by column ``key`` (it scopes the state of later windows)."""
        self._require_out("key_by")
        if not isinstance(key, str) or not key:
            raise ConfigError("key", key, "a column name (non-empty string)")
        step = self.flow._step_id(name, "key_by")
        self.flow._add(KeyByNode(step, self.ref.step, key))
        return Stream(self.flow, PortRef(step))

    def window(
        self,
        window: Window,
        *,
        allowed_lateness: Duration = 0,
        emit: Emit = "final",
        before_update: Callback | None = None,
        after_update: Callback | None = None,
    ) -> WindowedStream:
        """Assign events to event-time windows; call ``.aggregate(...)`` next.

        Parameters
        ----------
        window:
            ``wire.Tumbling(size)``, ``wire.Sliding(size, slide)`` or ``wire.Session(gap)``.
        allowed_lateness:
            How long after a window's end (in event time, measured by the watermark)
            late events still update it (SPEC §3). 0 by default.
        emit:
            ``"final"`` (default): a window is emitted once when the watermark passes
            its end (``emit="final"``), then again on every late change
            (``emit="update"``). ``"update"``: additionally every change while the
            window is open is emitted (``emit="early"``, at most once per window per
            epoch).
        before_update, after_update:
            Vectorized callbacks ``f(aggregate: pa.Table, event: pa.Table) -> bool
            array``, called at most once per key group per epoch: row ``i`` of
            ``aggregate`` is the window's result just before (``before_update``) or
            just after (``after_update``) event ``i`` (row ``i`` of ``event``) is
            added. ``True`` emits that result early (``emit="early"``); the window
            stays open. With callbacks, events are not pre-aggregated.

        Raises
        ------
        ConfigError
            On an unknown window type, emission mode or non-callable callback.
        """
        self._require_out("window")
        if not isinstance(window, Tumbling | Sliding | Session):
            raise ConfigError(
                "window", window, "wire.Tumbling(size), wire.Sliding(size, slide) or wire.Session(gap)"
            )
        if emit not in ("final", "update"):
            raise ConfigError("emit", emit, "'final' or 'update'")
        for name, fn in (("before_update", before_update), ("after_update", after_update)):
            if fn is not None and not callable(fn):
                raise ConfigError(name, fn, "None or a callable (aggregate, event) -> bool array")
        lateness = to_millis(allowed_lateness, parameter="allowed_lateness")
        return WindowedStream(self, window, lateness, emit, before_update, after_update)

    def process(
        self,
        on_events: OnEvents,
        *,
        schema: pa.Schema,
        on_timer: OnTimer | None = None,
        state: Mapping[str, StateSpec] | None = None,
        name: str | None = None,
    ) -> Stream:
        """Custom stateful logic per key: per-key state and timers, vectorized per key group.

        Like Flink's ``KeyedProcessFunction`` or Beam's stateful ``DoFn`` with timers, but
        called once per key group per epoch with all its keys' rows as Arrow, never once
        per event. The stream must be keyed (the source's ``key=`` or ``key_by``).

        ``on_events(ctx, events) -> pa.Table | None``
            Called once per key group per epoch that brings on-time events, with all of
            them: the stream's columns plus ``event_time`` (int64 ms; it replaces a
            column of that name), sorted by (key, event time, arrival) (SPEC §1).
        ``on_timer(ctx, fired) -> pa.Table | None``
            Called with due timers: the key column, ``domain`` (``"event_time"`` |
            ``"processing_time"``), ``tag``, ``time`` and ``output_time`` (int64 ms),
            sorted by (time, key, tag); each call holds, per key, that key's timers at
            its earliest due time, and calls repeat until none is due, so every key sees
            its timers in time order (also those ``on_timer`` sets).
        ``ctx`` (:class:`wire.state.process.ProcessContext`)
            ``ctx.value_state(name)`` / ``list_state`` / ``map_state``: the declared
            states, each operation vectorized over an array of keys (``get(keys)``,
            ``update(keys, values)``, ``append``, ``put(keys, map_keys, values)``,
            ``entries``, ``clear(keys)``; :mod:`wire.state.keyed_state`).
            ``ctx.timers.set_event_time(keys, times, tag=..., output_times=None)``,
            ``set_processing_time(...)``, ``delete(keys, tag=..., domain=...)``: a timer
            is identified by (key, domain, tag); setting it again moves it.
            ``ctx.key`` (the key column), ``ctx.input_watermark``,
            ``ctx.output_watermark``, ``ctx.processing_time`` (ms).

        Output: every returned row has the columns of ``schema`` (cast to it), which must
        contain an int64 ``event_time``: the row's event time (ms). Rows, and every
        timer's ``output_time``, must not be below ``ctx.output_watermark`` (an on-time
        event's own ``event_time`` never is; a violation fails the epoch with
        ``ProcessFunctionError`` naming the step and function).

        Emission, per epoch and key group: (1) events with ``event_time <`` the input
        watermark in force when they arrived go to ``.late()`` (their columns,
        ``event_time``, ``watermark``, ``reason``); the others to one ``on_events``
        call; (2) the input watermark advances, and event-time timers with ``time <=``
        it fire; (3) processing-time timers with ``time <=`` the wall clock fire (in the
        first epoch that runs after it; a replay may differ, SPEC §1). At the end of
        input every pending timer fires.

        Watermarks (Beam watermark-hold rule, SPEC §2): the step's output watermark is
        ``max(out, min(input watermark, earliest output_time of a pending timer))``: a
        pending timer holds it at its ``output_time`` (default: the timer's time for
        event-time timers, the output watermark when set for processing-time timers),
        so what timers emit is never late downstream.

        State: each declared state and the timers are one Arrow table per key group in
        the checkpoint's chunk store, read only when the epoch's calls use it and
        rewritten only when they change it (the timers are read every epoch); purge
        state with timers (``clear`` in ``on_timer``).

        Example (deduplication within 10 s of event time; :mod:`wire.examples.process_examples`
        has it and an alert on three events of a key within a minute, both run by the
        test suite)::

            from wire.examples.process_examples import Dedupe
            fn = Dedupe(within_ms=10_000)   # state {"last_seen": wire.value_state(pa.int64())}
            unique = events.process(fn.on_events, on_timer=fn.on_timer, state=fn.state,
                                    schema=fn.schema(input_schema), name="dedupe")

            # inside Dedupe.on_events(ctx, events):
            #   last = ctx.value_state("last_seen").get(events.column(ctx.key))  # one call
            #   ... keep rows with event_time - last >= within_ms (numpy) ...
            #   ctx.value_state("last_seen").update(keys, newest)
            #   ctx.timers.set_event_time(keys, pc.add(newest, within_ms), tag="expire")
            # and Dedupe.on_timer(ctx, fired) clears the fired keys' last_seen.

        Parameters
        ----------
        on_events, on_timer:
            The functions above (``on_timer`` is needed to set timers).
        schema:
            The output columns: a ``pyarrow.Schema`` with an int64 ``event_time``.
        state:
            Declared states by name: ``wire.value_state(type)``, ``wire.list_state(type)``,
            ``wire.map_state(key_type, value_type)``.
        name:
            The step id (default ``process_<n>``); it names the state in the checkpoint.

        Raises
        ------
        ConfigError
            When the flow is built: ``on_events`` / ``on_timer`` not callable, ``schema``
            not a schema with an int64 ``event_time``, ``state`` not a mapping of names
            to state specs, or the stream not keyed (parameter ``key``).
        """
        self._require_out("process")
        if not callable(on_events):
            raise ConfigError("on_events", on_events, "a callable (ctx, events: pa.Table) -> pa.Table | None")
        if on_timer is not None and not callable(on_timer):
            raise ConfigError("on_timer", on_timer,
                              "None or a callable (ctx, fired: pa.Table) -> pa.Table | None")
        if not isinstance(schema, pa.Schema) or schema.get_field_index("event_time") < 0 or (
                schema.field("event_time").type != pa.int64()):
            raise ConfigError("schema", schema, "a pyarrow.Schema of the output with an int64 'event_time' "
                              "column (each output row's event time, ms)")
        states = dict(state or {})
        for state_name, spec in states.items():
            if not isinstance(state_name, str) or not state_name or not isinstance(spec, StateSpec):
                raise ConfigError("state", state, "a mapping of names to wire.value_state(type), "
                                  "wire.list_state(type) or wire.map_state(key_type, value_type)")
        if key_of(self.flow.plan(), self.ref.step) is None:
            raise ConfigError("key", None, "a keyed stream: the source's key= or key_by(column) before "
                              "process()")
        step = self.flow._step_id(name, "process")
        self.flow._add(ProcessNode(step, self.ref.step, on_events, on_timer, schema,
                                   declared_states(states)))
        return Stream(self.flow, PortRef(step))

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """Merge this stream with ``others`` (same columns, same key).

        The union's watermark is the minimum of its inputs' watermarks (SPEC §2); a
        keyed operator after it classifies lateness against that minimum.

        Raises
        ------
        ConfigError
            If ``others`` is empty or contains something other than streams of this flow.
        """
        self._require_out("union")
        if not others or any(not isinstance(o, Stream) or o.flow is not self.flow for o in others):
            raise ConfigError("others", others, "one or more streams of the same flow")
        for o in others:
            o._require_out("union")
        step = self.flow._step_id(name, "union")
        ups = (self.ref.step, *(o.ref.step for o in others))
        self.flow._add(UnionNode(step, ups))
        return Stream(self.flow, PortRef(step))

    def interval_join(
        self,
        other: Stream,
        *,
        lower: Duration | int,
        upper: Duration | int,
        allowed_lateness: Duration = 0,
        right_prefix: str = "right_",
        name: str | None = None,
    ) -> Stream:
        """Join with ``other`` on the key: pairs with ``t + lower <= other.t <= t + upper``.

        Both streams must be keyed by a column of the same name. Output columns: the
        key, this stream's columns, ``other``'s columns prefixed with ``right_prefix``,
        ``left_event_time``, ``right_event_time`` and ``event_time`` (int64 ms, the
        later of the two; the output row's event time). Each matching pair is emitted
        once, in the epoch in which its second event arrives.

        State: both sides' events, per key group, until the watermark makes them
        useless (left: ``t + upper + allowed_lateness < watermark``; right:
        ``t - lower + allowed_lateness < watermark``). Events with
        ``t + allowed_lateness < watermark`` are late: they go to ``.late()`` with
        ``side``, ``event_time``, ``watermark`` and ``reason`` (SPEC §3).
        The join's input watermark is the minimum of both inputs' (SPEC §2).

        Parameters
        ----------
        other:
            The right-hand stream (same flow, keyed by a column of the same name).
        lower, upper:
            Bounds of the interval, ms or durations; ``lower <= upper``; negative
            values as int ms.
        allowed_lateness:
            How far behind the watermark an event may be and still join.
        right_prefix:
            Prefix of ``other``'s payload columns in the output.
        name:
            The step id (default ``join_<n>``).

        Raises
        ------
        ConfigError
            On invalid bounds or a stream of another flow.
        """
        self._require_out("interval_join")
        if not isinstance(other, Stream) or other.flow is not self.flow:
            raise ConfigError("other", other, "a stream of the same flow")
        lo = lower if isinstance(lower, int) and not isinstance(lower, bool) else to_millis(
            lower, parameter="lower")
        hi = upper if isinstance(upper, int) and not isinstance(upper, bool) else to_millis(
            upper, parameter="upper")
        if lo > hi:
            raise ConfigError("lower", lower, f"a bound <= upper ({hi} ms)")
        lateness = to_millis(allowed_lateness, parameter="allowed_lateness")
        step = self.flow._step_id(name, "join")
        self.flow._add(
            IntervalJoinNode(step, self.ref.step, other.ref.step, lo, hi, lateness, right_prefix)
        )
        return Stream(self.flow, PortRef(step))

    def join(
        self,
        other: Stream,
        *,
        within: Duration | None = None,
        allowed_lateness: Duration = 0,
        right_prefix: str = "right_",
        name: str | None = None,
    ) -> Stream:
        """Equi-join with ``other`` on the key; ``within`` optionally bounds ``|other.t - t|``.

        ``within=None`` is a regular (unbounded) stream-stream inner join, as a SQL
        ``JOIN ... ON left.key = right.key`` over both streams: every accepted event of
        one side joins every accepted event of the other side with an equal key,
        whenever it arrives. ``within=d`` keeps the pairs whose event times are at most
        ``d`` apart (an interval join with ``lower = -d``, ``upper = d``; see
        :meth:`interval_join`, which this method uses with those bounds).

        Output columns and emission are those of :meth:`interval_join`: the key, this
        stream's columns, ``other``'s prefixed with ``right_prefix``, int64 ms
        ``left_event_time``, ``right_event_time`` and ``event_time`` (the later of the
        two, the row's event time); each pair once, in the epoch in which its second
        event arrives. Because an accepted event has ``t + allowed_lateness >=`` the
        input watermark, a joined row is never behind the join's output watermark
        (``input watermark - allowed_lateness``), so windows may follow the join.

        State: with ``within=None`` both sides' accepted events are buffered until the
        end of the stream (state grows with the input: filter and project both sides
        first). With ``within=d`` an event leaves the buffer once the watermark passes
        ``t + d + allowed_lateness``. Events with ``t + allowed_lateness <`` the
        watermark are late and go to ``.late()`` with their ``side`` and ``reason``
        (SPEC §3); they are never dropped silently. The input watermark is the minimum
        of both inputs' (SPEC §2).

        Raises
        ------
        ConfigError
            If ``within`` is negative or not a duration, or ``other`` belongs to
            another flow; at compile time, if the streams are not keyed by columns of
            the same name and type.
        """
        if within is None:
            lower, upper = INT64_MIN, INT64_MAX
        else:
            bound = to_millis(within, parameter="within")
            lower, upper = -bound, bound
        step = self.flow._step_id(name, "join")
        return self.interval_join(other, lower=lower, upper=upper, allowed_lateness=allowed_lateness,
                                  right_prefix=right_prefix, name=step)

    def late(self) -> Stream:
        """The late port of a window aggregation, join or process step: late events.

        Columns: the event's columns, ``event_time`` (int64 ms), ``watermark`` (int64 ms,
        the watermark when the event arrived), ``reason`` (string). An event column named
        ``event_time``, ``watermark`` or ``reason`` (e.g. a join's ``event_time``, when
        a window follows a join) is renamed ``input_<name>``.

        Not sunk, the port is kept under ``<checkpoint>/kept/<step>.late/`` (SPEC §3);
        ``.late().drop()`` discards it on purpose.
        """
        node = self.flow.plan().node(self.ref.step)
        if not isinstance(node, WindowAggregateNode | IntervalJoinNode | ProcessNode):
            raise PlanError(f"late(): step {self.ref.step!r} is not a window aggregation, join or process")
        return Stream(self.flow, PortRef(self.ref.step, LATE))

    def dead_letters(self) -> Stream:
        """The dead-letter port of this step (malformed records it rejected)."""
        return Stream(self.flow, PortRef(self.ref.step, DEAD_LETTER))

    def sink(self, sink: Sink, *, name: str | None = None) -> None:
        """Write this stream to ``sink`` (e.g. ``wire.sinks.parquet(path)``).

        Each epoch's rows of this port are written once per epoch, with an extra
        ``epoch`` column (int64, the Spark batch id), in the sink's declared guarantee.
        """
        if not isinstance(sink, Sink):
            raise ConfigError("sink", sink, "a Wire sink, e.g. wire.sinks.parquet(path)")
        step = self.flow._step_id(name, "sink")
        self.flow._add(SinkNode(step, self.ref, sink))

    def drop(self, *, name: str | None = None) -> None:
        """Discard this side port's records on purpose: ``hourly.late().drop()``.

        A late, dead-letter or overflow port that no sink reads is otherwise *kept*:
        the runner writes it as Parquet under ``<checkpoint>/kept/<step>.<port>/`` and
        the run summary says where (:mod:`wire.runtime.kept_ports`), so that no record
        is lost without a word. ``drop()`` says the loss is intended; the port's
        records are still counted in the metrics (``late``, ``malformed``).

        Raises
        ------
        PlanError
            On a data stream (an ``out`` port): a data stream ends in a sink.
        """
        if self.ref.port == OUT:
            raise PlanError(
                f"drop(): {self.ref.step!r} is a data stream; only side ports "
                "(.late(), .dead_letters(), .overflow()) can be dropped"
            )
        step = self.flow._step_id(name, "drop")
        self.flow._add(DropNode(step, self.ref))


@dataclass(frozen=True)
class WindowedStream:
    """A stream with a window assignment, waiting for its aggregations."""

    stream: Stream
    window: Window
    allowed_lateness_ms: int
    emit: Emit = "final"
    before_update: Callback | None = None
    after_update: Callback | None = None

    def aggregate(self, *, name: str | None = None, **aggregations: Aggregator) -> Stream:
        """Aggregate each (key, window) and emit results by the watermark.

        Output columns: the key column, ``window_start`` and ``window_end`` (UTC
        timestamps), one column per aggregation, ``emit`` (``"early"`` | ``"final"`` |
        ``"update"``). Each result row's event time is its ``window_start``.

        Emission (SPEC §3, §4): each (key, window) is emitted once as ``final`` in the
        epoch in which the watermark passes its end (for every key, also keys without
        new events); a late event within ``allowed_lateness`` updates the window and the
        new result is emitted as ``update`` (for sessions, also when it merges
        sessions). ``early`` rows come from ``emit="update"`` or the callbacks. State
        is purged once ``watermark >= window_end + allowed_lateness``; later events go
        to ``.late()``.

        Watermarks: the operator's output watermark is held at the start of its
        earliest window not yet emitted ``final`` (Beam's watermark hold, SPEC §2), so
        a second window operator downstream (a window of windows) is correct.

        State: per key group, the open windows' partial aggregates (one Arrow table).
        """
        if not aggregations:
            raise ConfigError("aggregations", aggregations, "at least one name=wire.count()/...")
        for out, agg in aggregations.items():
            if not isinstance(agg, Aggregator):
                raise ConfigError(
                    out, agg, "an aggregator: wire.count/sum/min/max/mean/first/last/collect/max_by/min_by/"
                    "top_k/aggregate(...)"
                )
        flow = self.stream.flow
        step = flow._step_id(name, "window")
        flow._add(
            WindowAggregateNode(
                step,
                self.stream.ref.step,
                self.window,
                self.allowed_lateness_ms,
                tuple(aggregations.items()),
                self.emit,
                self.before_update,
                self.after_update,
            )
        )
        return Stream(flow, PortRef(step))
