"""A filter pushed into the file source (``wire.compiler.pushdown``), in a real flow.

The filtered events never reach the JVM, but they still move the source's watermark
(SPEC §2), count as input events, and a malformed record still becomes a dead letter. The
hand transcript is the session one of ``test_pipeline_metamorphic_spark.py``: sessions
(gap 10) of a: 100, 108, 116, 124 chain into [100,134); 150 alone. b's events (v = 0) are
filtered out, but at 130 they move the watermark while a's session is open, which must
hold the session's output watermark at 100, or [100,120) would close before it arrives.
The same flow with a filter that does not translate (a function call) must give the same
rows, with every event crossing into Spark. Fused (``wire.compiler.fusion``, the default: the
session window's pre-stage runs in the source's tasks) it must give them too.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.core.envelope import MAX_WATERMARK
from wire.runtime.query_conf import FUSION
from wire.testing import MemorySink

pytestmark = pytest.mark.spark

FILES = [
    "t,k,v\n100,a,1\n108,a,1\n",
    "t,k,v\n112,b,0\n116,a,1\noops,a,1\n120,b,0\n",
    "t,k,v\n124,a,1\n130,b,0\n",
    "t,k,v\n150,a,1\n200,b,0\n",
]
EXPECTED = [("a", 100, 120, 4, 1, "final"), ("a", 140, 160, 1, 1, "final")]


def ms(ts) -> int:
    return round(ts.timestamp() * 1000)


def run(spark, tmp_path, predicate: str):
    data = tmp_path / "in"
    data.mkdir(parents=True)
    for i, text in enumerate(FILES):
        (data / f"part-{i}.csv").write_text(text)
    flow = wire.Flow("pushdown")
    schema = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
    events = flow.source(wire.sources.files(str(data / "*.csv"), format="csv", schema=schema),
                         event_time="t", key="k", name="events", max_events_per_epoch=3)
    sessions = events.filter(predicate).window(wire.Session(10)).aggregate(n=wire.count(), name="sessions")
    per20 = sessions.window(wire.Tumbling(20)).aggregate(events=wire.sum("n"), sessions=wire.count(),
                                                         name="per20")
    main, dead = MemorySink(), MemorySink()
    per20.sink(main, name="main")
    flow.dead_letters().sink(dead, name="dead")
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    summary = running.await_termination()
    # every epoch's progress, the last one's too (it has the last records and ends the input)
    assert [p["batchId"] for p in running.query.recentProgress] == list(range(summary.epochs))
    crossed = sum(p["numInputRows"] for p in running.query.recentProgress)
    got = sorted((r["k"], ms(r["window_start"]), ms(r["window_end"]), r["events"], r["sessions"], r["emit"])
                 for r in main.rows())
    return got, dead.rows(), summary, crossed


def test_pushed_filter_keeps_the_watermark_the_dead_letters_and_the_counts(spark, tmp_path):
    spark.conf.set(FUSION, "false")  # the window's two stages: the filter runs in Spark too
    try:
        got, dead, summary, crossed = run(spark, tmp_path / "pushed", "v > 0")
    finally:
        spark.conf.unset(FUSION)
    assert got == EXPECTED
    assert len(dead) == 1 and "oops" in str(dead[0])
    assert summary.input_events == 9  # every well-formed event, the filtered ones too
    assert sum(summary.epoch_events) == 9
    marks = summary.watermarks()
    assert marks["sessions"]["output_watermark"] == MAX_WATERMARK == marks["per20"]["output_watermark"]

    same, dead_too, summary_too, crossed_all = run(spark, tmp_path / "not_pushed", "abs(v) > 0")
    assert same == EXPECTED and len(dead_too) == 1 and summary_too.input_events == 9
    assert crossed_all - crossed == 4  # b's four events stayed in the source's Python tasks

    # fused (wire.compiler.fusion): the session window's pre-stage runs in the source's tasks,
    # with the filter as its exact predicate; the same rows, the same counts
    fused, dead_fused, summary_fused, _ = run(spark, tmp_path / "fused", "v > 0")
    assert fused == EXPECTED and len(dead_fused) == 1 and "oops" in str(dead_fused[0])
    assert summary_fused.input_events == 9 and sum(summary_fused.epoch_events) == 9
    assert summary_fused.watermarks()["sessions"]["output_watermark"] == MAX_WATERMARK
