"""Streams: ``Stream`` is a handle on one port of a flow; ``WindowedStream`` a windowed one.

Every method records one immutable node in its :class:`~wire.api.flow.Flow`'s plan
(:mod:`wire.plan.nodes`) and returns a handle on the new step's port; nothing runs until
the flow runs. Times are int64 milliseconds since the Unix epoch (UTC); durations are
ms, ``"5m"``-style strings or ``timedelta``. Every sink row also gets an ``epoch``
column (int64, the epoch that wrote it).

The examples are doctests that ``tests/unit/api/test_stream_docs.py`` runs, most on
Spark through :class:`wire.testing.TestStream` (one epoch per scripted step, the real
engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import pyarrow as pa

from wire.core.time import INT64_MAX, INT64_MIN, Duration, to_millis
from wire.core.windowing import Window
from wire.delivery.sink import GUARANTEES, Sink
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
    LookupJoinNode,
    MapNode,
    PortRef,
    ProcessNode,
    SelectNode,
    SinkNode,
    SourceNode,
    TemporalJoinNode,
    ThrottleNode,
    UnionNode,
    WindowAggregateNode,
)
from wire.state.aggregations import Aggregator
from wire.state.keyed_state import StateSpec
from wire.state.process import OnEvents, OnTimer, declared_states
from wire.state.spec import Callback, Emit
from wire.tables.base import LookupTable
from wire.tables.lookup import HOWS, How

if TYPE_CHECKING:
    from wire.api.flow import Flow

ThrottleMode = Literal["pause", "overflow"]
"""``Stream.throttle``'s modes: hold the excess at the sources, or divert it to ``.overflow()``."""
THROTTLE_MODES: tuple[ThrottleMode, ...] = get_args(ThrottleMode)
TemporalHow = Literal["inner", "left"]
"""``Stream.temporal_join``'s ``how``: drop events without a version, or emit them with nulls."""
TEMPORAL_HOWS: tuple[TemporalHow, ...] = get_args(TemporalHow)


