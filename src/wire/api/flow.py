"""The fluent flow API: ``Flow`` records a plan; ``Stream`` (:mod:`wire.api.stream`) is a handle on one port.

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
from typing import TYPE_CHECKING

from wire.api.stateful import WindowedStream
from wire.api.stream import Stream
from wire.core.time import Duration, to_millis
from wire.core.windowing import BoundedOutOfOrderness
from wire.delivery.sink import overlapping
from wire.errors import ConfigError, PlanError, WireError
from wire.plan.nodes import (
    ALL_STEPS,
    DEAD_LETTER,
    OUT,
    Node,
    Plan,
    PortRef,
    SinkNode,
    SourceNode,
)

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
        self._tables: dict[str, Stream] = {}
        self._policy_defaulted: set[str] = set()  # sources given no watermark= (a table's clause may set it)

    # -- building -------------------------------------------------------------------------
    def _add(self, node: Node) -> None:
        if any(n.step == node.step for n in self._nodes):
            raise PlanError(f"flow {self.flow_id!r}: step id {node.step!r} is used twice")
        if isinstance(node, SinkNode):
            self._check_target(node)
        self._nodes.append(node)

    def _check_target(self, node: SinkNode) -> None:
        """Refuse a sink whose path or table another sink of the flow writes (or contains)."""
        for other in self._nodes:
            if not isinstance(other, SinkNode):
                continue
            pair = overlapping(other.sink, node.sink)
            if pair is None:
                continue
            theirs, mine = pair
            kind = "table" if mine.kind == "table" else "path"
            if theirs == mine:
                where = f"both write to the {kind} {mine.name!r}"
            elif mine.name.startswith(theirs.name.rstrip("/") + "/"):
                where = f"write to {theirs.name!r} and {mine.name!r}, which is inside it"
            else:
                where = f"write to {theirs.name!r} and {mine.name!r}, which contains it"
            raise PlanError(
                f"flow {self.flow_id!r}: sinks {other.step!r} and {node.step!r} {where}. Each sink "
                "needs a path or table of its own: their epoch ids would collide, and a reader (or a "
                f"cleanup) of one would take the other's files. Give sink {node.step!r} another "
                f"{kind}; to write streams with the same columns to one place, .union() them into one sink"
            )

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
        max_events_per_epoch: int | None = None,
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
            ``None`` (default): the connector's ``default_max_events_per_epoch``
            (:data:`~wire.sources.base.source.DEFAULT_MAX_EVENTS_PER_EPOCH`, 100,000;
            Kafka 250,000).
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
            On an invalid parameter; when the connector's schema is given (files with
            ``schema=``, Kafka, HTTP ingest, Redis Streams, ``TestStream``), an
            ``event_time`` or ``key`` that is not one of its columns (the message lists
            them). Without a given schema, that check runs when the flow compiles. Also
            when the connector's deprecated ``idle_timeout`` / ``watermark_interval``
            contradicts ``watermark``'s (the message names the keyword and both values).
        """
        if not all(callable(getattr(connector, m, None)) for m in ("read_stream", "resolve_schema")):
            raise ConfigError("connector", connector,
                              "a Wire source connector: wire.sources.files(...), kafka(...), "
                              "redis_stream(...) or http_ingest(...)")
        if not isinstance(event_time, str) or not event_time:
            raise ConfigError("event_time", event_time, "a column name (non-empty string)")
        if key is not None and (not isinstance(key, str) or not key):
            raise ConfigError("key", key, "a column name (non-empty string) or None")
        defaulted = watermark is None
        if watermark is None:
            watermark = BoundedOutOfOrderness(0)
        if not isinstance(watermark, BoundedOutOfOrderness):
            raise ConfigError("watermark", watermark, "wire.BoundedOutOfOrderness(max_delay)")
        if max_events_per_epoch is None:
            from wire.sources.base.source import default_max_events_per_epoch  # the connector imported it

            max_events_per_epoch = default_max_events_per_epoch(connector)
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
        _check_columns_known(connector, step, event_time, key)
        from wire.sources.base.source import with_connector_settings  # the connector imported it already

        with_connector_settings(step, watermark, connector)  # a policy the connector contradicts fails here
        self._add(SourceNode(step, connector, event_time, key, watermark, max_events_per_epoch,
                             target_ms))
        if defaulted:
            self._policy_defaulted.add(step)
        return Stream(self, PortRef(step, OUT))

    def table(self, name: str, stream: Stream, *, watermark: str | None = None) -> Stream:
        """Register ``stream`` as the table ``name`` for SQL queries (:func:`wire.sql`).

        A query's ``FROM name`` reads the stream: its columns, its event time (the
        source's ``event_time`` column) and its watermark (the source's policy). Names
        are case-insensitive, as SQL identifiers. Registering records no plan node.

        ``watermark``: Flink's clause ``"WATERMARK FOR ts AS ts - INTERVAL '5' SECOND"``
        (``ts`` the source's ``event_time`` column; the delay in whole MILLISECOND,
        SECOND, MINUTE, HOUR or DAY units; ``AS ts``: no delay). Watermarks are
        generated at sources (SPEC §2), so the clause is the policy of the source that
        ``stream`` comes from (through per-row steps only: filter, map, select, key_by,
        explode, throttle): a source given no ``watermark=`` takes
        ``BoundedOutOfOrderness(delay)`` (for every reader of the source); a source
        with a policy must have the same delay (:mod:`wire.api.watermark_clause`).

        Returns
        -------
        Stream
            ``stream`` itself, so ``bids = flow.table("bids", events.filter(...))`` reads well.

        Raises
        ------
        ConfigError
            If ``name`` is not an identifier (letters, digits, ``_``, starting with a
            letter or ``_``), is registered already, or ``stream`` is not a stream of
            this flow.
        SqlError
            (a ``ConfigError``, parameter ``watermark``) with the line and column in the
            clause: it does not parse; ``stream`` passes a window, join, union or process
            (whose watermark is derived, not generated); ``ts`` is not the source's
            event time; or the source's policy has another delay.
        """
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ConfigError("name", name, "a SQL identifier: letters, digits and '_', not starting "
                              "with a digit")
        if name.lower() in self._tables:
            raise ConfigError("name", name, f"a name not registered yet (registered: {sorted(self._tables)})")
        if not isinstance(stream, Stream) or stream.flow is not self:
            raise ConfigError("stream", stream, "a stream of this flow")
        if watermark is not None:
            from wire.api.watermark_clause import apply_clause

            apply_clause(self, name, stream, watermark)
        self._tables[name.lower()] = stream
        return stream

    def _policy_given(self, source_step: str) -> bool:
        """Whether source ``source_step`` has a user-given watermark policy (a table's clause counts)."""
        return source_step not in self._policy_defaulted

    def _replace_source(self, node: SourceNode) -> None:
        """Set a source's watermark policy from a table's ``WATERMARK`` clause (the node, replaced)."""
        self._nodes = [node if n.step == node.step else n for n in self._nodes]
        self._policy_defaulted.discard(node.step)

    def tables(self) -> Mapping[str, Stream]:
        """The tables registered with :meth:`table`, by lower-case name (a copy)."""
        return dict(self._tables)

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
        fresh: bool = False,
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
        fresh:
            Start the flow over (``wire run --fresh``): the way out when a changed flow
            cannot resume its checkpoint (``CheckpointError: step ... changed``). The
            sources are read from their start, as by a new checkpoint, and each sink's
            output becomes the new run's: in order,

            1. the checkpoint is moved to ``<checkpoint>.superseded`` (nothing deleted);
            2. a new checkpoint (new checkpoint id) is opened and the flow compiled on
               Spark; if this fails, the old checkpoint is moved back and the error raised;
            3. each sink is handed to the new checkpoint
               (:meth:`wire.delivery.sink.Sink.supersede`): an exactly-once sink sets
               aside what this flow's sink wrote under any other checkpoint, with the
               epoch bookkeeping that would make it skip the new epochs as replays
               (Parquet / JSON Lines: ``<path>/_superseded/<old id>/``; Delta: one commit
               removing its files, kept by time travel until a ``VACUUM``; PostgreSQL
               append: the rows moved to ``<table>_superseded_<old id>``); other sinks
               are unchanged (upsert sinks keep the rows the new run does not overwrite,
               a Kafka sink's earlier messages stay in the topic);
            4. the old checkpoint is deleted, and the run starts.

            A run stopped during step 3 finishes the hand-over when run again, with or
            without ``fresh``. Only an explicit ``fresh=True`` hands a sink to another
            checkpoint: a run that resumes keeps its exactly-once bookkeeping. A source
            that starts from outside the checkpoint (a Kafka consumer group's committed
            offsets) is not read again from its start. Also the way to take over sinks
            whose old checkpoint directory is gone. Only the first attempt starts over;
            the restarts of ``max_restarts`` resume.

        Returns
        -------
        RunSummary
            Counts and timings of this run.

        Raises
        ------
        PlanError, ConfigError, CheckpointError, FlowFailed
            ``ConfigError`` (parameter ``progress``) before anything starts, for a
            ``progress`` that is none of the values above; (parameter ``fresh``) for a
            ``fresh`` that is not a bool. ``CheckpointError`` with ``fresh=True`` when the
            checkpoint path exists and is not a Wire checkpoint (it is left as it is).
        """
        from wire.runtime.progress import has_completed_epochs, resolve_progress
        from wire.runtime.supervisor import RestartPolicy, supervise

        _check_fresh(fresh)
        resumed = not fresh and has_completed_epochs(checkpoint)
        reporter = resolve_progress(progress, self.plan(), resumed=resumed)
        plane = None
        if dashboard:
            from wire.control import ControlPlane
            from wire.control.status import StartingFlow

            plane = ControlPlane()
            plane.add(StartingFlow(self.plan(), checkpoint))  # "starting" while Spark starts
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
                fresh=fresh and attempts == 1,  # a restart resumes what the first attempt started
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
        fresh: bool = False,
    ) -> RunningFlow:
        """Like :meth:`run`, but return at once with a handle on the running flow.

        The handle's ``watermarks()`` shows every step's latest watermarks,
        ``summary`` the counts so far, ``stop()`` stops it and
        ``await_termination()`` waits for the end.

        ``progress`` takes the values of :meth:`run` (default ``False`` here: nothing is
        drawn while the caller's code runs); a bar stops when the run ends. ``fresh``
        starts the flow over, as in :meth:`run`.

        Raises
        ------
        ConfigError
            (parameter ``progress``) before anything starts, for an invalid ``progress``;
            (parameter ``fresh``) for a ``fresh`` that is not a bool.
        """
        from wire.runtime.progress import has_completed_epochs, resolve_progress

        _check_fresh(fresh)
        resumed = not fresh and has_completed_epochs(checkpoint)
        reporter = resolve_progress(progress, self.plan(), resumed=resumed)
        return self._start(checkpoint, master=master, spark_conf=spark_conf, spark=spark,
                           key_groups=key_groups, max_epochs=max_epochs, progress=reporter,
                           own_progress=True, fresh=fresh)

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
        fresh: bool = False,
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
            fresh=fresh,
        )


def _check_columns_known(connector: Source, step: str, event_time: str, key: str | None) -> None:
    """Check ``event_time`` and ``key`` against the source's schema when it is known at build time.

    Known: the connector holds an Arrow ``schema`` given by the user (files with
    ``schema=``, Kafka, HTTP ingest, Redis Streams, ``TestStream``), from which its
    ``resolve_schema()`` derives the columns without reading input. Otherwise (a file
    source inferring its schema from the first file) the same check runs when the flow
    compiles.

    Raises
    ------
    ConfigError
        Naming the parameter, the column, the source's columns and the closest name.
    """
    import difflib

    import pyarrow as pa

    if not isinstance(getattr(connector, "schema", None), pa.Schema):
        return
    try:
        names = list(connector.resolve_schema().names)
    except (WireError, OSError):  # not known after all: checked when the flow compiles
        return
    for parameter, column in (("event_time", event_time), ("key", key)):
        if column is None or column in names:
            continue
        close = difflib.get_close_matches(column, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            parameter, column,
            f"the name of one of the source's columns {names}{hint}; pass it as "
            f"flow.source(..., {parameter}=<column>)", step=step,
        )


def _check_fresh(fresh: object) -> None:
    if not isinstance(fresh, bool):
        raise ConfigError("fresh", fresh, "True (start the flow over) or False (resume the checkpoint)")


__all__ = ["Flow", "Stream", "WindowedStream"]
