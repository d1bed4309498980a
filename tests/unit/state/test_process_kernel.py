"""The keyed process kernel (``wire.state.process.on_epoch``) against a per-event reference.

The reference processes each epoch's on-time events one at a time in (event time,
arrival) order with a dict of per-key state and a heap of timers, then pops due
event-time timers one at a time in (time, key) order; the kernel calls the vectorized
functions once per epoch (and once per timer round). For random inputs, random epoch
splits and watermark delays, both give the same outputs, late events and output
watermarks, epoch by epoch. The kernel runs over Segments on a chunk store, re-opened
from its index every epoch as on Spark.
"""

from __future__ import annotations

import heapq
import itertools
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.examples.process_examples import BurstAlert, Dedupe
from wire.state import keyed_state as K
from wire.state.process import LATE_REASON, ProcessSpec, on_epoch
from wire.state.segments import MemoryChunkStore, Segments

PAYLOAD = pa.schema([("k", pa.string()), ("x", pa.int64())])


def events_table(rows: list[tuple[str, int, int]], seq0: int) -> pa.Table:
    """(key, event time, x) rows -> payload + __et + __seq."""
    return pa.table({
        "k": pa.array([r[0] for r in rows], pa.string()),
        "x": pa.array([r[2] for r in rows], pa.int64()),
        "__et": pa.array([r[1] for r in rows], pa.int64()),
        "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64()),
    })


def run_kernel(spec: ProcessSpec, epochs: list[tuple[list[tuple[str, int, int]], int]], now: int = 0):
    """Per epoch: (sorted outputs, sorted late (k, t, watermark), output watermark)."""
    store = MemoryChunkStore()
    index = None
    wm_in = out = NO_WATERMARK
    seq = 0
    transcript = []
    for rows, new_in, *wall in epochs:
        segments = Segments(index, store, pa.concat_tables)
        r = on_epoch(segments, events_table(rows, seq), wm_in, new_in, out, wall[0] if wall else now, spec)
        seq += len(rows)
        index = segments.index()
        late = sorted((d["k"], d["event_time"], d["watermark"]) for d in r.late.to_pylist())
        assert all(d["reason"] == LATE_REASON for d in r.late.to_pylist())
        transcript.append((sorted(tuple(d.values()) for d in r.outputs.to_pylist()), late,
                           r.output_watermark))
        wm_in, out = new_in, r.output_watermark
    return transcript, store


# -- the per-event reference ------------------------------------------------------------
def dedupe_event(n, state, timers, k, t, x):
    last = state.get(k)
    dup = last is not None and t - last < n
    state[k] = t if last is None else max(last, t)
    timers[(k, "expire")] = state[k] + n
    return [] if dup else [(k, x, t)]


def dedupe_timer(n, state, timers, k, tag, time):
    state.pop(k, None)
    return []


def burst_event(n, state, timers, k, t, x):
    recent = state.get(k, [])
    out = [(k, t, recent[0])] if len(recent) == 2 and t - recent[0] < n else []
    state[k] = [*recent, t][-2:]
    timers[(k, "expire")] = max(state[k]) + n
    return out


def burst_timer(n, state, timers, k, tag, time):
    state.pop(k, None)
    return []


def run_reference(on_event, on_timer, epochs):
    state: dict = {}
    timers: dict = {}  # (key, tag) -> time (event time; output_time = time)
    wm_in = out = NO_WATERMARK
    seq = 0
    transcript = []
    for rows, new_in in epochs:
        arrived = [(t, seq + i, k, x) for i, (k, t, x) in enumerate(rows)]
        seq += len(rows)
        late = sorted((k, t, wm_in) for t, _, k, x in arrived if t < wm_in)
        outputs = []
        for t, _, k, x in sorted(a for a in arrived if a[0] >= wm_in):
            outputs += on_event(state, timers, k, t, x)
        while True:
            heap = [(time, k, tag) for (k, tag), time in timers.items() if time <= new_in]
            if not heap:
                break
            heapq.heapify(heap)
            time, k, tag = heapq.heappop(heap)
            del timers[(k, tag)]
            outputs += on_timer(state, timers, k, tag, time)
        hold = min(timers.values(), default=None)
        out = max(out, new_in if hold is None else min(new_in, hold))
        transcript.append((sorted(outputs), late, out))
        wm_in = new_in
    return transcript


