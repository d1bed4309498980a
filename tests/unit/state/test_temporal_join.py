"""The temporal join's epoch kernel (``state.temporal_join.on_epoch``), the one the engine runs.

Oracle: DuckDB's ``ASOF LEFT JOIN`` over the whole input at once (each event with the
version of its key with the largest version time ``<= t``; a delete marker met means
no row). Properties, for any input, split into epochs independently per input (so
either input may run ahead of the other), in any arrival order within an input, with
per-input watermarks under which nothing is late:

* the concatenated output equals the oracle (``how="inner"`` and ``how="left"``);
* no output row is behind the output watermark forwarded before its epoch (Beam hold);
* after every epoch, the stored versions are exactly the ones a not-yet-late event can
  still meet (the purge bound), and the end of input empties the state.

Hand-derived transcripts cover late events, late table updates, deletes, emission
waiting for the table watermark, and ties in version time.
"""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import ConfigError
from wire.state import temporal_join as TJ
from wire.state import temporal_join_spec as TJS
from wire.state.segments import MemoryChunkStore

NO_WM = -(2**63)
MAX_WM = 2**63 - 1
STREAM = pa.schema([("k", pa.string()), ("id", pa.int64())])
TABLE = pa.schema([("k", pa.string()), ("val", pa.int64()), ("del", pa.bool_())])


def _spec(how: str = "inner") -> TJS.TemporalJoinSpec:
    return TJS.TemporalJoinSpec("k", "k", ("id",), ("val",), delete="del", how=how)  # type: ignore[arg-type]


def _events(rows: list[tuple[str | None, int, int]]) -> pa.Table:
    """Stream events ``(key, t, id)``; arrival = row order."""
    return pa.table({"k": pa.array([r[0] for r in rows], pa.string()),
                     "id": pa.array([r[2] for r in rows], pa.int64()),
                     "__et": pa.array([r[1] for r in rows], pa.int64())})


def _versions(rows: list[tuple[str, int, int, bool]], seq0: int = 0) -> pa.Table:
    """Table rows ``(key, version time, val, deleted)`` with ``__seq`` = position + ``seq0``."""
    return pa.table({"k": pa.array([r[0] for r in rows], pa.string()),
                     "val": pa.array([r[2] for r in rows], pa.int64()),
                     "del": pa.array([r[3] for r in rows], pa.bool_()),
                     "__et": pa.array([r[1] for r in rows], pa.int64()),
                     "__seq": pa.array(range(seq0, seq0 + len(rows)), pa.int64())})


class Run:
    """Drives :func:`on_epoch` epoch after epoch like the processor, keeping state and watermarks."""

    def __init__(self, how: str = "inner", bucket_ms: int = 7) -> None:
        self.spec = _spec(how)
        self.bucket_ms = bucket_ms  # small: the test times (0..40) span several pending buckets
        self.store = MemoryChunkStore()
        self.index: pa.Table | None = None
        self.versions: pa.Table | None = None
        self.holds: pa.Table | None = None
        self.swm = self.twm = self.out = NO_WM
        self.joined: list[dict] = []
        self.late: list[dict] = []

    def epoch(self, events: pa.Table | None = None, table: pa.Table | None = None, *,
              swm: int | None = None, twm: int | None = None) -> TJ.TemporalEpoch:
        new_s = self.swm if swm is None else swm
        new_t = self.twm if twm is None else twm
        r = TJ.on_epoch(self.store, self.index, self.versions, self.holds,
                        [events] if events is not None else [],
                        [table] if table is not None else [], stream_wm=self.swm, new_stream_wm=new_s,
                        table_wm=self.twm, new_table_wm=new_t, wm_out=self.out, spec=self.spec,
                        stream_payload=STREAM, table_payload=TABLE, bucket_ms=self.bucket_ms, fanout=2)
        times = r.event_time.to_pylist()
        assert all(t >= self.out for t in times), "an output row behind the output watermark"
        assert r.wm_out >= self.out
        self.versions, self.holds, self.index, self.out = r.versions, r.holds, r.index, r.wm_out
        self.swm, self.twm = new_s, new_t
        self.joined += r.joined.to_pylist()
        self.late += r.late.to_pylist()
        return r

    @property
    def pending(self) -> pa.Table:
        """The whole pending buffer (read from every bucket)."""
        return TJ.pending_events(self.store, self.index, self.spec, STREAM, self.twm)


