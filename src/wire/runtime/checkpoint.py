"""Wire's metadata inside a flow's checkpoint directory.

Layout of ``<checkpoint>/``: ``spark/`` is Spark's own checkpoint (offsets with
the recorded watermarks, commits, RocksDB state); ``wire.json`` records the flow
id, the number of key groups (state is partitioned by it; another number on a restart
rescales: :mod:`wire.runtime.rescale`, which adds ``spark_dir`` = ``spark-g<n>``,
``generation``, ``epoch_base``, ``seeds``, ``resume`` and ``previous_spark_dir``), a
checkpoint id that sinks use as their owner mark, and under
``steps`` the fingerprint of the plan that wrote it (per step id: each source,
stateful step and sink with its parameters, :mod:`wire.plan.fingerprint`), e.g.::

    {"checkpoint_id": "5f0c...", "flow_id": "orders", "key_groups": 8,
     "steps": {"hourly": {"kind": "window", "window": "Tumbling(size=10000 ms)",
                          "key": "origin", "allowed_lateness_ms": 0, "emit": "final",
                          "aggregations": {"n": "Count(column=None)"}, ...},
               "out": {"kind": "sink", "reads": "hourly.out",
                       "sink": {"kind": "ParquetSink", "guarantee": "exactly_once",
                                "path": "/data/out"}}, ...}}

:func:`open_checkpoint` refuses a plan whose changes the checkpoint cannot survive.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.errors import CheckpointError, PlanError
from wire.plan.fingerprint import Fingerprint, incompatible_changes, plan_fingerprint
from wire.plan.nodes import Plan
from wire.runtime.checkpoint_files import (
    META_FILE,
    WAY_OUT,
    EpochInfo,
    absolute_checkpoint,
    check_spark_logs,
    epoch_base,
    epochs_settled,
    finished,
    is_checkpoint,
    is_local_checkpoint,
    list_epochs,
    log_batches,
    read_spark_log,
    spark_checkpoint,
    uri_scheme,
)

__all__ = [
    "DEFAULT_KEY_GROUPS", "META_FILE", "SET_ASIDE_SUFFIX", "START_OVER", "WAY_OUT", "CheckpointMeta",
    "EpochInfo", "Rescale", "StartOver", "absolute_checkpoint", "begin_start_over", "check_spark_logs",
    "default_key_groups", "epoch_base", "epochs_settled", "finish_start_over", "finished",
    "is_checkpoint", "is_local_checkpoint", "list_epochs", "log_batches", "open_checkpoint", "read_spark_log",
    "source_count", "spark_checkpoint", "uri_scheme",
]
"""Opening a checkpoint is here; reading its files without opening it
(:mod:`wire.runtime.checkpoint_files`) is importable from here too."""


@dataclass(frozen=True)
class CheckpointMeta:
    """What ``wire.json`` records."""

    flow_id: str
    key_groups: int
    checkpoint_id: str
    spark_dir: str = "spark"
    """Spark's checkpoint directory, relative to the checkpoint (``spark-g<n>`` after the
    n-th rescale, :mod:`wire.runtime.rescale`)."""
    epoch_base: int = 0
    """Added to Spark's batch ids to make Wire's epoch ids (0 until a rescale)."""
    seeds: dict[str, str] = field(default_factory=dict)
    """Per stateful step, the Parquet of its initial state (absolute; after a rescale)."""
    resume: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per source step, where its reads resume (after a rescale, :func:`wire.sources.base.resumable`)."""
    start_over: bool = False
    """A start-over is not finished: the sinks must still be handed to this checkpoint
    (:data:`START_OVER`)."""


Rescale = Callable[[Path, dict[str, Any], int], dict[str, Any]]
"""``rescale(root, doc, key_groups) -> new wire.json document`` (:mod:`wire.runtime.rescale`)."""


DEFAULT_KEY_GROUPS = 8
"""The fewest key groups a new checkpoint gets when the flow does not choose
(``key_groups=None``); see :func:`default_key_groups`."""


