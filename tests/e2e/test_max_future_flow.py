"""End to end (issue 11): one event dated 2100 among normal events.

40 normal events, one per second from 2020-09-13T12:26:40Z (1.6e12 ms, a multiple of
10 s), users ``a``/``b`` alternating, with the 2100 event as the 11th record; five
records per epoch, ``Tumbling("10s")``, ``BoundedOutOfOrderness("5s")``.

* With ``max_future="1h"`` the 2100 event is a dead letter with its reason and no normal
  event is late: each 10 s window holds 5 events of each user (counted by hand below).
* Without it (as before): the 2100 event, admitted in epoch 2 (records 10-14), moves the
  watermark to 2100 - 5 s, so every event admitted after epoch 2 (records 15-40: the
  normal events 14-39, 26 of them) goes to the late port.
"""

from __future__ import annotations

import re
from collections import Counter

import pyarrow as pa
import pytest
from test_csv_flow import ms, read

import wire

pytestmark = pytest.mark.spark

BASE = 1_600_000_000_000
Y2100 = 4_102_444_800_000
NORMAL = [(i, BASE + i * 1000, "ab"[i % 2]) for i in range(40)]
RECORDS = [*NORMAL[:10], (99, Y2100, "a"), *NORMAL[10:]]


def run(tmp_path, spark, watermark):
    src = tmp_path / "in"
    src.mkdir()
    (src / "events.csv").write_text("id,ts,user\n" + "".join(f"{i},{t},{u}\n" for i, t, u in RECORDS))
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("user", pa.string())])
    flow = wire.Flow("max-future")
    events = flow.source(wire.sources.files(str(src), format="csv", schema=schema), event_time="ts",
                         key="user", watermark=watermark, max_events_per_epoch=5)
    counts = events.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="counts")
    counts.sink(wire.sinks.jsonl(tmp_path / "out"))
    counts.late().sink(wire.sinks.jsonl(tmp_path / "late"))
    flow.dead_letters().sink(wire.sinks.jsonl(tmp_path / "dlq"))
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark, key_groups=2)
    return summary, read(tmp_path / "out"), read(tmp_path / "late"), read(tmp_path / "dlq")


def test_with_max_future_the_2100_event_is_a_dead_letter_and_nothing_is_late(spark, tmp_path):
    summary, out, late, dlq = run(tmp_path, spark, wire.BoundedOutOfOrderness("5s", max_future="1h"))
    assert late == []
    assert [(r["step"], r["location"].rsplit("/", 1)[-1], r["record"]) for r in dlq] == [
        ("source_1", "events.csv:12", f"99,{Y2100},a")]  # header, 10 events, then line 12
    assert re.fullmatch(r"event time 2100-01-01T00:00:00Z is \d+(\.\d)?y ahead of processing time "
                        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z, beyond max_future=1h", dlq[0]["reason"])
    windows = Counter({(u, BASE + 10_000 * w): 5 for u in "ab" for w in range(4)})
    assert Counter({(r["user"], ms(r["window_start"])): r["n"] for r in out}) == windows
    assert all(r["emit"] == "final" for r in out) and len(out) == 8
    assert summary.total("malformed") == 1 and summary.input_events == 40


def test_without_max_future_the_2100_event_makes_later_events_late_as_before(spark, tmp_path):
    summary, _, late, dlq = run(tmp_path, spark, wire.BoundedOutOfOrderness("5s"))
    assert dlq == []
    assert sorted(r["id"] for r in late) == list(range(14, 40))
    assert summary.total("late") == 26
