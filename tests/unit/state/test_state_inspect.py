"""Decoding a keyed operator's stored state (``wire.state.inspect``) against pandas oracles.

Each test drives the operator's own epoch kernel (the function the Spark processor runs)
over random events split into epochs with a moving watermark, on a chunk store that packs
small chunks as the engine does, then decodes the stored entries as the checkpoint reader
would and compares with what an independent pandas computation of the documented rules
says the state holds for the input admitted so far:

* windows: per (key, window) not purged (``end + lateness > watermark``) the count, sum,
  mean and max of the events not late on arrival, and ``fired`` = ``end <= watermark``;
* sessions: the merged sessions of the admitted events that are not purged;
* interval join: the admitted events (``t + lateness >= watermark`` on arrival) whose
  buffer bucket is not dropped yet;
* process function: a per-event reference's ``last_seen`` values, list states and timers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wire.core.envelope import encode_table
from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.core.windowing import Session, Tumbling
from wire.examples.process_examples import BurstAlert, Dedupe
from wire.state import aggregations as A
from wire.state import inspect as I
from wire.state import join_epoch as JE
from wire.state import window_epoch as WE
from wire.state.join import IntervalJoinSpec
from wire.state.keyed_state import StateSpec, map_state
from wire.state.packed_chunks import PackedChunks
from wire.state.process import ProcessSpec, declared_states, on_epoch
from wire.state.rekey import GroupState
from wire.state.segments import MemoryChunkStore, Segments
from wire.state.spec import WindowSpec


def _epochs(seed: int, n: int = 120, span: int = 300, delay: int = 20) -> list[tuple[pd.DataFrame, int]]:
    """Random events (k, t, x) split into epochs, each with the watermark after it (max seen - delay)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"k": rng.choice(["a", "b", "c"], n), "t": rng.integers(0, span, n),
                       "x": rng.integers(-50, 50, n)})
    df["seq"] = np.arange(n)
    cuts = sorted(set(rng.integers(1, n, 5).tolist()))
    out, seen = [], NO_WATERMARK
    for lo, hi in zip([0, *cuts], [*cuts, n], strict=True):
        part = df.iloc[lo:hi]
        seen = max(seen, int(part["t"].max()) - delay)
        out.append((part, seen))
    return out


def _table(part: pd.DataFrame, payload: list[str]) -> pa.Table:
    cols = {c: pa.array(part[c].tolist(), pa.string() if c == "k" else pa.int64()) for c in payload}
    cols["__et"] = pa.array(part["t"].tolist(), pa.int64())
    cols["__seq"] = pa.array(part["seq"].tolist(), pa.int64())
    return pa.table(cols)


def _decoded(store: MemoryChunkStore, wm_in: int, wm_out: int, kg: int = 3) -> I.Decoded:
    """The key group as the checkpoint reader decodes it: every stored entry, packs unpacked."""
    group = I.Decoded(kg, GroupState(wm_in, wm_out, {"src": wm_in}, {}, {}))
    for (b, c), table in store.chunks.items():
        I.add_entry(group, b, c, encode_table(table))
    return group


LEFT = pa.schema([("k", pa.string()), ("a", pa.int64())])
RIGHT = pa.schema([("k", pa.string()), ("b", pa.int64())])
SPEC = WindowSpec(Tumbling(10), 5, "k", (("n", A.count()), ("s", A.sum("x")), ("m", A.mean("x")),
                                        ("hi", A.max("x"))))


def _run_windows(epochs, spec) -> tuple[MemoryChunkStore, int, int]:
    raw = MemoryChunkStore()
    store, index = PackedChunks(raw), None
    wm_in = wm_out = NO_WATERMARK
    schema = _table(epochs[0][0].iloc[:0], ["k", "x"]).schema
    partial = WE.W.partial_schema(spec, schema)
    for part, new_in in epochs:
        inputs = WE.WindowInputs(events=[_table(part, ["k", "x"])])
        out = WE.on_epoch(store, index, inputs, wm_in=wm_in, new_in=new_in, wm_out=wm_out, spec=spec,
                          partial_schema=partial, events_schema=schema)
        store.flush()
        index, wm_in, wm_out = out.index, new_in, out.wm_out
    return raw, wm_in, wm_out


