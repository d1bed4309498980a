"""Read a flow's keyed state from its checkpoint, offline or while it runs (issue 29).

Which Spark operator holds a step's state, and which epoch is read: :mod:`wire.runtime.state_layout`.

Where the state is
    Each keyed step (window, interval join, process function) is one Spark
    ``transformWithStateInPandas`` operator whose state is per key group
    (``pmod(xxhash64(key), key_groups)``): a ValueState ``operator`` (input and output
    watermark, per-channel watermarks, the chunk index) and a MapState ``segments``
    (``(bucket, chunk) -> Arrow IPC``; small chunks packed into one entry), in Spark's
    RocksDB state store under ``<checkpoint>/<spark_dir>/state/<operator id>/``.
    Spark's state data source (``spark.read.format("statestore")``, options
    ``operatorId``, ``stateVarName``, ``batchId``; for one key group also
    ``snapshotPartitionId`` / ``snapshotStartBatchId``: :func:`state_partition`) reads
    both variables as rows of key group numbers and Arrow blobs; :mod:`wire.state.inspect`
    decodes them, with Wire's own codecs, into the shapes its docstring documents
    (windows, open sessions, join buffers, process states and timers). Neither RocksDB
    nor the state store files are opened by hand: Spark's reader loads the committed
    version into a directory of its own and reads it, so a read never writes to,
    deletes from or locks the checkpoint (tested while a flow runs, and with readers
    killed mid-read).

How a step is decoded
    From ``wire.json``'s record of the step (its window and built-in aggregations, its
    declared process states); a window with a user aggregator (``wire.aggregate``) needs
    the flow (``flow=``), whose functions merge and finish its partials.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from wire.compiler.keyed import OperatorState
from wire.compiler.window_stage import NO_KEY, window_spec
from wire.core.arrow_types import spark_round_trip, spark_schema
from wire.core.envelope import KG
from wire.errors import CheckpointError, ConfigError
from wire.plan.fingerprint import JOIN, TEMPORAL_JOIN, WINDOW
from wire.plan.nodes import Plan, ProcessNode, WindowAggregateNode
from wire.runtime.state_layout import (
    FlowLike,
    Located,
    StepLayout,
    layout_of,
    layouts,
    locate,
    plan_of,
    reading_session,
)
from wire.state import inspect as I
from wire.state.inspect_layout import process_layout_of, window_spec_of
from wire.state.keyed_state import StateSpec
from wire.state.rekey import GroupState


def _statestore(spark: SparkSession, at: Located, op: int, var: str, kgs: list[int] | None,
                snapshot: tuple[int, int] | None = None) -> DataFrame:
    reader = (spark.read.format("statestore").option("operatorId", op).option("stateVarName", var)
              .option("batchId", at.batch))
    if snapshot is not None:  # one state partition: its snapshot, then its changes up to the batch
        reader = reader.option("snapshotPartitionId", snapshot[0]).option("snapshotStartBatchId", snapshot[1])
    df = reader.load(str(at.spark_dir))
    if kgs is not None:
        df = df.where(F.col("key").getField(KG).isin(kgs))
    return df


def _spark_call(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except (PySparkException, Py4JError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{what}: Spark's state reader failed: {first}") from e


def state_partition(spark: SparkSession, at: Located, op: int, kg: int) -> tuple[int, int] | None:
    """The state partition holding key group ``kg`` and its latest snapshot at or before ``at``.

    ``(partition id, snapshot batch id)``, or None when the partition has no snapshot yet
    (RocksDB writes one every few epochs; before that only change logs). The partition is
    the one Spark's shuffle sends the key group to: ``pmod(hash(kg), partitions)`` (Murmur3,
    the hash partitioning of ``groupBy(__kg)``); the partitions are the directories of
    ``state/<operator id>/``.
    """
    root = at.spark_dir / "state" / str(op)
    parts = sorted(int(p.name) for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []
    if not parts or parts != list(range(len(parts))):
        return None
    row = spark.range(1).select(F.pmod(F.hash(F.lit(kg).cast("int")), F.lit(len(parts))).alias("p")).first()
    part = int(row["p"]) if row is not None else 0
    versions = []
    for f in (root / str(part)).iterdir():
        head = f.name.split(".")[0].split("_")[0]
        if f.name.endswith(".zip") and head.isdigit() and int(head) - 1 <= at.batch:
            versions.append(int(head) - 1)
    return (part, max(versions)) if versions else None


def read_groups(spark: SparkSession, at: Located, layout: StepLayout,
                kgs: list[int] | None = None) -> dict[int, I.Decoded]:
    """The step's state of key groups ``kgs`` (None: all) at ``at``, decoded per key group.

    Only the rows of those key groups leave Spark. For one key group, Spark reads only the
    state partition holding it, from its latest snapshot (:func:`state_partition`); when
    the partition has no snapshot yet (or it was just cleaned up), it scans every state
    partition of the operator and keeps the key group's rows (Spark's state reader has no
    lookup by key).
    """
    if kgs is not None and len(kgs) == 1:
        snapshot = state_partition(spark, at, layout.operator_id, kgs[0])
        if snapshot is not None:
            try:
                return _read_groups(spark, at, layout, kgs, snapshot)
            except CheckpointError:
                pass  # the snapshot went away (maintenance): read the whole operator
    return _read_groups(spark, at, layout, kgs, None)


def _read_groups(spark: SparkSession, at: Located, layout: StepLayout, kgs: list[int] | None,
                 snapshot: tuple[int, int] | None) -> dict[int, I.Decoded]:
    what = f"step {layout.step!r} (Spark operator {layout.operator_id}) at epoch {at.epoch}"
    op = layout.operator_id
    values = _spark_call(what, lambda: _statestore(spark, at, op, "operator", kgs, snapshot).select(
        F.col("key").getField(KG).alias("kg"), "value.*", F.length("value.tables").alias("nbytes")).toArrow())
    groups: dict[int, I.Decoded] = {}
    for row in values.to_pylist():
        st = OperatorState.load((row["wm_in"], row["wm_out"], row["channels"], row["tables"]))
        groups[int(row["kg"])] = I.Decoded(int(row["kg"]), GroupState(
            st.wm_in, st.wm_out, dict(st.channels or {}), dict(st.tables or {}), {}), int(row["nbytes"] or 0))
    chunks = _spark_call(what, lambda: _statestore(spark, at, op, "segments", kgs, snapshot).select(
        F.col("key").getField(KG).alias("kg"), F.col("user_map_key.bucket").alias("bucket"),
        F.col("user_map_key.chunk").alias("chunk"), F.col("user_map_value.rows").alias("rows")).toArrow())
    for kg, b, c, rows in zip(*(chunks.column(n).to_pylist() for n in ("kg", "bucket", "chunk", "rows")),
                              strict=True):
        I.add_entry(groups.setdefault(int(kg), I.Decoded(int(kg), GroupState())), int(b), int(c), rows)
    return groups


# -- decoding ------------------------------------------------------------------------------
def _node(plan: Plan, step: str) -> Any:
    try:
        return plan.node(step)
    except (KeyError, ValueError, LookupError):
        raise ConfigError("step", step, "a step of the given flow") from None


def decoder(layout: StepLayout, flow: FlowLike | None = None) -> Callable[[list[I.Decoded]], pa.Table]:
    """``decode(groups) -> table`` for the step (the shapes of :mod:`wire.state.inspect`).

    With ``flow``, the window's aggregations and the declared states come from the flow's
    plan; without, from ``wire.json``'s record (built-in aggregators only).
    """
    plan = None if flow is None else plan_of(flow)
    if layout.kind == WINDOW:
        node = None if plan is None else _node(plan, layout.step)
        spec = window_spec(node, layout.key) if isinstance(node, WindowAggregateNode) else window_spec_of(
            layout.fingerprint, layout.key, layout.step)
        keyed = layout.key != NO_KEY
        return lambda groups: I.window_rows(groups, spec, keyed=keyed)
    if layout.kind == JOIN:
        return lambda groups: I.join_rows(groups, layout.key)
    if layout.kind == TEMPORAL_JOIN:
        return lambda groups: I.temporal_join_rows(groups, layout.key)
    node = None if plan is None else _node(plan, layout.step)
    if isinstance(node, ProcessNode):
        states = tuple(sorted((n, s) for n, s in node.states if isinstance(s, StateSpec)))
        proc = I.ProcessLayout(layout.key, states)
    else:
        proc = process_layout_of(layout.fingerprint, layout.key, layout.step)
    return lambda groups: I.process_rows(groups, proc)


def _annotate(table: pa.Table, layout: StepLayout, at: Located, groups: dict[int, I.Decoded]) -> pa.Table:
    wm_in, wm_out = I.merge_watermarks({k: g.state for k, g in groups.items()})
    meta = {"wire.step": layout.step, "wire.kind": layout.kind, "wire.key": layout.key,
            "wire.epoch": str(at.epoch), "wire.key_groups": str(at.key_groups),
            "wire.input_watermark": "" if wm_in is None else str(wm_in),
            "wire.output_watermark": "" if wm_out is None else str(wm_out)}
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **{
        k.encode(): v.encode() for k, v in meta.items()}})


def key_group_of(spark: SparkSession, layout: StepLayout, key: object, key_groups: int) -> int:
    """The key group of ``key``: Spark's ``pmod(xxhash64(key), key_groups)``, as the flow computes it.

    ``key`` is cast to the key column's Spark SQL type first (a string ``"42"`` to a
    ``bigint`` key).

    Raises
    ------
    ConfigError
        If the layout does not record the key type, or ``key`` is not a value of it.
    """
    value: object = 0  # an unkeyed window: one constant key
    typ = "int"
    if layout.key != NO_KEY:
        value, typ = key, layout.key_type
    if not typ:
        raise ConfigError("key", key, f"a key of step {layout.step!r}, whose key type this checkpoint "
                          "does not record (run the flow once with this Wire version)")
    cast = F.lit(value).try_cast(typ)  # null, not an error, for a value of another type
    try:
        row = spark.range(1).select(cast.isNull().alias("bad"), F.pmod(F.xxhash64(cast), F.lit(key_groups))
                                    .cast("int").alias("kg")).first()
    except PySparkException:
        row = None
    if row is None or (row["bad"] and key is not None):
        raise ConfigError("key", key, f"a value of step {layout.step!r}'s key column {layout.key!r} ({typ})")
    return int(row["kg"])


# -- the public functions --------------------------------------------------------------------
def read_state(
    checkpoint: str | os.PathLike[str],
    step: str,
    epoch: int | None = None,
    *,
    key: object = None,
    flow: FlowLike | None = None,
    spark: SparkSession | None = None,
) -> pa.Table:
    """A keyed step's state as a ``pyarrow.Table``, as of a committed epoch.

    Shapes (one documented table per operator kind, :mod:`wire.state.inspect`):

    * window (tumbling, sliding): one row per (key, window) still in state:
      ``key_group``, the key, ``window_start`` / ``window_end`` (int64 ms), per
      aggregation its current result ``<name>`` and partial columns ``<name>__<part>``,
      and ``fired`` (its ``final`` row was emitted; it stays until ``window_end +
      allowed_lateness`` passes the watermark);
    * session window: the open sessions, merged, in the same shape;
    * interval join: one row per buffered event: ``key_group``, ``side``, the key,
      ``event_time`` (int64 ms), ``arrival``, and ``left`` / ``right`` structs of its payload;
    * temporal join: one row per stream event waiting for the table's watermark and per
      stored table version: ``key_group``, ``kind`` (``"pending"`` / ``"version"``), the
      key, ``event_time`` (int64 ms; a version's version time), ``arrival``, ``deleted``
      (a delete marker; null for events), and ``event`` / ``version`` structs of its payload;
    * process function: one row per key: ``key_group``, the key, one column per declared
      state (value; list in append order; map), and ``timers`` (list of
      ``{domain, tag, time, output_time}``, int64 ms, in firing order).

    The table's schema metadata holds ``wire.step``, ``wire.kind``, ``wire.key``,
    ``wire.epoch``, ``wire.key_groups`` and the operator's ``wire.input_watermark`` /
    ``wire.output_watermark`` (ms; the minimum over its key groups, as downstream sees
    it); :func:`read_key_groups` gives them per key group.

    Parameters
    ----------
    checkpoint : str or PathLike
        The flow's checkpoint directory.
    step : str
        A keyed step id (window, join, process).
    epoch : int, optional
        Wire's epoch id (``wire checkpoints``); None: the last committed epoch.
    key : optional
        Only this key's rows (cast to the key column's type); the read then touches only
        the key's key group. None: every key.
    flow : wire.Flow, optional
        The flow, for windows with user aggregators and checkpoints without
        ``state_layout.json`` (see the module docstring).
    spark : SparkSession, optional
        The session to read with (default: the active one, else a local one).

    Raises
    ------
    ConfigError
        If ``step`` is not a keyed step or ``key`` not a value of its key type.
    CheckpointError
        If the checkpoint, epoch or step's state cannot be read (naming why).
    """
    layout = layout_of(checkpoint, step, flow=flow, spark=spark)
    at = locate(checkpoint, epoch)
    session = reading_session(spark)
    kgs = None if key is None else [key_group_of(session, layout, key, at.key_groups)]
    groups = read_groups(session, at, layout, kgs)
    table = decoder(layout, flow)(list(groups.values()))
    if key is not None and layout.key != NO_KEY:
        table = I.filter_key(table, layout.key, key)
    return _annotate(table, layout, at, groups)


def read_key_groups(
    checkpoint: str | os.PathLike[str], step: str, epoch: int | None = None, *,
    flow: FlowLike | None = None, spark: SparkSession | None = None,
) -> pa.Table:
    """One row per key group of a keyed step: its watermarks, channels, chunks, rows and bytes.

    Columns (:data:`wire.state.inspect.GROUPS_SCHEMA`): ``key_group``, ``input_watermark``,
    ``output_watermark`` (int64 ms; ``-2**63``: none yet, ``2**63 - 1``: end of input),
    ``channels`` (map: input channel -> its watermark), ``chunks``, ``rows``, ``bytes``
    (stored Arrow IPC bytes). Errors as :func:`read_state`.
    """
    layout = layout_of(checkpoint, step, flow=flow, spark=spark)
    at = locate(checkpoint, epoch)
    groups = read_groups(reading_session(spark), at, layout)
    return _annotate(I.group_rows(groups.values()), layout, at, groups)


def read_state_spark(
    checkpoint: str | os.PathLike[str], step: str, epoch: int | None = None, *,
    flow: FlowLike | None = None, spark: SparkSession | None = None,
) -> DataFrame:
    """:func:`read_state` as a Spark DataFrame, decoded on the executors (for large state).

    The same rows and columns as :func:`read_state`. Two passes over the operator's state,
    both on the executors: the first decodes each key group and returns only its table's
    schema (the driver unifies them: a join side or a declared state absent from one key
    group is typed by the others), the second is the returned DataFrame. No state row
    reaches the driver. Errors as :func:`read_state`; Spark raises a decoding error when
    the DataFrame is computed.
    """
    layout = layout_of(checkpoint, step, flow=flow, spark=spark)
    at = locate(checkpoint, epoch)
    session = reading_session(spark)
    decode = decoder(layout, flow)
    what = f"step {layout.step!r} (Spark operator {layout.operator_id}) at epoch {at.epoch}"
    ops = _statestore(session, at, layout.operator_id, "operator", None).select(
        F.col("key").getField(KG).alias("kg"), F.lit(0).alias("part"), "value.wm_in", "value.wm_out",
        "value.channels", F.col("value.tables").alias("blob"), F.lit(None).cast("long").alias("bucket"),
        F.lit(None).cast("long").alias("chunk"))
    segs = _statestore(session, at, layout.operator_id, "segments", None).select(
        F.col("key").getField(KG).alias("kg"), F.lit(1).alias("part"),
        F.lit(None).cast("long").alias("wm_in"),
        F.lit(None).cast("long").alias("wm_out"), F.lit(None).cast("string").alias("channels"),
        F.col("user_map_value.rows").alias("blob"), F.col("user_map_key.bucket").alias("bucket"),
        F.col("user_map_key.chunk").alias("chunk"))
    stored = ops.unionByName(segs).groupBy("kg")

    def schema_of(rows: pa.Table) -> pa.Table:
        table = _group_table(rows, decode)
        return pa.table({"schema": pa.array([table.schema.remove_metadata().serialize().to_pybytes()])})

    found = _spark_call(what, lambda: stored.applyInArrow(schema_of, "schema binary").distinct().toArrow())
    schemas = [pa.ipc.read_schema(pa.py_buffer(b)) for b in found.column("schema").to_pylist()]
    wide = [s for s in schemas if len(s) > 1]  # a key group without rows decodes to key_group only
    schema = pa.schema([pa.field(I.KEY_GROUP, pa.int32())])
    if wide:
        schema = spark_round_trip(pa.unify_schemas(wide, promote_options="permissive"))

    def decode_group(rows: pa.Table) -> pa.Table:
        return _conform(_group_table(rows, decode), schema)

    return stored.applyInArrow(decode_group, spark_schema(schema))


Decoder = Callable[[list[I.Decoded]], pa.Table]
"""``decode(groups) -> table``: a step's decoding (:func:`decoder`)."""


