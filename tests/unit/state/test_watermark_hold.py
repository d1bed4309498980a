"""Watermark hold of chained windows (SPEC §2, Beam hold rule), on the pure kernels.

Each chain runs twice: on the reference composition (``process_epoch``) and on the
kernel the Spark processor runs (``on_epoch`` over memory chunks, bucketed state).

A window whose results feed a second window must never let its output watermark pass
the earliest window start an on-time input event could still create, whether or not
a window is open. Metamorphic property: for every split of the same input into
epochs, and every watermark delay under which no source event is late, the second
window's results equal a pandas batch oracle and nothing goes to a late port.
"""

from __future__ import annotations

import itertools

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.core.envelope import MAX_WATERMARK
from wire.state import aggregations as agg
from wire.state.assigners import Session, Sliding, Tumbling, earliest_start
from wire.state.segments import MemoryChunkStore
from wire.state.window_epoch import WindowInputs, on_epoch
from wire.state.windows import WindowSpec, output_watermark, preaggregate, process_epoch, split_late

NO_WM = -(2**63)
SECOND = WindowSpec(Tumbling(20), 0, "k", (("best", agg.max("x")), ("windows", agg.count())))


def events_table(rows: list[tuple[str, int, int]], seq0: int) -> pa.Table:
    return pa.table({
        "k": pa.array([r[0] for r in rows], pa.string()),
        "x": pa.array([r[2] for r in rows], pa.int64()),
        "__et": pa.array([r[1] for r in rows], pa.int64()),
        "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64()),
    })


class Reference:
    """One window operator run by the reference composition: process_epoch + output_watermark."""

    def __init__(self, spec: WindowSpec):
        self.spec, self.state = spec, None

    def epoch(self, events: pa.Table, wm_in: int, new_in: int, wm_out: int):
        self.state, results, late = process_epoch(self.state, events, wm_in, new_in, self.spec)
        return results, late.num_rows, output_watermark(wm_out, new_in, self.state, self.spec)


class Engine:
    """One window operator run by the kernel the Spark processor runs (on_epoch), its state in
    memory chunks; raw events classified by the operator itself, as downstream of a window."""

    def __init__(self, spec: WindowSpec):
        self.spec, self.store, self.index = spec, MemoryChunkStore(), None

    def epoch(self, events: pa.Table, wm_in: int, new_in: int, wm_out: int):
        out = on_epoch(self.store, self.index, WindowInputs(events=[events]), wm_in=wm_in, new_in=new_in,
                       wm_out=wm_out, spec=self.spec,
                       partial_schema=preaggregate(split_late(events, NO_WM, self.spec)[0], self.spec).schema,
                       events_schema=events.schema)
        self.index = out.index
        return out.results, 0 if out.late is None else out.late.num_rows, out.wm_out


KERNELS = {"reference": Reference, "engine": Engine}


def run_chain(events: list[tuple[str, int, bool]], cuts: list[int], delay: int, first: WindowSpec,
              kernel: str = "reference") -> tuple[list[tuple], int]:
    """Source (watermark = max event time - delay) -> filter -> window 1 -> window 2, per epoch.

    Returns window 2's results (key, start, best, windows) and the count of late rows.
    """
    w1, w2 = KERNELS[kernel](first), KERNELS[kernel](SECOND)
    bounds = [0, *sorted(set(cuts)), len(events)]
    epochs = [events[a:b] for a, b in itertools.pairwise(bounds)] + [None]
    in1 = out1 = in2 = out2 = NO_WM
    max_et, seq, late, out = NO_WM, 0, 0, []
    for chunk in epochs:
        if chunk is None:
            src_wm = MAX_WATERMARK  # end of input
            chunk = []
        else:
            max_et = max([max_et, *(t for _, t, _ in chunk)])
            src_wm = max(in1, max_et - delay)
        counted = [(k, t, 1) for k, t, keep in chunk if keep]  # the filter before window 1
        r1, l1, new_out1 = w1.epoch(events_table(counted, seq), in1, src_wm, out1)
        seq += len(counted)
        finals = [r for r in r1.to_pylist() if r["emit"] == "final"]
        feed = [(r["k"], r["window_start"], r["n"]) for r in finals]
        r2, l2, out2 = w2.epoch(events_table(feed, seq), in2, new_out1, out2)
        seq += len(feed)
        late += l1 + l2
        out += [(r["k"], r["window_start"], r["best"], r["windows"]) for r in r2.to_pylist()
                if r["emit"] == "final"]
        in1, out1, in2 = src_wm, new_out1, new_out1
    return sorted(out), late


