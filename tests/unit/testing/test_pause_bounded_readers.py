"""A paused bounded source plans nothing and never says it ended; its last offset says so (issue 26 item 1).

The runner ends a bounded flow only on offsets that say ``"ended": true``
(:func:`wire.runtime.runner.input_consumed`), so these are the two things each bounded
reader must get right: while paused, ``latestOffset`` returns its start; once its input
is exhausted, its offset carries ``ended``.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadMaxRows

from wire.core import envelope
from wire.core.control_file import control_path, set_paused, set_stopping
from wire.examples.nexmark_source import NexmarkStreamReader, _Config, nexmark
from wire.testing.test_stream import TestStreamReader, TestStreamSource, _Script

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])


def script_reader(steps: int, control: str | None) -> TestStreamReader:
    events = envelope.encode_table(pa.table({"t": [1], "k": ["a"]}, schema=SCHEMA))
    source = TestStreamSource(SCHEMA, tuple((events, 10 * (i + 1)) for i in range(steps)))
    return TestStreamReader(_Script(source.to_json(step="s", event_time="t", key_groups=1,
                                                   control_file=control)))


def test_test_stream_pauses_and_its_last_step_ends_it(tmp_path):
    control = control_path(tmp_path)
    r = script_reader(3, control)
    o0 = r.initialOffset()
    o1 = r.latestOffset(o0, None)
    assert o1 == {"step": 1}
    set_paused(control, True)
    assert r.latestOffset(o1, None) == o1  # paused: nothing admitted, not ended
    set_paused(control, False)
    set_paused(control, True, "s")  # the step alone
    assert r.latestOffset(o1, None) == o1
    set_paused(control, False, "s")
    set_stopping(control, True)  # a graceful stop admits nothing more either
    assert r.latestOffset(o1, None) == o1
    set_stopping(control, False)
    o2 = r.latestOffset(o1, None)
    o3 = r.latestOffset(o2, None)
    assert (o2, o3) == ({"step": 2}, {"step": 3, "ended": True})
    assert r.latestOffset(o3, None) == o3  # ended: no more epochs
    assert [p.index for p in r.partitions(o2, o3)] == [2]  # the last step's epoch reads it


def test_test_stream_of_no_step_ends_with_one_empty_epoch():
    r = script_reader(0, None)
    o0 = r.initialOffset()
    end = r.latestOffset(o0, None)
    assert end == {"step": 0, "ended": True} and r.partitions(o0, end) == []
    assert r.latestOffset(end, None) == end


def test_nexmark_pauses_without_ending_and_ends_after_resume(tmp_path):
    control = control_path(tmp_path)
    src = nexmark(events=250, first_event_rate=100)
    cfg = src.to_json(step="src", event_time="date_time", key_groups=1, max_delay_ms=0,
                      max_events_per_epoch=100, control_file=control)
    r = NexmarkStreamReader(_Config(cfg))
    o1 = r.latestOffset(r.initialOffset(), ReadMaxRows(100))
    assert o1["next"] == 100 and not o1["ended"]
    set_paused(control, True, "src")
    assert r.latestOffset(o1, ReadMaxRows(100)) == o1
    set_paused(control, False, "src")
    offsets = [o1]
    while (end := r.latestOffset(offsets[-1], ReadMaxRows(100))) != offsets[-1]:
        offsets.append(end)
    assert [o["next"] for o in offsets] == [100, 200, 250]
    assert [o["ended"] for o in offsets] == [False, False, True]  # with its last events
    assert offsets[-1]["watermark"] == envelope.MAX_WATERMARK
