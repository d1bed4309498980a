"""Joins and enrichment of a :class:`~wire.api.stream.Stream`: two streams, or a stream and a table.

:class:`Joins` is mixed into ``Stream`` (its methods are ``Stream``'s, documented here):

- ``interval_join`` / ``join``: two keyed streams, pairs within event-time bounds;
- ``lookup_join``: each event meets an external table's row as it is when its epoch runs
  (processing time; :mod:`wire.tables`);
- ``as_table`` / ``temporal_join``: each event meets the version of a table row valid at
  its event time, the table being a stream of keyed upserts (:class:`VersionedTable`).

The examples are doctests that ``tests/unit/api/test_stream_docs.py`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from wire.core.time import INT64_MAX, INT64_MIN, Duration, to_millis
from wire.errors import ConfigError
from wire.plan.nodes import IntervalJoinNode, LookupJoinNode, PortRef, TemporalJoinNode
from wire.tables.base import LookupTable
from wire.tables.lookup import HOWS, How

if TYPE_CHECKING:
    from wire.api.flow import Flow
    from wire.api.stream import Stream

TemporalHow = How
"""``Stream.temporal_join``'s ``how`` (the same values as ``lookup_join``'s): ``"inner"`` drops
events without a version, ``"left"`` emits them with nulls."""
TEMPORAL_HOWS: tuple[TemporalHow, ...] = HOWS


class Joins:
    """``Stream``'s joins (mixed into :class:`~wire.api.stream.Stream`; see the module docstring)."""

    if TYPE_CHECKING:
        flow: Flow
        ref: PortRef

        def _require_out(self, op: str) -> None: ...

        def _at(self, step: str) -> Stream: ...

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
        if not isinstance(other, type(self)) or other.flow is not self.flow:
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
        return self._at(step)

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
        return self._at(step)

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
        return VersionedTable(cast("Stream", self), key, delete)

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
        return self._at(step)


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
