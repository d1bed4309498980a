"""PostgreSQL sink: append exactly once (epoch marker table) or upsert by key, from the executors.

Built by :func:`postgres`. Executor tasks send their rows as CSV produced by Arrow
(vectorised) through ``COPY ... FROM STDIN``: into per-task staging tables that the
driver moves into the table in one transaction with the epoch marker (append), or
straight into the table by key (upsert).

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

import base64
import contextlib
import hashlib
import io
import json
import secrets
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from wire.delivery.sink import EpochStager, ExecutorSink, Sink, StagedPart
from wire.errors import CheckpointError, ConfigError, WireError, needs_extra
from wire.sinks.arrow_kinds import is_binary, is_nested
from wire.sinks.json_rows import _to_json_array

with needs_extra("postgres", "wire.sinks.postgres"):
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

__all__ = ["MARKER_TABLE", "PostgresAppendSink", "PostgresUpsertSink", "postgres"]

MARKER_TABLE = "wire_sink_epochs"
"""Name of the epoch marker table, created in the sink's ``schema`` (append mode)."""

STAGING_PREFIX = "_wire_stage_"
"""Name prefix of the append mode's per-task staging tables, in the sink's ``schema``."""

MODES = ("append", "upsert")
_MAX_IDENT = 63  # PostgreSQL's NAMEDATALEN - 1: longer names are silently truncated
_CSV = pa_csv.WriteOptions(include_header=False, quoting_style="all_valid", batch_size=8192)
_BATCH_ROWS = 65_536


# --- configuration --------------------------------------------------------------------


def _check_name(parameter: str, value: object) -> str:
    accepted = f"a non-empty identifier of at most {_MAX_IDENT} bytes"
    if not isinstance(value, str) or not value or len(value.encode()) > _MAX_IDENT or "\x00" in value:
        raise ConfigError(parameter, value, accepted)
    return value


def _check_dsn(dsn: object) -> str:
    accepted = "a libpq connection string or postgresql:// URL"
    if not isinstance(dsn, str):
        raise ConfigError("dsn", dsn, accepted)
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise ConfigError("dsn", "<unparsable, not shown>", accepted) from None
    return dsn


def _check_key(key: object) -> tuple[str, ...]:
    accepted = "a column name or a non-empty tuple of distinct column names (required for mode='upsert')"
    names = (key,) if isinstance(key, str) else key
    if not isinstance(names, tuple | list) or not names:
        raise ConfigError("key", key, accepted)
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ConfigError("key", key, accepted)
    return tuple(names)


# --- shared by the driver and the executors --------------------------------------------


def _connect(dsn: str, app: str) -> psycopg.Connection:
    """An autocommit connection in UTC and UTF-8, named ``app`` in ``pg_stat_activity``."""
    conn = psycopg.connect(dsn, autocommit=True, application_name=app[:_MAX_IDENT])
    try:
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("SET client_encoding TO 'UTF8'")
    except BaseException:
        conn.close()
        raise
    return conn


