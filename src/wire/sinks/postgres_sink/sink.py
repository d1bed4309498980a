"""PostgreSQL sink: append exactly once (epoch marker table) or upsert by key, from the executors.

Built by :func:`postgres`. Executor tasks send their rows as CSV produced by Arrow
(vectorised) through ``COPY ... FROM STDIN``: into per-task staging tables that the
driver moves into the table in one transaction with the epoch marker (append), or
straight into the table by key (upsert).

This module holds the two sinks (the driver's commit protocol) and :func:`postgres`;
the executors' side is :mod:`wire.sinks.postgres_sink.executors`, the driver's connection
shared by both modes :mod:`wire.sinks.postgres_sink.driver`, the target table and
connection :mod:`wire.sinks.postgres_sink.target`, the types and CSV below
:mod:`wire.sinks.postgres_sink.column_types`.

Arrow → PostgreSQL types (used to create the table; an existing table must have one
of the accepted types, else :class:`~wire.errors.WireError`):

==========================================  =====================  =======================
Arrow                                        created as             also accepted
==========================================  =====================  =======================
int8, int16, uint8                           smallint               integer, bigint, numeric
int32, uint16                                integer                bigint, numeric
int64, uint32                                bigint                 numeric
uint64                                       numeric
float16, float32                             real                   double precision
float64                                      double precision
decimal(p, s)                                numeric(p, s)          numeric
string, large_string, string_view            text                   varchar
bool                                         boolean
timestamp with tz                            timestamptz
timestamp without tz                         timestamp
date32, date64                               date
time32, time64                               time
binary (all variants)                        bytea
list (all variants), struct, map             jsonb                  json
null (all values null)                       text                   any type
dictionary<_, T>                             as T
==========================================  =====================  =======================

Timestamps keep their instant (``timestamptz`` is shown in the session's zone; the
sink's own session uses UTC). Sub-microsecond digits are rounded by PostgreSQL. JSON
values are encoded as by :func:`wire.sinks.file_sinks.jsonl` (NaN → ``null``,
timestamps ISO-8601 ``Z``, binary base64). Durations have no mapping (cast them first).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

import pyarrow as pa

from wire.delivery.sink import EpochStager, Guarantee, Sink, StagedPart
from wire.errors import CheckpointError, ConfigError, WireError, needs_extra
from wire.sinks.postgres_sink.driver import _PostgresSink, _Run
from wire.sinks.postgres_sink.executors import _AppendStager, _schema_from_json, _UpsertStager
from wire.sinks.postgres_sink.target import _check_dsn, _check_key, _check_name, _connect, _move

with needs_extra("postgres", "wire.sinks.postgres"):
    import psycopg
    from psycopg import sql

__all__ = ["MARKER_TABLE", "PostgresAppendSink", "PostgresUpsertSink", "postgres"]

MARKER_TABLE = "wire_sink_epochs"
"""Name of the epoch marker table, created in the sink's ``schema`` (append mode)."""

STAGING_PREFIX = "_wire_stage_"
"""Name prefix of the append mode's per-task staging tables, in the sink's ``schema``."""

PostgresMode = Literal["append", "upsert"]
"""How a PostgreSQL sink writes (``postgres(mode=...)``)."""
MODES: tuple[PostgresMode, ...] = get_args(PostgresMode)


