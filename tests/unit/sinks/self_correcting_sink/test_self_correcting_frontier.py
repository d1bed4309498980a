"""The self-correcting sink's frontier (SPEC §8, issue 26 item 13): independent of the epochs' cuts.

A model of the file source (one partition; files arrive over time under any name;
each epoch admits up to a budget of records in the source's reading order, the open
file first, then new files by name) produces the end offsets each epoch records, as
:mod:`wire.sources.file_source.reader` writes them. Two replicas read the same input with
arbitrary budgets and arrival timings; the expectations are a plain fold of the
records each replica consumed (a dict per key), never captured output.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.sinks.self_correcting_sink.frontier import decide, epoch_offsets, frontier_of_offsets
from wire.sinks.self_correcting_sink.writer import (
    DesiredCollection,
    Frontier,
    MemoryTable,
    SelfCorrectingWriter,
)
from wire.sources.file_source.file_set import FileSet, reading_order

DELAY = 10

# --- hand-made frontiers ------------------------------------------------------------------


def _files(done, open_=None, record=0, watermark=0):
    read = {n: [1, 1] for n in [*done, *([open_] if open_ else [])]}
    pos = {"file": f"/in/{open_ or (done[-1] if done else '')}", "record": record,
           "files": {"read": read, "open": open_}, "segments": []}
    return frontier_of_offsets([{"watermark": watermark, "admitted": 0,
                                 "partitions": {"all": {"from": {}, "next": pos, "taken": 0}}}])


def test_file_frontiers_by_hand():
    a = _files(["a"], "b", 3)
    assert a <= _files(["a"], "b", 5) and a <= _files(["a", "b"]) and a == _files(["a"], "b", 3)
    assert not a <= _files(["a"], "b", 2)
    assert not _files(["b"]) <= _files(["a"]) and not _files(["a"]) <= _files(["b"])  # other orders
    assert _files(["b"]) <= _files(["a", "b"]) and _files(["a"]) <= _files(["a", "b"])
    assert not _files(["a"], watermark=5) <= _files(["a"], watermark=4)  # the watermark counts
    assert decide(_files(["a"]), _files(["a", "b"])) == "advance"
    assert decide(_files(["a", "b"]), _files(["a", "b"])) == "repair"
    assert decide(_files(["a", "b"]), _files(["a"])) == "behind"
    assert decide(_files(["b"]), _files(["a"])) == "behind"  # not comparable: never take input back
    assert decide(Frontier(), _files([])) == "advance"  # a table with no recorded frontier


def test_other_positions_and_round_trip():
    kafka = [{"watermark": 7, "admitted": 9, "partitions": {"t:0": {"next": 5}, "t:1": {"next": 4}}},
             {"watermark": 3, "next": 12}, None]
    f = frontier_of_offsets(kafka)
    assert Frontier.from_json(f.to_json()) == f and Frontier.from_json(f.to_json()).sources == f.sources
    later = [{**kafka[0], "partitions": {"t:0": {"next": 6}, "t:1": {"next": 4}}}, kafka[1], None]
    assert f < frontier_of_offsets(later)
    redis = frontier_of_offsets([{"watermark": 1, "partitions": {"s": {"next": "1700-2"}}}])
    assert redis <= frontier_of_offsets([{"watermark": 1, "partitions": {"s": {"next": "1700-10"}}}])
    assert Frontier.from_json(None) == Frontier() and Frontier() <= f
    assert not f <= Frontier.scalar(3) and not Frontier.scalar(3) <= f  # kinds do not compare
    with pytest.raises(ValueError, match="not a self-correcting frontier"):
        Frontier.from_json("{")


def test_epoch_offsets_reads_sparks_log_with_the_epoch_base(tmp_path):
    (tmp_path / "wire.json").write_text('{"spark_dir": "spark-g1", "epoch_base": 10}')
    (tmp_path / "spark-g1" / "offsets").mkdir(parents=True)
    (tmp_path / "spark-g1" / "offsets" / "2").write_text('v1\n{"batchWatermarkMs":0}\n{"watermark":5}\n-\n')
    assert epoch_offsets(tmp_path, 12) == [{"watermark": 5}, None]
    assert epoch_offsets(tmp_path, 11) is None


# --- a model of the file source, and replicas over it ---------------------------------------

Record = tuple[str, int, int]  # (key, event time, value)


class FileReplica:
    """One replica: reads the files visible at each epoch, up to ``budget`` records per epoch."""

    def __init__(self, files: dict[str, list[Record]], budget: int) -> None:
        self.files = files
        self.budget = budget
        self.read: dict[str, tuple[int, int]] = {}
        self.open: str | None = None
        self.record = 0
        self.last = ""
        self.consumed: list[tuple[str, int]] = []
        self.max_et: int | None = None
        self.desired = DesiredCollection(("k",))
        self.sums: dict[str, tuple[int, int]] = {}

    def epoch(self, visible: list[str]) -> tuple[Frontier, set]:
        """Admit up to the budget; return the epoch's end frontier and its touched keys."""
        order = reading_order(FileSet(self.read, self.open), visible)
        left, rows = self.budget, []
        for name in order:
            if left <= 0:
                break
            start = self.record if name == self.open else 0
            end = min(len(self.files[name]), start + left)
            if end == start:
                continue
            self.read[name] = (1, 1)
            for i in range(start, end):
                self.consumed.append((name, i))
                k, et, v = self.files[name][i]
                n, total = self.sums.get(k, (0, 0))
                self.sums[k] = (n + 1, total + v)
                rows.append({"k": k, "n": n + 1, "total": total + v})
                self.max_et = et if self.max_et is None else max(self.max_et, et)
            left -= end - start
            self.open = name if end < len(self.files[name]) else None
            self.record, self.last = end, name
        import pyarrow as pa

        touched = self.desired.apply(pa.Table.from_pylist(
            rows, schema=pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])))
        position = {"file": f"/in/{self.last}", "record": self.record,
                    "files": {"read": {n: list(s) for n, s in self.read.items()}, "open": self.open},
                    "segments": []}
        watermark = -(2**63) if self.max_et is None else self.max_et - DELAY
        offset = {"admitted": len(self.consumed), "watermark": watermark,
                  "partitions": {"all": {"from": {}, "next": position, "taken": 0}}}
        return frontier_of_offsets([offset]), touched

    def rows(self) -> dict[str, tuple[int, int]]:
        return {r["k"]: (r["n"], r["total"]) for r in self.desired.rows.values()}