def _schema_to_json(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _schema_from_json(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass(frozen=True)
class _Target:
    """The sink's table as both the driver and the executors check it (picklable)."""

    schema: str
    table: str
    key: tuple[str, ...]
    """Upsert key; empty in append mode."""
    where: str
    """The sink's :meth:`~wire.delivery.sink.Sink.describe`, for messages."""

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    def ensure(self, conn: psycopg.Connection, schema: pa.Schema) -> None:
        """Create the table from the Arrow schema, or check that the existing one fits.

        Runs in its own transaction (a savepoint when ``conn`` is in one) under an
        advisory lock on the table's name, so that concurrent tasks creating the same
        table wait for each other instead of failing.
        """
        names = schema.names
        if len(set(names)) != len(names):
            raise WireError(f"{self.where}: duplicate column names in {names}")
        too_long = [n for n in names if len(n.encode()) > _MAX_IDENT or not n]
        if too_long:
            raise WireError(f"{self.where}: column names empty or longer than {_MAX_IDENT} bytes: {too_long}")
        missing = [k for k in self.key if k not in names]
        if missing:
            raise WireError(f"{self.where}: key column(s) {missing} not among the rows' columns {names}")
        columns = [
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.type, self.where)[0]))
            for f in schema
        ]
        if self.key:
            keys = sql.SQL(", ").join(map(sql.Identifier, self.key))
            columns.append(sql.SQL("PRIMARY KEY ({})").format(keys))
        with conn.transaction():
            lock = f"wire table {self.schema}.{self.table}"
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            create = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})")
            conn.execute(create.format(self.ident, sql.SQL(", ").join(columns)))
            self._check(conn, schema)

    def column_types(self, conn: psycopg.Connection) -> dict[str, str]:
        """The table's columns and their SQL types (``format_type``)."""
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (self.schema, self.table),
        ).fetchall()
        return dict(rows)

    def _check(self, conn: psycopg.Connection, schema: pa.Schema) -> None:
        row = conn.execute(
            "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (self.schema, self.table),
        ).fetchone()
        if row is None or row[1] not in ("r", "p"):
            raise WireError(f"{self.where}: {self.schema}.{self.table} exists but is not a table")
        oid = row[0]
        actual: dict[str, str] = dict(
            conn.execute(
                "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
                (oid,),
            ).fetchall()
        )
        problems = []
        for f in schema:
            _, accepted = _pg_type(f.type, self.where)
            if f.name not in actual:
                problems.append(f"column {f.name!r} is missing")
            elif accepted and actual[f.name] not in accepted:
                problems.append(
                    f"column {f.name!r} is {actual[f.name]} but Arrow type {f.type} needs one of "
                    f"{', '.join(sorted(accepted))}"
                )
        if self.key:
            problems += self._check_unique(conn, oid)
        if problems:
            raise WireError(
                f"{self.where}: existing table {self.schema}.{self.table} does not fit the rows: "
                f"{'; '.join(problems)}. Alter or drop the table, or write to another one"
            )

    def _check_unique(self, conn: psycopg.Connection, oid: int) -> list[str]:
        rows = conn.execute(
            "SELECT i.indexrelid, a.attname FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL "
            "AND k.ord <= i.indnkeyatts",
            (oid,),
        ).fetchall()
        unique: dict[int, set[str]] = {}
        for index, column in rows:
            unique.setdefault(index, set()).add(column)
        if set(self.key) not in unique.values():
            return [f"no primary key or unique constraint on exactly {self.key} for ON CONFLICT"]
        return []


# --- executors ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _AppendStager(EpochStager):
    """Executor side of append mode: COPY the task's rows into its own staging table."""

    dsn: str = field(repr=False)
    target: _Target
    app: str
    epoch: int
    prefix: str
    """``<staging prefix><epoch>_<attempt>_``: the task appends ``<partition>_<random>``."""
    skip: bool = False
    """The epoch's marker is already there (a replay): stage nothing."""

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Create ``<prefix><partition>_<random>`` (UNLOGGED) and COPY the rows into it, in one transaction.

        Raises
        ------
        WireError
            When a column has no PostgreSQL type or PostgreSQL rejects the rows (the
            transaction is rolled back: no staging table is left).
        """
        if self.skip:
            return StagedPart(partition, 0, 0, {"table": None, "schema": None})
        name = f"{self.prefix}{partition}_{secrets.token_hex(3)}"
        columns = [
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.type, self.target.where)[0]))
            for f in table.schema
        ]
        names = table.column_names
        if len(set(names)) != len(names):
            raise WireError(f"{self.target.where}: duplicate column names in {names}")
        staging = sql.Identifier(self.target.schema, name)
        try:
            with closing(_connect(self.dsn, self.app)) as conn, conn.transaction():
                create = sql.SQL("CREATE UNLOGGED TABLE {} ({})")
                conn.execute(create.format(staging, sql.SQL(", ").join(columns)))
                _copy_csv(conn, staging, table)
        except psycopg.Error as e:
            raise WireError(f"{self.target.where}: epoch {self.epoch} not written (rolled back): {e}") from e
        receipt = {"table": name, "schema": _schema_to_json(table.schema)}
        return StagedPart(partition, table.num_rows, table.nbytes, receipt)


@dataclass(frozen=True)
class _UpsertStager(EpochStager):
    """Executor side of upsert mode: upsert the task's rows by key, in the task's own transaction."""

    dsn: str = field(repr=False)
    target: _Target
    app: str
    epoch: int

    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Keep the last row per key, COPY into a temp table, ``INSERT ... ON CONFLICT DO UPDATE``, commit.

        Raises
        ------
        WireError
            When a key column is missing or has nulls, the table does not fit, or
            PostgreSQL rejects the rows (the task's transaction is rolled back).
        """
        for k in self.target.key:
            if k in table.column_names and table.column(k).null_count:
                raise WireError(f"{self.target.where}: epoch {self.epoch}: key column {k!r} has nulls")
        try:
            with closing(_connect(self.dsn, self.app)) as conn:
                self.target.ensure(conn, table.schema)
                with conn.transaction():
                    _upsert(conn, self.target, _last_per_key(table, self.target.key))
        except psycopg.Error as e:
            raise WireError(f"{self.target.where}: epoch {self.epoch} not written (rolled back): {e}") from e
        return StagedPart(partition, table.num_rows, table.nbytes, {})


