"""The driver's side shared by both PostgreSQL sink modes: the run, its connection and reconnect.

:class:`_PostgresSink` opens and closes the driver's connection, describes the
sink, and runs a transaction with one reconnect (:meth:`_PostgresSink._with_reconnect`);
:class:`~wire.sinks.postgres_sink.PostgresAppendSink` and
:class:`~wire.sinks.postgres_sink.PostgresUpsertSink` build on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from wire.delivery.driver_run import DriverRunSink
from wire.delivery.sink import ExecutorSink
from wire.errors import WireError, needs_extra
from wire.sinks.postgres_sink.target import _connect, _Target

with needs_extra("postgres", "wire.sinks.postgres"):
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict


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
class _PostgresSink(DriverRunSink[_Run], ExecutorSink):
    """Shared by both modes: the driver's connection and its reconnect."""

    mode: ClassVar[str]

    dsn: str = field(repr=False)
    table: str
    schema: str = "public"

    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> _Run:
        """``open``: connect (driver, run start, before the first epoch) and create ``schema`` if missing.

        Raises
        ------
        WireError
            When the database cannot be reached or set up.
        CheckpointError
            Append mode: the marker table holds this flow's and sink's epochs under
            another checkpoint (see :func:`postgres`).
        """
        run = _Run(flow=flow_id, sink=sink_id, checkpoint=checkpoint_id)
        try:
            self._connect(run)
        except psycopg.Error as e:
            raise WireError(f"{self.describe()}: cannot open: {e}") from e
        return run

    def _end_run(self, run: _Run) -> None:
        """``close``: close the connection (driver, run end); every written epoch is already committed."""
        if run.conn is not None:
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