@dataclass(frozen=True)
class PostgresAppendSink(_PostgresSink):
    """Appends each epoch's rows exactly once; built by :func:`postgres` (``mode="append"``)."""

    guarantee: ClassVar[Guarantee] = "exactly_once"
    mode: ClassVar[str] = "append"

    def _setup(self, run: _Run, conn: psycopg.Connection) -> None:
        """Create the marker table; refuse epochs recorded under another checkpoint."""
        marker = sql.Identifier(self.schema, MARKER_TABLE)
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (flow text NOT NULL, sink text NOT NULL, "
                "epoch bigint NOT NULL, checkpoint text NOT NULL, "
                "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (flow, sink, epoch))"
            ).format(marker)
        )
        other = conn.execute(
            sql.SQL(
                "SELECT checkpoint FROM {} WHERE flow = %s AND sink = %s AND checkpoint <> %s LIMIT 1"
            ).format(marker),
            (run.flow, run.sink, run.checkpoint),
        ).fetchone()
        if other is not None:
            raise CheckpointError(
                f"{self.describe()}: {self.schema}.{MARKER_TABLE} holds epochs of flow {run.flow!r} sink "
                f"{run.sink!r} written under checkpoint {other[0]!r}, not this run's {run.checkpoint!r}: "
                "a new checkpoint restarts epoch ids, whose rows would be skipped as replays. To start "
                "the flow over, run it with fresh=True (`wire run --fresh`), which moves the table's "
                f"rows to {self.schema}.{_aside_name(self.table, other[0])} and deletes those marker "
                "rows in one transaction, handing the table to the new checkpoint; or write to "
                "another table"
            )

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Starting over: in one transaction, move the table's rows aside and drop the old epoch markers.

        Called on the driver before :meth:`open`, only when the flow starts over
        (:meth:`wire.delivery.sink.Sink.supersede`). When the marker table records
        epochs of this flow and sink under another checkpoint, one transaction copies
        the table's rows into ``<table>_superseded_<first 8 characters of the newest
        such checkpoint id>`` (created ``LIKE`` the table), deletes them from the table
        and deletes those marker rows; the new checkpoint's epochs then start at 0 in
        an empty table. The table's rows are all taken to be this sink's (an
        exactly-once append table has one writer: another flow writing the same table
        would see its rows moved too). Nothing recorded under another checkpoint:
        nothing is done.

        Raises
        ------
        WireError
            When the database cannot be reached or the transaction fails (nothing changed).
        """
        run = _Run(flow=flow_id, sink=sink_id, checkpoint=checkpoint_id)
        marker = sql.Identifier(self.schema, MARKER_TABLE)
        target = sql.Identifier(self.schema, self.table)
        try:
            conn = _connect(self.dsn, self._app(run, " start over"))
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: cannot start over: {e}") from e
        try:
            with conn.transaction():
                if not _exists(conn, marker):
                    return
                old = conn.execute(
                    sql.SQL("SELECT checkpoint FROM {} WHERE flow = %s AND sink = %s AND checkpoint <> %s "
                            "GROUP BY checkpoint ORDER BY max(committed_at) DESC").format(marker),
                    (flow_id, sink_id, checkpoint_id),
                ).fetchall()
                if not old:
                    return
                if _exists(conn, target):
                    aside = sql.Identifier(self.schema, _aside_name(self.table, old[0][0]))
                    conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(target))
                    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS)")
                                 .format(aside, target))
                    conn.execute(sql.SQL("INSERT INTO {} SELECT * FROM {}").format(aside, target))
                    conn.execute(sql.SQL("DELETE FROM {}").format(target))
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE flow = %s AND sink = %s AND checkpoint <> %s")
                    .format(marker),
                    (flow_id, sink_id, checkpoint_id),
                )
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: starting over failed (rolled back): {e}") from e
        finally:
            conn.close()

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> _Run:
        """``open``: connect and check the marker table, then drop the staging tables a crashed run left.

        Raises as :meth:`_PostgresSink._start_run` (CheckpointError: epochs of this sink
        under another checkpoint), and WireError when the staging tables cannot be dropped.
        """
        run = super()._start_run(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)
        assert run.conn is not None
        try:
            with run.conn.transaction():
                self._drop_staging(run.conn, self._staging_prefix(run))
        except psycopg.Error as e:
            run.conn.close()
            raise WireError(f"{self.describe()}: cannot open: {e}") from e
        return run

    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver: mint the epoch attempt's staging prefix; a replay of a recorded epoch stages nothing.

        The marker lookup is an optimisation (``commit_epoch`` decides); when the
        database cannot be asked, the executors stage anyway.

        Raises
        ------
        WireError
            Before :meth:`open`.
        """
        run = self._opened()
        skip = False
        with contextlib.suppress(psycopg.Error):
            if run.conn is None or run.conn.closed or run.conn.broken:
                self._connect(run)
            assert run.conn is not None
            skip = self._recorded(run.conn, run, epoch)
        attempt = secrets.token_hex(4)
        run.attempts[epoch] = attempt
        return _AppendStager(dsn=self.dsn, target=self._target(), app=self._app(run, " stage"), epoch=epoch,
                             prefix=f"{self._staging_prefix(run)}{epoch}_{attempt}_", skip=skip)

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver: in one transaction, move the receipted staging tables' rows and record the epoch.

        The transaction creates the table from the Arrow schema in the receipts (or
        checks that the existing one fits), claims ``(flow, sink, epoch)`` in the
        marker table, and, unless the marker was already there (a replay: nothing is
        inserted), ``INSERT INTO <table> SELECT ...`` from every receipted staging
        table; it then drops all of this sink's staging tables (those of failed task
        attempts too). An epoch without rows writes nothing. A dropped connection is
        reconnected once and the transaction retried.

        Raises
        ------
        WireError
            Before :meth:`open`; when the rows do not fit the table or PostgreSQL fails;
            nothing of the epoch is then written.
        """
        run = self._opened()
        run.attempts.pop(epoch, None)
        staged = [(p.receipt["table"], _schema_from_json(p.receipt["schema"]))
                  for p in parts if p.receipt.get("table")]
        self._with_reconnect(run, epoch, lambda conn: self._commit(conn, run, epoch, staged))

    def _commit(self, conn: psycopg.Connection, run: _Run, epoch: int,
                staged: list[tuple[str, pa.Schema]]) -> None:
        target = self._target()
        with conn.transaction():
            if staged:
                try:
                    schema = pa.unify_schemas([s for _, s in staged], promote_options="permissive")
                except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                    raise WireError(
                        f"{self.describe()}: epoch {epoch}: tasks staged different schemas: {e}"
                    ) from e
                if run.checked is None or not run.checked.equals(schema):
                    target.ensure(conn, schema)
                    run.checked = schema
                if not self._recorded(conn, run, epoch, claim=True):
                    types = target.column_types(conn)
                    for name, columns in staged:
                        _move(conn, target, name, columns, types)
            self._drop_staging(conn, self._staging_prefix(run))

    def _recorded(self, conn: psycopg.Connection, run: _Run, epoch: int, *, claim: bool = False) -> bool:
        """Whether the marker records ``epoch``; with ``claim``, record it when it does not."""
        marker = sql.Identifier(self.schema, MARKER_TABLE)
        if not claim:
            return conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE flow = %s AND sink = %s AND epoch = %s").format(marker),
                (run.flow, run.sink, epoch),
            ).fetchone() is not None
        claimed = conn.execute(
            sql.SQL(
                "INSERT INTO {} (flow, sink, epoch, checkpoint) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (flow, sink, epoch) DO NOTHING RETURNING epoch"
            ).format(marker),
            (run.flow, run.sink, epoch, run.checkpoint),
        ).fetchone()
        return claimed is None

    def _staging_prefix(self, run: _Run) -> str:
        """``_wire_stage_<hash of flow, sink, table>_``: names this sink's staging tables."""
        digest = hashlib.sha1(f"{run.flow}/{run.sink}/{self.table}".encode()).hexdigest()[:10]
        return f"{STAGING_PREFIX}{digest}_"

    def _drop_staging(self, conn: psycopg.Connection, prefix: str) -> None:
        """Drop every table of the sink's schema whose name starts with ``prefix``."""
        like = prefix.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"
        names = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE %s",
            (self.schema, like),
        ).fetchall()]
        for name in names:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.schema, name)))