def _oracle(events: list[tuple[str | None, int, int]], table: list[tuple[str, int, int, bool]],
            how: str) -> list[tuple[int, int | None, int | None]]:
    """``(id, val, version_time)`` per output row by DuckDB's ASOF LEFT JOIN."""
    ev = pd.DataFrame({"k": pd.Series([e[0] for e in events], dtype=object),
                       "t": pd.Series([e[1] for e in events], dtype="int64"),
                       "id": pd.Series([e[2] for e in events], dtype="int64")})
    vs = pd.DataFrame({"k": pd.Series([v[0] for v in table], dtype=object),
                       "vt": pd.Series([v[1] for v in table], dtype="int64"),
                       "val": pd.Series([v[2] for v in table], dtype="int64"),
                       "del": pd.Series([v[3] for v in table], dtype=bool)})
    con = duckdb.connect()
    con.register("ev", ev)
    con.register("vs", vs)
    rows = con.execute(
        "SELECT ev.id, vs.val, vs.vt, vs.del FROM ev ASOF LEFT JOIN vs ON ev.k = vs.k AND ev.t >= vs.vt"
    ).fetchall()
    out = []
    for i, val, vt, deleted in rows:
        matched = vt is not None and not deleted
        if matched:
            out.append((i, val, vt))
        elif how == "left":
            out.append((i, None, None))
    return sorted(out)


def _got(run: Run) -> list[tuple[int, int | None, int | None]]:
    return sorted((r["id"], r["val"], r["version_time"]) for r in run.joined)


# ---- the ASOF oracle property -------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c"])


@st.composite
def scenario(draw: st.DrawFn) -> dict:
    versions = draw(st.dictionaries(st.tuples(KEYS, st.integers(0, 40)),
                                    st.tuples(st.integers(0, 99), st.booleans()), max_size=14))
    table = [(k, t, v, d) for (k, t), (v, d) in versions.items()]
    n = draw(st.integers(0, 16))
    events = [(draw(st.one_of(KEYS, st.just("z"), st.none())), draw(st.integers(0, 45)), i) for i in range(n)]
    table = draw(st.permutations(table))
    events = draw(st.permutations(events))
    epochs = draw(st.integers(1, 5))
    cut_t = sorted(draw(st.lists(st.integers(0, len(table)), min_size=epochs - 1, max_size=epochs - 1)))
    cut_s = sorted(draw(st.lists(st.integers(0, len(events)), min_size=epochs - 1, max_size=epochs - 1)))
    return {"table": table, "events": events, "cut_t": cut_t, "cut_s": cut_s, "epochs": epochs,
            "delay_t": draw(st.integers(0, 30)), "delay_s": draw(st.integers(0, 30)),
            "how": draw(st.sampled_from(["inner", "left"]))}


def _parts(rows: list, cuts: list[int]) -> list[list]:
    bounds = [0, *cuts, len(rows)]
    return [rows[a:b] for a, b in itertools.pairwise(bounds)]


def _watermarks(parts: list[list], time_of, delay: int) -> list[int]:
    """After each epoch: max seen time - ``delay``, kept at or below every later row's time (never late)."""
    out, seen = [], NO_WM
    for i, part in enumerate(parts):
        seen = max([seen, *(time_of(r) for r in part)])
        future = [time_of(r) for p in parts[i + 1:] for r in p]
        wm = NO_WM if seen == NO_WM else seen - delay
        out.append(min([wm, *future]))
    return out