_records = st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 50), st.integers(0, 9)),
                    min_size=1, max_size=6)
_input = st.dictionaries(st.text("fghxyz", min_size=1, max_size=3), _records, min_size=1, max_size=5)


def _run(files, arrival, budget, visible_at):
    """A replica's epochs: (frontier, desired rows, consumed set) after each, and its touched keys."""
    r = FileReplica(files, budget)
    out = []
    step = 0
    while len(r.consumed) < sum(map(len, files.values())):
        visible = arrival[: visible_at(step)]
        before = len(r.consumed)
        frontier, touched = r.epoch(visible)
        step += 1
        if len(r.consumed) == before and len(visible) == len(arrival):
            raise AssertionError("no progress")
        out.append((frontier, r.rows(), frozenset(r.consumed), touched, r))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=_input, order=st.randoms(use_true_random=False), budgets=st.tuples(st.integers(1, 9),
       st.integers(1, 9)), pace=st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_same_frontier_same_collection_for_every_split(files, order, budgets, pace):
    """Two replicas with any budgets (epoch sizes) and file arrival timings: wherever their
    frontiers meet they hold the same collection, and ``<=`` means they consumed a subset."""
    arrival = sorted(files)
    order.shuffle(arrival)  # files arrive in any order of names
    runs = [_run(files, arrival, budgets[i], lambda s, i=i: 1 + s * pace[i] if pace[i] else len(arrival))
            for i in range(2)]
    for (fa, ra, ca, *_), (fb, rb, cb, *_) in itertools.product(*runs):
        if fa == fb:
            assert ra == rb and ca == cb
        if fa <= fb:
            assert ca <= cb
        assert (ca == cb) == (fa == fb)
    assert runs[0][-1][0] == runs[1][-1][0]  # both end at the same frontier


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=_input, order=st.randoms(use_true_random=False),
       budgets=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       schedule=st.lists(st.sampled_from(["A", "B", "edit"]), max_size=40),
       edits=st.lists(st.lists(st.tuples(st.sampled_from("abcdex"), st.integers(0, 99)), max_size=3),
                      min_size=1, max_size=4),
       killed=st.sampled_from(["A", "B", None]))
