"""Rescaling: restart a flow's checkpoint with another number of key groups (issue 12).

Keyed state is partitioned by ``pmod(xxhash64(key), key_groups)``, so a checkpoint's
state cannot simply be opened with another ``key_groups``. Like Flink restoring key
groups from a savepoint, :func:`rescale_checkpoint` redistributes it into a new Spark
checkpoint; the flow then runs on, and its outputs equal an uninterrupted run's.

What is read (all from the current Spark checkpoint, ``<checkpoint>/<spark_dir>/``, at its
last committed batch ``C``):

* each keyed operator's state, with Spark's state data source
  (``spark.read.format("statestore")``, options ``operatorId``, ``stateVarName`` =
  ``operator`` (its ValueState: watermarks, channels, chunk index) and ``segments`` (its
  MapState of Arrow chunks), ``batchId`` = ``C``), :data:`GROUPS_PER_READ` old key groups
  per read (:func:`rekey_operator`). A step's Spark operator id comes from the
  compiled plan (:func:`operator_ids`): each keyed operator's pre-stage function is named
  after its step (:func:`wire.compiler.keyed.stage_name`);
* the offset log: the end offsets of batch ``C`` (where the sources resume: they hold the
  sources' watermarks, per partition, and positions), and those of batch ``C + 1`` when that
  epoch was planned but not committed (an epoch in flight: the new query's first epoch
  covers exactly its range, so an exactly-once sink that published part of it and skips
  it by its epoch id loses nothing).

The re-key rule is :func:`wire.state.rekey.rekey`'s: each state row moves to the new key
group of its key (Spark's own ``pmod(xxhash64(key), new)``, computed by Spark on the
operator's distinct keys); every new key group gets the minimum over the old groups of
the input, output and channel watermarks. So the outputs equal an uninterrupted run's,
except the ``watermark`` column of result rows (the output watermark of the row's key
group, which depends on how keys are grouped, as it does between two runs with different
``key_groups``).

What is written: ``<checkpoint>/spark-g<n>.seeds/<operator id>.parquet`` per keyed step,
rows of :data:`wire.compiler.keyed.SEED_SCHEMA` that the new query's operators load
through ``transformWithStateInPandas(initialState=...)`` in its first epoch
(``handleInitialState``); then :func:`wire.runtime.checkpoint.open_checkpoint` writes the new
``wire.json``: ``key_groups``, ``spark_dir = "spark-g<n>"`` (empty: the new query starts at
batch 0), ``generation`` ``n``, ``epoch_base`` = old base + ``C`` + 1 (the epoch ids that
sinks and the epoch log see continue), ``seeds``, ``resume`` (per source step, ``start`` /
``end`` offsets, :func:`wire.sources.base.resumable`) and ``previous_spark_dir``, kept
until the new Spark checkpoint has committed an epoch. Every run of the generation
compiles its operators with the seeds (Spark reads them only in batch 0), so they are kept
until the next rescale's Spark checkpoint has committed.

Crash behaviour: nothing counts until ``wire.json`` is replaced (atomically). A crash
before leaves the old checkpoint as it was plus a ``spark-g<n>.seeds.tmp`` or an
uncommitted ``spark-g<n>.seeds`` directory, which the next attempt deletes and rebuilds
from the same old state (the same result). A crash after it is an ordinary restart of the
new generation: before its first commit, Spark replays batch 0 with the same initial
state and resume offsets.

Each line of Spark's offset log belongs to one source read; which step it reads comes from
the compiled plan (:func:`parse_source_order`). A source step read by several branches
resumes all its reads from one offset, so they must have recorded the same offsets.

Limits (refused, the checkpoint unchanged): a source step whose reads recorded different
offsets, a checkpoint without a committed epoch (:class:`~wire.errors.CheckpointError`); a
source connector without a ``resume`` parameter (:class:`~wire.errors.ConfigError`; every
Wire source has one, :func:`wire.sources.base.resumable`). The state of
:data:`GROUPS_PER_READ` old key groups of one operator passes through the driver's memory
at a time (and the new groups' chunk indexes); each read scans the operator's state in
Spark. Tested with the file source; the Kafka, Redis Streams, HTTP ingest, Nexmark and
scripted test sources resume the same way (as on an ordinary restart), untested on a rescale.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from wire.compiler.keyed import (
    SEED_CHUNK,
    SEED_OPERATOR,
    SEED_SCHEMA,
    OperatorState,
)
from wire.core.envelope import KG, decode_table, encode_table
from wire.core.time import NO_WATERMARK
from wire.errors import CheckpointError
from wire.plan.nodes import Plan, SourceNode
from wire.runtime.checkpoint import log_batches, read_spark_log
from wire.state.packed_chunks import PACK, unpack
from wire.state.rekey import INDEX_TABLE, GroupState, merge_channels, rekey
from wire.state.segments import INDEX_SCHEMA

_TWS = re.compile(r"TransformWithStateInPySpark .*opId = (\d+)")
_PRE = re.compile(r"MapInArrow wire_keyed_([0-9a-f]+)\(")
_FUSED = re.compile(r"transformWithStateUDF\([^)]*\bwire_keyed_([0-9a-f]+)#")
"""A state stage whose input column is named after its step: a window fused with its source
(:func:`wire.compiler.window_stage.compile_fused_window`)."""


def operator_ids(df: DataFrame) -> dict[str, int]:
    """Per keyed step of the compiled flow ``df``, its Spark stateful operator id.

    Read from Spark's explained physical plan (the same rules number the operators of a
    running query): the first pre-stage named :func:`~wire.compiler.keyed.stage_name`
    below each ``TransformWithStateInPySpark`` is that operator's; a window fused with its
    source (:mod:`wire.compiler.fusion`) has no pre-stage in Spark, and its state stage's
    input column carries the name instead.
    """
    return parse_operator_ids(explain(df))


def explain(df: DataFrame) -> str:
    """Spark's explained physical plan of ``df`` (``df.explain()``'s text)."""
    jvm = df.sparkSession._jvm
    assert jvm is not None  # a classic (JVM-backed) session
    return str(jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "simple"))


def logical_plan(df: DataFrame) -> str:
    """Spark's analyzed logical plan of ``df`` as text, no field list shortened.

    Its source relations are the query's sources in offset-log order (MicroBatchExecution
    numbers the analyzed plan's relations): one per branch that reads a source, also when
    the physical plan scans it once (:func:`wire.compiler.branches.read_once`).
    """
    plan = df._jdf.queryExecution().analyzed()
    # TreeNode.treeString(verbose, addSuffix, maxFields, printOperatorId, printOutputColumns)
    defaults = [getattr(plan, f"treeString$default${i}")() for i in (4, 5)]
    return str(plan.treeString(False, False, 2**31 - 1, *defaults))


_SOURCE_PORT = re.compile(r"CASE WHEN \(__kind#\d+ = 1\) THEN (.+?) ELSE __port#")
_RELATION = re.compile(r"\bStreamingRelation(V2)? ")


def parse_source_order(text: str) -> list[str]:
    """The source step of each ``StreamingRelation`` of a plan (:func:`logical_plan`), in plan order.

    Spark numbers a query's sources (the lines of its offset log) in the order they appear
    in its plan. Each Wire source read sits under the projection that names its watermark
    rows' channel after the source step (``CASE WHEN (__kind = 1) THEN <step> ELSE __port``):
    the nearest such line above a ``StreamingRelation`` names its step.
    """
    order: list[str] = []
    last: str | None = None
    for line in text.splitlines():
        if (m := _SOURCE_PORT.search(line)) is not None:
            last = m.group(1)
        elif _RELATION.search(line) is not None:
            if last is None:
                raise CheckpointError("rescale: a Spark source without a Wire source step in the plan")
            order.append(last)
            last = None
    return order


def parse_operator_ids(text: str) -> dict[str, int]:
    """:func:`operator_ids` of an explained physical plan (Spark's ``explain`` text)."""
    out: dict[str, int] = {}
    pending: int | None = None
    for line in text.splitlines():
        if (m := _TWS.search(line)) is not None:
            if (fused := _FUSED.search(line)) is not None:  # its input names the step (fusion)
                out[bytes.fromhex(fused.group(1)).decode("utf-8")] = int(m.group(1))
                continue
            pending = int(m.group(1))
        elif pending is not None and (m := _PRE.search(line)) is not None:
            out[bytes.fromhex(m.group(1)).decode("utf-8")] = pending
            pending = None
    return out


def _offset_lines(spark_dir: Path, batch: int) -> list[str]:
    return read_spark_log(spark_dir / "offsets" / str(batch), spark_dir.parent)


def _resume(
    order: list[str], spark_dir: Path, committed: int, planned: int, where: str
) -> dict[str, dict[str, Any]]:
    """Per source step, ``{"start": committed end offset, "end": in-flight end or None}``.

    ``order``: the source step of each of Spark's sources, in offset-log order
    (:func:`parse_source_order`). A step read several times (branches) must have recorded
    the same offsets for every read: they resume from one.
    """
    start, end = _offset_lines(spark_dir, committed), (
        _offset_lines(spark_dir, planned) if planned > committed else None)
    if len(order) != len(start) or (end is not None and len(end) != len(start)):
        raise CheckpointError(
            f"{where}: Spark's offset log records {len(start)} sources, the flow's plan "
            f"reads {len(order)} ({order}); run it with the checkpoint's key_groups")
    out: dict[str, dict[str, Any]] = {}
    for step in dict.fromkeys(order):
        at = [i for i, s in enumerate(order) if s == step]
        starts = {start[i] for i in at}
        ends: set[str | None] = {None} if end is None else {end[i] for i in at}
        if len(starts) != 1 or len(ends) != 1 or "-" in starts:
            raise CheckpointError(
                f"{where}: source {step!r} is read {len(at)} times (branches) and its reads "
                "recorded different offsets, so no single offset resumes them; run it with the "
                "checkpoint's key_groups")
        e = ends.pop()
        out[step] = {"start": json.loads(starts.pop()), "end": None if e is None else json.loads(e)}
    return out


def _read_groups(
    spark: SparkSession, spark_dir: Path, op: int, batch: int, lo: int, hi: int
) -> dict[int, GroupState]:
    """The operator's state of old key groups ``lo <= kg < hi``, decoded per group."""
    def read(var: str) -> DataFrame:
        df = (spark.read.format("statestore").option("operatorId", op)
              .option("stateVarName", var).option("batchId", batch).load(str(spark_dir)))
        return df.where(F.col("key").getField(KG).between(lo, hi - 1))

    values = read("operator").select(F.col("key").getField(KG).alias("kg"), "value.*").toArrow()
    groups: dict[int, GroupState] = {}
    for row in values.to_pylist():
        st = OperatorState.load((row["wm_in"], row["wm_out"], row["channels"], row["tables"]))
        groups[int(row["kg"])] = GroupState(st.wm_in, st.wm_out, dict(st.channels or {}),
                                            dict(st.tables or {}), {})
    chunks = read("segments").select(
        F.col("key").getField(KG).alias("kg"), F.col("user_map_key.bucket").alias("bucket"),
        F.col("user_map_key.chunk").alias("chunk"), F.col("user_map_value.rows").alias("rows"),
    ).toArrow()
    for kg, b, c, rows in zip(*(chunks.column(n).to_pylist() for n in ("kg", "bucket", "chunk", "rows")),
                              strict=True):
        held = groups.setdefault(int(kg), GroupState()).chunks
        if (int(b), int(c)) == PACK:  # the key group's small chunks, kept together
            held.update(unpack(decode_table(rows)))
        else:
            held[(int(b), int(c))] = decode_table(rows)
    return groups


GROUPS_PER_READ = 64
"""Old key groups whose state one read brings to the driver (:func:`rekey_operator`)."""


def rekey_operator(
    spark: SparkSession, spark_dir: Path, op: int, batch: int, *, old_groups: int, key: str,
    new_groups: int, per_group: set[str], path: Path,
) -> None:
    """Write operator ``op``'s re-keyed state to the seed Parquet ``path``, in bounded reads.

    Reads the old key groups :data:`GROUPS_PER_READ` at a time, re-keys each read
    (:func:`wire.state.rekey.rekey`) and writes its chunks at once, numbered after the
    chunks earlier reads put in the same new group and bucket (so chunks keep the old
    groups' order); only the chunk index and the watermarks stay in memory, and the
    operator rows (watermarks: the minimum over all reads) are written last.
    """
    written: dict[tuple[int, int], int] = {}
    index: dict[int, list[tuple[int, int, int, int]]] = {g: [] for g in range(new_groups)}
    other: dict[int, dict[str, list[pa.Table]]] = {g: {} for g in range(new_groups)}
    marks: list[tuple[int, int]] = []
    channels: list[dict[str, int]] = []
    with pq.ParquetWriter(path, SEED_SCHEMA) as writer:
        for lo in range(0, old_groups, GROUPS_PER_READ):
            old = _read_groups(spark, spark_dir, op, batch, lo, lo + GROUPS_PER_READ)
            if not old:
                continue
            new = rekey(old, key=key, new_groups=new_groups, per_group_channels=per_group,
                        assign=spark_assign(spark, old, key, new_groups))
            marks.append((new[0].wm_in, new[0].wm_out))
            channels.append(new[0].channels)
            for g, st in new.items():
                ix = st.tables.get(INDEX_TABLE)
                cols = [] if ix is None else [ix.column(n).to_pylist() for n in ("bucket", "chunk", "level")]
                levels = {(b, c): lv for b, c, lv in zip(*cols, strict=True)}
                chunks = {}
                for (b, c), table in sorted(st.chunks.items()):
                    n = written.get((g, b), 0)
                    written[(g, b)] = n + 1
                    chunks[(b, n)] = table
                    index[g].append((b, n, table.num_rows, levels.get((b, c), 0)))
                for name, table in st.tables.items():
                    if name != INDEX_TABLE:
                        other[g].setdefault(name, []).append(table)
                writer.write_table(seed_table({g: GroupState(chunks=chunks)}, operators=False))
        wm_in = min((m[0] for m in marks), default=NO_WATERMARK)
        wm_out = min((m[1] for m in marks), default=NO_WATERMARK)
        merged = merge_channels(channels, per_group=per_group, new_groups=new_groups)
        final = {}
        for g in range(new_groups):
            rows = sorted(index[g])
            tables = {name: pa.concat_tables(parts) for name, parts in other[g].items()}
            tables[INDEX_TABLE] = pa.Table.from_arrays(
                [pa.array([r[i] for r in rows], pa.int64()) for i in range(4)], schema=INDEX_SCHEMA)
            final[g] = GroupState(wm_in, wm_out, dict(merged), tables, {})
        writer.write_table(seed_table(final))


def spark_assign(spark: SparkSession, groups: dict[int, GroupState], key: str, new_groups: int) -> Any:
    """``assign(keys)`` for :func:`~wire.state.rekey.rekey`: Spark's ``pmod(xxhash64(key), n)``.

    Spark hashes the operator's distinct keys once (the same expression the compiled flow
    uses, on the same Arrow-to-Spark type), so keys land where the new query sends their events.
    """
    keys = [t.column(key) for s in groups.values() for t in [*s.chunks.values(), *(
        v for n, v in s.tables.items() if key in v.column_names)] if key in t.column_names]
    if not keys:
        return lambda arr: np.zeros(len(arr), np.int64)
    distinct = pc.unique(pa.chunked_array(keys).combine_chunks())
    hashed = spark.createDataFrame(pa.table({"k": distinct})).select(
        "k", F.pmod(F.xxhash64("k"), F.lit(new_groups)).cast("long").alias("g")).toArrow()
    known, kgs = hashed.column("k").combine_chunks(), hashed.column("g").to_numpy()

    def assign(arr: pa.Array) -> np.ndarray:
        at = pc.index_in(arr.cast(known.type), value_set=known, skip_nulls=False)
        if at.null_count:
            raise CheckpointError(f"rescale: a state key of column {key!r} was not hashed")
        assigned: np.ndarray = kgs[at.to_numpy()]
        return assigned

    return assign


def seed_table(groups: dict[int, GroupState], *, operators: bool = True) -> pa.Table:
    """The rows of :data:`~wire.compiler.keyed.SEED_SCHEMA` for re-keyed ``groups``.

    Per group its operator row (unless ``operators`` is False) and one row per chunk.
    """
    cols: dict[str, list[Any]] = {f.name: [] for f in SEED_SCHEMA}

    def add(**values: Any) -> None:
        for name in cols:
            cols[name].append(values.get(name))

    for g, s in sorted(groups.items()):
        if operators:
            wm_in, wm_out, channels, tables = OperatorState(s.wm_in, s.wm_out, s.channels, s.tables).dump()
            add(**{KG: g}, seed_kind=SEED_OPERATOR, wm_in=wm_in, wm_out=wm_out, channels=channels,
                tables=tables)
        for (b, c), t in sorted(s.chunks.items()):
            add(**{KG: g}, seed_kind=SEED_CHUNK, bucket=b, chunk=c, rows=encode_table(t))
    return pa.table(cols, schema=SEED_SCHEMA)


def rescale_checkpoint(
    spark: SparkSession, plan: Plan, root: Path, doc: dict[str, Any], key_groups: int
) -> dict[str, Any]:
    """Re-key ``root``'s state to ``key_groups``; return the new ``wire.json`` (not yet written).

    See the module docstring for what is read and written and the crash behaviour.

    Raises
    ------
    CheckpointError
        If the checkpoint has no committed epoch, the flow's sources cannot be resumed
        (see the limits), or the state does not match the flow's keyed steps.
    """
    from wire.compiler.plan_compiler import compile_plan

    where = f"checkpoint {str(root)!r} (key_groups={doc['key_groups']} -> {key_groups})"
    old_dir = root / doc.get("spark_dir", "spark")
    commits, offsets = log_batches(old_dir / "commits"), log_batches(old_dir / "offsets")
    if not commits:
        raise CheckpointError(f"{where}: no committed epoch to rescale from; run it with the "
                              "checkpoint's key_groups first, or start a new checkpoint")
    committed, planned = commits[-1], offsets[-1]
    # compiled as the new query will be (a source that cannot resume is refused here)
    sources = [n.step for n in plan.nodes if isinstance(n, SourceNode)]
    probe = compile_plan(plan, spark, key_groups, None,
                         resume={step: {"start": None, "end": None} for step in sources})
    explained = explain(probe.dataframe)
    resume = _resume(parse_source_order(logical_plan(probe.dataframe)), old_dir, committed, planned, where)
    if set(resume) != set(sources):
        raise CheckpointError(f"{where}: the plan's Spark sources read steps {sorted(resume)}, the "
                              f"flow's sources are {sorted(sources)}; run it with the checkpoint's "
                              "key_groups")
    ids = parse_operator_ids(explained)
    if set(ids) != set(probe.state_keys):
        raise CheckpointError(f"{where}: found Spark operators for steps {sorted(ids)}, the flow's "
                              f"keyed steps are {sorted(probe.state_keys)}")
    generation = int(doc.get("generation", 0)) + 1
    name = f"spark-g{generation}"
    seeds_dir, tmp = root / f"{name}.seeds", root / f"{name}.seeds.tmp"
    for leftover in (tmp, seeds_dir, root / name):  # of an attempt that never committed
        shutil.rmtree(leftover, ignore_errors=True)
    tmp.mkdir()
    per_group = set(probe.state_keys)
    seeds = {}
    for step, op in sorted(ids.items()):
        rekey_operator(spark, old_dir, op, committed, old_groups=int(doc["key_groups"]),
                       key=probe.state_keys[step], new_groups=key_groups, per_group=per_group,
                       path=tmp / f"{op}.parquet")
        seeds[step] = f"{name}.seeds/{op}.parquet"
    tmp.rename(seeds_dir)
    base = int(doc.get("epoch_base", 0)) + committed + 1
    return {**doc, "key_groups": key_groups, "spark_dir": name, "generation": generation,
            "epoch_base": base, "seeds": seeds, "resume": resume,
            "previous_spark_dir": doc.get("spark_dir", "spark")}
