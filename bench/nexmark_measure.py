"""Measuring one engine's run of a Nexmark query (``bench/nexmark.py``, ``bench/enrichment.py``).

:class:`Result` holds a run's figures, :func:`fill_from_progress` takes them from a query's
``recentProgress``, :func:`pooled` joins an engine's runs of one query, :class:`PeakRss`
samples the memory of the process tree, and :func:`settle` / :func:`count_rows` come before
and after a run.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from backlog_memory import tree_rss_mb
from pyspark.sql import SparkSession
from windows_bench import pct

TINY = 0.1
"""An epoch with fewer input rows than this fraction of the epoch size is not steady."""


@dataclass
class Result:
    """One engine's run of one query."""

    input_rows: int = 0
    steady_rows: int = 0
    steady_ms: float = 0.0
    epoch_ms: list[float] = field(default_factory=list)
    wall_s: float = float("nan")
    peak_mb: float = float("nan")
    output_rows: int | None = None
    epochs: int = 0
    error: str | None = None

    @property
    def rate(self) -> float:
        """Steady events/s."""
        return self.steady_rows / self.steady_ms * 1000 if self.steady_ms > 0 else float("nan")

    def p(self, q: float) -> float:
        """Percentile ``q`` of the steady epochs' triggerExecution, in ms."""
        return pct([ms / 1000 for ms in self.epoch_ms], q)


def pooled(runs: list[Result]) -> Result:
    """One engine's runs of one query as one result: rows and epoch times added up, so the rate is
    events over time across the runs; wall time the mean, peak memory the largest; an error of
    any run is the result's error; output rows are the first run's (every run's must be equal,
    else "differ" is noted in the error)."""
    if len(runs) == 1:
        return runs[0]
    r = Result()
    errors = [x.error for x in runs if x.error]
    r.error = errors[0] if errors else None
    outs = {x.output_rows for x in runs}
    if not r.error and len(outs) > 1:
        r.error = f"output rows differ between runs: {sorted(o or 0 for o in outs)}"
    r.output_rows = runs[0].output_rows
    r.input_rows = sum(x.input_rows for x in runs)
    r.steady_rows = sum(x.steady_rows for x in runs)
    r.steady_ms = sum(x.steady_ms for x in runs)
    r.epoch_ms = [ms for x in runs for ms in x.epoch_ms]
    r.epochs = sum(x.epochs for x in runs)
    r.wall_s = sum(x.wall_s for x in runs) / len(runs)
    r.peak_mb = max(x.peak_mb for x in runs)
    return r


def source_rows(progress: dict[str, Any], scans: int = 1) -> int:
    """Input rows of the query's first source in one progress (one pass over the input).

    ``scans``: how many times an epoch scans that source. Spark reports one entry per
    source however many branches scan it, with the rows of every scan added up: Wire
    scans a source that can replay once per branch (q3 and q4 join two branches of one
    source), so its rows are divided by its scans.
    """
    sources = progress.get("sources") or []
    rows = int(sources[0]["numInputRows"]) if sources else int(progress["numInputRows"])
    return rows // max(1, scans)


def fill_from_progress(r: Result, progress: list[dict[str, Any]], epoch: int, scans: int = 1,
                       events: list[float] | None = None) -> None:
    """Steady epochs: all but the first one and the tiny ones (fewer than TINY x epoch rows).

    ``events``: Wire's events per epoch (``RunSummary.epoch_events``, by batch id from 0): the
    events its source read, which Spark's ``numInputRows`` undercounts when the flow's filters
    are pushed into the source (only the rows that passed them reach the JVM).
    """
    batches = [p for p in progress if "triggerExecution" in p.get("durationMs", {})]

    def rows(p: dict[str, Any]) -> int:
        batch = int(p.get("batchId", -1))
        if events is not None and 0 <= batch < len(events):
            return int(events[batch])
        return source_rows(p, scans)

    r.epochs = len(batches)
    r.input_rows = sum(rows(p) for p in batches)
    steady = [p for p in batches[1:] if rows(p) >= TINY * epoch]
    r.steady_rows = sum(rows(p) for p in steady)
    r.epoch_ms = [float(p["durationMs"]["triggerExecution"]) for p in steady]
    r.steady_ms = sum(r.epoch_ms)


class PeakRss:
    """Samples the RSS of this process and all its descendants every 100 ms; ``peak_mb``."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak_mb = max(self.peak_mb, tree_rss_mb(os.getpid())[0])
            self._done.wait(0.1)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, tree_rss_mb(os.getpid())[0])


def settle(spark: SparkSession) -> None:
    """Garbage-collect the JVM and Python before a run, so a run starts from less memory."""
    gc.collect()
    spark.sparkContext._jvm.java.lang.System.gc()
    time.sleep(1.0)


def count_rows(d: Path) -> int:
    """Rows in the Parquet files under ``d`` (0 if there are none)."""
    if not d.exists():
        return 0
    return ds.dataset(str(d), format="parquet").count_rows()