def _expected_versions(seen: list[tuple[str, int, int, bool]], pending: pa.Table,
                       stream_wm: int, table_wm: int) -> set[tuple[str, int]]:
    """The (key, version time) a not-yet-late event can meet: the purge bound, derived from scratch."""
    latest: dict[tuple[str, int], bool] = {}
    for k, t, _, d in seen:  # arrival order: the last one of a (key, time) wins
        latest[(k, t)] = d
    pend: dict[str, int] = {}
    for k, t in zip(pending.column("k").to_pylist(), pending.column("__et").to_pylist(), strict=True):
        if k is not None:
            pend[k] = min(pend.get(k, t), t)
    keep = set()
    for key in {k for k, _ in latest}:
        if stream_wm >= MAX_WM:
            if key not in pend:
                continue
            horizon = pend[key]
        else:
            horizon = min(stream_wm, pend.get(key, stream_wm))
        times = sorted(t for k, t in latest if k == key)
        older = [t for t in times if t <= horizon]
        # a delete marker at or after the table watermark still hides older versions to come
        if older and (not latest[(key, older[-1])] or older[-1] >= table_wm):
            keep.add((key, older[-1]))
        keep |= {(key, t) for t in times if t > horizon}
    return keep


@settings(max_examples=50, deadline=None)
@given(scenario())
def test_output_equals_duckdb_asof_join_for_any_split_and_arrival_order(sc: dict) -> None:
    run = Run(sc["how"])
    tparts, sparts = _parts(sc["table"], sc["cut_t"]), _parts(sc["events"], sc["cut_s"])
    twms = _watermarks(tparts, lambda r: r[1], sc["delay_t"])
    swms = _watermarks(sparts, lambda r: r[1], sc["delay_s"])
    seen: list = []
    seq = 0
    for i in range(sc["epochs"]):
        seen += tparts[i]
        run.epoch(_events(sparts[i]), _versions(tparts[i], seq), swm=swms[i], twm=twms[i])
        seq += len(tparts[i])
        held = {(k, t) for k, t in zip(run.versions.column("k").to_pylist(),
                                       run.versions.column("__et").to_pylist(), strict=True)}
        assert held == _expected_versions(seen, run.pending, run.swm, run.twm)
    run.epoch(swm=MAX_WM, twm=MAX_WM)  # end of input
    assert run.late == []
    assert _got(run) == _oracle(sc["events"], sc["table"], sc["how"])
    assert run.pending.num_rows == 0 and run.versions.num_rows == 0
    assert run.out == MAX_WM


# ---- hand-derived transcripts ---------------------------------------------------------------


def test_delete_marker_removes_the_key_from_its_version_time_on() -> None:
    table = _versions([("a", 0, 1, False), ("a", 10, 0, True), ("a", 20, 3, False)])
    events = _events([("a", 5, 1), ("a", 10, 2), ("a", 15, 3), ("a", 20, 4), ("a", -1, 5)])
    inner, left = Run("inner"), Run("left")
    for run in (inner, left):
        run.epoch(events, table, swm=100, twm=100)
    # t=5 meets the version of 0; t=10 and 15 the delete of 10; t=20 the version of 20; t=-1 none
    assert _got(inner) == [(1, 1, 0), (4, 3, 20)]
    assert _got(left) == [(1, 1, 0), (2, None, None), (3, None, None), (4, 3, 20), (5, None, None)]


def test_late_stream_event_goes_to_the_late_port_with_reason_and_watermark() -> None:
    run = Run()
    run.epoch(None, _versions([("a", 0, 7, False)]), swm=100, twm=100)
    r = run.epoch(_events([("a", 99, 1), ("a", 100, 2)]), None, swm=120, twm=120)
    assert [(x["k"], x["id"], x["event_time"], x["watermark"], x["side"], x["reason"])
            for x in r.late.to_pylist()] == [("a", 1, 99, 100, "stream", TJS.STREAM_LATE_REASON)]
    assert _got(run) == [(2, 7, 0)]  # t=100 is on time (not < 100) and meets version 0