@dataclass(frozen=True)
class PostgresUpsertSink(_PostgresSink):
    """Upserts each epoch's rows by ``key``; built by :func:`postgres` (``mode="upsert"``)."""

    guarantee: ClassVar[Guarantee] = "idempotent"
    mode: ClassVar[str] = "upsert"

    key: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Validate ``key`` at flow-build time."""
        object.__setattr__(self, "key", _check_key(self.key))

    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver: the stager with which each executor task upserts its own rows.

        Raises
        ------
        WireError
            Before :meth:`open`.
        """
        run = self._opened()
        return _UpsertStager(dsn=self.dsn, target=self._target(), app=self._app(run, " upsert"), epoch=epoch)

    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver: nothing to publish, every task committed its own upsert (idempotent).

        Raises
        ------
        WireError
            Before :meth:`open`.
        """
        self._opened()


def _aside_name(table: str, checkpoint: str) -> str:
    """``<table>_superseded_<8 characters of checkpoint>``, within PostgreSQL's 63 bytes."""
    stem = table.encode()[:40].decode("utf-8", "ignore")
    return f"{stem}_superseded_{''.join(c for c in checkpoint if c.isalnum())[:8]}"


def _exists(conn: psycopg.Connection, name: sql.Identifier) -> bool:
    found = conn.execute("SELECT to_regclass(%s)", (name.as_string(conn),)).fetchone()
    return found is not None and found[0] is not None


