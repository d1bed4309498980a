"""The stateful steps of a :class:`~wire.api.stream.Stream` on one keyed stream: windows, process functions.

:class:`Stateful` is mixed into ``Stream`` (its methods are ``Stream``'s, documented here):

- ``window(...)`` assigns events to event-time windows and returns a :class:`WindowedStream`,
  whose ``aggregate(...)`` adds the window step (SPEC §4);
- ``process(...)``: a keyed process function with state and event-time timers.

Joins of two streams and enrichment from tables are in :mod:`wire.api.joins`. The examples
are doctests that ``tests/unit/api/test_stream_docs.py`` runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from wire.core.time import Duration, to_millis
from wire.core.windowing import Window
from wire.errors import ConfigError
from wire.plan.graph import key_of
from wire.plan.nodes import PortRef, ProcessNode, WindowAggregateNode
from wire.state.aggregations import Aggregator
from wire.state.keyed_state import StateSpec
from wire.state.process import OnEvents, OnTimer, declared_states
from wire.state.spec import Callback, Emit

if TYPE_CHECKING:
    from wire.api.flow import Flow
    from wire.api.stream import Stream


class Stateful:
    """``Stream``'s windows and process functions (mixed into :class:`~wire.api.stream.Stream`)."""

    if TYPE_CHECKING:
        flow: Flow
        ref: PortRef

        def _require_out(self, op: str) -> None: ...

        def _at(self, step: str) -> Stream: ...

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

        Records nothing by itself: :meth:`WindowedStream.aggregate` adds the step, and
        its docstring gives the output columns, the emission and the state. The stream
        should be keyed (the source's ``key=`` or :meth:`key_by`); unkeyed, every event
        shares one key (one key group holds all the state).

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
            On an unknown window type, emission mode, non-callable callback or invalid
            ``allowed_lateness`` (parameter named in the message).
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        10 ms tumbling windows with 5 ms of allowed lateness (``window_start`` is a UTC
        timestamp; shown here as ms):

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("user", pa.string())],
        ...                              event_time="t", key="user")
        >>> ts = (ts.add_events([{"t": 1, "user": "a"}, {"t": 12, "user": "a"}])  # epoch 0
        ...         .advance_watermark(10)              # epoch 1: the watermark passes [0, 10)'s end
        ...         .add_events([{"t": 5, "user": "a"}])  # epoch 2: behind the watermark, within lateness
        ...         .advance_watermark_to_infinity())   # epoch 3: the end of the input
        >>> out = ts.run(lambda events: events.window(wire.Tumbling(10), allowed_lateness=5)
        ...                                   .aggregate(n=wire.count()))
        >>> [(int(row["window_start"].timestamp() * 1000), row["n"], row["emit"], row["epoch"])
        ...  for row in out["main"]]
        [(0, 1, 'final', 1), (0, 2, 'update', 2), (10, 1, 'final', 3)]
        >>> ts.run(lambda events: events.window(wire.Tumbling(10), emit="always"))
        Traceback (most recent call last):
            ...
        wire.errors.ConfigError: invalid emit='always'; accepted: 'final' or 'update'
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
        return WindowedStream(cast("Stream", self), window, lateness, emit, before_update, after_update)

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

        Example: deduplication within 10 ms of event time, with
        :class:`wire.examples.process_examples.Dedupe` (that module also has an alert on
        three events of a key within a minute). Its ``on_events`` reads
        ``ctx.value_state("last_seen").get(keys)`` once for the epoch, keeps the rows with
        ``event_time - last_seen >= within_ms`` (numpy), writes each key's newest time
        back and moves the key's timer (``ctx.timers.set_event_time(keys, newest +
        within_ms, tag="expire")``); its ``on_timer`` clears the fired keys' state.

        >>> import pyarrow as pa, wire
        >>> from wire.examples.process_examples import Dedupe
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("user", pa.string())],
        ...                              event_time="t", key="user")
        >>> ts = ts.add_events([{"t": 1, "user": "a"}, {"t": 5, "user": "a"}, {"t": 30, "user": "a"},
        ...                     {"t": 2, "user": "b"}])
        >>> fn = Dedupe(within_ms=10)  # state: {"last_seen": wire.value_state(pa.int64())}
        >>> out = ts.run(lambda events: events.process(
        ...     fn.on_events, on_timer=fn.on_timer, state=fn.state, schema=fn.schema(ts.schema),
        ...     name="dedupe"))
        >>> sorted((row["user"], row["t"], row["event_time"]) for row in out["main"])
        [('a', 1, 1), ('a', 30, 30), ('b', 2, 2)]

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
        PlanError
            On the flow's dead-letter output.
        wire.errors.ProcessFunctionError
            While the flow runs, when a function breaks the contract above (the epoch
            fails; the message names the step and the function).
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
        return self._at(step)


@dataclass(frozen=True)
class WindowedStream:
    """A stream with a window assignment, waiting for its aggregations (``Stream.window``)."""

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

        State: per key group, the open windows' partial aggregates (tumbling and
        sliding windows: bucketed by window end; sessions: one Arrow table).

        Parameters
        ----------
        name:
            The step id (default ``window_<n>``); it names the state in the checkpoint.
        **aggregations:
            ``output_column=aggregator``: ``wire.count()``, ``sum``, ``min``, ``max``,
            ``mean``, ``first``, ``last``, ``collect``, ``max_by``, ``min_by``,
            ``top_k`` or ``wire.aggregate(create, add, merge, result)``.

        Raises
        ------
        ConfigError
            If no aggregation is given or one is not an aggregator; when the flow runs
            (compiles), if an aggregation's column is missing or of a type it does not
            take, or an output name collides with the key or another output.

        Examples
        --------
        Per user and 10 ms window (``window_start`` is a UTC timestamp; shown as ms):

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(
        ...     schema=[("t", pa.int64()), ("user", pa.string()), ("ms", pa.int64())],
        ...     event_time="t", key="user")
        >>> ts = ts.add_events([{"t": 1, "user": "a", "ms": 100}, {"t": 4, "user": "a", "ms": 300},
        ...                     {"t": 15, "user": "a", "ms": 50}]).advance_watermark_to_infinity()
        >>> out = ts.run(lambda events: events.window(wire.Tumbling(10)).aggregate(
        ...     n=wire.count(), total=wire.sum("ms"), slowest=wire.max("ms")))
        >>> list(out["main"][0])
        ['user', 'window_start', 'window_end', 'n', 'total', 'slowest', 'emit', 'epoch']
        >>> sorted((int(row["window_start"].timestamp() * 1000), row["n"], row["total"], row["slowest"],
        ...         row["emit"]) for row in out["main"])
        [(0, 2, 400, 300, 'final'), (10, 1, 50, 50, 'final')]
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
        return self.stream._at(step)
