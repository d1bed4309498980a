"""Replicas whose epochs cut the input differently, on real PostgreSQL and Delta tables (issue 26 #13).

Driven without Spark: each replica's checkpoint gets the end offsets Spark's offset
log would hold for its epochs (a file source reading ``f0`` .. ``f5``, 4 records
each, as :mod:`wire.sources.file_source.reader` writes positions), and the sink is fed
the rows a per-key running count and sum emits. The oracle is a plain fold of the
input; the table must equal it whichever replica wrote last.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import wire

FILES = {f"f{i}": [(f"k{(i * 4 + j) % 5}", i * 10 + j) for j in range(4)] for i in range(6)}
"""Per file, its records (key, value)."""
SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64()), ("epoch", pa.int64())])


class Replica:
    """A flow over FILES (files visible so far, ``budget`` records per epoch) driving one sink."""

    def __init__(self, sink, ck: Path, budget: int) -> None:
        self.sink, self.ck, self.budget = sink, ck, budget
        self.done: list[str] = []
        self.open: str | None = None
        self.record = 0
        self.sums: dict[str, tuple[int, int]] = {}
        self.epoch = 0
        (ck / "spark" / "offsets").mkdir(parents=True)
        (ck / "wire.json").write_text(json.dumps({"flow_id": "f", "spark_dir": "spark"}))
        sink.bind_checkpoint(str(ck))
        sink.open(flow_id="f", sink_id="sc", checkpoint_id=ck.name)

    def run_epoch(self, visible: list[str]) -> str:
        """Admit up to the budget (open file, then new files by name), write the epoch; its status."""
        order = ([self.open] if self.open else []) + sorted(f for f in visible if f not in self.done
                                                            and f != self.open)
        left, rows = self.budget, []
        for name in order:
            if left <= 0:
                break
            start = self.record if name == self.open else 0
            end = min(len(FILES[name]), start + left)
            for k, v in FILES[name][start:end]:
                n, total = self.sums.get(k, (0, 0))
                self.sums[k] = (n + 1, total + v)
                rows.append({"k": k, "n": n + 1, "total": total + v, "epoch": self.epoch})
            left -= end - start
            if end == len(FILES[name]):
                self.done.append(name)
                self.open, self.record = None, 0
            else:
                self.open, self.record = name, end
        read = {f: [1, 1] for f in [*self.done, *([self.open] if self.open else [])]}
        position = {"file": f"/in/{self.open or ''}", "record": self.record,
                    "files": {"read": read, "open": self.open}, "segments": []}
        offset = {"admitted": 0, "watermark": 0, "ended": False,
                  "partitions": {"in": {"from": {}, "next": position, "taken": 0}}}
        (self.ck / "spark" / "offsets" / str(self.epoch)).write_text(
            f"v1\n{{\"batchWatermarkMs\":0}}\n{json.dumps(offset)}\n")
        self.sink.write_epoch(self.epoch, pa.Table.from_pylist(rows, schema=SCHEMA))
        self.epoch += 1
        return self.sink.last_outcome().status

    def to_end(self, visible: list[str]) -> list[str]:
        out = []
        while set(self.done) != set(visible):
            out.append(self.run_epoch(visible))
        return out


def oracle(files: list[str]) -> dict[str, tuple[int, int]]:
    want: dict[str, tuple[int, int]] = {}
    for name in files:
        for k, v in FILES[name]:
            n, total = want.get(k, (0, 0))
            want[k] = (n + 1, total + v)
    return want


@pytest.fixture(scope="module")
def dsn(pg_server):
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute('CREATE DATABASE "sc_frontier"')
    return pg_server.dsn.replace("dbname=postgres", "dbname=sc_frontier")


def _backend(request, tmp_path):
    if request.param == "postgres":
        dsn = request.getfixturevalue("dsn")
        table = f"t_{tmp_path.name[-20:].lower().replace('-', '_')}"

        def make():
            return wire.sinks.self_correcting(dsn, table=table, key="k")

        def rows():
            with psycopg.connect(dsn) as c:
                return c.execute(f"SELECT k, n, total FROM {table}").fetchall()

        def edit():
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f"DELETE FROM {table} WHERE k = 'k1'")
                c.execute(f"UPDATE {table} SET n = n + 100 WHERE k = 'k2'")
                c.execute(f"INSERT INTO {table} (k, n, total) VALUES ('zz', 1, 1)")
        return make, rows, edit
    path = str(tmp_path / "delta")

    def make_delta():
        return wire.sinks.self_correcting(path, key="k")

    def rows_delta():
        return [(r["k"], r["n"], r["total"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist()]

    def edit_delta():
        now = DeltaTable(path).to_pyarrow_table()
        kept = [r for r in now.to_pylist() if r["k"] != "k1"]
        for r in kept:
            r["n"] += 100 * (r["k"] == "k2")
        kept.append({"k": "zz", "n": 1, "total": 1})
        write_deltalake(path, pa.Table.from_pylist(kept, schema=now.schema), mode="overwrite")
    return make_delta, rows_delta, edit_delta


@pytest.fixture(params=["postgres", "delta"])
def backend(request, tmp_path):
    return _backend(request, tmp_path)


def _as_dict(rows) -> dict[str, tuple[int, int]]:
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys)), "duplicate keys"
    return {k: (n, total) for k, n, total in rows}


def test_later_replica_with_other_cuts_repairs_and_takes_over(backend, tmp_path):
    make, rows, edit = backend
    first = [f"f{i}" for i in range(5)]
    a = Replica(make(), tmp_path / "ck_a", budget=2)  # 10 epochs
    a.to_end(first)
    assert _as_dict(rows()) == oracle(first)
    edit()  # hand edits after A's last append
    b = Replica(make(), tmp_path / "ck_b", budget=7)  # 3 epochs over the same input
    statuses = b.to_end(first)
    # B catches up in its own cuts: behind until it has read what the table reflects, then repairs
    assert statuses[:-1] == ["behind"] * (len(statuses) - 1) and statuses[-1] == "written"
    assert b.sink.last_outcome().distance == 3  # the three hand-edited keys
    assert _as_dict(rows()) == oracle(first)
    # A is gone; a new file arrives: B takes over
    a.sink.close()
    b.to_end([*first, "f5"])
    assert _as_dict(rows()) == oracle([*first, "f5"])
    b.sink.close()


def test_a_late_replica_with_small_cuts_never_takes_the_table_back(backend, tmp_path):
    make, rows, _ = backend
    files = [f"f{i}" for i in range(6)]
    b = Replica(make(), tmp_path / "ck_b", budget=12)  # 2 epochs
    b.to_end(files)
    a = Replica(make(), tmp_path / "ck_a", budget=1)  # 24 epochs: its epoch ids pass B's at once
    for _ in range(len(FILES) * 4 - 1):
        assert a.run_epoch(files) == "behind"
        assert _as_dict(rows()) == oracle(files)
    assert a.run_epoch(files) == "unchanged"  # the same frontier, the same rows
    assert _as_dict(rows()) == oracle(files)
    a.sink.close()
    b.sink.close()


class Changed:
    """The sink as a changed flow drives it: key k0 filtered out, totals doubled."""

    def __init__(self, sink) -> None:
        self.sink = sink

    def __getattr__(self, name):
        return getattr(self.sink, name)

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        rows = [{**r, "total": 2 * r["total"]} for r in table.to_pylist() if r["k"] != "k0"]
        self.sink.write_epoch(epoch, pa.Table.from_pylist(rows, schema=SCHEMA))


def changed_oracle(records: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    want: dict[str, tuple[int, int]] = {}
    for k, v in records:
        n, total = want.get(k, (0, 0))
        want[k] = (n + 1, total + v)
    return {k: (n, 2 * t) for k, (n, t) in want.items() if k != "k0"}


@pytest.mark.parametrize("fresh", [True, False])
def test_a_flow_started_over_writes_from_its_first_epoch(backend, tmp_path, fresh):
    """Start over (issue 26 item 2) on a self-correcting sink: the changed flow's new checkpoint
    reads from the start of the input. With ``supersede`` (what ``fresh=True`` calls) its first
    epoch corrects the table to its own result for what it read (the old flow's rows of k0
    deleted, totals doubled); without it, the writer is behind the old run's frontier and writes
    nothing until it has read as far."""
    make, rows, _ = backend
    files = [f"f{i}" for i in range(5)]
    a = Replica(make(), tmp_path / "ck_a", budget=2)
    a.to_end(files)
    a.sink.close()
    assert _as_dict(rows()) == oracle(files)
    sink = make()
    if fresh:
        sink.supersede(flow_id="f", sink_id="sc", checkpoint_id="ck_b")
        sink.supersede(flow_id="f", sink_id="sc", checkpoint_id="ck_b")  # a second call changes nothing
    b = Replica(Changed(sink), tmp_path / "ck_b", budget=7)
    first = b.run_epoch(files)  # f0 and three records of f1
    admitted = FILES["f0"] + FILES["f1"][:3]
    if fresh:
        assert first == "written"
        assert _as_dict(rows()) == changed_oracle(admitted)
    else:
        assert first == "behind"
        assert _as_dict(rows()) == oracle(files)  # still the old flow's rows
    b.to_end(files)
    assert _as_dict(rows()) == changed_oracle([r for f in files for r in FILES[f]])
    sink.close()
