"""Compile ``Stream.lookup_join`` into one Python stage (no state store).

A lookup join keeps no state, so it needs neither ``transformWithState`` nor a key-group
call: each epoch task enriches the events it holds and passes watermark and side rows
through unchanged (the join neither holds nor moves watermarks).

* **Database table** (PostgreSQL): the stream is first shuffled by the key group of its
  ``on`` column (``xxhash64(on) mod key_groups``, as keyed operators compute it,
  :func:`wire.compiler.keyed.with_key_group`), so all events of one key group meet in
  one task. The task gathers its events, takes their distinct keys, answers what it
  can from its worker's cache (:class:`wire.tables.lookup.KeyCache`) and asks the
  table for the rest in one batched query (``mapInArrow``, :class:`LookupStage`). So an
  epoch asks the table at most once per key group (once per task), never once per event,
  and each key at most once.
* **Snapshot table** (Delta, Parquet): no shuffle; an Arrow UDF over the ``on`` column
  (:meth:`LookupStage.joined_columns`) returns the joined columns as a struct, so only
  the key goes to Python and only the joined columns come back, the rows stay in the JVM
  (1.3-1.7x the events/s of a ``mapInArrow`` moving every column, measured at 300k events).
  Each worker process keeps the whole table and reads its version once per epoch task
  (:class:`wire.tables.lookup.SnapshotLookup`).

The readers live in the Python worker process (:data:`_READERS`, one per step and
table definition), so the cache and the loaded snapshot outlive a task: Spark reuses
its Python workers (``spark.python.worker.reuse``, on by default). Metrics per task of a
database table: ``events``, ``lookup_queries``, ``lookup_keys``, ``lookup_cache_hits``,
``unmatched`` (events without a row); a UDF has no side output, so a snapshot table's join
reports none.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf

from wire.compiler.keyed import conform, each_batch, with_key_group
from wire.core.arrow_types import arrow_payload_schema, spark_round_trip, spark_schema
from wire.core.envelope import (
    ENVELOPE_COLUMNS,
    KG,
    KIND,
    KIND_DATA,
    METRICS_PORT,
    metrics_table,
    side_batch,
    with_envelope,
)
from wire.errors import ConfigError
from wire.plan.nodes import LookupJoinNode
from wire.tables.base import LookupTable, SnapshotTable, hold_and_retry
from wire.tables.lookup import DatabaseLookup, KeyCache, SnapshotLookup, enrich

Reader = DatabaseLookup | SnapshotLookup

_READERS: dict[tuple[str, str, int, int], Reader] = {}
"""This Python worker process's readers, by (step, table, cache TTL, cache size)."""

MAX_READERS = 32
"""Readers a worker process keeps; beyond, the oldest is dropped (a long-lived worker serving many flows)."""

BUFFER_ROWS = 1 << 20
"""Events a task gathers before it asks a database table for their keys.

A task normally holds all its events of the epoch in one read; a task with more asks once
per this many, so its memory stays bounded."""


@dataclass(frozen=True)
class LookupStage:
    """The ``mapInArrow`` function of one lookup join (pickled to the executors)."""

    step: str
    table: LookupTable
    table_schema: pa.Schema
    """The table's key, then the joined columns."""
    on: str
    how: str
    cache_ttl_ms: int
    cache_size: int
    out: pa.Schema
    """Output rows: the input's payload, the joined columns, the envelope."""

    @property
    def __name__(self) -> str:  # Spark names the stage after its function
        return "wire_lookup_" + self.step.encode("utf-8").hex()

    def reader(self) -> Reader:
        """The table's reader in this worker process (made on first use).

        A table is told apart by its ``repr`` (its settings, never mutable state) and, for
        a database, its DSN.
        """
        table = repr(self.table) + getattr(self.table, "dsn", "")
        ident = (self.step, table, self.cache_ttl_ms, self.cache_size)
        reader = _READERS.get(ident)
        if reader is None:
            while len(_READERS) >= MAX_READERS:
                _READERS.pop(next(iter(_READERS))).table.close()
            if isinstance(self.table, SnapshotTable):
                reader = SnapshotLookup(self.table, self.table_schema, self.step)
            else:
                reader = DatabaseLookup(self.table, self.table_schema, self.step,
                                        KeyCache(self.cache_ttl_ms, self.cache_size))
            _READERS[ident] = reader
        return reader

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A database table's epoch task: control rows at once, the enriched events, one metrics row.

        The table is read once for the task's events (once per :data:`BUFFER_ROWS`
        events), after they were all gathered.
        """
        reader: Reader | None = None
        pending: list[pa.RecordBatch] = []
        gathered = events = unmatched = 0
        for control, rows in each_batch(batches):
            if control is not None:
                yield conform(control, self.out)
            if not rows.num_rows:
                continue
            if reader is None:
                reader = self.reader()
                reader.begin_epoch()
            pending.append(rows)
            gathered += rows.num_rows
            if gathered >= BUFFER_ROWS:
                events, unmatched = events + gathered, unmatched + (yield from self.join(pending, reader))
                pending, gathered = [], 0
        if reader is None:
            return
        if pending:
            events, unmatched = events + gathered, unmatched + (yield from self.join(pending, reader))
        stats = {"events": events, "unmatched": unmatched, **reader.stats.as_metrics()}
        yield side_batch(self.out, METRICS_PORT, metrics_table(self.step, stats), key_group=0)

    def joined_columns(self, keys_batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        """Arrow UDF of a snapshot table: per batch of ``on`` values, the joined columns as a struct.

        The struct is null where the table has no row (or ``on`` is null). The table's
        version is read once per task, at the first batch.
        """
        reader: Reader | None = None
        names = self.table_schema.names[1:]
        types = [self.out.field(n).type for n in names]
        for keys in keys_batches:
            if reader is None:
                reader = self.reader()
                reader.begin_epoch()
            rows = reader.rows(keys)
            table_keys = rows.column(0)
            if table_keys.type != keys.type:
                table_keys = table_keys.cast(keys.type)
            idx = pc.index_in(keys, value_set=table_keys)
            arrays = [rows.column(n).take(idx).combine_chunks().cast(t, safe=False)  # ns -> µs
                      for n, t in zip(names, types, strict=True)]
            yield pa.StructArray.from_arrays(arrays, names=names, mask=pc.is_null(idx))

    def join(self, batches: list[pa.RecordBatch], reader: Reader) -> Generator[pa.RecordBatch, None, int]:
        """Enrich ``batches`` of data rows with ``reader`` (one batched read); return the unmatched count."""
        events = pa.Table.from_batches(batches)
        joined, unmatched = enrich(events, self.on, reader.rows(events.column(self.on)), how=self.how)
        for batch in joined.to_batches(max_chunksize=65_536):
            yield conform(batch, self.out)
        return unmatched


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _comparable(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether event keys of type ``a`` can be matched with table keys of type ``b`` (cast to ``a``)."""
    kinds = (pa.types.is_integer, _is_text, pa.types.is_binary, pa.types.is_date, pa.types.is_timestamp)
    return a == b or any(k(a) and k(b) for k in kinds)


