"""The sink protocol: where a flow's ports end, and how an epoch is delivered once.

Two kinds of sink, both committed inside the epoch (SPEC §6):

**Executor sinks** (:class:`ExecutorSink`: Parquet, JSON Lines, Delta, PostgreSQL,
SQLite) follow the two-phase form: *executors stage, the driver commits*. Per epoch
the runtime calls, in the user's driver process:

1. :meth:`ExecutorSink.prepare_epoch` on the driver, which returns a small, picklable
   :class:`EpochStager` (paths, names, an attempt token; never a connection);
2. :meth:`EpochStager.stage` **on the executors**, once per Spark task (partition)
   that has rows for the sink, with that partition's rows as one ``pyarrow.Table``.
   It writes them to a staging location and returns a small JSON-able receipt;
3. :meth:`ExecutorSink.commit_epoch` on the driver, with the receipts of the tasks
   that succeeded, which publishes the epoch atomically with its epoch id or, for a
   replayed epoch that was already published, publishes nothing and discards what
   was staged.

So no data row of an executor sink passes through the driver: only receipts do.

**Driver sinks** (console, webhook, Redis stream, the test memory sink, and the
wrappers ``guarded`` and ``round_robin``) receive the epoch's rows on the driver:

1. :meth:`Sink.open` once at run start, before the first epoch (after a restart
   too, before the replayed epoch); when the flow starts over (``fresh=True``),
   :meth:`Sink.supersede` just before it.
2. :meth:`Sink.write_epoch` once per epoch (Spark micro-batch id) with all of the
   epoch's rows for the sink's port as one ``pyarrow.Table``.
   All sinks of a flow are written inside the epoch, **before** Spark marks the epoch
   complete in the flow's checkpoint (SPEC §6). If the run crashes before that mark,
   the restarted run calls ``write_epoch`` again with the same epoch id and the
   same rows.
3. :meth:`Sink.close` once when the run ends (normally or not).

An executor sink also accepts ``write_epoch`` (stage and commit in the calling
process), which is how the wrappers use it.

Each sink declares its ``guarantee`` for such a replay:

* ``"exactly_once"`` — ``write_epoch`` is idempotent per epoch id: a replayed
  epoch is recognised and skipped, so every row is delivered once.
* ``"idempotent"`` — the replay rewrites the same rows under deterministic keys
  (upsert): exactly once in effect.
* ``"at_least_once"`` — a replayed epoch may be delivered twice.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, ClassVar, Literal, get_args

import pyarrow as pa

Guarantee = Literal["exactly_once", "idempotent", "at_least_once"]
"""What a sink promises for a replayed epoch (module docstring): the type of :attr:`Sink.guarantee`."""
GUARANTEES: tuple[Guarantee, ...] = get_args(Guarantee)
"""Every :data:`Guarantee`, strongest first."""


class Sink(ABC):
    """Base class of every sink: few methods, all called on the driver.

    Subclasses are frozen dataclasses (a sink is part of an immutable flow plan);
    state that only exists while a flow runs is kept out of the comparable fields.
    """

    guarantee: ClassVar[Guarantee]
    """``"exactly_once"``, ``"idempotent"`` or ``"at_least_once"`` (module docstring).

    Checked when the sink is added to a flow (``Stream.sink``): another value is a
    ``ConfigError`` naming ``guarantee``."""

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:  # noqa: B027
        """Prepare to write; called once at run start, before the first epoch.

        Also called at a restart, before the replay of the last incomplete epoch.
        The default does nothing.
        """

    def supersede(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:  # noqa: B027
        """Starting over: hand this sink to checkpoint ``checkpoint_id``; called before :meth:`open`.

        Called on the driver only when a flow starts over (``flow.run(..., fresh=True)``,
        ``wire run --fresh``; again by the next run if that one stopped before every
        sink was handed over), never on a run that merely resumes. A sink that keeps
        epoch bookkeeping bound to a checkpoint (an exactly-once sink's epoch markers:
        a new checkpoint restarts epoch ids at 0, which the old markers would skip as
        replays) sets aside what this flow's sink ``sink_id`` wrote under any *other*
        checkpoint, with its bookkeeping, and records ``checkpoint_id`` as the owner,
        so that the new run's output replaces the old. Must be idempotent: a sink
        already owned by ``checkpoint_id`` is left as it is. Output of other flows or
        sink ids is never touched. The default does nothing (a sink whose bookkeeping
        does not depend on the checkpoint).

        Raises
        ------
        CheckpointError
            When the target belongs to another flow or sink.
        """

    @abstractmethod
    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Deliver one epoch's rows; called once per epoch, before the epoch commits.

        Exactly-once sinks must make this idempotent per ``epoch``: a replay after a
        crash calls it again with the same epoch id and the same rows.
        """

    def close(self) -> None:  # noqa: B027
        """Release resources; called once when the run ends. The default does nothing."""

    def describe(self) -> str:
        """One line naming the sink, its target and its guarantee."""
        return f"{type(self).__name__} ({self.guarantee})"

    target_fields: ClassVar[tuple[str, ...]] = (
        "path", "table", "schema", "key", "mode", "partition_by", "url", "stream", "dsn")
    """The dataclass fields that say where the sink delivers (see :meth:`fingerprint`)."""

    def fingerprint(self) -> dict[str, Any]:
        """Where and how the sink delivers, as JSON values: kind, guarantee and target.

        Called at run start; recorded per sink step in the checkpoint's ``wire.json``
        (:func:`wire.runtime.checkpoint.open_checkpoint`), which refuses to resume when
        it changed: the sink's earlier epochs went to the old target. The default: the
        class name, :attr:`guarantee`, the dataclass fields named in
        :attr:`target_fields` (credentials removed from ``dsn`` / ``url``) and wrapped
        sinks (a field holding sinks) by their own fingerprint; tuning fields (batch
        sizes, timeouts) are left out.
        """
        fp: dict[str, Any] = {"kind": type(self).__qualname__, "guarantee": self.guarantee}
        for f in fields(self) if is_dataclass(self) else ():  # type: ignore[var-annotated]
            value = getattr(self, f.name)
            if isinstance(value, Sink):
                fp[f.name] = value.fingerprint()
            elif isinstance(value, tuple) and value and all(isinstance(v, Sink) for v in value):
                fp[f.name] = [v.fingerprint() for v in value]
            elif f.name in self.target_fields:
                fp[f.name] = _no_password(value) if f.name in ("dsn", "url") else value
        return fp


    def targets(self) -> tuple[SinkTarget, ...]:
        """Where the sink writes, for the flow's check that no two sinks share a target.

        Called when the flow is built (:meth:`wire.Flow.plan` checks every pair of
        sinks, :func:`overlapping`). The default reads the dataclass fields: ``dsn``
        with ``table`` (and ``schema``, default ``public``) is a PostgreSQL table, by
        host, port and database; ``path`` with ``table`` a table in a database file;
        ``path`` alone a directory or table location that the sink owns with all that
        is below it; a field holding sinks (a wrapper) their targets. A sink with none
        of these (webhook, console, Kafka, Redis) returns ``()``: not checked.
        """
        found: list[SinkTarget] = []
        values: dict[str, Any] = (
            {f.name: getattr(self, f.name) for f in fields(self)} if is_dataclass(self) else {})
        for value in values.values():
            if isinstance(value, Sink):
                found.extend(value.targets())
            elif isinstance(value, tuple) and value and all(isinstance(v, Sink) for v in value):
                found.extend(t for v in value for t in v.targets())
        table, path, dsn = values.get("table"), values.get("path"), values.get("dsn")
        if isinstance(table, str) and isinstance(dsn, str):
            schema = values.get("schema") if isinstance(values.get("schema"), str) else "public"
            found.append(SinkTarget("table", f"postgres {_database(dsn)} {schema}.{table}"))
        elif isinstance(table, str) and isinstance(path, str):
            found.append(SinkTarget("table", f"{_location(path)} table {table}"))
        elif isinstance(path, str):
            found.append(SinkTarget("path", _location(path)))
        return tuple(found)


