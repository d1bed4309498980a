"""Where a flow's keyed state is: each keyed step's Spark operator, and the epoch to read (issue 29).

Which Spark operator a step is
    Spark numbers its stateful operators, not Wire's steps. Every run records the
    mapping in ``<checkpoint>/state_layout.json`` (:func:`record_layout`): per keyed
    step its Spark operator id, the key column its state rows carry and the key's Spark
    SQL type (to compute a key's key group). A checkpoint last run by an older Wire has
    no such file: pass the flow (``flow=``) and it is derived by compiling the flow.

Which epoch
    ``epoch=None`` reads the state as of the last committed epoch; ``epoch=N`` (Wire's
    epoch id, as ``wire checkpoints`` lists them) any committed epoch Spark still
    retains (``spark.sql.streaming.minBatchesToRetain``, 100 by default). Epochs from
    before a rescale are not readable (the state was re-keyed into a new Spark checkpoint).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from wire.compiler.plan_compiler import CompiledFlow
from wire.compiler.window_stage import NO_KEY
from wire.errors import CheckpointError, ConfigError
from wire.plan.fingerprint import JOIN, PROCESS, TEMPORAL_JOIN, WINDOW
from wire.plan.nodes import Plan
from wire.runtime.checkpoint import META_FILE, log_batches

if TYPE_CHECKING:  # type hints only: the API layer sits above this one
    from wire.api.flow import Flow
    from wire.runtime.runner import RunningFlow


FlowLike: TypeAlias = "Flow | RunningFlow | Plan"
"""What ``flow=`` takes: the flow, its running handle or its plan."""

LAYOUT_FILE = "state_layout.json"
"""Per keyed step, its Spark operator id, key column and key type (:func:`record_layout`)."""

KINDS = (WINDOW, JOIN, TEMPORAL_JOIN, PROCESS)


@dataclass(frozen=True)
class StepLayout:
    """Where one keyed step's state is and how to decode it."""

    step: str
    kind: str
    """``"window"``, ``"interval_join"``, ``"temporal_join"`` or ``"process"``."""
    operator_id: int
    """Spark's stateful operator id (``state/<id>/`` of the Spark checkpoint)."""
    key: str
    """The key column the state rows carry (``__key`` for an unkeyed window)."""
    key_type: str
    """The key column's Spark SQL type, e.g. ``"string"``, ``"bigint"``."""
    fingerprint: dict[str, Any]
    """The step's record in ``wire.json`` (:func:`wire.plan.fingerprint.node_fingerprint`)."""


@dataclass(frozen=True)
class Located:
    """A checkpoint's committed epoch as Spark's state reader needs it."""

    spark_dir: Path
    batch: int
    """Spark's batch id."""
    epoch: int
    """Wire's epoch id (batch id + the checkpoint's epoch base)."""
    key_groups: int


