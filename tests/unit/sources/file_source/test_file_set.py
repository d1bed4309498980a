"""File sources keep the set of files they have read (issue 11): new files whatever their name,
changed files reported as dead letters, never silently ignored.

The reader is driven directly (no Spark) like Spark drives it. Every expected value
is derived by hand from the rules in ``wire.sources.file_source.file_set``; mtimes are set
explicitly so that the reasons can be written out in full.
"""

from __future__ import annotations

import doctest
import json
import os

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadMaxRows

import wire.sources.file_source.file_set as file_set
import wire.sources.file_source.formats as file_readers
import wire.sources.file_source.reader as file_stream
from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy
from wire.sources.file_source.file_set import Change, FileSet, detect_changes, reading_order
from wire.sources.file_source.source import SourceBinding, WireFileStreamReader, files

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
T0 = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z in ns
DEAD = "src.dead_letter"


def put(path, rows, *, mtime_s=0):
    """Write a CSV file of (id, ts) rows with mtime T0 + mtime_s seconds; return its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "id,ts\n" + "".join(f"{i},{ts}\n" for i, ts in rows)
    path.write_text(text)
    ns = T0 + mtime_s * 10**9
    os.utime(path, ns=(ns, ns))
    return len(text.encode())


def reader_for(source, *, per_epoch=4):
    return WireFileStreamReader(SourceBinding("src", source, SCHEMA, "ts", WatermarkPolicy(0), per_epoch,
                                1), clock=lambda: 0)


def decode(batches):
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    sides = {}
    for r in rows:
        if r["__kind"] == envelope.KIND_SIDE:
            sides.setdefault(r["__port"], []).extend(envelope.decode_table(r["__blob"]).to_pylist())
    metrics: dict[str, int] = {}
    for m in sides.pop(envelope.METRICS_PORT, []):  # counters add up over an epoch's tasks
        if not m["name"].startswith("gauge:"):
            metrics[m["name"]] = metrics.get(m["name"], 0) + m["value"]
    data = [(r["id"], r["__seq"]) for r in rows if r["__kind"] == envelope.KIND_DATA]
    return {"data": data, "dead": sides.get(DEAD, []), "metrics": metrics, "batches": batches}


def files_of(offset):
    """Per partition, its file set (in the partition's position, wire.sources.file_source.reader)."""
    return {n: p["next"]["files"] for n, p in offset["partitions"].items()}


def segments_of(offset):
    """Per partition that admitted records, the epoch's ranges [file, lo, hi)."""
    return {n: p["next"]["segments"] for n, p in offset["partitions"].items() if p["taken"]}


def step(reader, start):
    """One epoch as Spark runs it: (end offset, decoded rows), or (start, None) when none is due."""
    end = reader.latestOffset(start, ReadMaxRows(reader._binding.max_events_per_epoch))
    if end == start:
        return start, None
    json.dumps(end)  # offsets hold JSON primitives only
    return end, decode([b for p in reader.partitions(start, end) for b in reader.read(p)])


def ids(out):
    return [i for i, _ in out["data"]]


# ------------------------------------------------------------------------------ pure rules


def test_module_examples_run():
    assert doctest.testmod(file_set).failed == 0


def test_reading_order_open_file_first_then_new_files_by_name():
    fs = FileSet({"b": (1, 1), "c": (2, 2)}, open="c")
    assert reading_order(fs, ["a", "b", "c", "d"]) == ["c", "a", "d"]
    assert reading_order(FileSet({"b": (1, 1)}), ["d", "a", "b"]) == ["a", "d"]
    assert reading_order(FileSet({"c": (1, 1)}, open="c"), ["a"]) == ["a"]  # open file vanished


def test_detect_changes_reports_each_change_once_and_keeps_vanished_files():
    fs = FileSet({"a": (10, 1), "b": (20, 1), "c": (30, 1)}, open="c")
    listed = {"a": (10, 1), "b": (20, 2), "c": (5, 3)}  # a same, b touched, c truncated while open
    fs2, changes = detect_changes("p", fs, listed, 7)
    assert changes == [Change("p", "b", (20, 1), (20, 2), None), Change("p", "c", (30, 1), (5, 3), 7)]
    assert fs2 == FileSet({"a": (10, 1), "b": (20, 2), "c": (5, 3)}, open=None)
    assert detect_changes("p", fs2, listed, 0) == (fs2, [])  # reported once
    gone, changes = detect_changes("p", fs2, {"b": (20, 2)}, 0)  # a, c fully read and removed: fine
    assert gone == fs2 and changes == []
    _, changes = detect_changes("p", FileSet({"x": (9, 1)}, open="x"), {}, 4)
    assert changes == [Change("p", "x", (9, 1), None, 4)]
    assert changes[0].reason() == (
        "file vanished while being read (4 records read): size was 9 bytes; "
        "its remaining records and new content are not read"
    )
    assert Change.from_json(json.loads(json.dumps(changes[0].to_json()))) == changes[0]


# ------------------------------------------------------------------------------ new files


def test_a_new_file_that_sorts_before_the_files_read_is_read(tmp_path):
    size_b = put(tmp_path / "b.csv", [(1, 1000), (2, 2000)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False))
    start, out = step(reader, reader.initialOffset())
    assert out["data"] == [(1, 0), (2, 1)]
    size_a = put(tmp_path / "a.csv", [(3, 3000)], mtime_s=1)  # arrives later, sorts first
    start, out = step(reader, start)
    assert out["data"] == [(3, 2)] and out["dead"] == []
    assert out["metrics"] == {"records": 1, "events": 1, "malformed": 0}
    # names relative to the source directory, with size and mtime (ns)
    assert files_of(start) == {"all": {"read": {"a.csv": [size_a, T0 + 10**9], "b.csv": [size_b, T0]},
                                      "open": None}}
    assert step(reader, start)[1] is None  # nothing is read twice
    os.remove(tmp_path / "b.csv")  # a file read and moved away: nothing to report
    assert step(reader, start)[1] is None
    put(tmp_path / "b.csv", [(1, 1000), (2, 2000)])  # back, unchanged: not read again
    assert step(reader, start)[1] is None


def test_new_files_wait_for_the_open_file_then_come_in_name_order(tmp_path):
    put(tmp_path / "c.csv", [(1, 10), (2, 20), (3, 30)])
    reader = reader_for(files(str(tmp_path / "*.csv"), format="csv", bounded=False), per_epoch=2)
    start, out = step(reader, reader.initialOffset())
    assert ids(out) == [1, 2] and files_of(start)["all"]["open"] == "c.csv"
    put(tmp_path / "d.csv", [(5, 50)])
    put(tmp_path / "a.csv", [(4, 40)])
    put(tmp_path / "b.csv", [(6, 60)])
    start, out = step(reader, start)
    assert ids(out) == [3, 4]  # the rest of c, then a
    assert segments_of(start) == {"all": [["c.csv", 2, 3], ["a.csv", 0, 1]]}
    start, out = step(reader, start)
    assert ids(out) == [6, 5] and [s for _, s in out["data"]] == [4, 5]


def test_directory_partitions_read_new_files_with_earlier_names(tmp_path):
    put(tmp_path / "in" / "p0" / "m.csv", [(1, 10)])
    put(tmp_path / "in" / "p1" / "m.csv", [(2, 20)])
    reader = reader_for(files(str(tmp_path / "in"), format="csv", bounded=False, partition_by="directory"))
    start, out = step(reader, reader.initialOffset())
    assert ids(out) == [1, 2]
    put(tmp_path / "in" / "p1" / "a.csv", [(3, 30)])
    start, out = step(reader, start)
    assert ids(out) == [3]
    # names relative to the source directory
    assert sorted(files_of(start)["p1"]["read"]) == ["p1/a.csv", "p1/m.csv"]


def test_an_offset_of_an_older_wire_is_continued_and_then_reads_earlier_names(tmp_path):
    put(tmp_path / "a.csv", [(1, 10)])
    put(tmp_path / "b.csv", [(2, 20), (3, 30)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False))
    # the form of an offset before file-set tracking: a position per partition, no files
    old = {"admitted": 3, "watermark": 30, "max_event_time": 30, "ended": False, "started": None,
           "at": None, "turn": 1}
    old["partitions"] = {"all": {"file": str(tmp_path / "b.csv"), "record": 2, "admitted": 3,
                                 "max_event_time": 30, "watermark": 30, "last_arrival": 0,
                                 "idle": False, "done": False}}
    put(tmp_path / "c.csv", [(5, 50)])
    start, out = step(reader, old)  # a.csv and b.csv sort up to the old position: read
    assert out["data"] == [(5, 3)] and sorted(files_of(start)["all"]["read"]) == ["a.csv", "b.csv", "c.csv"]
    put(tmp_path / "0.csv", [(4, 40)])
    start, out = step(reader, start)
    assert out["data"] == [(4, 4)]


# ------------------------------------------------------------------------------ changed files


def test_a_file_rewritten_shorter_after_it_was_read_is_one_dead_letter(tmp_path):
    before = put(tmp_path / "b.csv", [(1, 1000), (2, 2000), (3, 3000)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False))
    start, out = step(reader, reader.initialOffset())
    assert ids(out) == [1, 2, 3]
    after = put(tmp_path / "b.csv", [(9, 9000)], mtime_s=5)
    assert (before, after) == (27, 13)
    start, out = step(reader, start)
    assert out["data"] == []
    assert [(d["step"], d["location"], d["reason"]) for d in out["dead"]] == [(
        "src", str(tmp_path / "b.csv"),
        "file changed after it was read: size 27 -> 13 bytes, mtime 2024-01-01T00:00:00.000000000Z -> "
        "2024-01-01T00:00:05.000000000Z; its new content is not read",
    )]
    assert json.loads(out["dead"][0]["record"]) == {
        "file": "b.csv", "before": {"size": 27, "mtime_ns": T0},
        "after": {"size": 13, "mtime_ns": T0 + 5 * 10**9}, "records_read": None,
    }
    assert out["metrics"] == {"records": 0, "events": 0, "malformed": 0, "changed_files": 1}
    assert start["admitted"] == 3
    assert step(reader, start)[1] is None  # reported once
    put(tmp_path / "b.csv", [(9, 9000), (10, 10_000)], mtime_s=6)  # changed again: reported again
    start, out = step(reader, start)
    assert out["data"] == [] and "size 13 -> 22 bytes" in out["dead"][0]["reason"]


def test_rows_appended_to_a_file_read_are_a_dead_letter_not_read(tmp_path):
    put(tmp_path / "a.csv", [(1, 1000), (2, 2000)])
    reader = reader_for(files(str(tmp_path / "*.csv"), format="csv", bounded=False))
    start, out = step(reader, reader.initialOffset())
    put(tmp_path / "a.csv", [(1, 1000), (2, 2000), (3, 3000)], mtime_s=1)
    start, out = step(reader, start)
    assert out["data"] == [] and len(out["dead"]) == 1
    assert out["dead"][0]["reason"].startswith("file changed after it was read: size 20 -> 27 bytes")


def test_a_touched_file_is_a_dead_letter_even_with_the_same_size(tmp_path):
    put(tmp_path / "a.csv", [(1, 1000)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False))
    start, _ = step(reader, reader.initialOffset())
    put(tmp_path / "a.csv", [(2, 2000)], mtime_s=3)  # same size, new content
    start, out = step(reader, start)
    assert out["data"] == [] and "size 13 -> 13 bytes" in out["dead"][0]["reason"]


def test_a_file_changed_while_being_read_stops_there_with_a_dead_letter(tmp_path):
    put(tmp_path / "c.csv", [(1, 10), (2, 20), (3, 30), (4, 40)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False), per_epoch=2)
    start, out = step(reader, reader.initialOffset())
    assert ids(out) == [1, 2]
    put(tmp_path / "c.csv", [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)], mtime_s=1)
    put(tmp_path / "d.csv", [(6, 60)])
    start, out = step(reader, start)
    assert ids(out) == [6]
    assert [d["reason"] for d in out["dead"]] == [
        "file changed while being read (2 records read): size 26 -> 31 bytes, mtime "
        "2024-01-01T00:00:00.000000000Z -> 2024-01-01T00:00:01.000000000Z; "
        "its remaining records and new content are not read"
    ]
    assert files_of(start)["all"]["open"] is None
    assert step(reader, start)[1] is None


