"""Pure logic of the self-correcting sink (SPEC §8): desired collection, correction, CAS loop.

Expectations are derived by hand or from a reference fold of the epochs (a plain
dict per key), never from captured output.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.errors import WireError
from wire.sinks.self_correcting_sink.writer import (
    BatchDescription,
    DesiredCollection,
    DesiredStore,
    Frontier,
    MemoryTable,
    SelfCorrectingWriter,
    ShardedDesiredStore,
    correct_part,
    correction,
    mint,
    shard_of,
)

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("gone", pa.bool_())])


def _rows(*triples):
    return pa.table({"k": [t[0] for t in triples], "v": [t[1] for t in triples],
                     "gone": [t[2] if len(t) > 2 else False for t in triples]}, schema=SCHEMA)


def _desired() -> DesiredCollection:
    return DesiredCollection(("k",), retract_column="gone")


def test_mint_forward_or_repair_never_back():
    at = Frontier.scalar
    # the table's upper is a version: every append records the next one, with the writer's frontier
    assert mint(3, at(2), at(5)) == BatchDescription(3, 4, at(5))
    assert mint(3, at(5), at(5)) == BatchDescription(3, 4, at(5))  # equal frontier: repair
    assert mint(3, at(7), at(5)) is None  # the table reflects more input: behind
    assert mint(0, Frontier(), at(1)) == BatchDescription(0, 1, at(1))  # nothing recorded yet
    with pytest.raises(ValueError):
        BatchDescription(4, 4)


def test_update_replaces_and_retraction_deletes():
    d = _desired()
    assert d.apply(_rows(("a", 1), ("b", 2))) == {("a",), ("b",)}
    assert d.apply(_rows(("a", 5), ("b", None, True))) == {("a",), ("b",)}
    assert d.rows == {("a",): {"k": "a", "v": 5}}
    assert d.schema.names == ["k", "v"]


def test_covers_retracts_merged_sessions():
    d = DesiredCollection(("user", "window_start"), covers=("window_start", "window_end"))
    t = pa.table({"user": ["u", "u", "w"], "window_start": [0, 100, 0], "window_end": [50, 150, 50],
                  "n": [1, 1, 1]})
    d.apply(t)
    # a late event bridges u's two sessions: [0, 150) covers [0, 50) and [100, 150)
    merged = pa.table({"user": ["u"], "window_start": [0], "window_end": [150], "n": [3]})
    touched = d.apply(merged)
    assert touched == {("u", 0), ("u", 100)}
    assert sorted(d.rows) == [("u", 0), ("w", 0)]
    assert d.rows[("u", 0)]["n"] == 3


def test_correction_by_hand():
    desired = {("a",): {"k": "a", "v": 1}, ("b",): {"k": "b", "v": 2}, ("c",): {"k": "c", "v": 3}}
    persisted = [{"k": "a", "v": 1}, {"k": "b", "v": 9}, {"k": "d", "v": 4}, {"k": "c", "v": 3},
                 {"k": "c", "v": 3}]
    full = correction(desired, persisted, ("k",), ("k", "v"))
    # b altered, d extra, c duplicated; a equal
    assert full.differing == {("b",), ("c",), ("d",)}
    assert full.deletes == {("b",), ("c",), ("d",)}
    assert sorted(r["k"] for r in full.inserts) == ["b", "c"]
    assert full.size == 5
    only_a_b = correction(desired, persisted, ("k",), ("k", "v"), keys={("a",), ("b",)})
    assert only_a_b.differing == {("b",)} and only_a_b.keys == 2
    nan = correction({("a",): {"k": "a", "v": float("nan")}}, [{"k": "a", "v": float("nan")}],
                     ("k",), ("k", "v"))
    assert nan.empty


def test_desired_store_keeps_two_epochs(tmp_path):
    store = DesiredStore(tmp_path)
    d = _desired()
    for e in range(4):
        d.apply(_rows((f"k{e}", e)))
        store.save(e, d.to_arrow())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["desired-2.parquet", "desired-3.parquet"]
    e, t = store.load_before(3)
    assert e == 2 and t.num_rows == 3
    back = _desired()
    back.load(t)
    assert back.rows == {(f"k{i}",): {"k": f"k{i}", "v": i} for i in range(3)}
    assert store.load_before(2) is None


def test_writer_repairs_drift_and_skips_replay():
    table = MemoryTable(("k",))
    d = _desired()
    w = SelfCorrectingWriter(("k",))
    touched = d.apply(_rows(("a", 1), ("b", 2)))
    out = w.write(table, d, touched, 1)
    assert out.status == "written" and out.full and out.corrections == 2
    table.edit([{"k": "a", "v": 100}, {"k": "x", "v": 0}])  # b deleted, a altered, x inserted by hand
    touched = d.apply(_rows(("c", 3)))
    out = w.write(table, d, touched, 2)
    assert out.status == "written" and out.full and out.drift == 3
    assert sorted(map(tuple, (r.values() for r in table.rows))) == [("a", 1), ("b", 2), ("c", 3)]
    # a replay of epoch 1 (frontier 2) after a crash: the table is already there, nothing differs
    again = SelfCorrectingWriter(("k",))
    out = again.write(table, d, touched, 2)
    assert out.status == "unchanged" and out.corrections == 0 and table.upper == 2
    # a writer whose frontier is before the table's writes nothing
    assert SelfCorrectingWriter(("k",)).write(table, d, touched, 1).status == "behind"
    ro = SelfCorrectingWriter(("k",)).write(table, d, set(), 3, read_only=True)
    assert ro.status == "read_only" and ro.distance == 0 and table.upper == 2


def test_writer_gives_up_after_max_conflicts():
    class Moving(MemoryTable):
        def commit(self, desc, attempt, token):
            self.upper += 1
            return False

    d = _desired()
    touched = d.apply(_rows(("a", 1)))
    w = SelfCorrectingWriter(("k",), max_conflicts=3)
    with pytest.raises(WireError, match="3 compare-and-set conflicts"):
        w.write(Moving(("k",)), d, touched, 10_000)


# --- randomized interleaving of two writers ---------------------------------------------

_events = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 9), st.booleans()), max_size=5)


class _Interleaved:
    """A view of a MemoryTable through which one writer reads; after each read a scripted
    action may run: the other writer's next epoch, or a hand edit (drift)."""

    def __init__(self, table, actions):
        self.table = table
        self.actions = actions

    def read_meta(self):
        snap = self.table.read_meta()
        if self.actions:
            self.actions.pop(0)()
        return snap

    def __getattr__(self, name):  # read, stage, commit, discard
        return getattr(self.table, name)