def _group_table(rows: pa.Table, decode: Decoder) -> pa.Table:
    """One key group's stored rows (its ``operator`` value and ``segments`` entries), decoded."""
    group: I.Decoded | None = None
    chunks: list[tuple[int, int, bytes]] = []
    for r in rows.to_pylist():
        if r["part"] == 0:
            st = OperatorState.load((r["wm_in"], r["wm_out"], r["channels"], r["blob"]))
            group = I.Decoded(int(r["kg"]), GroupState(
                st.wm_in, st.wm_out, dict(st.channels or {}), dict(st.tables or {}), {}))
        else:
            chunks.append((int(r["bucket"]), int(r["chunk"]), r["blob"]))
    if group is None:
        group = I.Decoded(int(rows.column("kg")[0].as_py()) if rows.num_rows else 0, GroupState())
    for b, c, blob in chunks:
        I.add_entry(group, b, c, blob)
    return decode([group])


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: columns cast, missing ones null (a key group without rows: empty)."""
    if not table.num_rows:
        return schema.empty_table()
    n, names = table.num_rows, set(table.column_names)
    columns = [table.column(f.name).cast(f.type) if f.name in names else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass(frozen=True)
class StepSummary:
    """One line of ``wire state CHECKPOINT`` (:func:`summarize`)."""

    step: str
    kind: str
    key_groups: int
    """Key groups holding state."""
    keys: int
    """Distinct keys in state."""
    open_windows: int | None
    """Windows (sessions) in state that have not fired; None for joins and process functions."""
    entries: int
    """Rows of :func:`read_state`'s table: windows, buffered events, keys."""
    bytes: int
    """Stored bytes (Arrow IPC of the chunks and the operator values)."""
    oldest_event_time: int | None
    """Earliest window start, buffered event time or pending event-time timer (ms); None: none."""
    input_watermark: int | None
    output_watermark: int | None


