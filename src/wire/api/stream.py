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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from wire.api.joins import Joins
from wire.api.stateful import Stateful
from wire.delivery.sink import GUARANTEES, Sink
from wire.errors import ConfigError, PlanError
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
    KeyByNode,
    MapNode,
    PortRef,
    SelectNode,
    SinkNode,
    SourceNode,
    ThrottleNode,
    UnionNode,
)

if TYPE_CHECKING:
    from wire.api.flow import Flow

ThrottleMode = Literal["pause", "overflow"]
"""``Stream.throttle``'s modes: hold the excess at the sources, or divert it to ``.overflow()``."""
THROTTLE_MODES: tuple[ThrottleMode, ...] = get_args(ThrottleMode)


@dataclass(frozen=True)
class Stream(Stateful, Joins):
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

    def _at(self, step: str) -> Stream:
        """A handle on ``step``'s main output port."""
        return Stream(self.flow, PortRef(step))

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
