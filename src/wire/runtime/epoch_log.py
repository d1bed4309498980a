"""The epoch log: one JSON line per completed epoch under the checkpoint, for ``wire report``.

``<checkpoint>/epochs.jsonl`` gets, after each epoch commits, the run's counters so far
(the same counters the control plane reads): processing time ``t_ms`` (ms since the Unix
epoch), the epoch id as ``batch`` (Spark's batch id plus the checkpoint's epoch base,
which a rescale raises: :mod:`wire.runtime.rescale`), ``run`` (the run's start, ms:
counters restart with each run; :func:`across_runs` sums them over every run),
``epochs``, ``epoch_ms`` (the epoch's wall time), ``metrics`` and ``gauges`` as
``[step, name, value]`` rows, ``rows_written`` per sink and the ``source_steps``.

Bounded: when the file holds ``2 * max_records`` lines it is rewritten with the newest
``max_records`` (default 10,000 epochs, a few MB). ``<checkpoint>/graph.json`` holds the
flow's operator graph (:func:`wire.plan.graph.graph_of`), written when a run starts, and
``<checkpoint>/samples.json`` the run's newest dead letters and late events
(:meth:`wire.runtime.samples.SampleBuffer.to_dict`), rewritten after each epoch that
produced some (at most 100 previews, a few tens of kB).

Writing is best effort: a full disk must not fail the flow, so an ``OSError`` stops the
log for the rest of the run and is reported in :attr:`EpochLog.error`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from wire.plan.graph import graph_of
from wire.plan.nodes import Plan

EPOCH_LOG = "epochs.jsonl"
GRAPH_FILE = "graph.json"
SAMPLES_FILE = "samples.json"
DEFAULT_MAX_RECORDS = 10_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class EpochLog:
    """Appends one record per completed epoch to ``<checkpoint>/epochs.jsonl``."""

    def __init__(self, checkpoint: str | os.PathLike[str], *, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.path = Path(checkpoint) / EPOCH_LOG
        self.max_records = max_records
        self.run_ms = _now_ms()
        self.error: str | None = None
        self._lines: int | None = None

    def write_graph(self, plan: Plan) -> None:
        """Record the flow's operator graph next to the log."""
        try:
            (self.path.parent / GRAPH_FILE).write_text(json.dumps(graph_of(plan)))
        except OSError as e:
            self.error = f"cannot write {self.path.parent / GRAPH_FILE}: {e}"

    def write_samples(self, samples: Any) -> None:
        """Replace ``samples.json`` with ``samples`` (a :class:`~wire.runtime.samples.SampleBuffer`)."""
        if self.error is not None:
            return
        path = self.path.parent / SAMPLES_FILE
        try:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(samples.to_dict()))
            tmp.replace(path)
        except OSError as e:
            self.error = f"cannot write {path}: {e}"

    def append(self, summary: Any, batch: int, epoch_s: float) -> None:
        """Record the run's counters after epoch ``batch`` (``summary``: a ``RunSummary``)."""
        if self.error is not None:
            return
        record = {
            "t_ms": _now_ms(),
            "run": self.run_ms,
            "batch": batch,
            "epochs": summary.epochs,
            "epoch_ms": round(1000.0 * epoch_s, 3),
            "metrics": [[s, n, v] for (s, n), v in sorted(summary.metrics.items())],
            "gauges": [[s, n, v] for (s, n), v in sorted(summary.gauges.items())],
            "rows_written": dict(sorted(summary.rows_written.items())),
            "source_steps": list(summary.source_steps),
        }
        try:
            if self._lines is None:
                self._lines = sum(1 for _ in self.path.open()) if self.path.exists() else 0
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            self._lines += 1
            if self._lines >= 2 * self.max_records:
                self._trim()
        except OSError as e:
            self.error = f"cannot write {self.path}: {e}"

    def _trim(self) -> None:
        keep = self.path.read_text().splitlines()[-self.max_records:]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        tmp.replace(self.path)
        self._lines = len(keep)


def read_epoch_log(checkpoint: str | os.PathLike[str], *, replayed: bool = False) -> list[dict[str, Any]]:
    """The records of ``<checkpoint>/epochs.jsonl``, oldest first (a torn last line is skipped).

    A batch recorded twice (replayed after a crash) keeps its later record, unless
    ``replayed`` (then every record, in the order written).
    """
    path = Path(checkpoint) / EPOCH_LOG
    if not path.exists():
        return []
    records: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    if replayed:
        return records
    latest = {r["batch"]: i for i, r in enumerate(records)}
    return [r for i, r in enumerate(records) if latest[r["batch"]] == i]


def across_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epochs of ``records`` (every record, as written) with counters over every run.

    A record's counters (``epochs``, ``metrics``, ``rows_written``) are its run's so far:
    they restart with each run (``run``). Returned: one record per epoch (a replayed
    batch's later record: the earlier one's epoch did not complete), oldest first, whose
    counters are the sums over every run up to that epoch: an epoch adds what its record
    adds to the previous record of its run, and a record replaced by a replay adds nothing.
    Gauges stay the record's own (latest values). Each record gets ``runs``: how many runs
    the sums cover. Epochs trimmed from the log (:data:`DEFAULT_MAX_RECORDS`) count in the
    sums only through the counters of their run's later records.
    """
    latest = {r["batch"]: i for i, r in enumerate(records)}
    previous: dict[Any, dict[str, Any]] = {}
    epochs = 0
    metrics: dict[tuple[str, str], int] = {}
    rows: dict[str, int] = {}
    runs: list[Any] = []
    out = []
    for i, r in enumerate(records):
        before = previous.get(r["run"])
        previous[r["run"]] = r
        if latest[r["batch"]] != i:
            continue
        if r["run"] not in runs:
            runs.append(r["run"])
        was = {(s, n): v for s, n, v in before["metrics"]} if before is not None else {}
        for s, n, v in r["metrics"]:
            metrics[(s, n)] = metrics.get((s, n), 0) + int(v) - int(was.get((s, n), 0))
        was_rows = before["rows_written"] if before is not None else {}
        for k, v in r["rows_written"].items():
            rows[k] = rows.get(k, 0) + int(v) - int(was_rows.get(k, 0))
        epochs += int(r["epochs"]) - (int(before["epochs"]) if before is not None else 0)
        out.append({**r, "epochs": epochs, "runs": len(runs),
                    "metrics": [[s, n, v] for (s, n), v in sorted(metrics.items())],
                    "rows_written": dict(sorted(rows.items()))})
    return out