@pytest.mark.parametrize("seed", range(8))
def test_windows_equal_the_pandas_oracle_of_the_admitted_events(seed):
    epochs = _epochs(seed)
    raw, wm, wm_out = _run_windows(epochs, SPEC)
    got = I.window_rows([_decoded(raw, wm, wm_out)], SPEC)

    admitted, wm_in = [], NO_WATERMARK
    for part, new_in in epochs:
        end = (part["t"] // 10) * 10 + 10
        admitted.append(part[~(end + 5 <= wm_in)])
        wm_in = new_in
    ev = pd.concat(admitted)
    ev = ev.assign(window_start=(ev["t"] // 10) * 10)
    ev["window_end"] = ev["window_start"] + 10
    ev = ev[ev["window_end"] + 5 > wm]
    want = ev.groupby(["k", "window_start", "window_end"]).agg(
        n=("x", "size"), s=("x", "sum"), m=("x", "mean"), hi=("x", "max")).reset_index()
    want["fired"] = want["window_end"] <= wm
    cols = ["k", "window_start", "window_end", "n", "s", "m", "hi", "fired"]
    have = got.to_pandas()[cols] if got.num_rows else pd.DataFrame(columns=cols)
    pd.testing.assert_frame_equal(have.sort_values(cols[:3]).reset_index(drop=True),
                                  want[cols].sort_values(cols[:3]).reset_index(drop=True), check_dtype=False)
    if got.num_rows:
        assert set(got.column("key_group").to_pylist()) == {3}
        assert {"n__count", "s__sum", "m__sum", "m__count", "hi__max"} <= set(got.column_names)


def test_an_unkeyed_window_has_no_key_column_and_an_empty_state_no_rows():
    spec = WindowSpec(Tumbling(10), 0, "__key", (("n", A.count()),))
    store = MemoryChunkStore()
    empty = I.window_rows([_decoded(store, 0, 0)], spec)
    assert empty.num_rows == 0
    table = pa.table({"__key": pa.array([0, 0], pa.int32()), "__et": pa.array([1, 2], pa.int64()),
                      "__seq": pa.array([0, 1], pa.int64())})
    partial = WE.W.partial_schema(spec, table.schema)
    out = WE.on_epoch(store, None, WE.WindowInputs(events=[table]), wm_in=NO_WATERMARK, new_in=0,
                      wm_out=NO_WATERMARK, spec=spec, partial_schema=partial, events_schema=table.schema)
    assert out.results.num_rows == 0
    rows = I.window_rows([_decoded(store, 0, out.wm_out)], spec, keyed=False)
    assert rows.to_pylist() == [{"key_group": 3, "window_start": 0, "window_end": 10, "n": 2, "n__count": 2,
                                 "fired": False}]


@pytest.mark.parametrize("seed", range(6))
def test_open_sessions_equal_the_merged_sessions_of_the_admitted_events(seed):
    gap = 15
    spec = WindowSpec(Session(gap), 1000, "k", (("n", A.count()), ("s", A.sum("x"))))
    epochs = _epochs(seed, delay=2000)  # nothing late: every event is admitted
    raw, wm, wm_out = _run_windows(epochs, spec)
    got = I.window_rows([_decoded(raw, wm, wm_out)], spec).to_pylist()

    ev = pd.concat([p for p, _ in epochs]).sort_values(["k", "t"])
    want = []
    for k, rows in ev.groupby("k"):
        start = end = None
        n = s = 0
        for t, x in zip(rows["t"], rows["x"], strict=True):
            if start is not None and t < end:
                end, n, s = max(end, t + gap), n + 1, s + x
                continue
            if start is not None:
                want.append((k, start, end, n, s))
            start, end, n, s = t, t + gap, 1, x
        want.append((k, start, end, n, s))
    assert [(r["k"], r["window_start"], r["window_end"], r["n"], r["s"]) for r in got] == sorted(want)
    assert all(r["fired"] is False for r in got)


@pytest.mark.parametrize("seed", range(8))
def test_join_buffers_equal_the_admitted_events_not_yet_purged(seed):
    lower, upper, lateness = -7, 12, 4
    spec = IntervalJoinSpec("k", lower, upper, ("a",), ("b",), allowed_lateness_ms=lateness)
    rng = np.random.default_rng(100 + seed)
    epochs = _epochs(seed, delay=15)
    side = rng.integers(0, 2, sum(len(p) for p, _ in epochs))
    lp, rp = LEFT, RIGHT
    raw = MemoryChunkStore()
    store, index = PackedChunks(raw, chunk_bytes=2000), None
    wm_in = wm_out = NO_WATERMARK
    admitted = []
    for part, new_in in epochs:
        is_left = side[part["seq"].to_numpy()] == 0
        left, right = part[is_left].rename(columns={"x": "a"}), part[~is_left].rename(columns={"x": "b"})
        inputs = JE.JoinInputs(left=[_table(left, ["k", "a"])], right=[_table(right, ["k", "b"])])
        out = JE.on_epoch(store, index, inputs, wm_in=wm_in, new_in=new_in, wm_out=wm_out, spec=spec,
                          left_payload=lp, right_payload=rp)
        store.flush()
        for name, rows in (("left", left), ("right", right)):
            ok = rows[rows["t"] + lateness >= wm_in]
            admitted += [(name, k, t, x, s) for k, t, x, s in zip(ok["k"], ok["t"], ok.iloc[:, 2], ok["seq"],
                                                                strict=True)]
        index, wm_in, wm_out = out.index, new_in, out.wm_out
    width = max(1000, upper - lower)
    want = []
    for name, k, t, x, s in admitted:
        last = (t // width + 1) * width - 1
        reach = last + (upper if name == "left" else -lower) + lateness
        if reach >= wm_in:
            want.append((name, k, t, x, s))
    got = I.join_rows([_decoded(raw, wm_in, wm_out)], "k").to_pylist()
    have = [(r["side"], r["k"], r["event_time"], (r["left"] or {}).get("a", (r["right"] or {}).get("b")),
             r["arrival"]) for r in got]
    assert have == sorted(want, key=lambda w: (w[0], w[1], w[2], w[4]))
    assert all((r["left"] is None) == (r["side"] == "right") for r in got)


def test_join_buffers_are_empty_after_the_end_of_input():
    spec = IntervalJoinSpec("k", 0, 5, ("a",), ("b",))
    lp, rp = LEFT, RIGHT
    store = MemoryChunkStore()
    part = pd.DataFrame({"k": ["a"], "t": [3], "a": [1], "seq": [0]})
    out = JE.on_epoch(store, None, JE.JoinInputs(left=[_table(part, ["k", "a"])]), wm_in=NO_WATERMARK,
                      new_in=0, wm_out=NO_WATERMARK, spec=spec, left_payload=lp, right_payload=rp)
    one_side = I.join_rows([_decoded(store, 0, 0)], "k")
    assert one_side.to_pylist() == [{"key_group": 3, "side": "left", "k": "a", "event_time": 3, "arrival": 0,
                                     "left": {"a": 1}, "right": None}]
    assert one_side.schema.field("right").type == pa.struct([])  # no right event buffered: no fields
    JE.on_epoch(store, out.index, JE.JoinInputs(), wm_in=0, new_in=MAX_WATERMARK, wm_out=out.wm_out,
                spec=spec, left_payload=lp, right_payload=rp)
    assert I.join_rows([_decoded(store, MAX_WATERMARK, MAX_WATERMARK)], "k").num_rows == 0


def _process_spec(fn, output: pa.Schema) -> ProcessSpec:
    payload = pa.schema([("k", pa.string()), ("x", pa.int64())])
    return ProcessSpec(step="p", key="k", key_type=pa.string(), payload=payload, output=output,
                       states=declared_states(fn.state), on_events=fn.on_events, on_timer=fn.on_timer)


def _run_process(spec: ProcessSpec, epochs) -> tuple[MemoryChunkStore, int]:
    raw = MemoryChunkStore()
    store, index = PackedChunks(raw), None
    wm_in = out = NO_WATERMARK
    for part, new_in in epochs:
        segments = Segments(index, store, pa.concat_tables)
        r = on_epoch(segments, _table(part, ["k", "x"]), wm_in, new_in, out, 0, spec)
        store.flush()
        index, wm_in, out = segments.index(), new_in, r.output_watermark
    return raw, wm_in


def _reference(epochs, on_event):
    """Per-event reference: on-time events in (t, arrival) order, then due timers in time order."""
    state, timers, wm_in = {}, {}, NO_WATERMARK
    for part, new_in in epochs:
        for k, t in sorted(zip(part["k"], part["t"], strict=True), key=lambda r: r[1]):
            if t >= wm_in:
                on_event(state, timers, k, t)
        for key in [key for key, when in timers.items() if when <= new_in]:
            del timers[key]
            state.pop(key, None)
        wm_in = new_in
    return state, timers


@pytest.mark.parametrize("seed", range(8))
def test_dedupe_state_and_timers_equal_a_per_event_reference(seed):
    fn = Dedupe(within_ms=25)
    epochs = _epochs(seed, delay=10)
    raw, wm = _run_process(_process_spec(fn, fn.schema(pa.schema([("k", pa.string()), ("x", pa.int64())]))),
                           epochs)

    def seen(state, timers, k, t):
        state[k] = t if k not in state else max(state[k], t)
        timers[k] = state[k] + 25

    # events of one key and epoch arrive sorted by (t, arrival); the reference sorts by t (stable)
    state, timers = _reference(epochs, seen)
    got = I.process_rows([_decoded(raw, wm, wm)], I.ProcessLayout("k", declared_states(fn.state))).to_pylist()
    assert [(r["k"], r["last_seen"]) for r in got] == sorted(state.items())
    assert [(r["k"], r["timers"]) for r in got] == [
        (k, [{"domain": "event_time", "tag": "expire", "time": w, "output_time": w}])
        for k, w in sorted(timers.items())]


@pytest.mark.parametrize("seed", range(6))
def test_burst_alert_list_state_equals_a_per_event_reference(seed):
    fn = BurstAlert(count=3, within_ms=40)
    epochs = _epochs(seed, delay=10)
    raw, wm = _run_process(_process_spec(fn, fn.schema("k", pa.string())), epochs)

    def remember(state, timers, k, t):
        state[k] = [*state.get(k, []), t][-2:]
        timers[k] = max(state[k]) + 40

    state, timers = _reference(epochs, remember)
    got = I.process_rows([_decoded(raw, wm, wm)], I.ProcessLayout("k", declared_states(fn.state))).to_pylist()
    assert [(r["k"], r["recent"]) for r in got] == sorted(state.items())
    want = [(k, [w]) for k, w in sorted(timers.items())]
    assert [(r["k"], [x["time"] for x in r["timers"]]) for r in got] == want


def test_value_list_and_map_states_decode_per_key_with_nulls_where_absent():
    layout = I.ProcessLayout("k", (("counts", map_state(pa.string(), pa.int64())),
                                   ("last", StateSpec("value", pa.int64())),
                                   ("seen", StateSpec("list", pa.string()))))
    store = MemoryChunkStore()
    store.put(0, 0, pa.table({"k": ["b", "a", "b"], "domain": ["event_time", "event_time", "processing_time"],
                              "tag": ["z", "", "p"], "time": [30, 7, 5], "output_time": [30, 7, 1]}))
    store.put(1, 0, pa.table({"k": ["a", "a", "c"], "map_key": ["y", "x", "x"], "value": [2, 1, 9]}))
    store.put(2, 0, pa.table({"k": ["a"], "value": pa.array([5], pa.int64())}))
    store.put(3, 0, pa.table({"k": ["c", "c", "a"], "__pos": [4, 2, 3], "value": ["u", "v", "w"]}))
    store.put(3, 1, pa.table({"k": ["c"], "__pos": [9], "value": ["q"]}))
    got = I.process_rows([_decoded(store, 0, 0, kg=1)], layout).to_pylist()
    assert got == [
        {"key_group": 1, "k": "a", "counts": [("x", 1), ("y", 2)], "last": 5, "seen": ["w"],
         "timers": [{"domain": "event_time", "tag": "", "time": 7, "output_time": 7}]},
        {"key_group": 1, "k": "b", "counts": None, "last": None, "seen": None,
         "timers": [{"domain": "processing_time", "tag": "p", "time": 5, "output_time": 1},
                    {"domain": "event_time", "tag": "z", "time": 30, "output_time": 30}]},
        {"key_group": 1, "k": "c", "counts": [("x", 9)], "last": None, "seen": ["v", "u", "q"], "timers": []},
    ]


def test_key_groups_table_and_key_filter():
    store = MemoryChunkStore()
    store.put(0, 0, pa.table({"k": pa.array([1, 2, 2], pa.int64()), "v": [1.0, 2.0, 3.0]}))
    a = _decoded(store, 100, 90, kg=2)
    b = I.Decoded(0, GroupState(NO_WATERMARK, NO_WATERMARK, {}, {}, {}))
    rows = I.group_rows([a, b]).to_pylist()
    names = ("key_group", "input_watermark", "output_watermark", "chunks", "rows")
    got = [tuple(r[n] for n in names) for r in rows]
    assert got == [(0, NO_WATERMARK, NO_WATERMARK, 0, 0), (2, 100, 90, 1, 3)]
    assert rows[1]["channels"] == [("src", 100)] and rows[1]["bytes"] > 0
    table = store.chunks[(0, 0)]
    assert I.filter_key(table, "k", "2").column("v").to_pylist() == [2.0, 3.0]
    assert I.filter_key(table, "k", 2).num_rows == 2
    with pytest.raises(ValueError, match="not a value of the key column 'k'"):
        I.filter_key(table, "k", "two")
    assert I.merge_watermarks({0: b.state, 2: a.state}) == (NO_WATERMARK, NO_WATERMARK)
    assert I.merge_watermarks({}) == (None, None)
