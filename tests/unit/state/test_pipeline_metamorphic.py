"""Metamorphic test over chained pipelines on the pure kernels (issue 11, SPEC §2).

A pipeline is a front (one source, the union of two sources, or the interval join of
two sources), then one or two window operators, the results of one feeding the next
(event time = window start). The driver runs the pure kernels the Spark stages run
(:func:`wire.state.windows.process_epoch` + :func:`~wire.state.windows.output_watermark`,
:func:`wire.state.join.join_epoch` + :func:`~wire.state.join.output_watermark`), per
key group and per epoch, carrying watermarks like the Spark layer: an operator's
input watermark is the minimum of its inputs' output watermarks (over every key group
upstream), its events of an epoch are classified against its input watermark of the
previous epoch, and its results leave in the same epoch.

Property: for any split of the same input into epochs and any source watermark
delay under which no source event is late, the final results equal a DuckDB batch
oracle, nothing goes to a late port, every window emits only ``final`` rows, no
operator emits a result behind the output watermark it forwarded before (the Beam
hold rule), and the end of input releases every hold (every output watermark ends
at ``MAX_WATERMARK``).
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from wire.core.envelope import MAX_WATERMARK
from wire.state import aggregations as agg
from wire.state import join as J
from wire.state.assigners import Session, Sliding, Tumbling
from wire.state.windows import WindowSpec, output_watermark, process_epoch, split_late

NO_WM = -(2**63)
Row = tuple[str, int, int]
"""An event between operators: key, event time (ms), value ``x``."""


# ---------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class Stage:
    """One window operator: its assigner, what ``x`` becomes, re-keying and lateness."""

    assigner: Tumbling | Sliding | Session
    agg: str  # "count" | "sum" | "max": the result column x (the next stage's value)
    rekey: bool  # the next stage is keyed by one constant key ("top per window" shape)
    lateness: int = 0

    def spec(self) -> WindowSpec:
        x = {"count": agg.count(), "sum": agg.sum("x"), "max": agg.max("x")}[self.agg]
        return WindowSpec(self.assigner, self.lateness, "k", (("x", x), ("n", agg.count())))


@dataclass(frozen=True)
class Pipeline:
    front: str  # "one" | "union" | "join"
    stages: tuple[Stage, ...]
    join: J.IntervalJoinSpec | None = None


def table(rows: list[Row], seq0: int) -> pa.Table:
    return pa.table({
        "k": pa.array([r[0] for r in rows], pa.string()),
        "x": pa.array([r[2] for r in rows], pa.int64()),
        "__et": pa.array([r[1] for r in rows], pa.int64()),
        "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64()),
    })


def group_of(key: str, groups: int) -> int:
    return zlib.crc32(key.encode()) % groups


class Checks:
    """What the driver observed: late rows, non-final rows, results behind a watermark."""

    def __init__(self) -> None:
        self.late = 0
        self.not_final: list[dict] = []
        self.behind: list[tuple] = []


class WindowOp:
    """A window operator over ``groups`` key groups, as the Spark window stage runs it."""

    def __init__(self, stage: Stage, groups: int, name: str) -> None:
        self.stage, self.spec, self.name = stage, stage.spec(), name
        self.state: list[pa.Table | None] = [None] * groups
        self.out = [NO_WM] * groups
        self.wm_in = NO_WM

    def epoch(self, rows: list[Row], new_in: int, seq: int, checks: Checks) -> list[dict]:
        results = []
        groups = len(self.out)
        for g in range(groups):
            mine = [r for r in rows if group_of(r[0], groups) == g]
            state, res, late = process_epoch(self.state[g], table(mine, seq), self.wm_in, new_in, self.spec)
            self.state[g] = state
            checks.late += late.num_rows
            for r in res.to_pylist():
                if r["emit"] != "final":
                    checks.not_final.append(r)
                if r["emit"] == "final" and r["window_start"] < self.out[g]:  # behind what went downstream
                    checks.behind.append((self.name, r["window_start"], self.out[g]))
                results.append(r)
            self.out[g] = output_watermark(self.out[g], new_in, state, self.spec)
        self.wm_in = new_in
        return results

    def feed(self, results: list[dict]) -> list[Row]:
        """The results as the next operator's events (event time = window start)."""
        return [("all" if self.stage.rekey else r["k"], r["window_start"], r["x"]) for r in results]