@dataclass(frozen=True)
class SinkTarget:
    """One place a sink writes, for :func:`overlapping`.

    ``kind`` is ``"path"`` (a directory or table location, with all below it) or
    ``"table"`` (a table in a database, ``name`` naming the database too).
    """

    kind: str
    name: str

    def overlaps(self, other: SinkTarget) -> bool:
        """The same target, or (paths) one inside the other."""
        if self.kind == "path" and other.kind == "path":
            a, b = self.name.rstrip("/") + "/", other.name.rstrip("/") + "/"
            return a.startswith(b) or b.startswith(a)
        return self == other


def overlapping(a: Sink, b: Sink) -> tuple[SinkTarget, SinkTarget] | None:
    """The first pair of targets of ``a`` and ``b`` that overlap (:meth:`SinkTarget.overlaps`)."""
    for x in a.targets():
        for y in b.targets():
            if x.overlaps(y):
                return x, y
    return None


def _location(path: str) -> str:
    """A local path made absolute and normalised; a URI (``s3://...``) as it is."""
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def _database(dsn: str) -> str:
    """``host:port/dbname`` of a libpq connection string (without credentials)."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # the postgres extra is missing: compare the text, password removed
        return str(_no_password(dsn))
    try:
        info = conninfo_to_dict(dsn)
    except Exception:  # a malformed dsn fails when the sink connects
        return str(_no_password(dsn))
    return f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def _no_password(text: Any) -> Any:
    """A connection string without its password (``user:pw@`` in a URL, ``password=``)."""
    if not isinstance(text, str):
        return text
    text = re.sub(r"^([A-Za-z][\w+.-]*://[^:/@?#]*):[^@/?#]*@", r"\1@", text)
    text = re.sub(r"([?&])password=[^&]*&?", r"\1", text)
    return re.sub(r"\s*\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", "", text).strip()


@dataclass(frozen=True)
class StagedPart:
    """What one executor task staged for one sink in one epoch (travels to the driver).

    ``rows`` and ``bytes`` are the rows and bytes the task staged; ``receipt`` is the
    sink's own JSON-able description of where (file names, staging table, sizes).
    """

    partition: int
    rows: int
    bytes: int
    receipt: dict[str, Any]


class EpochStager(ABC):
    """The executor-side half of an :class:`ExecutorSink` for one epoch.

    Built on the driver by :meth:`ExecutorSink.prepare_epoch`, pickled to the
    executors, and called there once per task that has rows. It must hold only
    plain, picklable values (paths, names, tokens): connections are opened inside
    :meth:`stage`.
    """

    @abstractmethod
    def stage(self, partition: int, table: pa.Table) -> StagedPart:
        """Stage one task's rows (``table.num_rows > 0``, ``epoch`` column included).

        Runs on an executor. The staged data must be durable when this returns, and
        invisible to readers of the sink until the driver commits it. A retried task
        stages again under a new name; the driver publishes only what the receipts
        of the successful attempts name.
        """


class ExecutorSink(Sink):
    """A sink written by the executors and committed by the driver (module docstring)."""

    @abstractmethod
    def prepare_epoch(self, epoch: int) -> EpochStager:
        """Driver, before the epoch's Spark job: return the stager the executors call.

        Must not be expensive: it runs once per epoch on the driver.
        """

    @abstractmethod
    def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
        """Driver, after every task staged: publish ``parts`` atomically, or skip a replay.

        Called once per epoch, also when no task had rows (``parts`` empty), so that
        the sink can discard leftovers of the attempt. A replayed epoch that an
        earlier attempt already published publishes nothing and removes what the
        replay staged. Raises when the epoch cannot be committed: the epoch then
        fails and is replayed.
        """

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Stage ``table`` as one part and commit it, in the calling process.

        The driver-side form of the protocol, used by sink wrappers
        (``guarded``, ``round_robin``) and tests; the runtime itself stages on the
        executors.
        """
        stager = self.prepare_epoch(epoch)
        parts = [stager.stage(0, table)] if table.num_rows else []
        self.commit_epoch(epoch, parts)

