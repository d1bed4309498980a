"""PostgreSQL sink: append exactly once (epoch marker table) or upsert by key.

Built by :func:`postgres`. Rows travel as CSV produced by Arrow (vectorised) through
``COPY ... FROM STDIN``; each epoch is one transaction.

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
values are encoded as by :func:`wire.connectors.sinks.jsonl` (NaN → ``null``,
timestamps ISO-8601 ``Z``, binary base64). Durations have no mapping (cast them first).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from wire.connectors.arrow_kinds import is_binary, is_nested
from wire.connectors.sinks import Sink, _to_json_array
from wire.errors import CheckpointError, ConfigError, WireError

__all__ = ["MARKER_TABLE", "PostgresAppendSink", "PostgresUpsertSink", "postgres"]

MARKER_TABLE = "wire_sink_epochs"
"""Name of the epoch marker table, created in the sink's ``schema`` (append mode)."""

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


# --- the sinks -----------------------------------------------------------------------


@dataclass
class _Run:
    """What a sink holds while a flow runs (between ``open`` and ``close``)."""

    flow: str
    sink: str
    checkpoint: str
    conn: psycopg.Connection | None = None
    checked: pa.Schema | None = None  # the Arrow schema last verified against the table


@dataclass(frozen=True)
class _PostgresSink(Sink):
    """Shared by both modes: connection, table creation and checks, COPY."""

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

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Write the epoch's rows in one transaction (driver, once per epoch, before it commits).

        An empty table writes nothing. The table is created from the Arrow schema on
        the first write. When the connection turns out to be dropped, it reconnects
        once and retries the whole (rolled back) transaction; the retry is safe in
        both modes because the marker / the upsert make it idempotent.

        Raises
        ------
        WireError
            When the rows do not fit the table, or PostgreSQL rejects them; nothing
            of the epoch is then written.
        """
        run = self._run
        if run is None:
            raise WireError(f"{self.describe()}: write_epoch before open")
        if table.num_rows == 0:
            return
        try:
            if run.conn is None:  # an earlier reconnect failed
                self._connect(run)
            self._write(run, epoch, table)
        except psycopg.OperationalError as e:
            if run.conn is not None and not (run.conn.closed or run.conn.broken):
                raise WireError(f"{self.describe()}: epoch {epoch} not written (rolled back): {e}") from e
            try:
                self._connect(run)
                self._write(run, epoch, table)
            except psycopg.Error as again:
                raise WireError(
                    f"{self.describe()}: epoch {epoch} not written after reconnecting: {again}"
                ) from again
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: epoch {epoch} not written (rolled back): {e}") from e

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

    # --- per-mode hooks ----------------------------------------------------------

    def _setup(self, run: _Run, conn: psycopg.Connection) -> None:
        """Prepare the database after connecting (outside a transaction)."""

    def _write_rows(self, run: _Run, conn: psycopg.Connection, epoch: int, table: pa.Table) -> None:
        raise NotImplementedError

    def _constraint(self) -> sql.Composable | None:
        """Extra table constraint when the sink creates the table."""
        return None

    def _check_table_extra(self, conn: psycopg.Connection, oid: int, table: pa.Table) -> list[str]:
        """Further problems of an existing table for this mode."""
        return []

    # --- shared machinery --------------------------------------------------------

    @property
    def _target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)

    def _connect(self, run: _Run) -> None:
        if run.conn is not None:
            run.conn.close()
            run.conn = None
        app = f"wire {run.flow}/{run.sink}"[:_MAX_IDENT]
        conn = psycopg.connect(self.dsn, autocommit=True, application_name=app)
        try:
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute("SET client_encoding TO 'UTF8'")
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            self._setup(run, conn)
        except BaseException:
            conn.close()
            raise
        run.conn = conn

    def _write(self, run: _Run, epoch: int, table: pa.Table) -> None:
        assert run.conn is not None
        if run.checked is None or not run.checked.equals(table.schema):
            self._ensure_table(run.conn, table)
            run.checked = table.schema
        with run.conn.transaction():
            self._write_rows(run, run.conn, epoch, table)

    def _ensure_table(self, conn: psycopg.Connection, table: pa.Table) -> None:
        """Create the table from the Arrow schema, or check that the existing one fits."""
        names = table.column_names
        if len(set(names)) != len(names):
            raise WireError(f"{self.describe()}: duplicate column names in {names}")
        too_long = [n for n in names if len(n.encode()) > _MAX_IDENT or not n]
        if too_long:
            raise WireError(
                f"{self.describe()}: column names empty or longer than {_MAX_IDENT} bytes: {too_long}"
            )
        columns = [
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.type, self)[0]))
            for f in table.schema
        ]
        constraint = self._constraint()
        if constraint is not None:
            columns.append(constraint)
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._target, sql.SQL(", ").join(columns))
        )
        row = conn.execute(
            "SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s",
            (self.schema, self.table),
        ).fetchone()
        if row is None or row[1] not in ("r", "p"):
            raise WireError(f"{self.describe()}: {self.schema}.{self.table} exists but is not a table")
        oid = row[0]
        actual = dict(
            conn.execute(
                "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
                (oid,),
            ).fetchall()
        )
        problems = []
        for f in table.schema:
            _, accepted = _pg_type(f.type, self)
            if f.name not in actual:
                problems.append(f"column {f.name!r} is missing")
            elif accepted and actual[f.name] not in accepted:
                problems.append(
                    f"column {f.name!r} is {actual[f.name]} but Arrow type {f.type} needs one of "
                    f"{', '.join(sorted(accepted))}"
                )
        problems += self._check_table_extra(conn, oid, table)
        if problems:
            raise WireError(
                f"{self.describe()}: existing table {self.schema}.{self.table} does not fit the rows: "
                f"{'; '.join(problems)}. Alter or drop the table, or write to another one"
            )


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

    def _write_rows(self, run: _Run, conn: psycopg.Connection, epoch: int, table: pa.Table) -> None:
        """Claim the epoch in the marker table, then COPY; a recorded epoch is a replay: skip."""
        marker = sql.Identifier(self.schema, MARKER_TABLE)
        claimed = conn.execute(
            sql.SQL(
                "INSERT INTO {} (flow, sink, epoch, checkpoint) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (flow, sink, epoch) DO NOTHING RETURNING epoch"
            ).format(marker),
            (run.flow, run.sink, epoch, run.checkpoint),
        ).fetchone()
        if claimed is None:
            return  # committed by an earlier attempt of this epoch
        _copy_csv(conn, self._target, table)


@dataclass(frozen=True)
class PostgresUpsertSink(_PostgresSink):
    """Upserts each epoch's rows by ``key``; built by :func:`postgres` (``mode="upsert"``)."""

    guarantee: ClassVar[str] = "idempotent"
    mode: ClassVar[str] = "upsert"

    key: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Validate ``key`` at flow-build time."""
        object.__setattr__(self, "key", _check_key(self.key))

    def _ensure_table(self, conn: psycopg.Connection, table: pa.Table) -> None:
        missing = [k for k in self.key if k not in table.column_names]
        if missing:
            raise WireError(
                f"{self.describe()}: key column(s) {missing} not among the rows' columns {table.column_names}"
            )
        super()._ensure_table(conn, table)

    def _constraint(self) -> sql.Composable | None:
        return sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, self.key)))

    def _check_table_extra(self, conn: psycopg.Connection, oid: int, table: pa.Table) -> list[str]:
        problems = []
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
            problems.append(f"no primary key or unique constraint on exactly {self.key} for ON CONFLICT")
        return problems

    def _write_rows(self, run: _Run, conn: psycopg.Connection, epoch: int, table: pa.Table) -> None:
        """Keep the last row per key, COPY into a temp table, ``INSERT ... ON CONFLICT DO UPDATE``."""
        for k in self.key:
            if table.column(k).null_count:
                raise WireError(f"{self.describe()}: epoch {epoch}: key column {k!r} has nulls")
        rows = _last_per_key(table, self.key)
        stage = sql.Identifier("_wire_upsert_stage")
        cols = sql.SQL(", ").join(map(sql.Identifier, rows.column_names))
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
                stage, cols, self._target
            )
        )
        _copy_csv(conn, stage, rows)
        others = [c for c in rows.column_names if c not in self.key]
        if others:
            action = sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in others)
            )
        else:
            action = sql.SQL("DO NOTHING")
        conn.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
                self._target, cols, cols, stage, sql.SQL(", ").join(map(sql.Identifier, self.key)), action
            )
        )


def postgres(
    dsn: str,
    *,
    table: str,
    mode: str = "append",
    key: str | Sequence[str] | None = None,
    schema: str = "public",
) -> Sink:
    """Write each epoch's rows to a PostgreSQL table, in one transaction per epoch.

    ``mode="append"`` — guarantee ``exactly_once``. In one transaction per epoch the
    sink claims ``(flow, sink, epoch)`` in the marker table ``<schema>.wire_sink_epochs``
    (``flow, sink, epoch, checkpoint, committed_at``; primary key ``(flow, sink,
    epoch)``; created at ``open``), COPYs the rows and commits: rows and marker commit
    together, so a crash before the commit writes nothing, and a replayed epoch finds
    its marker and is skipped. The marker binds (flow, sink) to the flow's checkpoint:
    ``open`` refuses with :class:`~wire.errors.CheckpointError` if the marker holds
    epochs of the same flow and sink under another checkpoint (epoch ids restart).

    ``mode="upsert"`` — guarantee ``idempotent``. ``key`` names the columns of a
    primary key (created with the table) or unique constraint (existing table).
    Per epoch, rows with the same key keep only the last one; they are COPYed into a
    temp table and ``INSERT ... ON CONFLICT (key) DO UPDATE`` sets all other columns,
    so a replay rewrites the same values. Key columns must not hold nulls.

    In both modes ``open`` (driver, run start) connects; ``write_epoch`` (driver, once
    per epoch, before the epoch commits) creates the table from the first epoch's
    Arrow schema (types: see :mod:`wire.connectors.postgres`), or checks that an
    existing table has compatible columns (it may have more, with defaults), writes
    and commits; a dropped connection is reconnected once and the epoch retried.
    Empty epochs write nothing. ``close`` (driver, run end) disconnects. Identifiers
    are quoted, so names are case-sensitive.

    Parameters
    ----------
    dsn:
        libpq connection string or URL, e.g. ``"host=db dbname=wire user=wire"``; it is
        never shown in ``repr`` or :meth:`~wire.connectors.sinks.Sink.describe`.
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
        ``dsn``, ``table``, ``schema`` are malformed. At write time, WireError when an
        existing table does not fit the rows or PostgreSQL rejects them.

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


def _pg_type(t: pa.DataType, sink: Sink) -> tuple[str, frozenset[str]]:
    """(SQL type to create, ``pg_type.typname`` values accepted; empty = any) for Arrow ``t``."""
    if pa.types.is_dictionary(t):
        return _pg_type(t.value_type, sink)
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
    raise WireError(f"{sink.describe()}: no PostgreSQL type for Arrow type {t}; cast the column first")


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