def test_late_table_update_goes_to_the_late_port_and_changes_nothing() -> None:
    run = Run()
    run.epoch(None, _versions([("a", 0, 7, False)]), swm=50, twm=50)
    r = run.epoch(_events([("a", 60, 1)]), _versions([("a", 40, 8, False), ("a", 49, 9, True)], 1),
                  swm=100, twm=100)
    assert [(x["k"], x["val"], x["del"], x["event_time"], x["watermark"], x["side"], x["reason"], x["id"])
            for x in r.late.to_pylist()] == [
        ("a", 8, False, 40, 50, "table", TJS.TABLE_LATE_REASON, None),
        ("a", 9, True, 49, 50, "table", TJS.TABLE_LATE_REASON, None)]
    assert _got(run) == [(1, 7, 0)]  # the late update of 40 and late delete of 49 are not versions


def test_event_waits_until_the_table_watermark_passes_its_time() -> None:
    run = Run()
    r = run.epoch(_events([("a", 10, 1)]), _versions([("a", 0, 7, False)]), swm=30, twm=10)
    # table watermark 10 has not passed t=10: a version of time 10 may still come
    assert r.joined.num_rows == 0 and run.pending.num_rows == 1
    assert r.wm_out == 10  # min(stream 30, table 10), held at the pending event's 10
    r = run.epoch(None, _versions([("a", 10, 8, False)], 1), swm=30, twm=11)
    assert _got(run) == [(1, 8, 10)] and r.wm_out == 11
    assert r.versions.column("__et").to_pylist() == [10]  # version 0: no event >= 30 meets it


def test_output_watermark_is_held_by_a_pending_event() -> None:
    run = Run()
    run.epoch(_events([("a", 5, 1)]), None, swm=40, twm=NO_WM)
    assert run.out == NO_WM
    run.epoch(None, None, swm=40, twm=3)  # the stream is at 40, the table at 3; event 5 pending
    assert run.out == 3
    run.epoch(None, None, swm=40, twm=50)
    assert run.out == 40 and _got(run) == []  # no version for "a": inner drops the event


def test_the_last_arrived_of_two_versions_with_the_same_time_wins() -> None:
    run = Run()
    run.epoch(None, _versions([("a", 5, 1, False), ("a", 5, 2, False)]), swm=0, twm=0)
    run.epoch(_events([("a", 7, 1)]), _versions([("a", 5, 3, False)], seq0=2), swm=0, twm=10)
    run.epoch(None, None, swm=20, twm=20)
    assert _got(run) == [(1, 3, 5)]


def test_null_keys_never_match_and_keys_types_must_agree() -> None:
    run = Run("left")
    run.epoch(_events([(None, 5, 1)]), _versions([("a", 0, 1, False)]), swm=10, twm=10)
    assert _got(run) == [(1, None, None)]
    with pytest.raises(ConfigError, match="invalid on="):
        TJS.output_schema(_spec(), pa.schema([("k", pa.int64()), ("id", pa.int64())]), TABLE)


def test_config_errors_name_the_parameter_and_accepted_values() -> None:
    with pytest.raises(ConfigError, match=r"how.*'inner' or 'left'"):
        TJS.TemporalJoinSpec("k", "k", ("id",), ("val",), how="outer")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rename them with select"):
        TJS.TemporalJoinSpec("k", "k", ("val",), ("val",))
    with pytest.raises(ConfigError, match="invalid delete='flag'; accepted: a bool column"):
        TJS.output_schema(TJS.TemporalJoinSpec("k", "k", ("id",), ("val",), delete="flag"),
                         STREAM, pa.schema([("k", pa.string()), ("val", pa.int64()), ("flag", pa.int64())]))


def test_no_per_event_python_loop_large_epoch() -> None:
    """100k events and 10k versions in one epoch: the kernel stays vectorized (no timing asserted)."""
    rng = np.random.default_rng(1)
    n, m = 100_000, 10_000
    events = pa.table({"k": pa.array(rng.integers(0, 500, n).astype(str)), "id": pa.array(np.arange(n)),
                       "__et": pa.array(rng.integers(0, 1000, n))})
    table = pa.table({"k": pa.array(rng.integers(0, 500, m).astype(str)),
                      "val": pa.array(rng.integers(0, 9, m)), "del": pa.array(np.zeros(m, bool)),
                      "__et": pa.array(rng.integers(0, 1000, m)), "__seq": pa.array(np.arange(m))})
    run = Run("left")
    run.epoch(events, table, swm=0, twm=MAX_WM)
    assert len(run.joined) == n


