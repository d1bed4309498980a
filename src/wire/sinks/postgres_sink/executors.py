"""The executors' side of the PostgreSQL sinks: what each Spark task does with its rows.

Append mode (:class:`_AppendStager`): COPY the task's rows into its own staging
table, named in the receipt with the rows' Arrow schema (:func:`_schema_to_json`);
the driver moves them. Upsert mode (:class:`_UpsertStager`): keep the last row per
key (:func:`_last_per_key`) and upsert them in the task's own transaction
(:func:`_upsert`).
"""

from __future__ import annotations

import base64
import secrets
from contextlib import closing
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from wire.delivery.sink import EpochStager, StagedPart
from wire.errors import WireError, needs_extra
from wire.sinks.postgres_sink.column_types import _copy_csv, _pg_type
from wire.sinks.postgres_sink.target import _connect, _Target

with needs_extra("postgres", "wire.sinks.postgres"):
    import psycopg
    from psycopg import sql


def _schema_to_json(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _schema_from_json(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass(frozen=True)
class _PgStager(EpochStager):
    """What both modes' stagers carry to the executors: where to connect and what to write."""

    dsn: str = field(repr=False)
    target: _Target
    app: str
    """The connection's ``application_name``."""
    epoch: int


@dataclass(frozen=True)
class _AppendStager(_PgStager):
    """Executor side of append mode: COPY the task's rows into its own staging table."""

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
class _UpsertStager(_PgStager):
    """Executor side of upsert mode: upsert the task's rows by key, in the task's own transaction."""

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
