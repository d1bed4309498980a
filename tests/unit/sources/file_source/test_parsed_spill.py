"""Parse once (``wire.sources.file_source.parsed_spill``): with a local master the executors read
the planner's parse of each file, and whatever goes wrong with a spill they parse the file
themselves and read the very same rows."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from tests.unit.sources.file_source.test_file_source import (
    SCHEMA,
    binding,
    count_parses,
    csv_rows,
    run,
    write,
)

import wire.sources.base.handoff as handoff_mod
import wire.sources.file_source.formats as file_readers
import wire.sources.file_source.parsed_spill as spill_mod
import wire.sources.file_source.reader as file_stream
from wire.sources.file_source.listing import FileStamp
from wire.sources.file_source.source import WireFileStreamReader, files

BAD = "id,ts,v\n1,1000,1.5\n2,notatime,1\n3,3000,x\n4,4000,2\n"


def inputs(tmp_path):
    write(tmp_path / "a.csv", csv_rows([(i, 1000 * i, i / 2) for i in range(7)]))
    write(tmp_path / "b.csv", BAD)
    write(tmp_path / "c.csv", csv_rows([(i, 9000 + i, 1) for i in range(5)]))
    return files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)


def local(src, per_epoch=3):
    return dataclasses.replace(binding(src, per_epoch=per_epoch), local=True)


def epochs_read_by(planner, executor, starts_ends):
    """The batches of each epoch, planned by ``planner`` and read by ``executor`` (another process's copy)."""
    return [[b for p in planner.partitions(s, e) for b in executor.read(p)] for s, e in starts_ends]


@pytest.fixture(autouse=True)
def spills_under_tmp_path(tmp_path, monkeypatch):
    """Spill directories go under the test's own directory (a test's planner is not always stopped)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(handoff_mod.tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv(handoff_mod.ROOT_ENV, str(tmp_path / "tmp"))


@pytest.fixture
def fresh_executor_cache(monkeypatch):
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(8))


def test_executor_reads_the_planners_parse_and_gets_the_same_rows(tmp_path, monkeypatch,
                                                                  fresh_executor_cache):
    """An executor's copy of the reader (pickled before any planning, as Spark's read planning
    makes it) parses nothing when the planner's spills are there, and its batches, dead letters
    included, equal those of a run without spills."""
    src = inputs(tmp_path)
    expected = run(WireFileStreamReader(binding(src)))
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(8))
    planner = WireFileStreamReader(local(src))
    executor = pickle.loads(pickle.dumps(planner))
    calls = count_parses(monkeypatch)
    ends = []
    start = planner.initialOffset()
    while (end := planner.latestOffset(start, planner.getDefaultReadLimit())) != start:
        ends.append((start, end))
        got = epochs_read_by(planner, executor, [(start, end)])[0]
        assert got == expected[len(ends) - 1][2]["batches"]
        start = end
    assert len(ends) == len(expected)
    assert sorted(calls) == ["a.csv", "b.csv", "c.csv"]  # the planner's parses only
    assert planner.handoff() is not None


def test_a_missing_or_stale_spill_means_the_executor_parses(tmp_path, monkeypatch, fresh_executor_cache):
    """Spills gone (deleted, or an executor on another machine): the executor parses each
    file and reads exactly what it reads without spills."""
    src = inputs(tmp_path)
    planner = WireFileStreamReader(local(src, per_epoch=100))
    start = planner.initialOffset()
    end = planner.latestOffset(start, planner.getDefaultReadLimit())
    expected = [b for p in WireFileStreamReader(binding(src)).partitions(start, end)
                for b in WireFileStreamReader(binding(src)).read(p)]
    spills = planner.handoff()
    assert spills is not None and len(os.listdir(spills)) == 3
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(8))
    for name in os.listdir(spills):
        os.remove(os.path.join(spills, name))
    calls = count_parses(monkeypatch)
    executor = WireFileStreamReader(local(src, per_epoch=100))
    assert [b for p in planner.partitions(start, end) for b in executor.read(p)] == expected
    assert sorted(calls) == ["a.csv", "b.csv", "c.csv"]


def test_spill_round_trip_and_identity(tmp_path):
    path = write(tmp_path / "b.csv", BAD)
    spec = dataclasses.replace(local(inputs(tmp_path)), local=True).parse_spec()
    parsed = file_readers.parse_file(str(path), spec)
    stamp = FileStamp.of(str(path))
    spills = spill_mod.SpillDir()
    spills.write_parse("all", "b.csv", stamp, spec, parsed)
    back = spill_mod.read_spill(spills.path, stamp, spec)
    assert back is not None
    assert back.records == parsed.records == 4
    assert back.table.equals(parsed.table)
    assert np.array_equal(back.valid, parsed.valid) and np.array_equal(back.event_times, parsed.event_times)
    assert back.malformed == parsed.malformed and len(back.malformed) == 2
    # another stamp (the file changed) or another parse spec: not this spill
    touched = dataclasses.replace(stamp, mtime_ns=stamp.mtime_ns + 1)
    assert spill_mod.read_spill(spills.path, touched, spec) is None
    assert spill_mod.read_spill(spills.path, stamp, dataclasses.replace(spec, delimiter=";")) is None
    assert spill_mod.read_spill(None, stamp, spec) is None
    # a copy sent to another process holds no spills and deletes nothing
    copy = pickle.loads(pickle.dumps(spills))
    assert copy.path is None
    copy.close()
    assert os.path.isdir(spills.path)


def test_spills_are_released_past_the_committed_epochs_and_removed_at_stop(tmp_path):
    src = inputs(tmp_path)
    planner = WireFileStreamReader(local(src, per_epoch=4))
    start = planner.initialOffset()
    seen = []
    while (end := planner.latestOffset(start, planner.getDefaultReadLimit())) != start:
        if planner._read_ahead is not None:
            planner._read_ahead.join()
        seen.append(sorted(os.listdir(planner.handoff())))
        start = end
    name = {spill_mod.spill_name(FileStamp.of(str(tmp_path / f)), planner._spec): f
            for f in ("a.csv", "b.csv", "c.csv")}
    # 4 records an epoch: a.csv (7 records) is read by epochs 1-2, b.csv (4) by 2-3, c.csv (5)
    # by 3-4; a file's spill goes when an epoch after its last is planned (its epochs committed);
    # the read-ahead spills the next file while an epoch runs; epoch 4 admits the last records
    # and ends the bounded source (c.csv's spill stays until the query stops)
    assert [sorted(name[n] for n in names) for names in seen] == [
        ["a.csv", "b.csv"], ["a.csv", "b.csv", "c.csv"], ["b.csv", "c.csv"], ["c.csv"],
    ]
    directory = planner.handoff()
    planner.stop()
    assert not os.path.exists(directory) and planner.handoff() is None


def test_spill_budget_stops_writing(tmp_path, monkeypatch, fresh_executor_cache):
    src = inputs(tmp_path)
    planner = WireFileStreamReader(local(src, per_epoch=100))
    planner._spills.max_bytes = 1  # the first spill fills it
    start = planner.initialOffset()
    planner.latestOffset(start, planner.getDefaultReadLimit())
    assert len(os.listdir(planner.handoff())) == 1


def test_orphaned_directories_of_ended_planners_are_removed(tmp_path, monkeypatch):
    """In every root a planner may have chosen: the temporary directory and shared memory."""
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    monkeypatch.setattr(handoff_mod.tempfile, "gettempdir", lambda: str(tmp))
    monkeypatch.setattr(handoff_mod, "SHARED_MEMORY", str(shm))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = [root / f"{handoff_mod.PREFIX}{int(ended.stdout)}-x" for root in (tmp, shm)]
    kept = [tmp / f"{handoff_mod.PREFIX}{os.getpid()}-y", shm / "unrelated"]
    for d in (*dead, *kept):
        d.mkdir(parents=True)
    handoff_mod.remove_orphans()
    assert not any(d.exists() for d in dead) and all(d.exists() for d in kept)


def test_the_handoff_root_is_memory_when_it_has_room(tmp_path, monkeypatch):
    """``WIRE_HANDOFF_ROOT`` first; then shared memory with 4 GiB free; else ``$TMPDIR``."""
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.delenv(handoff_mod.ROOT_ENV, raising=False)
    monkeypatch.setattr(handoff_mod, "SHARED_MEMORY", str(shm))
    monkeypatch.setattr(handoff_mod.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    free = os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize
    monkeypatch.setattr(handoff_mod, "MIN_FREE_MEMORY_BYTES", free // 2)
    assert handoff_mod.handoff_root() == str(shm)
    monkeypatch.setattr(handoff_mod, "MIN_FREE_MEMORY_BYTES", free * 2)  # a container's small /dev/shm
    assert handoff_mod.handoff_root() == str(tmp_path / "tmp")
    monkeypatch.setattr(handoff_mod, "SHARED_MEMORY", str(tmp_path / "none"))
    monkeypatch.setattr(handoff_mod, "MIN_FREE_MEMORY_BYTES", 0)
    assert handoff_mod.handoff_root() == str(tmp_path / "tmp")  # no such directory
    monkeypatch.setenv(handoff_mod.ROOT_ENV, str(tmp_path / "mine"))
    assert handoff_mod.handoff_root() == str(tmp_path / "mine")
    planner = handoff_mod.HandoffDir()
    planner.write("t.arrow", "owner", lambda: pa.table({"x": [1]}))
    assert planner.path is not None and planner.path.startswith(str(tmp_path / "mine" / handoff_mod.PREFIX))
    planner.close()