def default_key_groups(parallelism: int) -> int:
    """Key groups of a new checkpoint on a Spark with ``parallelism`` task slots.

    ``max(8, 2 * parallelism)``: each stateful operator runs one task per key group
    that has data, so the key groups cap its parallelism; two per slot even out
    skew between groups. Each key group also costs a few Python↔JVM state calls per
    operator and epoch, so more groups than that only add fixed cost (measured on
    Nexmark q5/q7/q11 with epochs of 500k events on 2 cores: 8 groups ~25% faster
    than 16). ``parallelism`` is Spark's ``defaultParallelism`` (cores of a local
    master, executor cores of a cluster). Restarting with another number rescales the state
    (:mod:`wire.runtime.rescale`).
    """
    return max(DEFAULT_KEY_GROUPS, 2 * int(parallelism))


START_OVER = "start_over"
"""Key of ``wire.json`` set while a start-over (``fresh=True``) is not finished: the
runner then hands every sink to the new checkpoint (:meth:`wire.delivery.sink.Sink.supersede`)
before the first epoch, and :func:`finish_start_over` removes it."""

SET_ASIDE_SUFFIX = ".superseded"
"""``<checkpoint>.superseded``: where :func:`begin_start_over` moves the previous checkpoint."""


def open_checkpoint(
    checkpoint: str | os.PathLike[str],
    *,
    flow_id: str,
    key_groups: int | None,
    plan: Plan | None = None,
    new_key_groups: Callable[[], int] | None = None,
    rescale: Rescale | None = None,
    start_over: bool = False,
) -> CheckpointMeta:
    """Create or verify ``<checkpoint>/wire.json``; called at run start, before Spark runs.

    ``key_groups=None`` takes the checkpoint's recorded number of key groups, or for a
    new checkpoint ``new_key_groups()`` (called only then; the runner passes
    :func:`default_key_groups` of the SparkSession's parallelism), or
    :data:`DEFAULT_KEY_GROUPS` without it.

    With ``plan``, ``wire.json`` also records the plan's fingerprint under ``"steps"``
    (:func:`wire.plan.fingerprint.plan_fingerprint`: per step id, each source,
    stateful step and sink with its parameters), and a checkpoint that already has
    epochs is resumed only by a compatible plan. The rules
    (:func:`wire.plan.fingerprint.incompatible_changes`):

    * refused: a source added, removed or renamed (Spark's offset log has one offset
      per source); a stateful step (window, join) added, removed or renamed, or its
      key, window, allowed lateness, emission, aggregations, callbacks, join bounds
      changed (its state was built under the old definition; Spark restores state by
      operator position, and a new operator has none); a sink's kind, guarantee,
      target (path, table, key columns, url) or the port it reads changed under the
      same step id (its earlier epochs are in the old target, and an exactly-once
      sink would skip them there); the number of key groups, unless ``rescale`` is
      given;
    * allowed: changed stateless steps (filter, map, select, throttle, union; a
      ``key_by`` only where no stateful step's key changes); a sink added under a new
      step id (it receives the epochs from the next one on, not earlier output) or
      removed (so renaming a sink is allowed: its new name starts a new target); a
      sink's tuning (batch size, timeouts, breaker settings); a source's options
      (path, schema, watermark, admission: it resumes from its recorded offsets);
    * a checkpoint with no epoch yet (nothing in ``spark/offsets``) takes any plan;
    * a checkpoint written before fingerprints existed opens and records them.

    ``start_over`` (set by ``fresh=True``, after :func:`begin_start_over` moved the
    previous checkpoint aside): a new checkpoint records :data:`START_OVER`, and the
    returned meta says so until :func:`finish_start_over`; a checkpoint that still
    records it (a start-over interrupted before its sinks were handed over) returns it
    too, so that the run finishes the hand-over.

    Another number of key groups with ``rescale`` (the runner passes
    :func:`wire.runtime.rescale.rescale_checkpoint`): after the plan checks,
    ``rescale(root, doc, key_groups)`` re-keys the state into a new Spark checkpoint
    directory and returns the new ``wire.json``; writing it (atomically) is the commit
    point of the rescale. Once the new Spark checkpoint has committed an epoch, the
    previous one is deleted (at the next open).

    Local sink paths are compared absolute (a relative path from another working
    directory is another target); those inside the checkpoint relative to it. Not
    detected: a stateless change that changes the *type* of a key or aggregated
    column (the plan does not know column types before Spark resolves them).

    Also checked, before Spark reads anything: ``checkpoint`` is a directory;
    ``wire.json`` is a JSON object with a string ``flow_id``, an int ``key_groups``
    and a string ``checkpoint_id``; a ``spark/`` directory comes with a ``wire.json``;
    Spark's ``metadata`` and its latest offset and commit log files parse
    (:func:`check_spark_logs`). A ``wire.json.tmp`` left by a crash during a write is
    removed.

    Raises
    ------
    CheckpointError
        If the checkpoint belongs to another flow, was created with another number
        of key groups, records an incompatible plan (naming each step and what
        changed), or is damaged or partial (naming the path and what is wrong). The
        message ends with :data:`WAY_OUT` where starting over is the way out.
    """
    root = Path(checkpoint)
    _make_directory(root)
    path = root / META_FILE
    _remove_leftover(root)
    current = None if plan is None else plan_fingerprint(plan, checkpoint=root)
    if not path.exists():
        if _has_content(root / "spark"):
            raise CheckpointError(
                f"checkpoint {str(root)!r} holds a Spark checkpoint (spark/) but no {META_FILE}: "
                f"it is partial or not a Wire checkpoint. {WAY_OUT}"
            )
        if key_groups is None:
            key_groups = new_key_groups() if new_key_groups is not None else DEFAULT_KEY_GROUPS
        meta = CheckpointMeta(flow_id, key_groups, uuid.uuid4().hex, start_over=start_over)
        _write_meta(root, {**_document(meta, current), **({START_OVER: True} if start_over else {})})
        return meta
    doc = _read_meta(root)
    if doc["flow_id"] != flow_id:
        raise CheckpointError(
            f"checkpoint {str(root)!r} belongs to flow {doc['flow_id']!r}, not {flow_id!r}"
        )
    if key_groups is None:
        key_groups = doc["key_groups"]
    spark_dir = root / doc.get("spark_dir", "spark")
    if doc["key_groups"] != key_groups and rescale is None:
        raise CheckpointError(
            f"checkpoint {str(root)!r} was created with key_groups={doc['key_groups']}; "
            f"got key_groups={key_groups} (state is partitioned by it; use the same value "
            "or a new checkpoint)"
        )
    recorded = doc.get("steps")
    if current is not None and recorded is not None and log_batches(spark_dir / "offsets"):
        changes = incompatible_changes(recorded, current)
        if changes:
            raise CheckpointError(
                f"checkpoint {str(root)!r}: " + "; ".join(changes)
                + f". The checkpoint's state and output cannot be resumed by this flow. {WAY_OUT}"
            )
    check_spark_logs(root, sources=None if plan is None else source_count(plan))
    previous = doc.get("previous_spark_dir")
    if previous and log_batches(root / doc["spark_dir"] / "commits"):
        shutil.rmtree(root / previous, ignore_errors=True)  # the new generation has committed
        shutil.rmtree(root / f"{previous}.seeds", ignore_errors=True)
        doc = {k: v for k, v in doc.items() if k != "previous_spark_dir"}
        _write_meta(root, doc)
    if doc["key_groups"] != key_groups and rescale is not None:
        doc = rescale(root, doc, key_groups)
        _write_meta(root, {**doc, **({"steps": current} if current is not None else {})})
        doc = _read_meta(root)
    meta = CheckpointMeta(
        flow_id, key_groups, doc["checkpoint_id"], spark_dir=doc.get("spark_dir", "spark"),
        epoch_base=int(doc.get("epoch_base", 0)),
        seeds={step: str(root / p) for step, p in doc.get("seeds", {}).items()},
        resume=dict(doc.get("resume", {})), start_over=doc.get(START_OVER) is True,
    )
    if current is not None and recorded != current:
        _write_meta(root, {**doc, "steps": current})
    return meta