def _upsert(conn: psycopg.Connection, target: _Target, rows: pa.Table) -> None:
    stage = sql.Identifier("_wire_upsert_stage")
    cols = sql.SQL(", ").join(map(sql.Identifier, rows.column_names))
    keys = sql.SQL(", ").join(map(sql.Identifier, target.key))
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
            stage, cols, target.ident
        )
    )
    _copy_csv(conn, stage, rows)
    others = [c for c in rows.column_names if c not in target.key]
    action: sql.Composable
    if others:
        action = sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)
        )
    else:
        action = sql.SQL("DO NOTHING")
    conn.execute(  # in key order, so that concurrent tasks lock rows in the same order
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ORDER BY {} ON CONFLICT ({}) {}").format(
            target.ident, cols, cols, stage, keys, keys, action
        )
    )


# --- the sinks (driver) -------------------------------------------------------------------


@dataclass
class _Run:
    """What a sink holds while a flow runs (between ``open`` and ``close``)."""

    flow: str
    sink: str
    checkpoint: str
    conn: psycopg.Connection | None = None
    checked: pa.Schema | None = None  # the Arrow schema last verified against the table
    attempts: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _PostgresSink(ExecutorSink):
    """Shared by both modes: the driver's connection and its reconnect."""

    mode: ClassVar[str]

    dsn: str = field(repr=False)
    table: str
    schema: str = "public"
    _run: _Run | None = field(default=None, init=False, repr=False, compare=False)

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Connect (driver, run start, before the first epoch) and create ``schema`` if missing.

        Raises
        ------
        WireError
            When the database cannot be reached or set up.
        CheckpointError
            Append mode: the marker table holds this flow's and sink's epochs under
            another checkpoint (see :func:`postgres`).
        """
        self.close()
        run = _Run(flow=flow_id, sink=sink_id, checkpoint=checkpoint_id)
        try:
            self._connect(run)
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: cannot open: {e}") from e
        object.__setattr__(self, "_run", run)

    def close(self) -> None:
        """Close the connection (driver, run end); every written epoch is already committed."""
        run = self._run
        object.__setattr__(self, "_run", None)
        if run is not None and run.conn is not None:
            run.conn.close()

    def describe(self) -> str:
        """E.g. ``"postgres wire@db.example public.flights append (exactly_once)"`` (no password)."""
        info = conninfo_to_dict(self.dsn)
        where = str(info.get("dbname") or "(default db)")
        if info.get("host"):
            where += f"@{info['host']}"
        return f"postgres {where} {self.schema}.{self.table} {self.mode} ({self.guarantee})"

    # --- shared machinery --------------------------------------------------------

    def _target(self) -> _Target:
        return _Target(self.schema, self.table, getattr(self, "key", ()), self.describe())

    def _app(self, run: _Run, role: str = "") -> str:
        return f"wire {run.flow}/{run.sink}{role}"

    def _opened(self) -> _Run:
        if self._run is None:
            raise WireError(f"{self.describe()}: epoch written before open")
        return self._run

    def _setup(self, run: _Run, conn: psycopg.Connection) -> None:
        """Prepare the database after connecting (outside a transaction)."""

    def _connect(self, run: _Run) -> None:
        if run.conn is not None:
            run.conn.close()
            run.conn = None
        conn = _connect(self.dsn, self._app(run))
        try:
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            self._setup(run, conn)
        except BaseException:
            conn.close()
            raise
        run.conn = conn

    def _with_reconnect(self, run: _Run, epoch: int, work: Callable[[psycopg.Connection], None]) -> None:
        """Run ``work`` on the driver's connection; reconnect once and retry it when the connection dropped.

        ``work`` must be one transaction, safe to retry after a rollback.
        """
        try:
            if run.conn is None:  # an earlier reconnect failed
                self._connect(run)
            assert run.conn is not None
            work(run.conn)
        except psycopg.OperationalError as e:
            if run.conn is not None and not (run.conn.closed or run.conn.broken):
                raise WireError(f"{self.describe()}: epoch {epoch} not written (rolled back): {e}") from e
            try:
                self._connect(run)
                assert run.conn is not None
                work(run.conn)
            except psycopg.Error as again:
                raise WireError(
                    f"{self.describe()}: epoch {epoch} not written after reconnecting: {again}"
                ) from again
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: epoch {epoch} not written (rolled back): {e}") from e


@dataclass(frozen=True)
class PostgresAppendSink(_PostgresSink):
    """Appends each epoch's rows exactly once; built by :func:`postgres` (``mode="append"``)."""

    guarantee: ClassVar[str] = "exactly_once"
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
                f"{run.sink!r} written under checkpoint {other[0]!r}, not {run.checkpoint!r}; a new "
                "checkpoint restarts epoch ids, whose rows would be skipped as replays. To start over, "
                f"delete those marker rows (and the rows they wrote), or use another sink id or table"
            )

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """Connect as :meth:`_PostgresSink.open` does, then drop the staging tables a crashed run left.

        Raises
        ------
        WireError
            When the database cannot be reached or set up.
        CheckpointError
            The marker table holds this flow's and sink's epochs under another
            checkpoint (see :func:`postgres`).
        """
        super().open(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)
        run = self._opened()
        assert run.conn is not None
        try:
            with run.conn.transaction():
                self._drop_staging(run.conn, self._staging_prefix(run))
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: cannot open: {e}") from e

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