def _oldest(kind: str, table: pa.Table) -> int | None:
    if not table.num_rows:
        return None
    if kind == WINDOW:
        value = pc.min(table.column("window_start")).as_py()
    elif kind == JOIN:
        value = pc.min(table.column("event_time")).as_py()
    elif kind == TEMPORAL_JOIN:  # the earliest pending event (versions are not events)
        pending = table.filter(pc.equal(table.column("kind"), "pending"))
        value = pc.min(pending.column("event_time")).as_py() if pending.num_rows else None
    else:
        timers = pc.list_flatten(table.column("timers"))
        if not len(timers):
            return None
        timers = timers.filter(pc.equal(pc.struct_field(timers, "domain"), "event_time"))
        value = pc.min(pc.struct_field(timers, "time")).as_py() if len(timers) else None
    return None if value is None else int(value)


def summarize(checkpoint: str | os.PathLike[str], epoch: int | None = None, *, flow: FlowLike | None = None,
              spark: SparkSession | None = None) -> Iterator[StepSummary]:
    """Per keyed step of the checkpoint's flow, a :class:`StepSummary` of its state at ``epoch``."""
    found = layouts(checkpoint, flow=flow, spark=spark)
    at = locate(checkpoint, epoch)
    session = reading_session(spark)
    for step, layout in sorted(found.items()):
        groups = read_groups(session, at, layout)
        table = decoder(layout, flow)(list(groups.values()))
        wm_in, wm_out = I.merge_watermarks({k: g.state for k, g in groups.items()})
        keys = 1 if layout.key == NO_KEY and table.num_rows else (
            len(pc.unique(table.column(layout.key))) if layout.key in table.column_names else 0)
        open_windows = None
        if layout.kind == WINDOW:
            open_windows = int(pc.sum(pc.invert(table.column("fired"))).as_py() or 0) if table.num_rows else 0
        used = len({int(k) for k in table.column(I.KEY_GROUP).to_pylist()}) if table.num_rows else 0
        yield StepSummary(step, layout.kind, used, keys, open_windows, table.num_rows,
                          sum(g.bytes for g in groups.values()), _oldest(layout.kind, table), wm_in, wm_out)