def oracle(events: list[tuple[str, int, bool]], first: WindowSpec) -> list[tuple]:
    """pandas: window 1 counts over the kept events, then max / count per 20 ms of window start."""
    df = pd.DataFrame([(k, t) for k, t, keep in events if keep], columns=["k", "t"])
    if df.empty:
        return []
    a = first.assigner
    if isinstance(a, Session):
        rows = []
        for k, g in df.sort_values("t").groupby("k"):
            start = end = None
            n = 0
            for t in g["t"]:
                if start is not None and t < end:  # overlaps the open session: merge
                    end, n = max(end, t + a.gap_ms), n + 1
                else:
                    if start is not None:
                        rows.append((k, start, n))
                    start, end, n = t, t + a.gap_ms, 1
            rows.append((k, start, n))
        w1 = pd.DataFrame(rows, columns=["k", "start", "n"])
    else:
        size = a.size_ms
        slide = a.slide_ms if isinstance(a, Sliding) else size
        parts = []
        for j in range(-(-size // slide)):
            s = df["t"] - df["t"] % slide - j * slide
            parts.append(pd.DataFrame({"k": df["k"], "start": s})[df["t"] - s < size])
        w1 = pd.concat(parts).groupby(["k", "start"]).size().rename("n").reset_index()
    w1["w2"] = w1["start"] - w1["start"] % 20
    w2 = w1.groupby(["k", "w2"]).agg(best=("n", "max"), windows=("n", "size")).reset_index()
    return sorted((r.k, int(r.w2), int(r.best), int(r.windows)) for r in w2.itertuples())


FIRST_WINDOWS = [
    WindowSpec(Tumbling(10), 0, "k", (("n", agg.count()),)),
    WindowSpec(Sliding(30, 10), 0, "k", (("n", agg.count()),)),
    WindowSpec(Sliding(25, 10), 0, "k", (("n", agg.count()),)),
    WindowSpec(Session(7), 0, "k", (("n", agg.count()),)),
]


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_filtered_gap_then_sliding_window_is_not_late_downstream(kernel):
    """The bug: filtered events move the watermark while no window is open (hand transcript).

    Epoch 0: only filtered events, the source watermark goes to 100. Epoch 1: an on-time
    event at 105 opens sliding windows [80,110), [90,120) and [100,130). The first
    window's output watermark must have stayed at 80 (the earliest start an event at
    >= 100 can create), not 100: else window 2 routes the [80,110) result to late.
    """
    first = FIRST_WINDOWS[1]
    events = [("a", 50, False), ("a", 100, False), ("a", 105, True)]
    got, late = run_chain(events, [2], 0, first, kernel)
    assert late == 0
    assert got == [("a", 80, 1, 2), ("a", 100, 1, 1)] == oracle(events, first)


@pytest.mark.parametrize("t, assigner, start", [
    (105, Tumbling(10), 100), (-1, Tumbling(10), -10), (100, Tumbling(10), 100),
    (105, Sliding(30, 10), 80), (100, Sliding(30, 10), 80), (99, Sliding(25, 10), 80),
    (105, Session(7), 105),
])
def test_earliest_start_by_hand(t, assigner, start):
    assert earliest_start(t, assigner) == start


def test_output_watermark_holds_without_open_windows_and_releases_at_end():
    spec = FIRST_WINDOWS[1]
    assert output_watermark(NO_WM, 100, None, spec) == 80
    assert output_watermark(90, 100, None, spec) == 90  # never goes back
    assert output_watermark(80, MAX_WATERMARK, None, spec) == MAX_WATERMARK
    assert output_watermark(NO_WM, NO_WM, None, spec) == NO_WM


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(st.tuples(st.sampled_from([0, 1, 3, 7, 12, 25, 40]), st.sampled_from("ab"), st.booleans()),
                   min_size=1,
                   max_size=40),
    disorder=st.integers(0, 6),
    extra_delay=st.integers(0, 10),
    cuts=st.lists(st.integers(0, 40), max_size=10),
    which=st.integers(0, len(FIRST_WINDOWS) - 1),
    kernel=st.sampled_from(sorted(KERNELS)),
    data=st.data(),
)
def test_any_epoch_split_and_delay_gives_the_batch_result(steps, disorder, extra_delay, cuts, which, kernel,
                                                          data):
    """Events ``disorder`` ms out of order at most; delay >= disorder: no source event is late."""
    t, events = 1000, []
    for gap, k, keep in steps:
        t += gap
        shift = data.draw(st.integers(0, disorder))
        events.append((k, t - shift, keep))
    first = FIRST_WINDOWS[which]
    cut = [c for c in cuts if c <= len(events)]
    got, late = run_chain(events, cut, disorder + extra_delay, first, kernel)
    assert late == 0
    assert got == oracle(events, first)