@dataclass(frozen=True)
class Stream:
    """A handle on one port of one step; operators return new streams.

    Obtained from ``Flow.source`` (a source's events), from an operator, or from a
    side port (``late()``, ``dead_letters()``, ``overflow()``). Expressions (``Expr``)
    are Spark ``Column`` objects (which need an active SparkSession, e.g.
    ``wire.spark()``) or Spark SQL strings over the stream's columns. A stream may feed
    any number of operators and sinks (branches); every stream must end in a sink or
    ``drop()`` (checked when the flow runs).
    """

    flow: Flow
    ref: PortRef

    def _require_out(self, op: str) -> None:
        if self.ref.step == ALL_STEPS:
            raise PlanError(f"{op}: the flow's dead-letter output can only be sunk")

    def filter(self, predicate: Expr, *, name: str | None = None) -> Stream:
        """Keep events for which ``predicate`` is true; null counts as false.

        Columns in and out: unchanged, as are the key and the event time. Stateless: no
        state; each event passes or not in the epoch it arrives in.

        Parameters
        ----------
        predicate:
            A boolean Spark SQL expression (``"n > 10"``) or ``Column``.
        name:
            The step id (default ``filter_<n>``).

        Raises
        ------
        PlanError
            On the flow's dead-letter output (``flow.dead_letters()``), which can only be sunk.
        ConfigError
            When the flow runs (compiles), if ``predicate`` is neither a Column nor a
            non-empty string; Spark's ``AnalysisException`` if it does not resolve
            against the stream's columns.

        Examples
        --------
        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("n", pa.int64())], event_time="t")
        >>> ts = ts.add_events([{"t": 1, "n": 5}, {"t": 2, "n": None}, {"t": 3, "n": 50}])  # epoch 0
        >>> out = ts.run(lambda events: events.filter("n > 10"))
        >>> out["main"]
        [{'t': 3, 'n': 50, 'epoch': 0}]
        """
        self._require_out("filter")
        step = self.flow._step_id(name, "filter")
        self.flow._add(FilterNode(step, self.ref.step, predicate))
        return Stream(self.flow, PortRef(step))

    def map(self, *, name: str | None = None, **columns: Expr) -> Stream:
        """Add or replace columns, ``name=expression`` each; other columns pass through.

        Columns out: the input's, a replaced column in its place, new ones appended in
        argument order. Every expression reads the *input* columns (one ``map`` cannot
        use a column it adds). The key and the event time are kept (replacing the key
        column changes the key's values; the event time is fixed at the source).
        Stateless: each event is mapped in the epoch it arrives in.

        Parameters
        ----------
        name:
            The step id (default ``map_<n>``).
        **columns:
            ``column_name=expression``: a Spark SQL string or ``Column``.

        Raises
        ------
        ConfigError
            If no column is given; when the flow runs (compiles), for a name starting
            with ``__`` (Wire's envelope) or an expression that is not a Column or a
            non-empty string (Spark's ``AnalysisException`` if it does not resolve).
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("n", pa.int64())], event_time="t")
        >>> ts = ts.add_events([{"t": 1, "n": 5}, {"t": 2, "n": None}])
        >>> out = ts.run(lambda events: events.map(n10="n * 10", n="coalesce(n, 0)"))
        >>> out["main"]
        [{'t': 1, 'n': 5, 'n10': 50, 'epoch': 0}, {'t': 2, 'n': 0, 'n10': None, 'epoch': 0}]
        """
        self._require_out("map")
        if not columns:
            raise ConfigError("columns", columns, "at least one name=expression")
        step = self.flow._step_id(name, "map")
        self.flow._add(MapNode(step, self.ref.step, tuple(columns.items())))
        return Stream(self.flow, PortRef(step))

    def select(self, *columns: Expr | tuple[str, Expr], name: str | None = None) -> Stream:
        """Keep exactly ``columns``: names, expressions (with ``.alias``) or ``(name, expression)``.

        Columns out: ``columns``, in this order; the event time is kept whether or not
        its column is selected. A stream stays keyed while its key column is selected
        (an unselected key leaves it unkeyed: ``key_by`` re-keys it). Stateless.

        Parameters
        ----------
        *columns:
            Column names, Spark SQL expressions, ``Column`` objects or
            ``(name, expression)`` pairs.
        name:
            The step id (default ``select_<n>``).

        Raises
        ------
        ConfigError
            If no column is given; when the flow runs, as :meth:`map`.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("n", pa.int64())], event_time="t")
        >>> out = ts.add_events([{"t": 1, "n": 5}, {"t": 2, "n": 50}]).run(
        ...     lambda events: events.select("n", ("big", "n > 10")))
        >>> out["main"]
        [{'n': 5, 'big': False, 'epoch': 0}, {'n': 50, 'big': True, 'epoch': 0}]
        """
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

        Columns out: the input's, with ``column`` holding one element (of the list's
        element type). Stateless: the elements are emitted in the epoch their event
        arrives in, in list order.

        Raises
        ------
        ConfigError
            If ``column`` is not a non-empty str; when the flow runs (compiles), if it
            is not a list column of the stream.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("tags", pa.list_(pa.string()))],
        ...                              event_time="t")
        >>> ts = ts.add_events([{"t": 1, "tags": ["a", "b"]}, {"t": 2, "tags": []}, {"t": 3, "tags": None}])
        >>> out = ts.run(lambda events: events.explode("tags"))
        >>> out["main"]
        [{'t': 1, 'tags': 'a', 'epoch': 0}, {'t': 1, 'tags': 'b', 'epoch': 0}]
        """
        self._require_out("explode")
        if not isinstance(column, str) or not column:
            raise ConfigError("column", column, "a list column's name (non-empty string)")
        step = self.flow._step_id(name, "explode")
        self.flow._add(ExplodeNode(step, self.ref.step, column))
        return Stream(self.flow, PortRef(step))

    def throttle(
        self, max_events_per_epoch: int, *, mode: ThrottleMode = "pause", name: str | None = None
    ) -> Stream:
        """Flow control (SPEC §5): let at most ``max_events_per_epoch`` events pass per epoch.

        ``mode="pause"`` (default) holds the excess input: the admission per epoch of
        every source feeding this stream is lowered to the limit, so the excess waits
        in the external system and nothing is dropped. ``mode="overflow"`` lets the
        first events of each epoch task pass (per Spark partition of the epoch; one
        partition for a single-partition source) and diverts the rest to
        ``.overflow()``, with their columns unchanged. Columns pass through unchanged.

        Columns in and out: unchanged (the ``overflow`` port has the same columns).
        State: none; the limit counts per epoch (and, for ``"overflow"``, per task).
        Emission: in the epoch the events arrive in (``"pause"``: in a later epoch, as
        the sources admit them).

        Parameters
        ----------
        max_events_per_epoch:
            The limit, a positive int (events per epoch).
        mode:
            ``"pause"`` or ``"overflow"`` (:data:`ThrottleMode`).
        name:
            The step id (default ``throttle_<n>``).

        Raises
        ------
        ConfigError
            If the limit is not a positive int or the mode is not ``"pause"`` or
            ``"overflow"``.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        The overflow port is not sunk here, so the run keeps it under the checkpoint:

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64())], event_time="t")
        >>> ts = ts.add_events([{"t": t} for t in range(5)])
        >>> out = ts.run(lambda events: events.throttle(2, mode="overflow", name="limit"))
        >>> [row["t"] for row in out["main"]], list(out.summary.kept)
        ([0, 1], ['limit.overflow'])
        >>> ts.run(lambda events: events.throttle(2, mode="drop"))
        Traceback (most recent call last):
            ...
        wire.errors.ConfigError: invalid mode='drop'; accepted: 'pause' or 'overflow'
        """
        self._require_out("throttle")
        if isinstance(max_events_per_epoch, bool) or not isinstance(max_events_per_epoch, int) or (
            max_events_per_epoch <= 0
        ):
            raise ConfigError("max_events_per_epoch", max_events_per_epoch, "a positive int")
        if mode not in THROTTLE_MODES:
            raise ConfigError("mode", mode, "'pause' or 'overflow'")
        step = self.flow._step_id(name, "throttle")
        self.flow._add(ThrottleNode(step, self.ref.step, max_events_per_epoch, mode))
        return Stream(self.flow, PortRef(step))

    def overflow(self) -> Stream:
        """The overflow port of a ``throttle(..., mode="overflow")`` step.

        Columns: those of the throttle's input, unchanged; the events beyond the limit,
        in the epoch they arrived in. Not sunk, the port is kept under
        ``<checkpoint>/kept/<step>.overflow/``; ``.overflow().drop()`` discards it.

        Raises
        ------
        PlanError
            If this stream is not a throttle step in ``"overflow"`` mode.

        Examples
        --------
        >>> import wire
        >>> flow = wire.Flow("throttled")
        >>> events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t")
        >>> limited = events.throttle(1_000, mode="overflow", name="limit")
        >>> limited.overflow().sink(wire.sinks.parquet("out/overflow"))
        >>> events.overflow()
        Traceback (most recent call last):
            ...
        wire.errors.PlanError: overflow(): step 'source_1' is not a throttle in overflow mode
        """
        node = self.flow.plan().node(self.ref.step)
        if OVERFLOW not in node.side_ports():
            raise PlanError(f"overflow(): step {self.ref.step!r} is not a throttle in overflow mode")
        return Stream(self.flow, PortRef(self.ref.step, OVERFLOW))

    def key_by(self, key: str, *, name: str | None = None) -> Stream:
        """Re-key the stream by column ``key``: it scopes the state of later keyed operators.

        Windows, joins and ``process`` after it keep their state per value of ``key``
        and the window results carry a ``key`` column. Columns in and out: unchanged.
        Stateless: events pass in the epoch they arrive in.

        Parameters
        ----------
        key:
            A column of the stream.
        name:
            The step id (default ``key_by_<n>``).

        Raises
        ------
        ConfigError
            If ``key`` is not a non-empty str; when the flow runs (compiles), if it is
            not a column of the stream.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        Counts per user in 10 ms windows, after a source keyed by nothing:

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("user", pa.string())], event_time="t")
        >>> ts = ts.add_events([{"t": 1, "user": "a"}, {"t": 2, "user": "b"}, {"t": 3, "user": "a"}])
        >>> out = ts.advance_watermark_to_infinity().run(
        ...     lambda events: events.key_by("user").window(wire.Tumbling(10)).aggregate(n=wire.count()))
        >>> sorted((row["user"], row["n"], row["emit"]) for row in out["main"])
        [('a', 2, 'final'), ('b', 1, 'final')]
        """
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
        return Stream(self.flow, PortRef(step))

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """Merge this stream with ``others`` (same columns, same key).

        Columns in and out: every input must have the same columns (in any order);
        the output has this stream's. The output is keyed when all inputs are keyed by
        the same column. Stateless: each event passes in the epoch it arrives in. The
        union's watermark is the minimum of its inputs' watermarks (SPEC §2); a keyed
        operator after it classifies lateness against that minimum.

        Parameters
        ----------
        *others:
            Streams of the same flow (e.g. branches of one source, or other sources).
        name:
            The step id (default ``union_<n>``).

        Raises
        ------
        ConfigError
            If ``others`` is empty or contains something other than streams of this
            flow; when the flow runs (compiles), if the columns differ.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("n", pa.int64())], event_time="t")
        >>> ts = ts.add_events([{"t": 1, "n": 1}, {"t": 2, "n": 5}, {"t": 3, "n": 9}])
        >>> out = ts.run(lambda events: events.filter("n < 2").union(events.filter("n > 8")))
        >>> sorted((row["t"], row["n"]) for row in out["main"])
        [(1, 1), (3, 9)]
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
            On invalid bounds or a stream of another flow; when the flow runs
            (compiles), if the streams are not keyed by columns of the same name and type.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        Each click with the purchases of its user up to 5 ms later:

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(
        ...     schema=[("t", pa.int64()), ("user", pa.string()), ("action", pa.string())],
        ...     event_time="t", key="user")
        >>> ts = ts.add_events([
        ...     {"t": 10, "user": "a", "action": "click"}, {"t": 12, "user": "a", "action": "buy"},
        ...     {"t": 30, "user": "a", "action": "buy"}, {"t": 11, "user": "b", "action": "buy"}])
        >>> def build(events):
        ...     clicks, buys = events.filter("action = 'click'"), events.filter("action = 'buy'")
        ...     return clicks.interval_join(buys, lower=0, upper=5)
        >>> out = ts.run(build)
        >>> list(out["main"][0])  # doctest: +NORMALIZE_WHITESPACE
        ['user', 't', 'action', 'right_t', 'right_action', 'left_event_time', 'right_event_time',
         'event_time', 'epoch']
        >>> [(row["user"], row["t"], row["right_t"], row["event_time"]) for row in out["main"]]
        [('a', 10, 12, 12)]
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

        Parameters
        ----------
        other:
            The right-hand stream (same flow, keyed by a column of the same name).
        within:
            None (default): no time bound. Else the largest ``|other.t - t|`` of a
            pair: ms, ``"5m"``-style string or ``timedelta``.
        allowed_lateness:
            How far behind the watermark an event may be and still join.
        right_prefix:
            Prefix of ``other``'s payload columns in the output.
        name:
            The step id (default ``join_<n>``).

        Raises
        ------
        ConfigError
            If ``within`` is negative or not a duration, or ``other`` belongs to
            another flow; at compile time, if the streams are not keyed by columns of
            the same name and type.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        Every click with every purchase of its user, however far apart:

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(
        ...     schema=[("t", pa.int64()), ("user", pa.string()), ("action", pa.string())],
        ...     event_time="t", key="user")
        >>> ts = ts.add_events([
        ...     {"t": 10, "user": "a", "action": "click"}, {"t": 12, "user": "a", "action": "buy"},
        ...     {"t": 30, "user": "a", "action": "buy"}, {"t": 11, "user": "b", "action": "buy"}])
        >>> out = ts.run(lambda events: events.filter("action = 'click'")
        ...                                   .join(events.filter("action = 'buy'")))
        >>> sorted((row["user"], row["t"], row["right_t"], row["event_time"]) for row in out["main"])
        [('a', 10, 12, 12), ('a', 10, 30, 30)]
        """
        if within is None:
            lower, upper = INT64_MIN, INT64_MAX
        else:
            bound = to_millis(within, parameter="within")
            lower, upper = -bound, bound
        step = self.flow._step_id(name, "join")
        return self.interval_join(other, lower=lower, upper=upper, allowed_lateness=allowed_lateness,
                                  right_prefix=right_prefix, name=step)

    def lookup_join(
        self,
        table: LookupTable,
        *,
        on: str,
        how: How = "inner",
        cache_ttl: Duration | None = None,
        cache_size: int | None = None,
        name: str | None = None,
    ) -> Stream:
        """Enrich each event with the row of ``table`` whose key equals the event's ``on`` column.

        A lookup join (Flink's ``JOIN ... FOR SYSTEM_TIME AS OF proctime``): each event
        meets the table **as it is when the event's epoch runs** (processing time), not
        as it was at the event's time, so a replay may meet other rows
        (docs/lookup_join.md; the event-time alternative is the temporal join).

        Output columns: this stream's columns (key, event time and watermark unchanged),
        then the table's joined columns (``columns=`` of the table; not its key), with
        their Arrow types as Spark reads them (e.g. PostgreSQL ``int4`` -> int32,
        ``timestamptz`` -> timestamp UTC). Emission: in the event's epoch; the step keeps
        no state, holds no watermark and has no late port.

        Reads: a database table (``wire.tables.postgres``) is asked at most once per key
        group per epoch, for the distinct keys that the worker's cache lacks, in one
        batched query (the stream is shuffled by the key group of ``on`` first); rows and
        misses stay cached per worker process for ``cache_ttl``, at most ``cache_size``
        keys (least recently used out first). A snapshot table (``wire.tables.delta``,
        ``wire.tables.parquet``) is loaded whole by each worker and loaded again when its
        version changes, checked once per epoch; it has no cache settings.

        Failures: while the table cannot be reached, the epoch holds and retries with
        backoff for the table's ``unavailable_timeout``, then the flow fails with
        :class:`wire.errors.TableUnavailable` naming the step and the table.

        Parameters
        ----------
        table:
            A table from ``wire.tables``.
        on:
            The stream's column matched with the table's key (same kind of type:
            integers of any width, strings, dates, timestamps, binary).
        how:
            ``"inner"`` (default): an event without a row (or with a null ``on``) is
            dropped. ``"left"``: it is kept, with nulls in the joined columns.
        cache_ttl:
            Database tables: how long a row (or a miss) read from the table is reused,
            ms or a duration such as ``"60s"`` (default 60 s; 0: no cache, every epoch
            reads every key it needs).
        cache_size:
            Database tables: the most keys a worker's cache keeps (default 100,000;
            0: no cache).
        name:
            The step id (default ``lookup_join_<n>``).

        Raises
        ------
        ConfigError
            When ``table`` is not a ``wire.tables`` table, ``on`` is not a column name,
            ``how`` is not ``"inner"`` / ``"left"``, ``cache_ttl`` / ``cache_size`` are
            negative or given for a snapshot table; when the flow is compiled, if ``on``
            is not a column of the stream, its type does not match the table key's, a
            joined column's name is already a stream column, or the table lacks the key
            or a column.
        TableUnavailable
            When the flow runs (or compiles) and the table stays unreachable.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        Orders enriched from a Parquet table of customers (a snapshot table):

        >>> import pathlib, tempfile, pyarrow as pa, pyarrow.parquet as pq, wire
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "customers.parquet"
        >>> pq.write_table(pa.table({"id": [1, 2], "tier": ["gold", "silver"]}), path)
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("customer", pa.int64())],
        ...                              event_time="t")
        >>> ts = ts.add_events([{"t": 1, "customer": 2}, {"t": 2, "customer": 3}])
        >>> out = ts.run(lambda orders: orders.lookup_join(
        ...     wire.tables.parquet(path, key="id"), on="customer", how="left"))
        >>> sorted((row["t"], row["customer"], row["tier"]) for row in out["main"])
        [(1, 2, 'silver'), (2, 3, None)]
        """
        self._require_out("lookup_join")
        if not isinstance(table, LookupTable):
            raise ConfigError("table", table,
                              "a table from wire.tables: postgres(...), delta(...), parquet(...)")
        if not isinstance(on, str) or not on:
            raise ConfigError("on", on, "the name of the stream's column matched with the table's key")
        if how not in HOWS:
            raise ConfigError("how", how, " or ".join(repr(h) for h in HOWS))
        if table.snapshot:
            for parameter, value in (("cache_ttl", cache_ttl), ("cache_size", cache_size)):
                if value is not None:
                    raise ConfigError(parameter, value, f"None for a snapshot table ({table.describe()} "
                                      "is loaded whole and re-read when its version changes, checked "
                                      "once per epoch)")
        ttl = to_millis(60_000 if cache_ttl is None else cache_ttl, parameter="cache_ttl")
        size = 100_000 if cache_size is None else cache_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError("cache_size", cache_size, "None (100,000 keys) or an int >= 0 (0: no cache)")
        step = self.flow._step_id(name, "lookup_join")
        self.flow._add(LookupJoinNode(step, self.ref.step, table, on, how, ttl, size))
        return Stream(self.flow, PortRef(step))

    def late(self) -> Stream:
        """The late port of a window aggregation, join or process step: late events.

        Columns: the event's columns, ``event_time`` (int64 ms), ``watermark`` (int64 ms,
        the watermark when the event arrived), ``reason`` (string). An event column named
        ``event_time``, ``watermark`` or ``reason`` (e.g. a join's ``event_time``, when
        a window follows a join) is renamed ``input_<name>``.

        A join's late port also has ``side`` (``"left"`` or ``"right"``; the other
        side's columns are null). Emission: in the epoch the late event arrives in.

        Not sunk, the port is kept under ``<checkpoint>/kept/<step>.late/`` (SPEC §3);
        ``.late().drop()`` discards it on purpose.

        Raises
        ------
        PlanError
            If this stream is not a window aggregation, join or process step.

        Examples
        --------
        ``TestStream.run`` sinks every late port to ``out["late"]``; in a flow,
        ``hourly.late().sink(...)``:

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(schema=[("t", pa.int64()), ("user", pa.string())],
        ...                              event_time="t", key="user")
        >>> ts = (ts.add_events([{"t": 1, "user": "a"}])   # epoch 0
        ...         .advance_watermark(20)                # epoch 1: window [0, 10) closes
        ...         .add_events([{"t": 5, "user": "a"}]))  # epoch 2: for a closed window
        >>> out = ts.run(lambda events: events.window(wire.Tumbling(10)).aggregate(n=wire.count()))
        >>> out["late"]  # doctest: +NORMALIZE_WHITESPACE
        [{'t': 5, 'user': 'a', 'event_time': 5, 'watermark': 20,
          'reason': 'window closed: window_end + allowed_lateness <= watermark', 'epoch': 2}]
        """
        node = self.flow.plan().node(self.ref.step)
        if LATE not in node.side_ports():
            raise PlanError(f"late(): step {self.ref.step!r} is not a window aggregation, join or process")
        return Stream(self.flow, PortRef(self.ref.step, LATE))

    def dead_letters(self) -> Stream:
        r"""The dead-letter port of this source: the malformed records it rejected.

        Columns: ``step`` (string), ``location`` (string, e.g. ``"in/a.csv:3"``, the
        file and 1-based line; Kafka ``topic:partition:offset``), ``reason`` (string),
        ``record`` (string, the raw record). Emission: in the epoch that read the record;
        the rest of the input is read on. Only sources reject records;
        ``flow.dead_letters()`` has every source's. Not sunk (neither this port nor the
        flow's), the port is kept under ``<checkpoint>/kept/<step>.dead_letter/``.

        Raises
        ------
        PlanError
            If this stream is not a source's (no other step has dead letters).

        Examples
        --------
        >>> import pathlib, tempfile, pyarrow as pa, wire
        >>> tmp = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (tmp / "in.csv").write_text("t,n\n1,5\n2,oops\n")  # line 3 is malformed
        >>> flow = wire.Flow("dead-letters")
        >>> events = flow.source(wire.sources.files(str(tmp / "*.csv"), format="csv",
        ...                                         schema=pa.schema([("t", pa.int64()), ("n", pa.int64())])),
        ...                      event_time="t", name="events")
        >>> good, bad = wire.testing.MemorySink(), wire.testing.MemorySink()
        >>> events.sink(good)
        >>> events.dead_letters().sink(bad)
        >>> _ = flow.run(str(tmp / "checkpoint"))
        >>> [(row["t"], row["n"]) for row in good.rows()]
        [(1, 5)]
        >>> [(row["step"], row["location"].rsplit("/", 1)[1], row["record"]) for row in bad.rows()]
        [('events', 'in.csv:3', '2,oops')]
        >>> events.filter("n > 1").dead_letters()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        wire.errors.PlanError: dead_letters(): step 'filter_1' is not a source; only sources reject ...
        """
        if self.ref.step == ALL_STEPS or not isinstance(self.flow.plan().node(self.ref.step), SourceNode):
            raise PlanError(f"dead_letters(): step {self.ref.step!r} is not a source; only sources "
                            "reject records (flow.dead_letters() has every source's)")
        return Stream(self.flow, PortRef(self.ref.step, DEAD_LETTER))

    def sink(self, sink: Sink, *, name: str | None = None) -> None:
        """Write this stream to ``sink`` (e.g. ``wire.sinks.parquet(path)``).

        Columns written: the stream's, plus ``epoch`` (int64, the epoch id). Each
        epoch's rows of this port are written once per epoch, inside the epoch (before
        it is marked complete), in the sink's declared ``guarantee``
        (``"exactly_once"``, ``"idempotent"`` or ``"at_least_once"``: what a replayed
        epoch does). A stream may feed several sinks.

        Parameters
        ----------
        sink:
            A sink from ``wire.sinks`` (or a subclass of ``wire.sinks.Sink``).
        name:
            The step id (default ``sink_<n>``). Name sinks: automatic ids are numbered
            in the order the code adds them, and the checkpoint knows a sink by its id.

        Raises
        ------
        ConfigError
            If ``sink`` is not a Wire sink, or its ``guarantee`` is not one of the three.
        PlanError
            If another sink of the flow writes the same path or table (or one inside it).

        Examples
        --------
        >>> import wire
        >>> flow = wire.Flow("copy")
        >>> events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t")
        >>> events.sink(wire.sinks.parquet("out/events"), name="raw")
        >>> [node.step for node in flow.plan().nodes]
        ['source_1', 'raw']
        >>> events.sink(wire.sinks.jsonl("out/events/json"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        wire.errors.PlanError: flow 'copy': sinks 'raw' and 'sink_1' write to '.../out/events' and ...
        >>> events.sink("out/copy")
        Traceback (most recent call last):
            ...
        wire.errors.ConfigError: invalid sink='out/copy'; accepted: a Wire sink, e.g. wire.sinks.parquet(path)
        """
        if not isinstance(sink, Sink):
            raise ConfigError("sink", sink, "a Wire sink, e.g. wire.sinks.parquet(path)")
        guarantee = getattr(sink, "guarantee", None)
        if guarantee not in GUARANTEES:
            raise ConfigError("guarantee", guarantee, " or ".join(map(repr, GUARANTEES)), step=name)
        step = self.flow._step_id(name, "sink")
        self.flow._add(SinkNode(step, self.ref, sink))

    def drop(self, *, name: str | None = None) -> None:
        """Discard this side port's records on purpose: ``hourly.late().drop()``.

        A late, dead-letter or overflow port that no sink reads is otherwise *kept*:
        the runner writes it as Parquet under ``<checkpoint>/kept/<step>.<port>/`` and
        the run summary says where (:mod:`wire.runtime.kept_ports`), so that no record
        is lost without a word. ``drop()`` says the loss is intended; the port's
        records are still counted in the metrics (``late``, ``malformed``), and their
        columns are written nowhere.

        Raises
        ------
        PlanError
            On a data stream (an ``out`` port): a data stream ends in a sink.

        Examples
        --------
        >>> import wire
        >>> flow = wire.Flow("no-late")
        >>> events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t", key="k")
        >>> counts = events.window(wire.Tumbling("1m")).aggregate(n=wire.count())
        >>> counts.sink(wire.sinks.parquet("out/counts"))
        >>> counts.late().drop()
        >>> counts.drop()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        wire.errors.PlanError: drop(): 'window_1' is a data stream; only side ports ...
        """
        if self.ref.port == OUT:
            raise PlanError(
                f"drop(): {self.ref.step!r} is a data stream; only side ports "
                "(.late(), .dead_letters(), .overflow()) can be dropped"
            )
        step = self.flow._step_id(name, "drop")
        self.flow._add(DropNode(step, self.ref))

    def as_table(self, key: str, *, delete: str | None = None) -> VersionedTable:
        """View this stream of keyed upserts as a versioned table, for :meth:`temporal_join`.

        Each event is a *version* of the row of its ``key``: valid from the event's time
        (its *version time*, int64 ms) until the next version of that key. With
        ``delete``, an event whose ``delete`` column is true is a delete marker: from its
        version time on, the key has no row. Of two versions of a key with the same
        version time, the one that arrived last wins. Columns: the table's columns are
        this stream's; ``key`` is matched against the stream's ``on=`` column (same
        type), the ``delete`` column is not joined. Nothing runs or is stored until a
        :meth:`temporal_join` reads the table (its state holds the versions).

        Parameters
        ----------
        key:
            The key column (any type Spark can hash; nulls never match).
        delete:
            None (default: no deletes), or the name of a bool column marking deletes
            (null counts as false).

        Raises
        ------
        ConfigError
            If ``key`` or ``delete`` is not a non-empty column name; when the flow runs
            (compiles), if either is not a column of this stream, or ``delete`` not bool.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        >>> import wire
        >>> flow = wire.Flow("rates")
        >>> rates = flow.source(wire.sources.files("rates/*.csv", format="csv"), event_time="t")
        >>> table = rates.as_table(key="currency", delete="retracted")
        >>> (table.key, table.delete, table.stream.ref.step)
        ('currency', 'retracted', 'source_1')
        """
        self._require_out("as_table")
        for parameter, value in (("key", key), ("delete", delete)):
            if (value is not None or parameter == "key") and (not isinstance(value, str) or not value):
                accepted = "a column name" + (" or None" if parameter == "delete" else "")
                raise ConfigError(parameter, value, accepted)
        return VersionedTable(self, key, delete)

    def temporal_join(
        self,
        table: VersionedTable,
        *,
        on: str,
        how: TemporalHow = "inner",
        name: str | None = None,
    ) -> Stream:
        """Enrich each event with the version of its key's table row valid at the event's time.

        Event-time temporal join (Flink's ``JOIN ... FOR SYSTEM_TIME AS OF``): an event
        with ``on`` value ``k`` and event time ``t`` meets the version of ``k`` in
        ``table`` (:meth:`as_table`) with the largest version time ``<= t``. None, or a
        delete marker: ``how="inner"`` drops the event, ``how="left"`` emits it with
        null table columns. Null keys never match.

        Columns out: ``on``, this stream's other columns, the table's columns other than
        its key and delete column (nullable), and ``version_time`` (int64 ms, the version
        time met; null when none). A name in both inputs is an error (rename it with
        ``select``). The output is keyed by ``on``; each row's event time is the event's.

        Emission: an event is emitted in the first epoch in which the table's watermark
        has passed its time (``table watermark > t``), so the version it met is final:
        the result depends neither on the epoch split nor on the order in which the two
        inputs arrive (a replay gives the same answer). The output watermark follows the
        Beam hold rule (SPEC §2): the minimum of both inputs' watermarks, held at the
        earliest event still waiting.

        Late rows go to ``.late()`` (SPEC §3): an event with ``t <`` the stream's
        watermark, and a table row with version time ``<`` the table's watermark, with
        ``side`` (``"stream"`` / ``"table"``), ``event_time``, ``watermark`` and
        ``reason``. State, per key group: the waiting events, and per key only the
        versions a not-yet-late event can still meet (the newest at or before the stream
        watermark, and newer ones).

        Parameters
        ----------
        table:
            A versioned table of the same flow (``stream.as_table(key=...)``).
        on:
            This stream's column matched against the table's key (same type).
        how:
            ``"inner"`` (default) or ``"left"``.
        name:
            The step id (default ``temporal_join_<n>``).

        Raises
        ------
        ConfigError
            If ``table`` is not a versioned table of this flow, ``how`` is not
            ``"inner"`` or ``"left"``, or ``on`` is not a column name; when the flow runs
            (compiles), if ``on`` or the table's key is not a column, their types differ,
            or output columns clash.
        PlanError
            On the flow's dead-letter output.

        Examples
        --------
        Orders priced at the exchange rate valid when they were placed:

        >>> import pyarrow as pa, wire
        >>> ts = wire.testing.TestStream(
        ...     schema=[("t", pa.int64()), ("kind", pa.string()), ("cur", pa.string()), ("x", pa.float64())],
        ...     event_time="t")
        >>> ts = ts.add_events([
        ...     {"t": 0, "kind": "rate", "cur": "EUR", "x": 1.1},
        ...     {"t": 10, "kind": "rate", "cur": "EUR", "x": 1.2},
        ...     {"t": 5, "kind": "order", "cur": "EUR", "x": 100.0},
        ...     {"t": 12, "kind": "order", "cur": "EUR", "x": 50.0},
        ...     {"t": 7, "kind": "order", "cur": "USD", "x": 9.0}]).advance_watermark_to_infinity()
        >>> def build(events):
        ...     rates = events.filter("kind = 'rate'").select("cur", ("rate", "x")).as_table(key="cur")
        ...     orders = events.filter("kind = 'order'").select("t", "cur", ("amount", "x"))
        ...     return orders.temporal_join(rates, on="cur", how="left")
        >>> out = ts.run(build)
        >>> list(out["main"][0])
        ['cur', 't', 'amount', 'rate', 'version_time', 'epoch']
        >>> sorted((r["t"], r["cur"], r["amount"], r["rate"], r["version_time"]) for r in out["main"])
        [(5, 'EUR', 100.0, 1.1, 0), (7, 'USD', 9.0, None, None), (12, 'EUR', 50.0, 1.2, 10)]
        >>> ts.run(lambda e: e.temporal_join(e.as_table(key="cur"), on="cur", how="outer"))
        Traceback (most recent call last):
            ...
        wire.errors.ConfigError: invalid how='outer'; accepted: 'inner' or 'left'
        """
        self._require_out("temporal_join")
        if not isinstance(table, VersionedTable) or table.stream.flow is not self.flow:
            raise ConfigError("table", table, "a versioned table of the same flow (stream.as_table(key=...))")
        if how not in TEMPORAL_HOWS:
            raise ConfigError("how", how, " or ".join(map(repr, TEMPORAL_HOWS)))
        if not isinstance(on, str) or not on:
            raise ConfigError("on", on, "a column name of this stream")
        step = self.flow._step_id(name, "temporal_join")
        self.flow._add(TemporalJoinNode(step, self.ref.step, table.stream.ref.step, on, table.key,
                                        table.delete, how))
        return Stream(self.flow, PortRef(step))


@dataclass(frozen=True)
class VersionedTable:
    """A stream of keyed upserts seen as a table with versions in event time (``Stream.as_table``).

    Not a stream: it is only read by :meth:`Stream.temporal_join`. ``stream`` is the
    stream of versions, ``key`` its key column, ``delete`` its bool delete-marker column
    (None: no deletes).
    """

    stream: Stream
    key: str
    delete: str | None = None


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
        return Stream(flow, PortRef(step))