@dataclass(frozen=True)
class StartOver:
    """A start-over in progress (``fresh=True``), from :func:`begin_start_over`.

    ``set_aside`` is where the previous checkpoint now is (``<checkpoint>.superseded``),
    or None when there was none. Until the sinks are handed to the new checkpoint,
    :meth:`undo` puts everything back as it was.
    """

    root: Path
    set_aside: Path | None
    created: bool
    """True when :func:`begin_start_over` moved a checkpoint aside (so :meth:`undo` moves it back)."""

    def undo(self) -> None:
        """The new run could not start (before any sink was touched): restore the old checkpoint.

        Deletes the new checkpoint (it has no epoch: its query never started) and moves
        the set-aside one back.
        """
        if not self.created or self.set_aside is None or not self.set_aside.exists():
            return
        if self.root.exists():
            if log_batches(Path(spark_checkpoint(self.root)) / "offsets"):
                return  # never delete epochs (cannot happen: the query had not started)
            shutil.rmtree(self.root)
        os.replace(self.set_aside, self.root)


def begin_start_over(checkpoint: str | os.PathLike[str]) -> StartOver:
    """``fresh=True``, first step: set the previous checkpoint aside, deleting nothing.

    * No checkpoint (or an empty directory): nothing to set aside.
    * A Wire checkpoint: renamed to ``<checkpoint>.superseded`` (a leftover of that
      name from an earlier, finished start-over is deleted first). The run then opens
      a new checkpoint with :data:`START_OVER` set (:func:`open_checkpoint`); if the
      run cannot start before its sinks are touched (the plan does not compile, Spark
      fails), :meth:`StartOver.undo` restores it. Once every sink has accepted the new
      checkpoint, :func:`finish_start_over` deletes the set-aside one.
    * A checkpoint of an unfinished start-over (:data:`START_OVER` still set; it has no
      epoch, the query never started): deleted, and the start-over continues with the
      set-aside checkpoint kept where it is.

    Raises
    ------
    CheckpointError
        When ``checkpoint`` exists but is not a Wire checkpoint (no ``wire.json``) and
        is not an empty directory: Wire never moves or deletes what it did not create;
        or when it cannot be moved (naming the error).
    """
    root = Path(checkpoint)
    aside = _set_aside_path(root)
    if not root.exists() or (root.is_dir() and not any(root.iterdir())):
        return StartOver(root, aside if aside.exists() else None, created=False)
    if not is_checkpoint(root):
        raise CheckpointError(
            f"fresh=True: {str(root)!r} is not a Wire checkpoint (no {META_FILE}); it is left as "
            "it is. Remove it yourself or give another checkpoint directory."
        )
    doc = _read_meta(root)
    if doc.get(START_OVER) is True and not log_batches(Path(spark_checkpoint(root)) / "offsets"):
        shutil.rmtree(root)  # an unfinished start-over's new checkpoint: holds no epoch
        return StartOver(root, aside if aside.exists() else None, created=False)
    try:
        if aside.exists():  # left by a finished start-over (its sinks moved to the checkpoint)
            shutil.rmtree(aside)
        os.replace(root, aside)
    except OSError as e:
        raise CheckpointError(
            f"fresh=True: cannot set the checkpoint {str(root)!r} aside as {str(aside)!r}: {e}"
        ) from e
    return StartOver(root, aside, created=True)