def test_stream_and_table_keys_may_have_different_names() -> None:
    spec = TJS.TemporalJoinSpec("cur", "currency", ("amount",), ("rate",))
    sp = pa.schema([("cur", pa.string()), ("amount", pa.int64())])
    tp = pa.schema([("currency", pa.string()), ("rate", pa.float64())])
    r = TJ.on_epoch(MemoryChunkStore(), None, None, None,
                    [pa.table({"cur": ["EUR"], "amount": [3], "__et": [7]})],
                    [pa.table({"currency": ["EUR", "EUR"], "rate": [1.0, 2.0], "__et": [5, 9]})],
                    stream_wm=0, new_stream_wm=8, table_wm=0, new_table_wm=8, wm_out=0, spec=spec,
                    stream_payload=sp, table_payload=tp)
    assert r.joined.to_pylist() == [{"cur": "EUR", "amount": 3, "rate": 1.0, "version_time": 5}]
    assert r.versions.column_names[0] == "cur"  # state tables carry the operator's key column
    assert r.versions.column("__et").to_pylist() == [5, 9]


def test_a_rescale_splits_the_state_by_key_and_the_output_still_equals_the_oracle() -> None:
    """2 key groups for two epochs, re-keyed (wire.state.rekey) into 3, then to the end."""
    from wire.state.rekey import GroupState, rekey

    table = [("a", 0, 1, False), ("b", 2, 2, False), ("c", 4, 3, False), ("a", 10, 4, False),
             ("b", 12, 0, True), ("c", 14, 5, False), ("a", 20, 6, False), ("b", 22, 7, False)]
    events = [("a", 5, 0), ("b", 6, 1), ("c", 15, 2), ("a", 11, 3), ("b", 13, 4), ("c", 8, 5),
              ("a", 25, 6), ("b", 30, 7), ("c", 21, 8)]
    epochs = [(events[:3], table[:3], 4, 3), (events[3:6], table[3:6], 9, 12),
              (events[6:], table[6:], 21, 20)]

    def group_of(n: int):
        return lambda keys: np.array([ord(k) % n for k in keys.to_pylist()], dtype=np.int64)

    spec = _spec("left")
    groups = {g: GroupState(channels={"__stream": NO_WM, "__table": NO_WM}) for g in range(2)}
    joined: list[dict] = []

    def epoch(ev, tb, swm, twm, n):
        assign = group_of(n)
        evt, tbt = _events(ev), _versions(tb)
        for g, state in groups.items():
            mine_e = evt.filter(pa.array(assign(evt.column("k")) == g)) if evt.num_rows else evt
            mine_t = tbt.filter(pa.array(assign(tbt.column("k")) == g)) if tbt.num_rows else tbt
            store = MemoryChunkStore(dict(state.chunks))
            r = TJ.on_epoch(store, state.tables.get("__segments"), state.tables.get("versions"),
                            state.tables.get("holds"), [mine_e], [mine_t],
                            stream_wm=state.channels["__stream"], new_stream_wm=swm,
                            table_wm=state.channels["__table"], new_table_wm=twm, wm_out=state.wm_out,
                            spec=spec, stream_payload=STREAM, table_payload=TABLE, bucket_ms=7)
            joined.extend(r.joined.to_pylist())
            groups[g] = GroupState(min(swm, twm), r.wm_out, {"__stream": swm, "__table": twm},
                                   {"versions": r.versions, "holds": r.holds, "__segments": r.index},
                                   store.chunks)

    for ev, tb, swm, twm in epochs[:2]:
        epoch(ev, tb, swm, twm, 2)
    # events wait across the rescale
    assert sum(t.num_rows for s in groups.values() for t in s.chunks.values()) > 0
    groups = rekey(groups, key="k", new_groups=3, assign=group_of(3))
    epoch(*epochs[2], 3)
    epoch([], [], MAX_WM, MAX_WM, 3)
    got = sorted((r["id"], r["val"], r["version_time"]) for r in joined)
    assert got == _oracle(events, table, "left")