def test_an_epoch_the_previous_wire_planned_is_replayed_and_continued(tmp_path):
    """Offsets of the Wire before the source base (files, segments and changes at the top level)."""
    size_a = put(tmp_path / "a.csv", [(1, 10), (2, 20)])
    size_b = put(tmp_path / "b.csv", [(3, 30), (4, 40), (5, 50)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False), per_epoch=3)
    state = {"file": str(tmp_path / "a.csv"), "record": 2, "admitted": 2, "max_event_time": 20,
             "watermark": 20, "last_arrival": 0, "idle": False, "done": False}
    common = {"ended": False, "started": 0, "changed": []}
    old1 = {**common, "admitted": 2, "watermark": 20, "max_event_time": 20, "at": 0, "turn": 1,
            "partitions": {"all": state}, "segments": {"all": [["a.csv", 0, 2]]},
            "files": {"all": {"read": {"a.csv": [size_a, T0]}, "open": None}}}
    old2 = {**common, "admitted": 3, "watermark": 30, "max_event_time": 30, "at": 0, "turn": 2,
            "partitions": {"all": {**state, "file": str(tmp_path / "b.csv"), "record": 1, "admitted": 3,
                                   "max_event_time": 30, "watermark": 30}},
            "segments": {"all": [["b.csv", 0, 1]]},
            "files": {"all": {"read": {"a.csv": [size_a, T0], "b.csv": [size_b, T0]}, "open": "b.csv"}}}
    out = decode([b for p in reader.partitions(old1, old2) for b in reader.read(p)])  # the epoch in flight
    assert out["data"] == [(3, 2)] and out["dead"] == []
    start, out = step(reader, old2)  # the next epoch, planned by this Wire
    assert out["data"] == [(4, 3), (5, 4)] and start["watermark"] == 50
    assert files_of(start) == {"all": {"read": {"a.csv": [size_a, T0], "b.csv": [size_b, T0]}, "open": None}}
    assert step(reader, start)[1] is None