def _set_aside_path(root: Path) -> Path:
    """``<checkpoint>.superseded``, next to the checkpoint (absolute)."""
    return Path(os.path.abspath(root) + SET_ASIDE_SUFFIX)


def finish_start_over(checkpoint: str | os.PathLike[str]) -> None:
    """Every sink accepted the new checkpoint: clear :data:`START_OVER`, delete the set-aside one.

    Called by the runner after :meth:`wire.delivery.sink.Sink.supersede` and ``open``
    succeeded for every sink, before the first epoch.
    """
    root = Path(checkpoint)
    doc = _read_meta(root)
    if doc.get(START_OVER) is not None:
        _write_meta(root, {k: v for k, v in doc.items() if k != START_OVER})
    aside = _set_aside_path(root)
    if aside.is_dir() and is_checkpoint(aside):
        shutil.rmtree(aside)


def source_count(plan: Plan) -> int:
    """The source offsets each epoch records in Spark's offset log: one per source read.

    A branch that starts at or above a source reads it again, and Spark counts every read
    as a source of its own (:func:`wire.plan.graph.source_reads`).
    """
    from wire.plan.graph import source_reads
    from wire.plan.nodes import SourceNode

    try:
        return sum(source_reads(plan).values())
    except PlanError:  # a plan that does not compile: one read per source step
        return sum(isinstance(n, SourceNode) for n in plan.nodes)