# ---- the chunked state: what an epoch reads ------------------------------------------------


class _RecordingStore(MemoryChunkStore):
    """A chunk store that records the bucket of every ``get``."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[int] = []

    def get(self, bucket: int, chunk: int) -> pa.Table:
        self.gets.append(bucket)
        return super().get(bucket, chunk)


def test_an_epoch_reads_only_the_pending_buckets_the_table_watermark_released() -> None:
    run = Run("left", bucket_ms=10)
    store = run.store = _RecordingStore()
    run.epoch(_events([("a", 5, 1), ("b", 15, 2), ("a", 25, 3), ("b", 35, 4)]),
              _versions([("a", 0, 7, False), ("b", 0, 8, False)]), swm=40, twm=0)
    assert sorted(store.chunks) == [(0, 0), (1, 0), (2, 0), (3, 0)]  # one bucket per 10 ms
    store.gets.clear()
    run.epoch(_events([("a", 45, 5)]), None, swm=50)  # the table lags: the epoch only appends
    assert store.gets == [] and _got(run) == []
    run.epoch(None, None, twm=20)  # buckets [0, 10) and [10, 20) released, nothing else read
    assert sorted(store.gets) == [0, 1]
    assert _got(run) == [(1, 7, 0), (2, 8, 0)]
    store.gets.clear()
    run.epoch(None, None, twm=30)
    assert store.gets == [2] and _got(run) == [(1, 7, 0), (2, 8, 0), (3, 7, 0)]
    assert run.out == 30  # held by event 35, the earliest still pending
    assert sorted(run.pending.column("id").to_pylist()) == [4, 5]


def test_the_bucket_the_table_watermark_cuts_keeps_its_waiting_events_and_their_hold() -> None:
    run = Run("inner", bucket_ms=10)
    run.epoch(_events([("a", 11, 1), ("a", 17, 2), ("b", 13, 3)]), _versions([("a", 0, 7, False)]),
              swm=30, twm=0)
    run.epoch(None, _versions([("a", 14, 9, False), ("b", 14, 6, False)], 1), twm=14)
    assert _got(run) == [(1, 7, 0)]  # 11 meets version 0; b's 13 has none (inner drops it)
    assert run.out == 14 and run.pending.column("id").to_pylist() == [2]
    assert run.holds.to_pylist() == [{"k": "a", "bucket": 1, "__et": 17, "rows": 1}]
    run.epoch(None, None, twm=18)
    assert _got(run) == [(1, 7, 0), (2, 9, 14)]
    assert run.pending.num_rows == 0 and run.holds.num_rows == 0


def test_a_pending_table_of_the_first_layout_is_moved_into_buckets() -> None:
    spec = _spec("left")
    pending = pa.table({"k": ["a", "a"], "id": [1, 2], "__et": [5, 25], "__seq": [0, 1]})
    store = MemoryChunkStore()
    r = TJ.on_epoch(store, None, _versions([("a", 0, 7, False)]).select(["k", "val", "__et", "__seq"])
                    .append_column("__deleted", pa.array([False])), None, [], [],
                    stream_wm=30, new_stream_wm=30, table_wm=0, new_table_wm=10, wm_out=0, spec=spec,
                    stream_payload=STREAM, table_payload=TABLE, legacy_pending=pending, bucket_ms=10)
    assert [(x["id"], x["val"]) for x in r.joined.to_pylist()] == [(1, 7)]
    assert TJ.pending_events(store, r.index, spec, STREAM, 10).column("id").to_pylist() == [2]
    assert r.holds.to_pylist() == [{"k": "a", "bucket": 2, "__et": 25, "rows": 1}] and r.wm_out == 10