def test_the_open_file_vanishing_is_a_dead_letter(tmp_path):
    size = put(tmp_path / "c.csv", [(1, 10), (2, 20), (3, 30)])
    assert size == 21
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False), per_epoch=1)
    start, _ = step(reader, reader.initialOffset())
    os.remove(tmp_path / "c.csv")
    start, out = step(reader, start)
    assert out["data"] == [] and out["dead"][0]["reason"] == (
        "file vanished while being read (1 records read): size was 21 bytes; "
        "its remaining records and new content are not read")


def test_a_bounded_source_reports_a_change_before_it_ends(tmp_path):
    put(tmp_path / "a.csv", [(1, 10), (2, 20)])
    reader = reader_for(files(str(tmp_path), format="csv"), per_epoch=1)
    start, out = step(reader, reader.initialOffset())
    assert not start["ended"] and ids(out) == [1]
    put(tmp_path / "a.csv", [], mtime_s=1)
    # the change is the last thing the source has: its epoch reports it and ends the source
    start, out = step(reader, start)
    assert start["ended"] and len(out["dead"]) == 1 and out["data"] == []
    assert step(reader, start)[1] is None


def test_a_bounded_source_that_read_everything_ends_with_that_epoch(tmp_path):
    put(tmp_path / "a.csv", [(1, 10)])
    reader = reader_for(files(str(tmp_path), format="csv"))
    start, out = step(reader, reader.initialOffset())
    assert start["ended"] and ids(out) == [1] and out["dead"] == []
    put(tmp_path / "a.csv", [], mtime_s=1)  # after the end: not part of the input
    assert step(reader, start)[1] is None