class _Replica:
    """One replica's sink split into ``shards`` partitions of the key, each its own desired
    collection and part, as the executors run it (:func:`correct_part` per shard)."""

    def __init__(self, shards):
        self.shards = shards
        self.parts = [_desired() for _ in range(shards)]
        self.writer = SelfCorrectingWriter(("k",))
        self.next = 0

    def apply(self, rows):
        which = [shard_of(r, ("k",), self.shards) for r in rows.to_pylist()]
        return [self.parts[n].apply(rows.filter(pa.array([w == n for w in which], pa.bool_())))
                for n in range(self.shards)]

    def write(self, table, touched, upper):
        def parts(req):
            return [correct_part(table, self.parts[n], touched[n], req, shard=n, shards=self.shards)
                    for n in range(self.shards)]
        return self.writer.write_parts(table, parts, upper)

    def rows(self):
        return {r["k"]: r["v"] for d in self.parts for r in d.rows.values()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epochs=st.lists(_events, min_size=1, max_size=8),
       schedule=st.lists(st.sampled_from(["A", "B", "A>B", "B>A", "edit", "A>edit"]), max_size=30),
       edits=st.lists(st.lists(st.tuples(st.sampled_from("abcdefx"), st.integers(0, 99)), max_size=4),
                      min_size=1, max_size=5),
       shards=st.tuples(st.integers(1, 4), st.integers(1, 4)))