def postgres(
    dsn: str,
    *,
    table: str,
    mode: PostgresMode = "append",
    key: str | Sequence[str] | None = None,
    schema: str = "public",
) -> Sink:
    """Write each epoch's rows to a PostgreSQL table from the executors; the driver commits.

    ``mode="append"`` — guarantee ``exactly_once``, two-phase (SPEC §6). **Each
    executor task** with rows connects and, in one transaction, creates its own
    UNLOGGED staging table (``<schema>._wire_stage_<sink hash>_<epoch>_<attempt>_...``)
    and COPYs its rows into it; the receipt names the table and the rows' Arrow
    schema. **The driver** then, in one transaction, creates the target table from
    that schema (or checks that the existing one fits), claims ``(flow, sink, epoch)``
    in the marker table ``<schema>.wire_sink_epochs`` (``flow, sink, epoch,
    checkpoint, committed_at``; primary key ``(flow, sink, epoch)``; created at
    ``open``), copies the rows of the receipted staging tables only (``INSERT ... SELECT``),
    drops this sink's staging tables (a failed task attempt's too) and commits: rows
    and marker commit together. A crash before that commit writes nothing (``open``
    drops the staging tables it left); a replayed epoch finds its marker, inserts
    nothing (``prepare_epoch`` already finds it and the executors stage nothing).
    The marker binds (flow, sink) to the flow's checkpoint: ``open`` refuses with
    :class:`~wire.errors.CheckpointError` if the marker holds epochs of the same flow
    and sink under another checkpoint (epoch ids restart). Starting the flow over
    (``fresh=True``) first moves the table's rows to ``<table>_superseded_<id>`` and
    deletes those markers, in one transaction (:meth:`PostgresAppendSink.supersede`).

    ``mode="upsert"`` — guarantee ``idempotent``. ``key`` names the columns of a
    primary key (created with the table) or unique constraint (existing table).
    **Each executor task** with rows connects, creates the table if missing (under an
    advisory lock, so concurrent tasks do not race) or checks it, keeps the last of
    its rows per key, COPYs them into a temp table and ``INSERT ... ON CONFLICT (key)
    DO UPDATE`` sets all other columns, in its own transaction; the driver commits
    nothing. A replay rewrites the same values. Rows with the same key in different
    Spark partitions of one epoch are applied in no defined order (a keyed window's
    output never has them: it is partitioned by key group). Key columns must not
    hold nulls.

    In both modes ``open`` (driver, run start) connects; the table is created from
    the first epoch's Arrow schema (types: see :mod:`wire.sinks.postgres_sink.sink`), or
    an existing table must have compatible columns (it may have more, with
    defaults); the driver reconnects once when its connection dropped and retries
    its transaction. Empty epochs write nothing. ``close`` (driver, run end)
    disconnects. No data row passes through the driver; the executors must reach
    the database with ``dsn`` just as the driver does. Identifiers are quoted, so
    names are case-sensitive.

    Parameters
    ----------
    dsn:
        libpq connection string or URL, e.g. ``"host=db dbname=wire user=wire"``; it is
        never shown in ``repr`` or :meth:`~wire.delivery.sink.Sink.describe`.
    table:
        Table name (not quoted, not schema-qualified).
    mode:
        ``"append"`` or ``"upsert"``.
    key:
        Upsert key column(s); required for ``"upsert"``, not allowed for ``"append"``.
    schema:
        Schema of the table and of the marker table; created if missing.

    Returns
    -------
    Sink
        A :class:`PostgresAppendSink` or :class:`PostgresUpsertSink`.

    Raises
    ------
    ConfigError
        When ``mode`` is unknown, ``key`` is missing for upsert or given for append, or
        ``dsn``, ``table``, ``schema`` are malformed. On the executors or at
        ``commit_epoch``, WireError when an existing table does not fit the rows or
        PostgreSQL rejects them.

    Examples
    --------
    >>> sink = postgres("dbname=wire", table="delays", mode="upsert", key=("origin", "window_start"))
    >>> sink.describe()
    'postgres wire public.delays upsert (idempotent)'
    """
    if mode not in MODES:
        raise ConfigError("mode", mode, "'append' (exactly-once) or 'upsert' (idempotent, needs key)")
    dsn = _check_dsn(dsn)
    table = _check_name("table", table)
    schema = _check_name("schema", schema)
    if mode == "append":
        if key is not None:
            raise ConfigError("key", key, "None with mode='append' (key is for mode='upsert')")
        return PostgresAppendSink(dsn=dsn, table=table, schema=schema)
    if key is None:
        raise ConfigError("key", key, "the upsert key column(s), required for mode='upsert'")
    return PostgresUpsertSink(dsn=dsn, table=table, schema=schema, key=_check_key(key))