def test_records_changed_between_planning_and_reading_are_a_dead_letter(tmp_path):
    assert put(tmp_path / "a.csv", [(1, 10), (2, 20)]) == 16
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(4))
    tasks = reader.partitions(start, end)
    put(tmp_path / "a.csv", [(7, 70), (8, 80)], mtime_s=2)  # e.g. before a replay after a crash
    out = decode([b for t in tasks for b in reader.read(t)])
    assert out["data"] == []
    assert [(d["location"], d["reason"]) for d in out["dead"]] == [(
        str(tmp_path / "a.csv"),
        f"file changed (size 16 -> 16 bytes, mtime_ns {T0} -> {T0 + 2 * 10**9}) after records 0..1 "
        f"were admitted (size 16 bytes, mtime_ns {T0}) and before they were read; they are not read",
    )]


def test_replaying_logged_offsets_in_a_fresh_reader_gives_identical_batches(tmp_path, monkeypatch):
    put(tmp_path / "b.csv", [(1, 10), (2, 20), (3, 30)])
    reader = reader_for(files(str(tmp_path), format="csv", bounded=False), per_epoch=2)
    log = []
    start, out = step(reader, reader.initialOffset())
    log.append((reader.initialOffset(), start, out))
    put(tmp_path / "a.csv", [(4, 40)])
    end, out = step(reader, start)
    log.append((start, end, out))
    put(tmp_path / "a.csv", [(4, 41)], mtime_s=9)
    end2, out = step(reader, end)
    log.append((end, end2, out))
    assert [ids(o) for *_, o in log] == [[1, 2], [3, 4], []] and len(log[2][2]["dead"]) == 1
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(4))
    fresh = reader_for(files(str(tmp_path), format="csv", bounded=False), per_epoch=2)
    for i in (0, 2):  # as after a restart: no caches, the same offsets, the same rows
        s, e, o = log[i]
        assert [b for p in fresh.partitions(s, e) for b in fresh.read(p)] == o["batches"]
    # epoch 1 read a.csv before it changed; replayed now, its record is a dead letter, not new data
    again = decode([b for p in fresh.partitions(*log[1][:2]) for b in fresh.read(p)])
    assert ids(again) == [3] and "before they were read" in again["dead"][0]["reason"]
