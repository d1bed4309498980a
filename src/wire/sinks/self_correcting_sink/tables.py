"""The self-correcting sink's two kinds of table, each a :class:`~.writer.CasTable`.

:class:`_PgTable` (PostgreSQL: the upper in :data:`FRONTIER_TABLE`, parts staged in
an unlogged table, the compare-and-set one transaction) and :class:`_DeltaTable`
(Delta: the upper an application transaction, parts staged as Parquet files, the
compare-and-set one ``MERGE`` commit on the version read). Protocol and costs:
:mod:`wire.sinks.self_correcting_sink.sink`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from wire.errors import WireError
from wire.sinks.self_correcting_sink.frontier import Frontier
from wire.sinks.self_correcting_sink.rows import Correction, Key, Row, norm
from wire.sinks.self_correcting_sink.writer import BatchDescription, Snapshot

FRONTIER_TABLE = "wire_sc_frontiers"
"""PostgreSQL: the table (in the sink's ``schema``) recording each target table's upper
(version) and frontier (JSON text, :meth:`~wire.sinks.self_correcting_sink.frontier.Frontier.to_json`)."""
DELTA_APP_ID = "wire.self_correcting"
"""Delta: the application transaction whose version is the table's upper."""
DELTA_MARK = "wire.sc.upper"
"""Delta: the commit-info key of the sink's commits."""
DELTA_FRONTIER = "wire.sc.frontier"
"""Delta: the commit-info key holding the frontier of the sink's commit."""
_OP = "__wire_op"


class _Conflict(Exception):
    """Raised inside a compare-and-set transaction to roll it back."""


# --- PostgreSQL -----------------------------------------------------------------------


class _PgTable:
    """A PostgreSQL table as a :class:`~wire.sinks.self_correcting_sink.writer.CasTable`.

    Parts are staged in ``<schema>."<table>__wire_sc"`` (unlogged; the table's
    columns plus ``__wire_writer``, ``__wire_attempt``, ``__wire_shard`` and
    ``__wire_op``: ``d`` rows name a key to delete, ``i`` rows a row to insert).
    ``setup`` (the driver, once per run) creates the frontier and staging tables.
    """

    def __init__(self, conn: Any, schema: str, table: str, key: tuple[str, ...], columns: list[str],
                 writer: str, *, setup: bool = True) -> None:
        from psycopg import sql

        self.conn = conn
        self.sql = sql
        self.schema, self.table, self.key, self.columns, self.writer = schema, table, key, columns, writer
        self.ident = sql.Identifier(schema, table)
        self.frontier = sql.Identifier(schema, FRONTIER_TABLE)
        self.staging = sql.Identifier(schema, f"{table}__wire_sc"[:63])
        types = dict(conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (schema, table)).fetchall())
        self.key_types = [types[k] for k in key]
        if not setup:
            return
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (schema_name text NOT NULL, table_name text NOT NULL, "
            "upper bigint NOT NULL, nrows bigint NOT NULL, digest text NOT NULL, writer text, "
            "updated_at timestamptz NOT NULL DEFAULT now(), frontier text, "
            "PRIMARY KEY (schema_name, table_name))"
        ).format(self.frontier))
        # a table made by a Wire that recorded no frontier: the column, NULL (the empty frontier)
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS frontier text").format(self.frontier))
        conn.execute(sql.SQL(
            "INSERT INTO {} (schema_name, table_name, upper, nrows, digest) VALUES (%s, %s, 0, 0, '0') "
            "ON CONFLICT DO NOTHING").format(self.frontier), (schema, table))
        conn.execute(sql.SQL(
            "CREATE UNLOGGED TABLE IF NOT EXISTS {} AS SELECT NULL::text AS __wire_writer, "
            "NULL::text AS __wire_attempt, NULL::int AS __wire_shard, NULL::text AS __wire_op, t.* "
            "FROM {} AS t WITH NO DATA").format(self.staging, self.ident))

    def _fingerprint(self) -> tuple[int, str]:
        row = self.conn.execute(self.sql.SQL(
            "SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)), 0)::text FROM {} AS t"
        ).format(self.ident)).fetchone()
        return int(row[0]), str(row[1])

    def _keys_clause(self, keys: Collection[Key]) -> tuple[Any, list[list[Any]]]:
        sql = self.sql
        cols = sql.SQL(", ").join(map(sql.Identifier, self.key))
        arrays = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in self.key_types)
        clause = sql.SQL("({}) IN (SELECT * FROM unnest({}))").format(cols, arrays)
        values = [[k[i] for k in keys] for i in range(len(self.key))]
        return clause, values

    def read_meta(self) -> Snapshot:
        """Upper, frontier and drift (recorded vs current count and hash sum); token = the fingerprint."""
        sql = self.sql
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            upper, nrows, digest, frontier = self.conn.execute(sql.SQL(
                "SELECT upper, nrows, digest, frontier FROM {} WHERE schema_name = %s AND table_name = %s"
            ).format(self.frontier), (self.schema, self.table)).fetchone()
            now = self._fingerprint()
        return Snapshot(int(upper), now != (int(nrows), digest), now, Frontier.from_json(frontier))

    def read(self, keys: Collection[Key] | None, token: Any) -> list[Row]:
        """The rows of ``keys`` (None: all); a change since ``token`` fails the commit later."""
        sql = self.sql
        if keys is not None and not keys:
            return []
        select = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, self.columns)),
                                                     self.ident)
        if keys is None:
            cur = self.conn.execute(select)
        else:
            clause, values = self._keys_clause(keys)
            cur = self.conn.execute(sql.SQL("{} WHERE {}").format(select, clause), values)
        return [dict(zip(self.columns, r, strict=True)) for r in cur.fetchall()]

    def stage(self, attempt: str, shard: int, desc: BatchDescription, corr: Correction) -> None:
        """One transaction: replace this ``(attempt, shard)``'s staged rows by ``corr``'s (COPY)."""
        sql = self.sql
        meta = ["__wire_writer", "__wire_attempt", "__wire_shard", "__wire_op"]
        with self.conn.transaction():
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE __wire_attempt = %s AND __wire_shard = %s")
                              .format(self.staging), (attempt, shard))
            cols = sql.SQL(", ").join(map(sql.Identifier, [*meta, *self.columns]))
            copy = sql.SQL("COPY {} ({}) FROM STDIN").format(self.staging, cols)
            head = [self.writer, attempt, shard]
            with self.conn.cursor().copy(copy) as cp:
                for k in corr.deletes:
                    named = dict(zip(self.key, k, strict=True))
                    cp.write_row([*head, "d", *(named.get(c) for c in self.columns)])
                for row in corr.inserts:
                    cp.write_row([*head, "i", *(row.get(c) for c in self.columns)])

    def commit(self, desc: BatchDescription, attempt: str, token: Any) -> bool:
        """One transaction: lock, CAS the upper (and record the frontier), check the fingerprint, apply."""
        sql = self.sql
        keys = sql.SQL(", ").join(map(sql.Identifier, self.key))
        cols = sql.SQL(", ").join(map(sql.Identifier, self.columns))
        try:
            with self.conn.transaction():
                self.conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self.ident))
                moved = self.conn.execute(sql.SQL(
                    "UPDATE {} SET upper = %s, frontier = %s, writer = %s, updated_at = now() "
                    "WHERE schema_name = %s AND table_name = %s AND upper = %s RETURNING 1"
                ).format(self.frontier),
                    (desc.upper, desc.frontier.to_json(), self.writer, self.schema, self.table,
                     desc.lower)).fetchone()
                if moved is None or self._fingerprint() != token:
                    raise _Conflict
                self.conn.execute(sql.SQL(
                    "DELETE FROM {} WHERE ({}) IN (SELECT {} FROM {} WHERE __wire_attempt = %s "
                    "AND __wire_op = 'd')").format(self.ident, keys, keys, self.staging), (attempt,))
                self.conn.execute(sql.SQL(
                    "INSERT INTO {} ({}) SELECT {} FROM {} WHERE __wire_attempt = %s AND __wire_op = 'i'"
                ).format(self.ident, cols, cols, self.staging), (attempt,))
                nrows, digest = self._fingerprint()
                self.conn.execute(sql.SQL(
                    "UPDATE {} SET nrows = %s, digest = %s WHERE schema_name = %s AND table_name = %s"
                ).format(self.frontier), (nrows, digest, self.schema, self.table))
                # this writer's parts: the attempt's, and leftovers of crashed attempts
                self.conn.execute(sql.SQL("DELETE FROM {} WHERE __wire_writer = %s").format(self.staging),
                                  (self.writer,))
        except _Conflict:
            self._discard(attempt)
            return False
        return True

    def _discard(self, attempt: str) -> None:
        """Delete the staged rows of ``attempt``."""
        self.conn.execute(self.sql.SQL("DELETE FROM {} WHERE __wire_attempt = %s").format(self.staging),
                          (attempt,))