def _meta(checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(checkpoint) / META_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{str(checkpoint)!r} is not a readable Wire checkpoint ({META_FILE}: {e})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{str(checkpoint)!r}: {META_FILE} is not a JSON object")
    return doc


def record_layout(
    checkpoint: str | os.PathLike[str], compiled: CompiledFlow, query: Any = None,
    *, poll_s: float = 0.05,
) -> None:
    """Write ``<checkpoint>/state_layout.json`` for a compiled flow (the runner calls it at start).

    ``compiled``: a :class:`wire.compiler.plan_compiler.CompiledFlow`; its keyed steps'
    Spark operator ids come from the physical plan (:func:`wire.runtime.rescale.parse_operator_ids`,
    the rule a rescale relies on). With ``query`` (the flow's running ``StreamingQuery``)
    the plan is the one its first epoch executed, waited for every ``poll_s`` seconds: it
    is already planned, so explaining it takes milliseconds, where explaining
    ``compiled.dataframe`` plans the streaming query again (1-3 s, competing with the
    first epoch for the cores). A query that ends before executing an epoch, or no query:
    ``compiled.dataframe``. A flow without keyed steps explains nothing. Written
    atomically (a temporary file, then renamed).
    """
    from wire.runtime.rescale import operator_ids, parse_operator_ids

    ids: dict[str, int] = {}
    if compiled.state_keys:
        text = _executed_plan(query, poll_s) if query is not None else None
        ids = parse_operator_ids(text) if text is not None else operator_ids(compiled.dataframe)
    types = compiled.state_key_types
    doc = {"key_groups": compiled.key_groups, "steps": {
        step: {"operator_id": op, "key": compiled.state_keys.get(step), "key_type": types.get(step)}
        for step, op in sorted(ids.items())}}
    path = Path(checkpoint) / LAYOUT_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _executed_plan(query: Any, poll_s: float) -> str | None:
    """The explained physical plan of the running ``query``'s last epoch, once it ran one (else None)."""
    import time

    from pyspark import SparkContext

    try:
        jvm = SparkContext._jvm
        assert jvm is not None  # a classic (JVM-backed) session runs the query
        while True:
            execution = query._jsq.streamingQuery().lastExecution()
            if execution is not None:
                return str(jvm.PythonSQLUtils.explainString(execution, "simple"))
            if not query.isActive:
                return None
            time.sleep(poll_s)
    except (Py4JError, PySparkException, AttributeError):
        return None


def plan_of(flow: FlowLike) -> Plan:
    """The plan of a ``flow=`` argument (a flow, its running handle, or a plan)."""
    if isinstance(flow, Plan):
        return flow
    plan = getattr(flow, "plan", None)
    plan = plan() if callable(plan) else plan
    if not isinstance(plan, Plan):
        raise ConfigError("flow", flow, "a wire.Flow, a RunningFlow or a Plan")
    return plan


def _layout_from_flow(plan: Plan, checkpoint: str | os.PathLike[str], spark: SparkSession,
                      key_groups: int) -> dict[str, dict[str, Any]]:
    """What :func:`record_layout` records, derived by compiling ``plan`` as a run would (no query starts)."""
    from wire.compiler.plan_compiler import compile_plan
    from wire.plan.nodes import SourceNode
    from wire.runtime.kept_ports import keep_unsunk_ports
    from wire.runtime.rescale import operator_ids

    plan, _ = keep_unsunk_ports(plan, checkpoint)  # a run adds these sinks, and numbers operators with them
    sources = [n.step for n in plan.nodes if isinstance(n, SourceNode)]
    compiled = compile_plan(plan, spark, key_groups, None,
                            resume={s: {"start": None, "end": None} for s in sources})
    types = compiled.state_key_types
    return {step: {"operator_id": op, "key": compiled.state_keys.get(step), "key_type": types.get(step)}
            for step, op in operator_ids(compiled.dataframe).items()}


def layouts(checkpoint: str | os.PathLike[str], *, flow: FlowLike | None = None,
            spark: SparkSession | None = None) -> dict[str, StepLayout]:
    """Every keyed step of the checkpoint's flow, by step id.

    Raises
    ------
    CheckpointError
        If ``checkpoint`` is not a Wire checkpoint, or records no layout (a run by an
        older Wire) and no ``flow`` is given.
    """
    doc = _meta(checkpoint)
    steps = doc.get("steps") if isinstance(doc.get("steps"), dict) else {}
    path = Path(checkpoint) / LAYOUT_FILE
    recorded: dict[str, dict[str, Any]] | None = None
    if path.is_file():
        try:
            recorded = dict(json.loads(path.read_text(encoding="utf-8"))["steps"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(
                f"{str(path)!r} is damaged ({e}); run the flow again to rewrite it") from None
    if recorded is None or (flow is not None and any(v.get("key_type") is None for v in recorded.values())):
        if flow is None:
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r} has no {LAYOUT_FILE} (last run by an older Wire): pass "
                "the flow (read_state(..., flow=flow)) or run the flow once with this version")
        groups = int(doc.get("key_groups", 1))
        recorded = _layout_from_flow(plan_of(flow), checkpoint, reading_session(spark), groups)
    out = {}
    for step, rec in recorded.items():
        given = steps.get(step) if isinstance(steps, dict) else None
        fp: dict[str, Any] = given if isinstance(given, dict) else {}
        kind = str(fp.get("kind", ""))
        if kind not in KINDS:
            continue
        out[step] = StepLayout(step, kind, int(rec["operator_id"]), str(rec.get("key") or NO_KEY),
                               str(rec.get("key_type") or ""), dict(fp))
    return out


def layout_of(checkpoint: str | os.PathLike[str], step: str, *, flow: FlowLike | None = None,
              spark: SparkSession | None = None) -> StepLayout:
    """One keyed step's :class:`StepLayout`; ConfigError naming the keyed steps if ``step`` is none."""
    found = layouts(checkpoint, flow=flow, spark=spark)
    if step not in found:
        raise ConfigError("step", step, f"a keyed (stateful) step of the flow: {sorted(found)}")
    return found[step]


def locate(checkpoint: str | os.PathLike[str], epoch: int | None = None) -> Located:
    """The Spark batch holding Wire epoch ``epoch`` (None: the last committed one).

    Raises
    ------
    CheckpointError
        If nothing is committed, ``epoch`` is not committed, or it is from before a rescale.
    """
    doc = _meta(checkpoint)
    spark_dir = Path(checkpoint) / str(doc.get("spark_dir", "spark"))
    base = int(doc.get("epoch_base", 0))
    commits = log_batches(spark_dir / "commits")
    if not commits:
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} has no committed epoch: no state to read yet")
    if epoch is None:
        batch = commits[-1]
    else:
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise ConfigError("epoch", epoch, "None (the last committed epoch) or an int epoch id")
        batch = epoch - base
        if batch < 0:
            raise CheckpointError(f"epoch {epoch} is from before the rescale at epoch {base}: its state was "
                                  "re-keyed into a new Spark checkpoint and is not retained")
        if batch not in commits:
            raise CheckpointError(f"epoch {epoch} is not a committed epoch of {str(checkpoint)!r} "
                                  f"(committed: {commits[0] + base}..{commits[-1] + base})")
    return Located(spark_dir, batch, batch + base, int(doc.get("key_groups", 1)))


def reading_session(spark: SparkSession | None) -> SparkSession:
    """``spark``, else the active session, else a new local one (``local[2]``) to read state with."""
    if spark is not None:
        return spark
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from wire.runtime.session import spark_session

    return spark_session("local[2]", app_name="wire:read_state")
