"""The bounded sample of recent dead letters and late events (wire.runtime.samples)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from wire.core.envelope import DEAD_LETTER_SCHEMA
from wire.runtime.dataplane import EpochResult, PartitionWriter
from wire.runtime.samples import PREVIEW_CHARS, SampleBuffer, cut, preview_rows


def dead_letters(n: int, first: int = 0) -> pa.Table:
    return pa.table({"step": ["src"] * n, "location": [f"in/a.csv:{first + i + 2}" for i in range(n)],
                     "reason": [f"bad {first + i}" for i in range(n)],
                     "record": [f"row{first + i}" for i in range(n)]}, schema=DEAD_LETTER_SCHEMA)


def late_rows() -> pa.Table:
    return pa.table({"k": ["a", "b"], "price": [1.5, None], "event_time": [500, 700],
                     "watermark": [2000, 2000], "reason": ["window closed", "window closed"]})


def test_dead_letter_previews_are_the_last_rows_with_their_fields():
    got = preview_rows("src.dead_letter", dead_letters(5), limit=2)
    assert got == [
        {"kind": "dead_letter", "step": "src", "reason": "bad 3", "record": "row3",
         "location": "in/a.csv:5", "event_time": None, "watermark": None},
        {"kind": "dead_letter", "step": "src", "reason": "bad 4", "record": "row4",
         "location": "in/a.csv:6", "event_time": None, "watermark": None},
    ]


def test_late_previews_keep_event_time_watermark_and_the_other_columns_as_json():
    got = preview_rows("hourly.late", late_rows())
    assert [(p["step"], p["event_time"], p["watermark"], p["reason"]) for p in got] == [
        ("hourly", 500, 2000, "window closed"), ("hourly", 700, 2000, "window closed")]
    assert [json.loads(p["record"]) for p in got] == [{"k": "a", "price": 1.5}, {"k": "b", "price": None}]
    assert all(p["kind"] == "late" and p["location"] is None for p in got)


def test_other_ports_give_no_preview_and_long_records_are_cut():
    assert preview_rows("main.out", late_rows()) == []
    assert preview_rows("t.overflow", late_rows()) == []
    long = dead_letters(1).set_column(3, "record", pa.array(["x" * 1000]))
    record = preview_rows("src.dead_letter", long)[0]["record"]
    assert len(record) == PREVIEW_CHARS and record == "x" * (PREVIEW_CHARS - 1) + "…"
    assert cut("abc", 3) == "abc" and cut("abcd", 3) == "ab…"


def test_ring_buffer_keeps_the_newest_size_of_each_kind_newest_first():
    buf = SampleBuffer(size=3)
    buf.add(preview_rows("src.dead_letter", dead_letters(2, first=0)), epoch=0, now_ms=1000)
    buf.add(preview_rows("w.late", late_rows()), epoch=0, now_ms=1000)
    buf.add(preview_rows("src.dead_letter", dead_letters(3, first=2)), epoch=1, now_ms=2000)
    newest = buf.newest("dead_letter")
    assert [e.reason for e in newest] == ["bad 4", "bad 3", "bad 2"]  # 0 and 1 dropped
    assert [(e.epoch, e.processing_time) for e in newest] == [(1, 2000)] * 3
    assert [e.event_time for e in buf.newest("late")] == [700, 500]
    for i in range(100):  # a long run: the buffer stays at its size
        buf.add(preview_rows("src.dead_letter", dead_letters(1, first=10 + i)), epoch=2 + i, now_ms=i)
    assert len(buf.newest("dead_letter")) == 3 and buf.newest("dead_letter")[0].reason == "bad 109"
    assert len(buf.newest("late")) == 2
    d = buf.to_dict()
    assert d["size"] == 3 and [x["epoch"] for x in d["dead_letters"]] == [101, 100, 99]
    later = SampleBuffer(size=5)
    later.add(preview_rows("src.dead_letter", dead_letters(1, first=500)), epoch=0, now_ms=9)
    buf.extend(later)
    assert [e.reason for e in buf.newest("dead_letter")] == ["bad 500", "bad 109", "bad 108"]


def test_buffer_size_is_checked():
    with pytest.raises(ValueError, match="size"):
        SampleBuffer(size=0)


def test_epoch_job_returns_previews_bounded_per_port_and_task():
    from wire.core.envelope import KIND_SIDE, side_batch, with_envelope
    from wire.runtime.dataplane import RESULT_SCHEMA

    schema = with_envelope(pa.schema([("k", pa.string())]))
    rows = pa.Table.from_batches([
        side_batch(schema, "src.dead_letter", dead_letters(4)),
        side_batch(schema, "w.late", late_rows()),
    ])
    assert rows.column("__kind").to_pylist() == [KIND_SIDE, KIND_SIDE]
    writer = PartitionWriter(3, "w.out", [], sample_size=2)
    records = writer.process(0, rows)
    samples = [r for r in records if r["kind"] == "sample"]
    assert [(r["target"], r["rows"]) for r in samples] == [("src.dead_letter", 4), ("w.late", 2)]
    result = EpochResult.from_table(pa.Table.from_pylist(records, schema=RESULT_SCHEMA))
    assert [s["reason"] for s in result.samples] == ["bad 2", "bad 3", "window closed", "window closed"]