def spec_of(fn, schema: pa.Schema) -> ProcessSpec:
    return ProcessSpec(step="p", key="k", key_type=pa.string(), payload=PAYLOAD, output=schema,
                       states=tuple(sorted(fn.state.items())), on_events=fn.on_events,
                       on_timer=fn.on_timer)


DEDUPE_OUT = pa.schema([("k", pa.string()), ("x", pa.int64()), ("event_time", pa.int64())])


def epochs_of(events, cuts, delay):
    """Split arrivals into epochs; the watermark after each is max event time seen - delay."""
    bounds = [0, *sorted(set(cuts)), len(events)]
    epochs, wm, max_t = [], NO_WATERMARK, NO_WATERMARK
    for a, b in itertools.pairwise(bounds):
        rows = events[a:b]
        max_t = max([max_t, *(t for _, t, _ in rows)])
        wm = max(wm, max_t - delay) if max_t != NO_WATERMARK else wm
        epochs.append((rows, wm))
    return [*epochs, ([], MAX_WATERMARK)]


arrivals = st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 300), st.integers(0, 9)),
                    min_size=0, max_size=40)


@settings(max_examples=150, deadline=None)
@given(arrivals, st.lists(st.integers(0, 40), max_size=6), st.integers(0, 120), st.integers(1, 80))
def test_dedupe_equals_the_per_event_reference(events, cuts, delay, within):
    epochs = epochs_of(events, cuts, delay)
    fn = Dedupe(within_ms=within)
    got, _ = run_kernel(spec_of(fn, DEDUPE_OUT), epochs)
    expected = run_reference(lambda *a: dedupe_event(within, *a), lambda *a: dedupe_timer(within, *a),
                             epochs)
    assert got == expected


@settings(max_examples=150, deadline=None)
@given(arrivals, st.lists(st.integers(0, 40), max_size=6), st.integers(0, 120), st.integers(1, 120))
def test_burst_alert_equals_the_per_event_reference(events, cuts, delay, within):
    epochs = epochs_of(events, cuts, delay)
    fn = BurstAlert(count=3, within_ms=within)
    got, _ = run_kernel(spec_of(fn, BurstAlert.schema("k", pa.string())), epochs)
    expected = run_reference(lambda *a: burst_event(within, *a), lambda *a: burst_timer(within, *a),
                             epochs)
    assert got == expected


def test_state_is_purged_by_the_timers_at_the_end():
    """After the end of input every expiry timer fired and every state bucket is gone."""
    events = [("a", 5, 1), ("b", 7, 2), ("a", 9, 3), ("a", 40, 4)]
    _, store = run_kernel(spec_of(Dedupe(within_ms=10), DEDUPE_OUT), epochs_of(events, [2], 3))
    assert store.chunks == {}


class FlushCounts:
    """Count each key's events per ``x % 3`` in map state; 20 ms after a key's latest event
    (an event-time timer, moved by every event) emit ``(k, event_time=timer time, n)``."""

    state: ClassVar = {"counts": K.map_state(pa.int64(), pa.int64())}
    schema = pa.schema([("k", pa.string()), ("event_time", pa.int64()), ("n", pa.int64())])

    def on_events(self, ctx, events):
        x = events.column("x").to_numpy()
        t = pa.table({"k": events.column("k"), "b": pa.array(x % 3), "t": events.column("event_time")})
        per = t.group_by(["k", "b"]).aggregate([("t", "count")])
        counts = ctx.map_state("counts")
        old = pc.fill_null(counts.get(per.column("k"), per.column("b")), 0)
        counts.put(per.column("k"), per.column("b"), pc.add(old, per.column("t_count")))
        latest = t.group_by("k").aggregate([("t", "max")])
        ctx.timers.set_event_time(latest.column("k"), pc.add(latest.column("t_max"), 20), tag="flush")

    def on_timer(self, ctx, fired):
        counts = ctx.map_state("counts")
        entries = counts.entries(fired.column("k"))
        sums = entries.group_by("k").aggregate([("value", "sum")])
        counts.clear(fired.column("k"))
        out = fired.select(["k", "time"]).join(sums, "k")
        return pa.table({"k": out.column("k"), "event_time": out.column("time"),
                         "n": out.column("value_sum")})