def test_replicas_with_any_cuts_agree_repair_and_take_over(files, order, budgets, schedule, edits, killed):
    """Both replicas append through the frontier rule in any interleaving, with hand edits;
    one may stop (killed) at any point. After every append the table equals the writer's
    collection and its frontier never moves back; once the survivor has read everything,
    its next epoch leaves the table equal to the fold of the whole input."""
    arrival = sorted(files)
    order.shuffle(arrival)
    runs = {name: _run(files, arrival, budgets[i], lambda s: len(arrival)) for i, name in enumerate("AB")}
    table = MemoryTable(("k",))
    writers = {name: SelfCorrectingWriter(("k",)) for name in "AB"}
    nxt = {"A": 0, "B": 0}
    edit_iter = itertools.cycle(edits)
    stopped: set[str] = set()

    def step(name):
        i = nxt[name]
        if i >= len(runs[name]) or name in stopped:
            return
        nxt[name] += 1
        frontier, rows, _, touched, _ = runs[name][i]
        desired = DesiredCollection(("k",))
        desired.load(_arrow(rows))
        before = table.frontier
        out = writers[name].write(table, desired, touched, frontier)
        assert before <= table.frontier, "the table's frontier moved back"
        if out.status == "written":
            assert _table(table) == rows and table.frontier == frontier
        if out.status == "behind":
            assert not table.frontier <= frontier

    for n, action in enumerate(schedule):
        if action == "edit":
            table.edit([{"k": k, "n": v, "total": v} for k, v in next(edit_iter)] + table.rows[:2])
        else:
            step(action)
        if killed is not None and n == len(schedule) // 2:
            stopped.add(killed)
    survivor = "B" if killed == "A" else "A"
    while nxt[survivor] < len(runs[survivor]):
        step(survivor)
    table.edit([{"k": k, "n": v, "total": v} for k, v in next(edit_iter)] + table.rows[1:])
    # the survivor's next epoch (no new input: the same frontier) repairs the hand edit
    frontier, rows, *_ = runs[survivor][-1]
    desired = DesiredCollection(("k",))
    desired.load(_arrow(rows))
    writers[survivor].write(table, desired, set(), frontier)
    want: dict[str, tuple[int, int]] = {}
    for recs in files.values():
        for k, _, v in recs:
            n, total = want.get(k, (0, 0))
            want[k] = (n + 1, total + v)
    keys = [r["k"] for r in table.rows]
    assert len(keys) == len(set(keys)), "duplicate keys"
    assert _table(table) == want
    assert not table.staged


def _arrow(rows):
    import pyarrow as pa

    return pa.Table.from_pylist([{"k": k, "n": n, "total": t} for k, (n, t) in rows.items()],
                                schema=pa.schema([("k", pa.string()), ("n", pa.int64()),
                                                  ("total", pa.int64())]))


def _table(table: MemoryTable) -> dict[str, tuple[int, int]]:
    return {r["k"]: (r["n"], r["total"]) for r in table.rows}
