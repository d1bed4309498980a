"""Chained pipelines on the real engine: the same input split into different epochs (issue 11).

The Spark counterpart of ``tests/unit/state/test_pipeline_metamorphic.py`` (pytest needs
distinct basenames) for a few hand-picked inputs: session -> window and interval join ->
window, each input run under two epoch splits, with a source watermark delay under which
no source event is late. Both splits must give the hand-derived batch result, nothing may
reach a late port, and at the end of input every operator's output watermark is the end
of time (SPEC §2: the Beam hold rule; the end of input releases every hold). Times in ms.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import pyarrow as pa
import pytest

import wire
from wire.api.flow import Stream
from wire.core.envelope import MAX_WATERMARK, encode_table
from wire.plan.nodes import LATE, IntervalJoinNode, PortRef, WindowAggregateNode
from wire.testing.test_stream import TestStreamSource

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
NO_WM = -(2**63)


def script(chunks: list[list[tuple[str, int, int]]], delay: int = 0) -> TestStreamSource:
    """One epoch per chunk of ``(key, t, v)``; watermark = max event time so far - ``delay``."""
    steps, wm, max_et = [], NO_WM, NO_WM
    for chunk in chunks:
        max_et = max([max_et, *(t for _, t, _ in chunk)])
        wm = max(wm, max_et - delay)
        rows = [{"t": t, "k": k, "v": v} for k, t, v in chunk]
        steps.append((encode_table(pa.Table.from_pylist(rows, schema=SCHEMA)), wm))
    steps.append((None, MAX_WATERMARK))  # the end of input
    return TestStreamSource(SCHEMA, tuple(steps))


def run(spark, sources: dict[str, TestStreamSource], build: Callable[..., Stream]):
    """Run ``build(*streams)`` over the scripted sources; return main rows, late rows, summary."""
    flow = wire.Flow("pipeline")
    streams = [flow.source(src, event_time="t", key="k", name=name) for name, src in sources.items()]
    main, late, dead = wire.testing.MemorySink(), wire.testing.MemorySink(), wire.testing.MemorySink()
    build(*streams).sink(main, name="main")
    for node in flow.plan().nodes:
        if isinstance(node, WindowAggregateNode | IntervalJoinNode):
            Stream(flow, PortRef(node.step, LATE)).sink(late, name=f"late_{node.step}")
    flow.dead_letters().sink(dead, name="dead_letter")
    with tempfile.TemporaryDirectory(prefix="wire-pipeline-") as tmp:
        summary = flow.run(tmp, spark=spark, key_groups=2)
    assert dead.rows() == []
    return main.rows(), late.rows(), summary


def ms(ts) -> int:
    return round(ts.timestamp() * 1000)


def assert_holds_released(summary, *steps: str) -> None:
    marks = summary.watermarks()
    for step in steps:
        assert marks[step]["output_watermark"] == MAX_WATERMARK, step


# Sessions (gap 10) of a: 100, 108, 116, 124 chain into [100,134) (4 events); 150 alone.
# b's events (v = 0) are filtered out before the session window but move the watermark:
# at 130 a's session is still open and must hold the session operator's output
# watermark at 100, or the tumbling window [100,120) closes before the session arrives.
SESSION_EVENTS = [("a", 100, 1), ("a", 108, 1), ("b", 112, 0), ("a", 116, 1), ("b", 120, 0),
                  ("a", 124, 1), ("b", 130, 0), ("a", 150, 1), ("b", 200, 0)]


@pytest.mark.parametrize("sizes", [[1, 2, 4, 2], [3, 4, 2]], ids=["four epochs", "three epochs"])
def test_session_then_window_any_epoch_split(spark, sizes):
    chunks, i = [], 0
    for n in sizes:
        chunks.append(SESSION_EVENTS[i:i + n])
        i += n

    def build(s):
        sessions = s.filter("v > 0").window(wire.Session(10)).aggregate(n=wire.count(), name="sessions")
        return sessions.window(wire.Tumbling(20)).aggregate(events=wire.sum("n"), sessions=wire.count(),
                                                             name="per20")

    main, late, summary = run(spark, {"in": script(chunks)}, build)
    assert late == []
    got = sorted((r["k"], ms(r["window_start"]), ms(r["window_end"]), r["events"], r["sessions"], r["emit"])
                 for r in main)
    # [100,134) starts in [100,120); [150,160) starts in [140,160)
    assert got == [("a", 100, 120, 4, 1, "final"), ("a", 140, 160, 1, 1, "final")]
    assert_holds_released(summary, "sessions", "per20")


# Join bounds [0, 5], allowed lateness 4: a@10-a@12 (row at 12), b@12-b@15 (15), a@20-a@24
# (24), a@31-a@33 (33); a@70 has no partner. Tumbling(10) per key over the rows.
LEFT = [("a", 10, 1), ("b", 12, 2), ("a", 20, 3), ("a", 31, 4)]
RIGHT = [("a", 12, 10), ("b", 15, 20), ("a", 24, 30), ("a", 33, 40), ("a", 70, 50)]


@pytest.mark.parametrize(("left", "right"), [
    ([LEFT[:1], LEFT[1:3], LEFT[3:]], [RIGHT[:2], RIGHT[2:4], RIGHT[4:]]),
    ([LEFT[:2], LEFT[2:]], [RIGHT[:3], RIGHT[3:]]),
], ids=["three epochs", "two epochs"])
def test_join_then_window_any_epoch_split(spark, left, right):
    def build(clicks, views):
        joined = clicks.interval_join(views, lower=0, upper=5, allowed_lateness=4, name="j")
        return joined.window(wire.Tumbling(10)).aggregate(n=wire.count(), lv=wire.sum("v"),
                                                          rv=wire.sum("right_v"), name="per10")

    main, late, summary = run(spark, {"clicks": script(left), "views": script(right)}, build)
    assert late == []
    got = sorted((r["k"], ms(r["window_start"]), r["n"], r["lv"], r["rv"], r["emit"]) for r in main)
    assert got == [("a", 10, 1, 1, 10, "final"), ("a", 20, 1, 3, 30, "final"), ("a", 30, 1, 4, 40, "final"),
                   ("b", 10, 1, 2, 20, "final")]
    # the join's output watermark lags its input by the lateness, until the input ends
    assert_holds_released(summary, "j", "per10")