def _document(meta: CheckpointMeta, steps: Fingerprint | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"flow_id": meta.flow_id, "key_groups": meta.key_groups,
                           "checkpoint_id": meta.checkpoint_id}
    if meta.spark_dir != "spark":  # a rescaled checkpoint: its generation's fields
        doc.update(spark_dir=meta.spark_dir, epoch_base=meta.epoch_base, resume=meta.resume)
    if steps is not None:
        doc["steps"] = steps
    return doc


def _make_directory(root: Path) -> None:
    """Create ``root`` (and parents); a file in the way is a CheckpointError."""
    for p in (root, *root.parents):
        if p.exists() and not p.is_dir():
            what = "is a file" if p == root else f"is inside {str(p)!r}, which is a file"
            raise CheckpointError(f"checkpoint {str(root)!r} {what}, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(f"checkpoint {str(root)!r} cannot be created: {e}") from e


def _has_content(d: Path) -> bool:
    return d.exists() and (not d.is_dir() or any(d.iterdir()))


def _remove_leftover(root: Path) -> None:
    """Remove ``wire.json.tmp`` (and ``wire.tmp`` of older versions) left by a crashed write.

    Written in full and then renamed over ``wire.json``, it is never what counts: the
    ``wire.json`` next to it (or its absence) is.
    """
    for name in (META_FILE + ".tmp", "wire.tmp"):
        tmp = root / name
        if tmp.is_dir():
            raise CheckpointError(
                f"checkpoint {str(root)!r}: {name} is a directory (expected none or a leftover "
                "file of an interrupted write); remove it"
            )
        tmp.unlink(missing_ok=True)


def _write_meta(root: Path, doc: dict[str, Any]) -> None:
    """Replace ``wire.json`` atomically: write ``wire.json.tmp``, fsync, rename."""
    path, tmp = root / META_FILE, root / (META_FILE + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise CheckpointError(f"checkpoint {str(root)!r}: cannot write {META_FILE}: {e}") from e


def _read_meta(root: Path) -> dict[str, Any]:
    """``wire.json``, checked: a JSON object with the keys and types Wire writes."""
    path = root / META_FILE

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {str(root)!r}: {path} {what}. {WAY_OUT}")

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        raise bad("is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f"cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise bad(f"is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise bad(f"holds a JSON {type(doc).__name__}, expected an object")
    expected = {"flow_id": "a string", "key_groups": "an int", "checkpoint_id": "a string"}
    missing = [k for k in expected if k not in doc]
    if missing:
        raise bad(f"lacks {', '.join(map(repr, missing))}")
    for k, kind in expected.items():
        v = doc[k]
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1 if kind == "an int" else (
            isinstance(v, str) and v != "")
        if not ok:
            raise bad(f"has {k}={v!r}, expected {'a positive int' if kind == 'an int' else kind}")
    steps = doc.get("steps")
    if steps is not None and not (
        isinstance(steps, dict)
        and all(isinstance(v, dict) and isinstance(v.get("kind"), str) for v in steps.values())
    ):
        raise bad("has a malformed 'steps' (expected an object of {\"kind\": ...} objects)")
    return doc