class JoinOp:
    """An interval join over ``groups`` key groups, as the Spark join stage runs it."""

    def __init__(self, spec: J.IntervalJoinSpec, groups: int) -> None:
        self.spec = spec
        self.left: list[pa.Table | None] = [None] * groups
        self.right: list[pa.Table | None] = [None] * groups
        self.out = [NO_WM] * groups
        self.wm_in = NO_WM

    def epoch(self, left: list[Row], right: list[Row], new_in: int, seq: int, checks: Checks) -> list[Row]:
        rows: list[Row] = []
        groups = len(self.out)
        for g in range(groups):
            lg = [r for r in left if group_of(r[0], groups) == g]
            rg = [r for r in right if group_of(r[0], groups) == g]
            self.left[g], self.right[g], joined, late = J.join_epoch(
                self.left[g], self.right[g], table(lg, seq), table(rg, seq + len(left)), self.wm_in, new_in,
                self.spec)
            checks.late += late.num_rows
            for r in joined.to_pylist():
                if r["event_time"] < self.out[g]:
                    checks.behind.append(("join", r["event_time"], self.out[g]))
                rows.append((r["k"], r["event_time"], r["x"] + r["right_x"]))
            self.out[g] = J.output_watermark(self.out[g], new_in, self.spec)
        self.wm_in = new_in
        return rows


def epochs_of(events: list, cuts: list[int]) -> list[list]:
    bounds = [0, *sorted(c for c in cuts if c <= len(events)), len(events)]
    return [events[a:b] for a, b in itertools.pairwise(bounds)]


def run(pipeline: Pipeline, sources: list[list[tuple]], cuts: list[list[int]], delays: list[int],
        groups: int) -> tuple[list[tuple], Checks, list[int]]:
    """Run the pipeline epoch by epoch; sources are lists of ``(key, t, x, keep)``.

    Each source's watermark is ``max event time seen - delay`` (filtered events count:
    the filter ``keep`` runs after the source); the last epoch ends the input
    (``MAX_WATERMARK``). Returns the last stage's final rows, the checks, and every
    operator's output watermark at the end.
    """
    chunks = [epochs_of(s, c) for s, c in zip(sources, cuts, strict=True)]
    n_epochs = max(len(c) for c in chunks)
    join = JoinOp(pipeline.join, groups) if pipeline.join is not None else None
    windows = [WindowOp(s, groups, f"w{i}") for i, s in enumerate(pipeline.stages)]
    checks, out, seq = Checks(), [], 0
    max_et = [NO_WM] * len(sources)
    src_wm = [NO_WM] * len(sources)
    for e in range(n_epochs + 1):
        kept: list[list[Row]] = []
        for i, parts in enumerate(chunks):
            chunk = parts[e] if e < len(parts) else []
            max_et[i] = max([max_et[i], *(t for _, t, _, _ in chunk)])
            src_wm[i] = MAX_WATERMARK if e == n_epochs else max(src_wm[i], max_et[i] - delays[i])
            kept.append([(k, t, x) for k, t, x, keep in chunk if keep])
        wm = min(src_wm)  # a union / join takes the minimum of its inputs (SPEC §2)
        if join is not None:
            rows = join.epoch(kept[0], kept[1], wm, seq, checks)
            wm = min(join.out)
        else:
            rows = [r for part in kept for r in part]
        seq += 1000
        for op in windows:
            results = op.epoch(rows, wm, seq, checks)
            seq += 1000
            rows, wm = op.feed(results), min(op.out)
        out += [(r["k"], r["window_start"], r["window_end"], r["x"], r["n"]) for r in results
                if r["emit"] == "final"]
    outs = [*(join.out if join else []), *(w for op in windows for w in op.out)]
    return sorted(out), checks, outs


# ---------------------------------------------------------------- the oracle (DuckDB, batch)