def _move(conn: psycopg.Connection, target: _Target, staging: str, columns: pa.Schema,
          types: dict[str, str]) -> None:
    """``INSERT INTO target SELECT ... FROM staging``, each column cast to the target column's type."""
    select = [
        sql.SQL("CAST({} AS {})").format(
            sql.SQL("NULL") if pa.types.is_null(f.type) else sql.Identifier(f.name), sql.SQL(types[f.name])
        )
        for f in columns
    ]
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
            target.ident,
            sql.SQL(", ").join(sql.Identifier(f.name) for f in columns),
            sql.SQL(", ").join(select),
            sql.Identifier(target.schema, staging),
        )
    )


@dataclass(frozen=True)
class PostgresUpsertSink(_PostgresSink):
    """Upserts each epoch's rows by ``key``; built by :func:`postgres` (``mode="upsert"``)."""

    guarantee: ClassVar[str] = "idempotent"
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


def postgres(
    dsn: str,
    *,
    table: str,
    mode: str = "append",
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
    and sink under another checkpoint (epoch ids restart).

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
    the first epoch's Arrow schema (types: see :mod:`wire.sinks.postgres_sink`), or
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


# --- Arrow → PostgreSQL ---------------------------------------------------------------

_INTS: dict[str, tuple[str, frozenset[str]]] = {
    "int8": ("smallint", frozenset({"int2", "int4", "int8", "numeric"})),
    "int16": ("smallint", frozenset({"int2", "int4", "int8", "numeric"})),
    "uint8": ("smallint", frozenset({"int2", "int4", "int8", "numeric"})),
    "int32": ("integer", frozenset({"int4", "int8", "numeric"})),
    "uint16": ("integer", frozenset({"int4", "int8", "numeric"})),
    "int64": ("bigint", frozenset({"int8", "numeric"})),
    "uint32": ("bigint", frozenset({"int8", "numeric"})),
    "uint64": ("numeric", frozenset({"numeric"})),
}


def _pg_type(t: pa.DataType, where: str) -> tuple[str, frozenset[str]]:
    """(SQL type to create, ``pg_type.typname`` values accepted; empty = any) for Arrow ``t``."""
    if pa.types.is_dictionary(t):
        return _pg_type(t.value_type, where)
    if pa.types.is_integer(t):
        return _INTS[str(t)]
    if pa.types.is_floating(t):
        if t.bit_width == 64:
            return "double precision", frozenset({"float8"})
        return "real", frozenset({"float4", "float8"})
    if pa.types.is_decimal(t):
        return f"numeric({t.precision}, {t.scale})", frozenset({"numeric"})
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text", frozenset({"text", "varchar"})
    if pa.types.is_boolean(t):
        return "boolean", frozenset({"bool"})
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return "timestamp without time zone", frozenset({"timestamp"})
        return "timestamp with time zone", frozenset({"timestamptz"})
    if pa.types.is_date(t):
        return "date", frozenset({"date"})
    if pa.types.is_time(t):
        return "time without time zone", frozenset({"time"})
    if is_binary(t):
        return "bytea", frozenset({"bytea"})
    if is_nested(t):
        return "jsonb", frozenset({"jsonb", "json"})
    if pa.types.is_null(t):
        return "text", frozenset()
    raise WireError(f"{where}: no PostgreSQL type for Arrow type {t}; cast the column first")


def _csv_ready(arr: pa.Array) -> pa.Array:
    """Rewrite a column so that Arrow's CSV writer emits text PostgreSQL parses as intended."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _csv_ready(arr.dictionary_decode())
    if pa.types.is_string_view(t):
        return arr.cast(pa.string())
    if pa.types.is_float16(t):
        return arr.cast(pa.float32())
    if is_binary(t):
        hexed = [None if b is None else "\\x" + b.hex() for b in arr.to_pylist()]
        return pa.array(hexed, pa.string())
    if is_nested(t):
        dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
        values = _to_json_array(arr).to_pylist()
        return pa.array([None if v is None else dumps(v) for v in values], pa.string())
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    return arr


def _copy_csv(conn: psycopg.Connection, target: sql.Composable, table: pa.Table) -> None:
    """COPY ``table`` into ``target`` (its columns by name) as CSV written by Arrow.

    Every valid value is quoted and nulls are empty and unquoted, which is exactly how
    PostgreSQL's CSV format tells an empty string from NULL.
    """
    cols = sql.SQL(", ").join(map(sql.Identifier, table.column_names))
    query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, cols)
    with conn.cursor().copy(query) as copy:
        for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
            ready = pa.RecordBatch.from_arrays(
                [_csv_ready(c) for c in batch.columns], names=[f"c{i}" for i in range(batch.num_columns)]
            )
            buf = io.BytesIO()
            pa_csv.write_csv(ready, buf, _CSV)
            copy.write(buf.getbuffer())


def _last_per_key(table: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """Keep, for every key, only its last row (rows otherwise in their original order)."""
    row = "__wire_row"
    while row in key:
        row += "_"
    numbered = table.select(list(key)).append_column(row, pa.array(range(table.num_rows), pa.int64()))
    last = numbered.group_by(list(key), use_threads=False).aggregate([(row, "max")]).column(f"{row}_max")
    if len(last) == table.num_rows:
        return table
    return table.take(pc.take(last, pc.sort_indices(last)))