def flush_event(state, timers, k, t, x):
    state.setdefault(k, {}).setdefault(x % 3, 0)
    state[k][x % 3] += 1
    timers[(k, "flush")] = t + 20  # moved by every event (the epoch's latest one wins)
    return []


def flush_timer(state, timers, k, tag, time):
    return [(k, time, sum(state.pop(k).values()))]


@settings(max_examples=150, deadline=None)
@given(arrivals, st.lists(st.integers(0, 40), max_size=6), st.integers(0, 120))
def test_timer_outputs_and_map_state_equal_the_per_event_reference(events, cuts, delay):
    epochs = epochs_of(events, cuts, delay)
    got, store = run_kernel(spec_of(FlushCounts(), FlushCounts.schema), epochs)
    assert got == run_reference(flush_event, flush_timer, epochs)
    assert store.chunks == {}


class FlushAfterWallClock:
    """Count each key's events; a processing-time timer ``delay`` ms of wall clock after the
    key's latest epoch emits the count at the output watermark in force when it was set."""

    state: ClassVar = {"n": K.value_state(pa.int64())}
    schema = pa.schema([("k", pa.string()), ("event_time", pa.int64()), ("n", pa.int64())])

    def __init__(self, delay: int) -> None:
        self.delay = delay

    def on_events(self, ctx, events):
        per = events.group_by("k").aggregate([("event_time", "count")])
        n = ctx.value_state("n")
        keys = per.column("k")
        n.update(keys, pc.add(pc.fill_null(n.get(keys), 0), per.column("event_time_count")))
        ctx.timers.set_processing_time(per.column("k"), ctx.processing_time + self.delay, tag="flush")

    def on_timer(self, ctx, fired):
        n = ctx.value_state("n").get(fired.column("k"))
        ctx.value_state("n").clear(fired.column("k"))
        return pa.table({"k": fired.column("k"), "event_time": fired.column("output_time"), "n": n})


def reference_flush_after(epochs, delay):
    """Per event: count; (re)set the key's processing-time timer to now + delay, output time =
    the output watermark in force; after the epoch's events, pop due timers one at a time."""
    counts: dict = {}
    timers: dict = {}  # key -> (time, output_time)
    wm_in = out = NO_WATERMARK
    seq = 0
    transcript = []
    for rows, new_in, now in epochs:
        arrived = [(t, seq + i, k) for i, (k, t, _) in enumerate(rows)]
        seq += len(rows)
        late = sorted((k, t, wm_in) for t, _, k in arrived if t < wm_in)
        for _t, _, k in sorted(a for a in arrived if a[0] >= wm_in):
            counts[k] = counts.get(k, 0) + 1
            timers[k] = (now + delay, out)
        until = MAX_WATERMARK if new_in == MAX_WATERMARK else now
        outputs = []
        for k, (_time, o) in sorted(((k, v) for k, v in timers.items() if v[0] <= until),
                                   key=lambda kv: (kv[1][0], kv[0])):
            outputs.append((k, o, counts.pop(k)))
            del timers[k]
        hold = min((o for _, o in timers.values()), default=None)
        out = max(out, new_in if hold is None else min(new_in, hold))
        transcript.append((sorted(outputs), late, out))
        wm_in = new_in
    return transcript


@settings(max_examples=100, deadline=None)
@given(arrivals, st.lists(st.integers(0, 40), max_size=6), st.integers(0, 120), st.integers(1, 50),
       st.lists(st.integers(0, 30), min_size=8, max_size=8))
def test_processing_time_timers_and_their_hold_equal_the_reference(events, cuts, delay, wait, steps):
    epochs = epochs_of(events, cuts, delay)
    clock = list(itertools.accumulate(steps))
    # the wall clock of each epoch: increasing by 0..30 ms per epoch
    epochs = [(rows, wm, clock[i % len(clock)] + 1_000 * (i // len(clock)))
              for i, (rows, wm) in enumerate(epochs)]
    got, store = run_kernel(spec_of(FlushAfterWallClock(wait), FlushAfterWallClock.schema), epochs)
    assert got == reference_flush_after(epochs, wait)
    assert store.chunks == {}