def compile_lookup_join(df: DataFrame, node: LookupJoinNode, *, key_groups: int) -> DataFrame:
    """Append the lookup join ``node`` to the envelope DataFrame ``df``.

    Output payload columns: ``df``'s, then the table's joined columns (their Arrow types
    as Spark reads them). The table's schema is read here, on the driver (retried like
    any read while the table is unavailable).

    Raises
    ------
    ConfigError
        ``on`` is not a column of the stream; its type cannot be matched with the
        table's key type; a joined column has the name of a stream column; the table,
        its key or a column does not exist.
    TableUnavailable
        The table could not be reached for its ``unavailable_timeout``.
    """
    payload = arrow_payload_schema(df)
    if node.on not in payload.names:
        raise ConfigError("on", node.on, f"a column of the stream: {payload.names}", step=node.step)
    try:
        schema = hold_and_retry(node.table, node.table.resolve_schema, step=node.step)
    except ConfigError as e:
        raise ConfigError(e.parameter, e.value, e.accepted, step=node.step) from None
    finally:
        node.table.close()  # the driver reads no rows: do not keep its connection
    on_type, key_type = payload.field(node.on).type, schema.field(0).type
    if not _comparable(on_type, key_type):
        raise ConfigError("on", node.on, f"a column whose type matches the table key {schema.names[0]!r} "
                          f"({key_type}); {node.on!r} is {on_type}", step=node.step)
    clash = [n for n in schema.names[1:] if n in payload.names]
    if clash:
        raise ConfigError("columns", clash, "joined columns whose names the stream does not have: rename "
                          "the stream's (map/select) or pick the table's with columns=[...]", step=node.step)
    out = spark_round_trip(with_envelope(pa.schema([*payload, *list(schema)[1:]])))
    stage = LookupStage(node.step, node.table, schema, node.on, node.how, node.cache_ttl_ms,
                        node.cache_size, out)
    if node.table.snapshot:
        return _snapshot_join(df, stage, payload.names)
    df = with_key_group(df, node.on, key_groups).repartition(key_groups, F.col(KG))
    return df.mapInArrow(stage, spark_schema(out))


JOINED = "__lookup"
"""The struct column the snapshot join's Arrow UDF adds (dropped again)."""


def _snapshot_join(df: DataFrame, stage: LookupStage, payload: list[str]) -> DataFrame:
    """A snapshot table's join: an Arrow UDF over the ``on`` column only, the rows stay in the JVM.

    Only the key column travels to Python and only the joined columns come back (a
    ``mapInArrow`` would move every column both ways). ``how="inner"`` drops the data rows
    whose struct is null; control rows (null ``on``) always pass.
    """
    names = stage.table_schema.names[1:]
    struct = spark_schema(pa.schema([stage.out.field(n) for n in names]))
    # an iterator UDF (Iterator[pa.Array] -> Iterator[pa.Array], from the method's type hints)
    lookup = arrow_udf(stage.joined_columns, returnType=struct).asNondeterministic()  # type: ignore[call-overload]
    looked = df.withColumn(JOINED, lookup(F.col(f"`{stage.on}`")))
    if stage.how == "inner":
        looked = looked.filter((F.col(KIND) != F.lit(KIND_DATA)) | F.col(JOINED).isNotNull())
    return looked.select(*[F.col(f"`{c}`") for c in payload], *[F.col(JOINED)[n].alias(n) for n in names],
                         *[F.col(c) for c in ENVELOPE_COLUMNS])

