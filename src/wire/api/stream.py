"""Streams: ``Stream`` is a handle on one port of a flow; ``WindowedStream`` a windowed one.

Every method records one immutable node in its :class:`~wire.api.flow.Flow`'s plan
(:mod:`wire.plan.nodes`) and returns a handle on the new step's port; nothing runs until
the flow runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from wire.core.time import INT64_MAX, INT64_MIN, Duration, to_millis
from wire.core.windowing import Window
from wire.delivery.sink import Sink
from wire.errors import ConfigError, PlanError
from wire.plan.graph import key_of
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
    PortRef,
    ProcessNode,
    SelectNode,
    SinkNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
)
from wire.state.aggregations import Aggregator
from wire.state.keyed_state import StateSpec
from wire.state.process import OnEvents, OnTimer, declared_states
from wire.state.spec import Callback, Emit

if TYPE_CHECKING:
    from wire.api.flow import Flow


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

    def select(self, *columns: Expr | tuple[str, Expr], name: str | None = None) -> Stream:
        """Keep exactly ``columns``: names, expressions (with ``.alias``) or ``(name, expression)``."""
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
        if OVERFLOW not in node.side_ports():
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
        if not isinstance(window, Window):
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
        if LATE not in node.side_ports():
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
