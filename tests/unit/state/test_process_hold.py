"""The process operator's output watermark: Beam's hold rule (SPEC §2), by hand.

``out' = max(out, min(new_in, min output_time of pending timers))``. Each transcript
below was derived by hand from that rule and the firing rule (an event-time timer fires
once the input watermark reaches its time, ``time <= watermark``; a processing-time
timer once the wall clock does).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.state.process import ProcessFunctionError, ProcessSpec, on_epoch
from wire.state.segments import MemoryChunkStore, Segments

PAYLOAD = pa.schema([("k", pa.string())])
OUT = pa.schema([("k", pa.string()), ("event_time", pa.int64()), ("fired_at", pa.int64())])


def events(rows: list[tuple[str, int]]) -> pa.Table:
    return pa.table({"k": pa.array([k for k, _ in rows], pa.string()),
                     "__et": pa.array([t for _, t in rows], pa.int64()),
                     "__seq": pa.array(range(len(rows)), pa.int64())})


def emit_fired(ctx, fired):
    return pa.table({"k": fired.column("k"), "event_time": fired.column("output_time"),
                     "fired_at": fired.column("time")})


class Driver:
    """Runs epochs of one key group, carrying watermarks and the chunk index across them."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec, self.store, self.index = spec, MemoryChunkStore(), None
        self.wm_in = self.out = NO_WATERMARK

    def epoch(self, rows, new_in, now=0):
        seg = Segments(self.index, self.store, pa.concat_tables)
        r = on_epoch(seg, events(rows), self.wm_in, new_in, self.out, now, self.spec)
        self.index, self.wm_in, self.out = seg.index(), new_in, r.output_watermark
        return sorted(tuple(d.values()) for d in r.outputs.to_pylist()), r


def test_event_time_timers_hold_the_output_watermark_at_their_output_time():
    def on_events(ctx, ev):  # a timer 100 ms after each event, emitting at the event's time
        ctx.timers.set_event_time(ev.column("k"), pc.add(ev.column("event_time"), 100),
                                  output_times=ev.column("event_time"))

    d = Driver(ProcessSpec("p", "k", pa.string(), PAYLOAD, OUT, (), on_events, emit_fired))
    out, r = d.epoch([("a", 10), ("b", 30)], new_in=50)
    assert out == [] and r.output_watermark == 10           # held by a (out 10), not 50
    out, r = d.epoch([], new_in=110)                          # a's timer: 110 <= 110 fires
    assert out == [("a", 10, 110)] and r.output_watermark == 30   # now held by b
    out, r = d.epoch([("c", 120), ("a", 100)], new_in=125)   # a@100 < 110: late
    assert out == [] and r.output_watermark == 30
    assert [(x["k"], x["event_time"], x["watermark"]) for x in r.late.to_pylist()] == [("a", 100, 110)]
    out, r = d.epoch([], new_in=130)                          # b fires; c (out 120) holds
    assert out == [("b", 30, 130)] and r.output_watermark == 120
    out, r = d.epoch([], new_in=MAX_WATERMARK)
    assert out == [("c", 120, 220)] and r.output_watermark == MAX_WATERMARK
    assert r.stats["pending_timers"] == 0


def test_processing_time_timers_hold_until_the_wall_clock_fires_them():
    def on_events(ctx, ev):
        ctx.timers.set_processing_time(ev.column("k"), ctx.processing_time + 1000,
                                       output_times=ev.column("event_time"))

    d = Driver(ProcessSpec("p", "k", pa.string(), PAYLOAD, OUT, (), on_events, emit_fired))
    out, r = d.epoch([("a", 10)], new_in=50, now=0)
    assert out == [] and r.output_watermark == 10
    out, r = d.epoch([], new_in=80, now=999)
    assert out == [] and r.output_watermark == 10            # the watermark moved, the hold stays
    out, r = d.epoch([], new_in=90, now=1000)
    assert out == [("a", 10, 1000)] and r.output_watermark == 90


def test_rows_or_timers_below_the_output_watermark_are_refused():
    def early_row(ctx, ev):
        return pa.table({"k": ev.column("k"), "event_time": pa.array([5] * ev.num_rows, pa.int64()),
                         "fired_at": pa.array([0] * ev.num_rows, pa.int64())})

    d = Driver(ProcessSpec("p", "k", pa.string(), PAYLOAD, OUT, (), early_row, None))
    d.epoch([], new_in=20)
    with pytest.raises(ProcessFunctionError, match="below the operator's output watermark 20"):
        d.epoch([("a", 30)], new_in=40)

    def early_timer(ctx, ev):
        ctx.timers.set_event_time(ev.column("k"), 100, output_times=3)

    d = Driver(ProcessSpec("p", "k", pa.string(), PAYLOAD, OUT, (), early_timer, emit_fired))
    d.epoch([], new_in=20)
    with pytest.raises(ProcessFunctionError, match="output_time 3 ms is below"):
        d.epoch([("a", 30)], new_in=40)

    d = Driver(ProcessSpec("p", "k", pa.string(), PAYLOAD, OUT, (), early_timer, None))
    with pytest.raises(ProcessFunctionError, match="timers need an on_timer"):
        d.epoch([("a", 30)], new_in=40)


def test_missing_output_columns_name_the_function():
    def bad(ctx, ev):
        return pa.table({"k": ev.column("k")})

    d = Driver(ProcessSpec("p", "k", pa.string(), PAYLOAD, OUT, (), bad, None))
    with pytest.raises(ProcessFunctionError, match=r"step 'p': .*bad returned columns \['k'\], missing"):
        d.epoch([("a", 1)], new_in=2)
