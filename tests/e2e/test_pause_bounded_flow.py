"""Pausing a bounded flow never ends its run (issue 26 item 1).

Spark's ``availableNow`` trigger ended a bounded query at the first trigger a paused
source planned nothing: ``flow.run`` returned after 2 epochs with input left. Here a
bounded flow is paused after its first epoch; its run must wait, paused, with no epoch
and its query alive, then, once resumed, consume everything: its output equals the
uninterrupted run's and a pandas oracle over the input (files, Nexmark, TestStream).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import wire
from wire.core.control_file import control_path, set_paused
from wire.core.envelope import MAX_WATERMARK, encode_table
from wire.examples.nexmark_source import generate, nexmark
from wire.runtime.checkpoint import epochs_settled, finished
from wire.runtime.runner import RunSummary
from wire.testing.test_stream import TestStreamSource

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])
WINDOW_MS = 100


def wait_for(cond: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def windows_out(path: Path, key: str) -> list[tuple[str, int, int]]:
    """(key, window start ms, count) of every window row written, sorted."""
    rows = [json.loads(line) for f in sorted(path.glob("*/*.jsonl")) for line in f.read_text().splitlines()]
    assert all(r["emit"] == "final" for r in rows)
    return sorted((str(r[key]), ms(r["window_start"]), r["n"]) for r in rows)


def oracle(events: pd.DataFrame, time_col: str, key: str) -> list[tuple[str, int, int]]:
    """Tumbling windows of WINDOW_MS counted by pandas: every event is on time (delay covers disorder)."""
    starts = events[time_col] // WINDOW_MS * WINDOW_MS
    counts = events.groupby([events[key].astype(str), starts]).size()
    return sorted((str(k), int(s), int(n)) for (k, s), n in counts.items())


def run_paused(flow: wire.Flow, checkpoint: Path, spark: object, pause_s: float) -> tuple[RunSummary, int]:
    """``flow.run`` in a thread, paused (control file) after its first epoch for ``pause_s`` s.

    Asserts that the run did not end while paused and that no epoch ran then; returns its
    summary and the input events admitted when it was paused.
    """
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["summary"] = flow.run(str(checkpoint), spark=spark, key_groups=2, progress=False)
        except BaseException as e:  # re-raised in the test's thread
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: (checkpoint / "spark" / "commits" / "0").exists() or not thread.is_alive(),
             "the first epoch")
    assert thread.is_alive(), f"the run ended after one epoch: {result}"
    set_paused(control_path(checkpoint), True)
    # a trigger whose sources planned before the pause was written still runs its epoch:
    # settled, then (once its offsets are written) settled again
    wait_for(lambda: epochs_settled(checkpoint), "the epoch in flight to commit")
    time.sleep(1.0)
    wait_for(lambda: epochs_settled(checkpoint), "an epoch planned before the pause to commit")
    planned = sorted((checkpoint / "spark" / "offsets").iterdir())
    paused_until = time.monotonic() + pause_s
    while time.monotonic() < paused_until:
        assert thread.is_alive(), f"the run ended while paused: {result}"
        time.sleep(0.25)
    assert sorted((checkpoint / "spark" / "offsets").iterdir()) == planned, "an epoch ran while paused"
    assert not finished(checkpoint)
    set_paused(control_path(checkpoint), False)
    thread.join(timeout=300)
    assert not thread.is_alive(), "the run did not end once resumed"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    summary = result["summary"]
    assert isinstance(summary, RunSummary)
    return summary, len(planned)


def files_flow(src: Path, out: Path) -> wire.Flow:
    flow = wire.Flow("paused-files")
    events = flow.source(wire.sources.files(str(src / "*.jsonl"), format="jsonl", schema=SCHEMA),
                         event_time="t", key="k", max_events_per_epoch=50, name="events")
    events.window(wire.Tumbling(WINDOW_MS)).aggregate(n=wire.count(), name="w").sink(
        wire.sinks.jsonl(out), name="out")
    return flow


def test_paused_bounded_file_flow_waits_then_writes_what_an_uninterrupted_run_writes(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    times = list(range(0, 1200))
    for part in range(3):  # three files, each in event-time order
        chunk = times[part * 400:(part + 1) * 400]
        (src / f"part-{part}.jsonl").write_text(
            "".join(json.dumps({"t": t, "k": "abc"[t % 3]}) + "\n" for t in chunk))
    expected = oracle(pd.DataFrame({"t": times, "k": ["abc"[t % 3] for t in times]}), "t", "k")

    straight = files_flow(src, tmp_path / "out1").run(str(tmp_path / "ck1"), spark=spark, key_groups=2,
                                                      progress=False)
    summary, planned_at_pause = run_paused(files_flow(src, tmp_path / "out2"), tmp_path / "ck2", spark, 10.0)

    assert planned_at_pause < 1200 // 50, "paused after the input was consumed: nothing tested"
    assert not summary.stopped_early and finished(tmp_path / "ck2")
    assert summary.input_events == straight.input_events == len(times)
    assert windows_out(tmp_path / "out2", "k") == windows_out(tmp_path / "out1", "k") == expected


def nexmark_flow(out: Path) -> wire.Flow:
    flow = wire.Flow("paused-nexmark")
    events = flow.source(nexmark(events=3000, first_event_rate=1000, out_of_order_ms=50),
                         event_time="date_time", key="kind", max_events_per_epoch=300,
                         watermark=wire.BoundedOutOfOrderness("1s"), name="events")
    events.window(wire.Tumbling(WINDOW_MS)).aggregate(n=wire.count(), name="w").sink(
        wire.sinks.jsonl(out), name="out")
    return flow


def test_paused_nexmark_flow_waits_then_writes_what_an_uninterrupted_run_writes(spark, tmp_path):
    events = generate(0, 3000, seed=1, first_event_rate=1000, out_of_order_ms=50).to_pandas()
    expected = oracle(events, "date_time", "kind")
    straight = nexmark_flow(tmp_path / "out1").run(str(tmp_path / "ck1"), spark=spark, key_groups=2,
                                                   progress=False)
    summary, planned_at_pause = run_paused(nexmark_flow(tmp_path / "out2"), tmp_path / "ck2", spark, 3.0)
    assert planned_at_pause < 3000 // 300
    assert not summary.stopped_early and summary.input_events == straight.input_events == 3000
    assert windows_out(tmp_path / "out2", "kind") == windows_out(tmp_path / "out1", "kind") == expected


def test_stream_flow(out: Path, steps: list[list[int]]) -> wire.Flow:
    last = len(steps) - 1  # the last step moves the watermark to the end: every window closes
    script = tuple((encode_table(pa.table({"t": ts, "k": ["ab"[t % 2] for t in ts]}, schema=SCHEMA)),
                    MAX_WATERMARK if i == last else ts[-1]) for i, ts in enumerate(steps))
    flow = wire.Flow("paused-script")
    events = flow.source(TestStreamSource(SCHEMA, script), event_time="t", key="k", name="events")
    events.window(wire.Tumbling(WINDOW_MS)).aggregate(n=wire.count(), name="w").sink(
        wire.sinks.jsonl(out), name="out")
    return flow


test_stream_flow.__test__ = False  # type: ignore[attr-defined]  # a builder, not a test


def test_paused_test_stream_flow_waits_then_writes_what_an_uninterrupted_run_writes(spark, tmp_path):
    steps = [list(range(i * 100, (i + 1) * 100)) for i in range(6)]
    flat = [t for ts in steps for t in ts]
    expected = oracle(pd.DataFrame({"t": flat, "k": ["ab"[t % 2] for t in flat]}), "t", "k")
    straight = test_stream_flow(tmp_path / "out1", steps).run(str(tmp_path / "ck1"), spark=spark,
                                                              key_groups=2, progress=False)
    summary, planned_at_pause = run_paused(test_stream_flow(tmp_path / "out2", steps), tmp_path / "ck2",
                                           spark, 3.0)
    assert planned_at_pause < len(steps)
    assert not summary.stopped_early and summary.input_events == straight.input_events == len(flat)
    assert summary.epochs == straight.epochs == len(steps)
    assert windows_out(tmp_path / "out2", "k") == windows_out(tmp_path / "out1", "k") == expected