def _window_sql(source: str, stage: Stage) -> str:
    """SQL of one window stage over ``source(k, t, x)``: ``(k, start, end, x, n)``."""
    a = stage.assigner
    x = {"count": "count(*)", "sum": "sum(x)", "max": "max(x)"}[stage.agg]
    if isinstance(a, Session):
        # RANGE frames, not ROWS: events with equal times (a re-keyed stage's windows of
        # several keys share a start) get the same ``prev`` (the last earlier time) and the
        # same session id; ROWS frames order ties arbitrarily, and differently in the two
        # window functions, which put one of them into the session before.
        gap = a.gap_ms
        return f"""
            WITH o AS (
                SELECT *, max(t) OVER (PARTITION BY k ORDER BY t
                                       RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
                FROM {source}),
            s AS (
                SELECT *, sum(CASE WHEN prev IS NULL OR t >= prev + {gap} THEN 1 ELSE 0 END)
                          OVER (PARTITION BY k ORDER BY t RANGE UNBOUNDED PRECEDING) AS sid
                FROM o)
            SELECT k, min(t) AS "start", max(t) + {gap} AS "end",
                   CAST({x} AS BIGINT) AS x, count(*) AS n
            FROM s GROUP BY k, sid"""
    size = a.size_ms
    slide = a.slide_ms if isinstance(a, Sliding) else size
    per_event = -(-size // slide)
    return f"""
        WITH w AS (
            SELECT k, x, t, t - ((t % {slide}) + {slide}) % {slide} - j * {slide} AS ws
            FROM {source}, range({per_event}) AS r(j))
        SELECT k, ws AS "start", ws + {size} AS "end", CAST({x} AS BIGINT) AS x,
               count(*) AS n
        FROM w WHERE t - ws < {size} GROUP BY k, ws"""


def oracle(pipeline: Pipeline, sources: list[list[tuple]]) -> list[tuple]:
    con = duckdb.connect()
    for i, events in enumerate(sources):
        kept = [(k, t, x) for k, t, x, keep in events if keep]
        con.register(f"src{i}", pa.table({
            "k": pa.array([r[0] for r in kept], pa.string()),
            "t": pa.array([r[1] for r in kept], pa.int64()),
            "x": pa.array([r[2] for r in kept], pa.int64()),
        }))
    if pipeline.front == "one":
        current = "SELECT k, t, x FROM src0"
    elif pipeline.front == "union":
        current = "SELECT k, t, x FROM src0 UNION ALL SELECT k, t, x FROM src1"
    else:
        j = pipeline.join
        current = f"""SELECT l.k, greatest(l.t, r.t) AS t, l.x + r.x AS x
                      FROM src0 l JOIN src1 r ON l.k = r.k
                       AND r.t BETWEEN l.t + {j.lower_ms} AND l.t + {j.upper_ms}"""
    for i, stage in enumerate(pipeline.stages):
        con.execute(f"CREATE TABLE in{i} AS {current}")
        result = _window_sql(f"in{i}", stage)
        key = "'all'" if stage.rekey else "k"  # the next stage's key
        current = f'SELECT {key} AS k, "start" AS t, x FROM ({result})'
    rows = con.execute(f'SELECT k, "start", "end", x, n FROM ({result})').fetchall()
    return sorted(tuple(r) for r in rows)


# ---------------------------------------------------------------- inputs

FIRST = [Tumbling(10), Tumbling(7), Sliding(30, 10), Sliding(25, 10),
         Sliding(40, 5), Session(7), Session(20)]
SECOND = [Tumbling(10), Tumbling(20), Sliding(40, 20), Session(15)]
GAPS = [0, 1, 3, 7, 12, 25, 40, 90]


@st.composite
def stages(draw: st.DrawFn, kinds: list, *, rekey: bool) -> Stage:
    return Stage(draw(st.sampled_from(kinds)), draw(st.sampled_from(["count", "sum", "max"])),
                 rekey and draw(st.booleans()), draw(st.sampled_from([0, 0, 5])))


@st.composite
def pipelines(draw: st.DrawFn, *, sessions: bool = True) -> Pipeline:
    def kinds(assigners: list) -> list:
        return [a for a in assigners if sessions or not isinstance(a, Session)]

    front = draw(st.sampled_from(["one", "union", "join"]))
    first = draw(stages(kinds(FIRST), rekey=True))
    two = front == "one" or draw(st.booleans())
    chain = (first, draw(stages(kinds(SECOND), rekey=False))) if two else (first,)
    if front != "join":
        return Pipeline(front, chain)
    lower = draw(st.sampled_from([-10, -3, 0, 2]))
    upper = lower + draw(st.sampled_from([0, 4, 15]))
    spec = J.IntervalJoinSpec("k", lower, upper, ("x",), ("x",),
                              allowed_lateness_ms=draw(st.sampled_from([0, 4, 10])))
    return Pipeline(front, chain, spec)


def draw_run(pipeline: Pipeline, disorder: int, data: st.DataObject, delays: tuple[int, int],
             gaps: list[int] = GAPS) -> tuple[list[list[tuple]], list[tuple], Checks, list[int]]:
    """Draw an input, its epochs, source delays and key groups; run the pipeline on it.

    One walk of event times (steps from ``gaps``) is dealt out to the sources, so a
    union's or a join's inputs advance together; each event is up to ``disorder`` ms
    behind the walk (so each source is in time order up to ``disorder``), half the
    events are filtered out before the first operator (they still move the source
    watermark), an epoch ends after each event with probability 1/2, and each source's
    delay is drawn from ``delays`` (inclusive). The draws come from a Hypothesis-controlled
    ``Random`` (uniform draws find the rare orderings far more often than element-wise
    strategies, which favour short lists and small values); the drawn input is printed
    with a failing example.
    """
    n = 1 if pipeline.front == "one" else 2
    rnd = data.draw(st.randoms(use_true_random=False), label="random")
    t, events = 1000, []
    for _ in range(rnd.randint(0, 40)):
        t += rnd.choice(gaps)
        event = (rnd.choice("abc"), t - rnd.randint(0, disorder), rnd.randint(1, 9), rnd.random() < 0.5)
        events.append((rnd.randrange(n), event))
    cuts = [i + 1 for i in range(len(events)) if rnd.random() < 0.5]  # an epoch ends after event i
    per_source = [[e for i, e in events if i == s] for s in range(n)]
    source_cuts = [[sum(1 for i, _ in events[:c] if i == s) for c in cuts] for s in range(n)]
    source_delays = [rnd.randint(*delays) for _ in range(n)]
    groups = rnd.randint(1, 3)
    note(f"sources={per_source}\ncuts={source_cuts} delays={source_delays} key_groups={groups}")
    return per_source, *run(pipeline, per_source, source_cuts, source_delays, groups)


@settings(max_examples=150, deadline=None)
@given(pipeline=pipelines(), disorder=st.integers(0, 8), data=st.data())
def test_any_epoch_split_and_safe_delay_gives_the_batch_result(pipeline, disorder, data):
    """Delay >= the input's disorder: no source event is late, so nothing downstream is."""
    sources, got, checks, outs = draw_run(pipeline, disorder, data, (disorder, disorder + 10))
    assert checks.late == 0
    assert checks.not_final == []
    assert checks.behind == []
    assert outs == [MAX_WATERMARK] * len(outs)
    assert got == oracle(pipeline, sources)


@settings(max_examples=150, deadline=None)
@given(pipeline=pipelines(sessions=False), disorder=st.integers(0, 12), data=st.data())
def test_late_input_never_puts_a_result_behind_the_forwarded_watermark(pipeline, disorder, data):
    """A delay (0-2 ms) below the disorder, so events are late: the hold still covers results.

    Every ``final`` row and every joined row has an event time at or after the output
    watermark its operator forwarded before.

    A late event only enters a window that is still open (tumbling / sliding: its end is
    past the input watermark, so its start is at or after the hold) or updates a fired
    one (an ``update``, late by nature); a join accepts an event at most
    ``allowed_lateness`` behind its input watermark, which its output watermark lags by.
    Sessions are left out: a late event may merge, through other late events of the same
    epoch, into an open session and move its start back by any amount, which no finite
    hold covers (see :func:`wire.state.windows.output_watermark`).
    """
    _, _, checks, outs = draw_run(pipeline, disorder, data, (0, 2), [0, 1, 2, 3, 5, 20])
    assert checks.behind == []
    assert outs == [MAX_WATERMARK] * len(outs)


# ---------------------------------------------------------------- hand transcripts


def test_hold_bug_transcript_sliding_then_top_per_window():
    """Issue 11's bug: filtered events move the watermark to 100 while no window is open.

    Epoch 0 only has filtered events (watermark 100). Epoch 1: an on-time event at 105
    opens [80,110), [90,120), [100,130). The sliding window's output watermark must have
    stayed at 80, the earliest start an event at >= 100 can create, so the top-per-window
    stage ([80,100) and [100,120), keyed by one constant) takes every count on time.
    """
    pipeline = Pipeline("one", (Stage(Sliding(30, 10), "count", True),
                                Stage(Tumbling(20), "max", False)))
    events = [("a", 50, 1, False), ("a", 100, 1, False), ("a", 105, 1, True)]
    got, checks, _ = run(pipeline, [events], [[2]], [0], 1)
    assert checks.late == 0 and checks.behind == []
    assert got == [("all", 80, 100, 1, 2), ("all", 100, 120, 1, 1)] == oracle(pipeline, [events])


def test_session_then_window_transcript():
    """A session's result leaves when the watermark passes its end, with event time = its start.

    Gap 10, delay 0. Epoch 0: a@100, a@105 (watermark 105; session [100,115) open, holds 100).
    Epoch 1: a@130 (watermark 130): [100,115) fires (start 100, count 2); [130,140) opens and
    holds 130. The end of input fires [130,140). Tumbling(20) over the starts: [100,120) gets
    1 session of 2 events, [120,140) one of 1.
    """
    pipeline = Pipeline("one", (Stage(Session(10), "count", False),
                                Stage(Tumbling(20), "sum", False)))
    events = [("a", 100, 1, True), ("a", 105, 1, True), ("a", 130, 1, True)]
    got, checks, outs = run(pipeline, [events], [[2]], [0], 2)
    assert checks.late == 0 and checks.behind == []
    assert got == [("a", 100, 120, 2, 1), ("a", 120, 140, 1, 1)] == oracle(pipeline, [events])
    assert outs == [MAX_WATERMARK] * 4


def test_sessions_over_a_rekeyed_window_with_equal_starts_transcript():
    """Several keys' windows share a start once re-keyed: the session must take all of them.

    Sliding(30, 10) counts per key, one event per epoch, delay 0 (CI's failing draw, seed
    92816739...). a and b at 1000 and 1010, c at 1007 and 1010, open [980,1010),
    [990,1020), [1000,1030) and [1010,1040) for each of the three keys: 12 results at
    starts 980-1010, each start three times. a and b at 1050 give starts 1030, 1040 and
    1050 twice each; a, b and c at 1090 give 1070, 1080 and 1090 three times each.
    Session(15) over the starts, counting them: 1030 - 1010 = 20 >= 15 and
    1070 - 1050 = 20, so [980,1025) holds 12, [1030,1065) 6 and [1070,1105) 9. The
    oracle once ordered equal starts arbitrarily and put a 1030 into the first session.
    """
    pipeline = Pipeline("one", (Stage(Sliding(30, 10), "count", True),
                                Stage(Session(15), "count", False)))
    times = [("a", 1000), ("a", 1000), ("b", 1000), ("a", 1000), ("c", 1007), ("a", 1010),
             ("a", 1010), ("b", 1010), ("c", 1010), *[("a", 1050)] * 6, ("b", 1050),
             ("a", 1090), ("b", 1090), ("c", 1090)]
    events = [(k, t, 1, True) for k, t in times]
    got, checks, _ = run(pipeline, [events], [list(range(1, len(events)))], [0], 1)
    assert checks.late == 0 and checks.behind == []
    expected = [("all", 980, 1025, 12, 12), ("all", 1030, 1065, 6, 6), ("all", 1070, 1105, 9, 9)]
    assert got == expected == oracle(pipeline, [events])


def test_join_then_window_transcript():
    """Join bounds [0, 5], lateness 4: a joined row's event time is the later event's.

    Left a@10 (x 1), a@20 (x 2); right a@12 (x 10), a@25 (x 20); one event per side per
    epoch, delay 0. Pairs (10,12) at 12 and (20,25) at 25, x = left x + right x; Tumbling(10)
    sums them: [10,20) 11 and [20,30) 22. The join's output watermark lags its input by the
    lateness, but the end of input must release it.
    """
    spec = J.IntervalJoinSpec("k", 0, 5, ("x",), ("x",), allowed_lateness_ms=4)
    pipeline = Pipeline("join", (Stage(Tumbling(10), "sum", False),), spec)
    left = [("a", 10, 1, True), ("a", 20, 2, True)]
    right = [("a", 12, 10, True), ("a", 25, 20, True)]
    got, checks, outs = run(pipeline, [left, right], [[1], [1]], [0, 0], 1)
    assert checks.late == 0 and checks.behind == []
    assert got == [("a", 10, 20, 11, 1), ("a", 20, 30, 22, 1)] == oracle(pipeline, [left, right])
    assert outs == [MAX_WATERMARK, MAX_WATERMARK]  # the end of input releases the join's lag


def test_join_row_of_an_event_within_allowed_lateness_is_on_time_downstream():
    """The join's output watermark lags its input by ``allowed_lateness`` (4 ms here).

    Bounds [0, 5], delay 0. Epoch 0: left a@995, right b@1000 (join input watermark 995).
    Epoch 1: left a@1001 (input 1000, output 996). Epoch 2: right a@998, 2 ms behind its
    source's watermark but within the join's lateness: it joins the buffered a@995 into a
    row at 998. The window's input watermark is 996, so [990,1000) takes it on time; with
    an output watermark of 1000 (no lag) the row would be behind it and the window late.
    """
    spec = J.IntervalJoinSpec("k", 0, 5, ("x",), ("x",), allowed_lateness_ms=4)
    pipeline = Pipeline("join", (Stage(Tumbling(10), "sum", False),), spec)
    left = [("a", 995, 1, True), ("a", 1001, 2, True)]
    right = [("b", 1000, 5, True), ("a", 998, 10, True)]
    got, checks, _ = run(pipeline, [left, right], [[1], [1, 1]], [0, 0], 1)
    assert checks.late == 0 and checks.behind == []
    assert got == [("a", 990, 1000, 11, 1)] == oracle(pipeline, [left, right])


def test_window_over_join_rows_builds_and_routes_late_rows():
    """A join's rows have an ``event_time`` column; a window's late table keeps it as ``input_event_time``.

    Before, the window's late schema rejected the column, so no window could follow a join.
    """
    spec = WindowSpec(Tumbling(10), 0, "k", (("n", agg.count()),))
    rows = pa.table({"k": ["a", "a"], "x": [1, 2], "event_time": [5, 25], "__et": [5, 25], "__seq": [0, 1]})
    accepted, late, _ = split_late(rows, 20, spec)  # [0,10) is closed at 20, [20,30) open
    assert accepted.column("event_time").to_pylist() == [25]
    assert late.select(["k", "x", "input_event_time", "event_time", "watermark"]).to_pylist() == [
        {"k": "a", "x": 1, "input_event_time": 5, "event_time": 5, "watermark": 20}]


@pytest.mark.parametrize(("old_out", "new_in", "lateness", "expected"), [
    (NO_WM, NO_WM, 4, NO_WM),            # no watermark yet
    (NO_WM, 100, 4, 96),                 # an accepted event may be 4 ms behind the input
    (98, 100, 4, 98),                    # never goes back
    (96, MAX_WATERMARK, 4, MAX_WATERMARK),  # end of input: nothing can arrive any more
    (0, 100, 0, 100),
])
def test_join_output_watermark_by_hand(old_out, new_in, lateness, expected):
    spec = J.IntervalJoinSpec("k", 0, 5, ("x",), ("x",), allowed_lateness_ms=lateness)
    assert J.output_watermark(old_out, new_in, spec) == expected
