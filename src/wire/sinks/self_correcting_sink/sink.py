"""The self-correcting sink (SPEC §8): a PostgreSQL or Delta table kept equal to the flow's results.

Built by :func:`self_correcting`. The logic (desired collection, correction, batch
descriptions, the compare-and-set loop) is :mod:`wire.sinks.self_correcting_sink.writer`;
this module binds it to two kinds of table and to the runtime.

Where the work happens — executors write, the driver commits (SPEC §8)
    The sink is an executor sink. The keys are split into ``partitions``
    (:func:`~wire.sinks.self_correcting_sink.writer.shard_of` over the key columns, without
    the ``covers`` columns so a merged session meets the sessions it covers; fixed
    for the state directory's life). Each partition's **desired collection** (one
    row per key) is kept as Parquet under the flow's checkpoint,
    ``<checkpoint>/self_correcting/<sink step>/shard-<n>/desired-<epoch>.parquet``
    (the two newest epochs; a replayed epoch recomputes from the one before). Each
    replica has its own checkpoint, hence its own desired collections: nothing is
    shared between replicas but the table.

Per epoch
    1. **executors**, in the epoch's job: each task writes its rows for the sink,
       split by partition of the key, to ``input/<epoch>/shard-<n>/`` (no row
       reaches the driver);
    2. **driver**: read the table's upper and whether it *drifted* (PostgreSQL: its
       row count and the sum of ``hashtextextended(row::text, 0)`` differ from those
       the last append recorded; Delta: the newest commit is not one of the
       sink's); compare every key instead of the touched ones when it drifted,
       when another writer appended since this one, or every ``full_check_every``
       epochs; mint the batch description ``(lower, upper, frontier) = (table
       upper, table upper + 1, the epoch's frontier)`` once — the frontier is read
       from the epoch's end offsets in Spark's offset log (per source its watermark,
       per partition the records consumed), and none is minted when the table's
       frontier is ahead of it or not comparable (another replica read further);
    3. **executors**, one Spark task per partition: fold the partition's rows of the
       epoch into its desired collection and save it; read the persisted rows of its
       touched keys (in a full check: every row, keeping its partition's); compute
       the correction (desired − persisted) and stage its part for exactly that
       description — PostgreSQL: ``COPY`` into the unlogged table
       ``<schema>."<table>__wire_sc"`` tagged with the attempt and partition;
       Delta: a Parquet file ``parts/<attempt>/shard-<n>.parquet``;
    4. **driver**: commit the parts with compare-and-set. PostgreSQL: one
       transaction ``LOCK TABLE ... IN EXCLUSIVE MODE`` (hand edits wait),
       ``UPDATE wire_sc_frontiers SET upper = <upper>, frontier = <frontier> WHERE
       upper = <lower>``, check
       the table's fingerprint is the one read, delete the staged keys and insert
       the staged rows (``INSERT ... SELECT`` inside the server), record the new
       fingerprint. Delta: one ``MERGE`` of the staged parts (the upper an
       application transaction, the frontier in the commit info), committed on the
       version read with no commit retries, so any commit in between (another
       replica's, a hand edit) fails it; delta-rs rewrites the touched files in the
       driver process. A failed compare-and-set is counted, the parts are
       discarded, and steps 2-4 run again with a full check: never a blind append.

    In **read-only** mode every key is compared, nothing is staged, and the
    distance (keys differing) is reported. The mode is the ``read_only`` argument
    at build time, switched while running by ``PATCH
    /v1/flows/{id}/sinks/{sink} {"mode": "write" | "read_only"}`` or ``wire
    sink-mode``, through the flow's control file (a restart goes back to the
    build-time mode).

Quiet input
    Drift is found at epochs; with no input there are no epochs. So while no epoch
    has come for ``repair_interval`` ms (processing time, default 60 s), a timer
    thread on the driver runs steps 2-4 with no new rows, at the frontier of the
    newest epoch (this run's, else the newest in Spark's commit log): at that
    frontier the writer repairs, so a hand edit on a quiet flow is corrected within
    about ``repair_interval`` (plus the check's own time), and again every interval
    while no epoch comes. Such a check waits for no epoch (an epoch being written
    skips it) and costs, without drift, one read of the table's upper and
    fingerprint. Not in read-only mode. Its corrections count in the run's totals
    and ``sc_quiet_checks``, not in an epoch's metrics.

Cost per epoch: one file per (task, partition) with rows; one Spark job of
``partitions`` tasks (per attempt); the reads of the table (touched keys, or the
whole table per partition in a full check); one transaction / commit.
State directory: on a cluster it must be on storage every executor reaches.

Metrics per sink step (in the run summary, REST status and ``/metrics``):
counters ``sc_corrections`` (rows written: keys deleted + rows inserted),
``sc_drift_rows`` (keys found differing that the epoch did not touch),
``sc_cas_conflicts``, ``sc_epochs_behind``, ``sc_parts`` (partitions that staged a
part of an appended correction); gauges ``sc_read_only`` (1 / 0),
``sc_distance`` (keys differing before the epoch's append), ``sc_corrections_last_epoch``,
``sc_table_upper``.

Replicas and frontiers
    The frontier recorded with the table is a point in input time, not an epoch id
    (:mod:`wire.sinks.self_correcting_sink.frontier`): per source its watermark and,
    per partition, the records consumed (files read and the records of the open
    file, Kafka offsets, stream ids), from the epoch's end offsets. So replicas of
    one flow (the same sources, each its own checkpoint) agree whatever their
    epochs, e.g. with other ``max_events_per_epoch``: at an equal frontier a
    replica repairs (writes only what differs from its collection, which is the
    same); with more input it advances; a replica that has not yet consumed what
    the table reflects writes nothing until it has, so the table never goes back.
    A replica started later therefore catches up in its own cuts, then repairs and
    can take over. Every append leaves the table equal to the appending replica's
    desired collection. Replicas agree only where their results are a function of
    the input consumed and the watermark: events late by processing-time effects
    (one replica's watermark passed them, the other's did not) can differ. A table
    written by a Wire that recorded no frontier is taken as at the empty frontier.
    Driven without Spark (no offsets in the checkpoint) the frontier is the epoch
    id + 1.

Limits: key columns must be of a type that compares exactly (integers, strings,
booleans, dates, timestamps); values must be scalars
(PostgreSQL types as in :mod:`wire.sinks.postgres_sink.sink`).

Code: this module holds :func:`self_correcting` and its checks; the sink (driver
side) is :mod:`wire.sinks.self_correcting_sink.driver`, the executors' side
:mod:`wire.sinks.self_correcting_sink.parts`, the PostgreSQL and Delta tables
:mod:`wire.sinks.self_correcting_sink.tables`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from wire.core.time import Duration, to_millis
from wire.delivery.sink import Sink
from wire.errors import ConfigError, needs_extra
from wire.sinks.column_checks import column_names

# The sink's parts live in .tables (the PostgreSQL and Delta tables), .parts (the
# executors' side) and .driver (the sink);
# its public names and constants stay importable from here.
from wire.sinks.self_correcting_sink.driver import MODES as MODES
from wire.sinks.self_correcting_sink.driver import SelfCorrectingSink
from wire.sinks.self_correcting_sink.tables import DELTA_APP_ID as DELTA_APP_ID
from wire.sinks.self_correcting_sink.tables import DELTA_MARK as DELTA_MARK
from wire.sinks.self_correcting_sink.tables import FRONTIER_TABLE

__all__ = ["FRONTIER_TABLE", "SelfCorrectingSink", "self_correcting"]


def _check_key(key: object) -> tuple[str, ...]:
    return column_names(key, parameter="key",
                        accepted="a column name or a non-empty sequence of distinct column names")

def _is_dsn(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://")) or any(
        f"{k}=" in target for k in ("dbname", "host", "user", "port"))


def self_correcting(
    target: str | os.PathLike[str],
    *,
    key: str | Sequence[str],
    table: str | None = None,
    schema: str = "public",
    drop: Sequence[str] = ("epoch", "emit"),
    retract_column: str | None = None,
    covers: tuple[str, str] | None = None,
    read_only: bool = False,
    full_check_every: int = 0,
    state_dir: str | os.PathLike[str] | None = None,
    partitions: int | None = None,
    repair_interval: Duration | None = "60s",
) -> Sink:
    """Keep a table equal to the flow's current results, writing only the difference (SPEC §8).

    ``target`` is a PostgreSQL connection string or URL (then ``table`` is required)
    or a Delta table path. The table holds one row per ``key``: an epoch's row
    replaces the earlier row of its key (a window's ``update`` replaces its
    ``final``); a row with True in ``retract_column`` deletes its key; with
    ``covers=("window_start", "window_end")`` a row also deletes the rows of the
    same key without the window columns whose window it covers (sessions merged by
    a late event). Per epoch the sink computes the correction desired − persisted
    over the keys the epoch touched (every key when the table drifted, another
    replica wrote, or a periodic check is due) and appends it with a
    compare-and-set on the table's recorded upper (a version), in one
    transaction (PostgreSQL) or one commit (Delta), recording the epoch's frontier
    (per source its watermark and the records consumed, whatever the epochs' cuts);
    on a conflict it re-reads and recomputes. The executors compute and stage the correction, one Spark task
    per partition of the key; the driver mints the batch description and commits.
    Several replicas of one flow (each its own checkpoint) may write one table; a
    read-only replica writes nothing and reports its distance. The table is
    written after the epoch's job, before the epoch commits. Details, costs and
    metrics: :mod:`wire.sinks.self_correcting_sink.sink`.

    Guarantee: ``idempotent`` — a replayed epoch finds the table at its frontier
    with its rows and writes nothing; the table converges to the result collection.

    Parameters
    ----------
    target:
        ``"postgresql://..."`` / ``"host=... dbname=..."``, or a Delta table path.
    key:
        Column(s) identifying a result row, e.g. ``("origin", "window_start")``;
        integer, string, bool, date or timestamp columns.
    table:
        PostgreSQL table name (required for PostgreSQL, not allowed for Delta).
    schema:
        PostgreSQL schema of the table and of ``wire_sc_frontiers``.
    drop:
        Columns not written (default the per-run ``epoch`` and the ``emit`` kind).
    retract_column:
        Boolean column whose True rows delete their key.
    covers:
        ``(start, end)`` columns; ``start`` must be in ``key``.
    read_only:
        Start as a read-only standby (switch to write over REST or ``wire sink-mode``).
    full_check_every:
        Compare every key every N epochs (0: only on drift or another writer). Counts
        epochs only; for a bound in time when the input is quiet see ``repair_interval``.
    state_dir:
        Where to keep the desired collection; default under the flow's checkpoint.
        On a cluster it must be on storage every executor reaches (as a Parquet
        sink's path).
    partitions:
        Into how many partitions of the key the desired collection and each
        correction are split, one Spark task each. Default: Spark's
        ``defaultParallelism`` at the first run (at least 2). Fixed for the state
        directory's life: a later run keeps the recorded number.
    repair_interval:
        Bound on how long drift (a hand edit) stays when the input is quiet: when no
        epoch has come for this long (processing time; int ms, ``timedelta`` or
        ``"30s"``), a timer on the driver checks the table as an epoch with no rows
        would, at the frontier of the newest epoch, and repairs what differs; again
        every interval while no epoch comes. A check that finds no drift reads only
        the table's metadata and fingerprint. None: check only at epochs (then an
        edit stays until the next epoch). Not in read-only mode; counted in
        ``sc_quiet_checks`` (:meth:`SelfCorrectingSink.totals`).

    Returns
    -------
    Sink
        A :class:`SelfCorrectingSink`.

    Raises
    ------
    ConfigError
        On a malformed ``key``, ``table`` missing for PostgreSQL or given for Delta,
        ``covers`` not two column names with ``start`` in ``key``, ``read_only`` not a
        bool, ``full_check_every`` not an int >= 0, ``drop`` naming a key column,
        ``partitions`` not None or an int from 1 to 4096, ``repair_interval`` not None
        or a positive duration.

    Examples
    --------
    >>> sink = self_correcting("/tmp/hourly_delta", key=("origin", "window_start"))
    >>> sink.describe()
    'self_correcting delta /tmp/hourly_delta key=(origin, window_start) (idempotent)'
    """
    keys = _check_key(key)
    if not isinstance(target, str | os.PathLike) or not os.fspath(target):
        raise ConfigError("target", target, "a PostgreSQL connection string / URL or a Delta table path")
    text = os.fspath(target)
    if not isinstance(read_only, bool):
        raise ConfigError("read_only", read_only, "True or False")
    if isinstance(full_check_every, bool) or not isinstance(full_check_every, int) or full_check_every < 0:
        raise ConfigError("full_check_every", full_check_every, "an int >= 0 (0: no periodic full check)")
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int)
                                   or not 1 <= partitions <= 4096):
        raise ConfigError("partitions", partitions,
                          "None (Spark's default parallelism) or an int from 1 to 4096")
    repair_ms = None if repair_interval is None else to_millis(repair_interval, parameter="repair_interval",
                                                                  allow_zero=False)
    drops = (drop,) if isinstance(drop, str) else tuple(drop)
    if any(not isinstance(d, str) for d in drops) or set(drops) & set(keys):
        raise ConfigError("drop", drop, "column names, none of them a key column")
    if covers is not None and (not isinstance(covers, tuple | list) or len(covers) != 2
                               or not all(isinstance(c, str) for c in covers) or covers[0] not in keys):
        raise ConfigError("covers", covers, "None or (start column, end column) with the start column in key")
    if retract_column is not None and (not isinstance(retract_column, str) or retract_column in keys):
        raise ConfigError("retract_column", retract_column, "None or a boolean column name, not a key column")
    common: dict[str, Any] = dict(
        key=keys, drop=drops, retract_column=retract_column,
        covers=tuple(covers) if covers is not None else None, read_only=read_only,
        full_check_every=full_check_every, state_dir=os.fspath(state_dir) if state_dir is not None else None,
        partitions=partitions, repair_interval=repair_ms)
    if isinstance(text, str) and _is_dsn(text):
        from wire.sinks.postgres_sink.target import _check_dsn, _check_name

        if table is None:
            raise ConfigError("table", table, "the table name, required when target is a PostgreSQL DSN")
        return SelfCorrectingSink(backend="postgres", dsn=_check_dsn(text), table=_check_name("table", table),
                                  schema=_check_name("schema", schema), **common)
    if table is not None:
        raise ConfigError("table", table, "None when target is a Delta table path (table is for PostgreSQL)")
    with needs_extra("delta", "wire.sinks.self_correcting"):
        import deltalake  # noqa: F401
    return SelfCorrectingSink(backend="delta", path=text, **common)