def test_two_writers_interleaved_end_equal_to_desired(epochs, schedule, edits, shards):
    """Two replicas (each split into 1-4 partitions of the key) and hand edits, in any
    interleaving: the table ends equal to the reference fold, without duplicate keys."""
    tables = [_rows(*[(k, v, gone) for k, v, gone in events]) if events else _rows() for events in epochs]
    # the reference: fold every epoch into a plain dict
    expected: dict[str, int] = {}
    for events in epochs:
        for k, v, gone in events:
            if gone:
                expected.pop(k, None)
            else:
                expected[k] = v
    table = MemoryTable(("k",))
    replicas = {"A": _Replica(shards[0]), "B": _Replica(shards[1])}
    conflicts = 0
    edit_iter = itertools.cycle(edits)

    def hand_edit():
        table.edit([{"k": k, "v": v} for k, v in next(edit_iter)] + table.rows[:2])

    def step(name, actions=()):
        nonlocal conflicts
        r = replicas[name]
        e = r.next
        if e >= len(tables):
            for a in actions:
                a()
            return
        r.next += 1
        out = r.write(_Interleaved(table, list(actions)), r.apply(tables[e]), e + 1)
        conflicts += out.conflicts

    for action in schedule:
        if action in ("A", "B"):
            step(action)
        elif action == "edit":
            hand_edit()
        elif action == "A>edit":
            step("A", [hand_edit])
        else:
            first, second = action.split(">")
            step(first, [lambda s=second: step(s)])
    for name in "AB":  # both replicas run to the end of the input
        while replicas[name].next < len(tables):
            step(name)
    # the epoch after the end of input (no rows): finds and repairs drift left by an edit
    final = replicas["A"]
    final.write(table, [set()] * final.shards, len(tables) + 1)
    keys = [r["k"] for r in table.rows]
    assert len(keys) == len(set(keys)), "duplicate keys"
    assert {r["k"]: r["v"] for r in table.rows} == expected
    assert replicas["B"].rows() == expected
    assert not table.staged, "parts left staged"


def test_shard_of_agrees_across_value_forms():
    from datetime import UTC, date, datetime, timedelta, timezone
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    utc = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    same_instant = [utc, utc.astimezone(ZoneInfo("Europe/Paris")),
                    utc.astimezone(timezone(timedelta(hours=-3)))]
    assert len({shard_of({"t": t}, ("t",), 97) for t in same_instant}) == 1
    assert shard_of({"k": Decimal(7)}, ("k",), 97) == shard_of({"k": 7}, ("k",), 97)
    assert shard_of({"d": date(2024, 1, 2)}, ("d",), 1) == 0
    spread = {shard_of({"k": f"key{i}"}, ("k",), 4) for i in range(100)}
    assert spread == {0, 1, 2, 3}


def test_sharded_store_reads_the_unsharded_layout(tmp_path):
    DesiredStore(tmp_path).save(3, pa.table({"k": [f"k{i}" for i in range(20)], "v": list(range(20))}))
    store = ShardedDesiredStore.open(tmp_path, 3)
    assert ShardedDesiredStore.open(tmp_path, 8).shards == 3  # recorded at the first open
    got = [store.load_before(n, 4, ("k",)) for n in range(3)]
    assert sorted(k for t in got for k in t.column("k").to_pylist()) == sorted(f"k{i}" for i in range(20))
    assert all(shard_of({"k": k}, ("k",), 3) == n
               for n, t in enumerate(got) for k in t.column("k").to_pylist())
    store.shard(1).save(4, got[1])
    assert store.load_before(1, 5, ("k",)).equals(got[1])


def test_interleaved_append_is_a_conflict_then_resolved():
    table = MemoryTable(("k",))
    a, b = _desired(), _desired()
    wa, wb = SelfCorrectingWriter(("k",)), SelfCorrectingWriter(("k",))
    rows = _rows(("a", 1), ("b", 2))
    tb = b.apply(rows)

    def b_writes():
        assert wb.write(table, b, tb, 1).status == "written"

    out = wa.write(_Interleaved(table, [b_writes]), a, a.apply(rows), 1)
    # A read upper 0, B appended (0, 1) meanwhile: A's append failed, A re-read, found the
    # table at its own frontier with its own rows: nothing to write
    assert out.conflicts == 1 and out.status == "unchanged"
    more = _rows(("a", 7))
    tb = b.apply(more)
    out = wa.write(_Interleaved(table, [lambda: wb.write(table, b, tb, 2)]), a, a.apply(more), 2)
    assert out.conflicts == 1 and out.status == "unchanged"
    assert sorted((r["k"], r["v"]) for r in table.rows) == [("a", 7), ("b", 2)]


def test_store_keeps_the_newest_file_before_a_save_across_skipped_epochs(tmp_path):
    """Epochs without rows save nothing; a replay of the next saved epoch must still find
    the collection before it, however many epochs were skipped."""
    store = DesiredStore(tmp_path)
    for e in (1, 3):
        store.save(e, pa.table({"k": ["a"], "v": [e]}))
    store.save(10, pa.table({"k": ["a"], "v": [10]}))  # epochs 4-9 changed nothing
    assert store.load_before(10)[0] == 3 and store.load_before(10)[1].column("v").to_pylist() == [3]
    assert store.load_before(11)[0] == 10
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["desired-10.parquet", "desired-3.parquet"]