# --- Delta ------------------------------------------------------------------------------


class _DeltaTable:
    """A Delta table as a :class:`~wire.sinks.self_correcting_sink.writer.CasTable` (deltalake, no JVM).

    Parts are staged as Parquet files ``<parts>/<attempt>/shard-<n>.parquet`` (the
    table's columns plus ``__wire_op``: ``d`` a key to delete, ``u`` a row to insert),
    under the replica's state directory.
    """

    def __init__(self, path: str, key: tuple[str, ...], schema: pa.Schema, writer: str, parts: str,
                 *, setup: bool = True) -> None:
        from deltalake import CommitProperties, DeltaTable

        self.path, self.key, self.writer, self.parts = path, key, writer, Path(parts)
        self.columns = schema.names
        self.schema = schema
        if setup and not DeltaTable.is_deltatable(path):
            with contextlib.suppress(Exception):  # another replica may create it at the same moment
                DeltaTable.create(path, schema, mode="ignore",
                                  commit_properties=CommitProperties(custom_metadata={DELTA_MARK: "0"}))
            if not DeltaTable.is_deltatable(path):
                raise WireError(f"self-correcting sink: cannot create the Delta table at {path}")

    def read_meta(self) -> Snapshot:
        """Upper (txn version), frontier, drift (newest commit not the sink's); token = the version read.

        The frontier is in the commit info of the sink's commit that recorded the
        upper: the newest commit when the table did not drift, else found further
        back in the history (hand edits since).
        """
        from deltalake import DeltaTable

        dt = DeltaTable(self.path)
        upper = int(dt.transaction_version(DELTA_APP_ID) or 0)
        version = dt.version()
        newest = dt.history(1)
        drifted = bool(newest) and DELTA_MARK not in newest[0]
        return Snapshot(upper, drifted, version, self._frontier(dt, upper, newest))

    @staticmethod
    def _frontier(dt: Any, upper: int, newest: list[dict[str, Any]]) -> Frontier:
        """The frontier recorded by the sink's commit of ``upper`` (empty: none recorded)."""
        if upper == 0:
            return Frontier()
        limit = 1
        history = newest
        while True:
            for commit in history:
                if commit.get(DELTA_MARK) == str(upper):
                    return Frontier.from_json(commit.get(DELTA_FRONTIER))
            if len(history) < limit:
                return Frontier()  # the whole history read: a commit of a Wire without frontiers
            limit *= 8
            history = dt.history(limit)

    def read(self, keys: Collection[Key] | None, token: Any) -> list[Row]:
        """The rows of ``keys`` (None: all) at version ``token``."""
        from deltalake import DeltaTable

        if keys is not None and not keys:
            return []
        data = DeltaTable(self.path, version=token).to_pyarrow_table(columns=self.columns)
        if keys is not None:
            first = pa.array(sorted({k[0] for k in keys}), data.schema.field(self.key[0]).type)
            data = data.filter(pc.is_in(data.column(self.key[0]), value_set=first))
        rows: list[dict[str, Any]] = data.to_pylist()
        if keys is not None and len(self.key) > 1:
            rows = [r for r in rows if tuple(norm(r[k]) for k in self.key) in keys]
        return rows

    def stage(self, attempt: str, shard: int, desc: BatchDescription, corr: Correction) -> None:
        """Write ``corr`` as ``<parts>/<attempt>/shard-<shard>.parquet`` (atomic rename)."""
        rows: list[Row] = [{**r, _OP: "u"} for r in corr.inserts]
        rows += [{**dict(zip(self.key, k, strict=True)), _OP: "d"} for k in corr.deletes]
        table = pa.Table.from_pylist(rows, schema=self.schema.append(pa.field(_OP, pa.string())))
        directory = self.parts / attempt
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"shard-{shard}.parquet"
        tmp = directory / f".shard-{shard}-{uuid.uuid4().hex}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)

    def commit(self, desc: BatchDescription, attempt: str, token: Any) -> bool:
        """One ``MERGE`` commit of the staged parts on the version read, no retries."""
        from deltalake import CommitProperties, DeltaTable, Transaction
        from deltalake.exceptions import CommitFailedError

        try:
            dt = DeltaTable(self.path, version=token)
            if (dt.transaction_version(DELTA_APP_ID) or 0) != desc.lower:
                return False
            files = sorted((self.parts / attempt).glob("shard-*.parquet"))
            source = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
            if source is None:
                return False
            on = " AND ".join(f't."{k}" = s."{k}"' for k in self.key)
            props = CommitProperties(max_commit_retries=0,
                                     app_transactions=[Transaction(DELTA_APP_ID, desc.upper)],
                                     custom_metadata={DELTA_MARK: str(desc.upper),
                                                      DELTA_FRONTIER: desc.frontier.to_json(),
                                                      "wire.sc.writer": self.writer})
            (dt.merge(source, predicate=f"{on} AND s.\"{_OP}\" = 'd'", source_alias="s", target_alias="t",
                      commit_properties=props)
             .when_matched_delete()
             .when_not_matched_insert(updates={c: f's."{c}"' for c in self.columns},
                                      predicate=f"s.\"{_OP}\" = 'u'")
             .execute())
        except CommitFailedError:
            return False
        finally:
            self._discard(attempt)
        return True

    def _discard(self, attempt: str) -> None:
        """Remove ``<parts>/<attempt>``."""
        shutil.rmtree(self.parts / attempt, ignore_errors=True)
