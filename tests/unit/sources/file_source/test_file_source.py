"""The file source driven directly (no Spark): offsets, watermarks, rows, dead letters."""

from __future__ import annotations

import doctest
import json
import os
import pickle
import re
import threading
import time
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

import wire.sources.base.partitioned as partitioned
import wire.sources.file_source.formats as file_readers
import wire.sources.file_source.parsed_spill as parsed_spill
import wire.sources.file_source.reader as file_stream
import wire.sources.file_source.source as files_mod
from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError, WireError
from wire.sources.file_source.source import (
    NO_WATERMARK,
    FileSource,
    SourceBinding,
    WireFileDataSource,
    WireFileStreamReader,
    files,
    spark_row_schema,
)

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.float64())])


def write(path, text):
    path.write_text(text)
    return path


def csv_rows(rows):
    return "id,ts,v\n" + "".join(f"{i},{ts},{v}\n" for i, ts, v in rows)


def binding(source, schema=SCHEMA, *, delay=1000, per_epoch=3, key_groups=2, event_time="ts"):
    return SourceBinding("src", source, schema, event_time, WatermarkPolicy(delay), per_epoch, key_groups)


def run(reader, limit=None, start=None):
    """Drive the reader like Spark: (start, end, decoded output) per epoch until it stops."""
    limit = limit or ReadMaxRows(reader._binding.max_events_per_epoch)
    start = start or reader.initialOffset()
    epochs = []
    while True:
        end = reader.latestOffset(start, limit)
        if end == start:
            return epochs
        json.dumps(end)  # offsets hold JSON primitives only
        batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
        epochs.append((start, end, decode(batches)))
        start = end


def decode(batches):
    """Split an epoch's batches into data rows, side tables per port and watermark rows."""
    table = pa.Table.from_batches(batches)
    kinds = table[envelope.KIND].to_pylist()
    data = [r for r, k in zip(table.to_pylist(), kinds, strict=True) if k == envelope.KIND_DATA]
    marks = [r for r, k in zip(table.to_pylist(), kinds, strict=True) if k == 1]
    sides = {}
    for r, k in zip(table.to_pylist(), kinds, strict=True):
        if k == envelope.KIND_SIDE:
            sides.setdefault(r[envelope.PORT], []).extend(envelope.decode_table(r[envelope.BLOB]).to_pylist())
    return {"data": data, "sides": sides, "marks": marks, "batches": batches}


def metrics(out):
    """The epoch's counters (gauges left out)."""
    rows = out["sides"][envelope.METRICS_PORT]
    return {r["name"]: r["value"] for r in rows if not r["name"].startswith("gauge:")}


def gauges(out):
    rows = out["sides"][envelope.METRICS_PORT]
    return {r["name"]: r["value"] for r in rows if r["name"].startswith("gauge:")}


def position(offset, partition="all"):
    p = offset["partitions"][partition]["next"]  # the partition's position (wire.sources.file_source.reader)
    return os.path.basename(p["file"]), p["record"]


# ------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "x/*.csv", "format": "xml"}, "invalid format='xml'; accepted: 'csv', 'jsonl'"),
        ({"path": "", "format": "csv"}, "invalid path=''; accepted: a non-empty glob"),
        ({"path": "x", "format": "csv", "delimiter": ";;"}, "delimiter=';;'; accepted: a single"),
        ({"path": "x", "format": "csv", "null_values": "NA"}, "null_values='NA'"),
    ],
)
def test_config_errors_name_parameter_and_accepted_values(kwargs, message):
    with pytest.raises(ConfigError) as err:
        files(kwargs.pop("path"), **kwargs)
    assert message in str(err.value)


def test_binding_validation_and_json_round_trip(tmp_path):
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA, delimiter=";")
    b = binding(src)
    assert SourceBinding.from_json(b.to_json(), FileSource) == b
    with pytest.raises(ConfigError, match="step 'src': invalid event_time='when'"):
        binding(src, event_time="when")
    with pytest.raises(ConfigError, match="invalid event_time='v \\(double\\)'"):
        binding(src, event_time="v")
    with pytest.raises(ConfigError, match="invalid key_groups=0; accepted: an int >= 1"):
        binding(src, key_groups=0)
    with pytest.raises(ConfigError, match="invalid schema"):
        binding(src, pa.schema([("ts", pa.int64()), ("__kind", pa.int32())]))


def test_files_docstring_example_runs():
    result = doctest.testmod(files_mod)
    assert result.attempted >= 2 and result.failed == 0


def test_resolve_schema_infers_from_first_file_and_names_glob_when_nothing_matches(tmp_path):
    write(tmp_path / "b.csv", "id,ts,name\n1,2,x\n")
    write(tmp_path / "a.csv", "id,ts,v\n1,1000,1.5\n2,2000,NA\n")
    assert files(str(tmp_path), format="csv").resolve_schema() == SCHEMA
    pattern = str(tmp_path / "*.jsonl")
    with pytest.raises(WireError, match=re.escape(f"no jsonl file matches '{pattern}'")):
        files(pattern, format="jsonl").resolve_schema()


def test_resolve_schema_for_jsonl_and_parquet(tmp_path):
    write(tmp_path / "a.jsonl", '{"id": 1, "at": "2013-01-01T10:00:00Z", "x": null}\nnot json\n{"id": 2}\n')
    inferred = files(str(tmp_path / "*.jsonl"), format="jsonl").resolve_schema()
    assert inferred == pa.schema([("id", pa.int64()), ("at", pa.string()), ("x", pa.string())])
    pq.write_table(pa.table({"n": pa.array([1], pa.int16())}), tmp_path / "p.parquet")
    assert files(str(tmp_path), format="parquet").resolve_schema() == pa.schema([("n", pa.int16())])
    src = files(str(tmp_path), format="parquet", schema=SCHEMA, null_values=["-"])
    assert src.null_values == ("-",) and FileSource.from_dict(src.to_dict()) == src


def test_spark_schema_of_the_data_source(tmp_path):
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    struct = WireFileDataSource({"binding": binding(src).to_json()}).schema()
    assert struct.fieldNames() == ["id", "ts", "v", *envelope.ENVELOPE_COLUMNS]
    assert struct["__kind"].nullable is False


# ------------------------------------------------------------------------------ offsets


def test_admission_across_file_boundaries_and_watermarks(tmp_path):
    # arrival order: a.csv then b.csv; event times out of order within delay 1000
    write(
        tmp_path / "a.csv", csv_rows([(1, 1000, 1), (2, 5000, 1), (3, 2000, 1), (4, 3000, 1), (5, 9000, 1)])
    )
    write(tmp_path / "b.csv", csv_rows([(6, 7000, 1), (7, 8000, 1), (8, 20000, 1), (9, 4000, 1)]))
    reader = WireFileStreamReader(binding(files(str(tmp_path / "*.csv"), format="csv")))
    epochs = run(reader)
    ends = [(*position(e), e["admitted"]) for _, e, _ in epochs]
    assert ends == [("a.csv", 3, 3), ("b.csv", 1, 6), ("b.csv", 4, 9)]
    # __seq: the global arrival number, across files and epochs
    assert [[r["__seq"] for r in out["data"]] for *_, out in epochs] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert gauges(epochs[0][2]) == {
        "gauge:watermark": 4000, "gauge:watermark:all": 4000, "gauge:max_event_time": 5000
    }
    sizes = [len(out["data"]) for *_, out in epochs]
    assert sizes == [3, 3, 3]
    # max event time 5000, 9000, 20000 -> W = max - 1000, never decreasing; the epoch that
    # admits the last records carries the end of input (the partition's own W stays 19000)
    assert [e["watermark"] for _, e, _ in epochs] == [4000, 8000, envelope.MAX_WATERMARK]
    assert epochs[-1][1]["partitions"]["all"]["watermark"] == 19000
    assert [e["max_event_time"] for _, e, _ in epochs] == [5000, 9000, 20000]
    # data rows carry the start watermark; watermark rows the end watermark, per key group
    for start, end, out in epochs:
        assert {r["__wm"] for r in out["data"]} <= {start["watermark"]}
        assert [(r["__kg"], r["__wm"]) for r in out["marks"]] == [
            (0, end["watermark"]),
            (1, end["watermark"]),
        ]
    assert epochs[0][2]["data"][0]["__wm"] == NO_WATERMARK
    assert [r["__et"] for r in epochs[1][2]["data"]] == [3000, 9000, 7000]
    assert [r["id"] for r in epochs[2][2]["data"]] == [7, 8, 9]
    # the last epoch ends the source: its watermark rows are the maximal ones; no epoch after it
    _, last_end, last = epochs[-1]
    assert last_end["ended"] and not any(e["ended"] for _, e, _ in epochs[:-1])
    assert gauges(last)["gauge:watermark"] == envelope.MAX_WATERMARK
    assert reader.latestOffset(last_end, ReadMaxRows(3)) == last_end
    assert reader.partitions(last_end, last_end) == []


def test_watermark_is_monotonic_when_event_times_go_back(tmp_path):
    write(tmp_path / "a.csv", csv_rows([(1, 10000, 1), (2, 500, 1), (3, 600, 1), (4, 9500, 1)]))
    reader = WireFileStreamReader(binding(files(str(tmp_path / "a.csv"), format="csv"), per_epoch=2, delay=0))
    marks = [e["watermark"] for _, e, _ in run(reader)]
    assert marks == [10000, envelope.MAX_WATERMARK]  # 10000 again after 600, 9500: never back


def test_read_all_available_admits_everything(tmp_path):
    write(tmp_path / "a.csv", csv_rows([(i, i * 1000, 1) for i in range(10)]))
    write(tmp_path / "b.csv", csv_rows([(i, i * 1000, 1) for i in range(10, 15)]))
    reader = WireFileStreamReader(binding(files(str(tmp_path / "*.csv"), format="csv")))
    epochs = run(reader, ReadAllAvailable())
    assert [len(out["data"]) for *_, out in epochs] == [15]
    assert epochs[0][1]["ended"] and epochs[0][1]["watermark"] == envelope.MAX_WATERMARK
    assert reader.getDefaultReadLimit() == ReadMaxRows(3)


def test_replaying_the_same_offsets_gives_identical_batches(tmp_path, monkeypatch):
    write(tmp_path / "a.csv", csv_rows([(1, 1000, 1), (2, 5000, "x"), (3, 2000, 1), (4, 3, 2)]))
    write(tmp_path / "b.csv", csv_rows([(5, 7000, 1), (6, 8000, 1)]))
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    first = run(WireFileStreamReader(binding(src)))
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(4))
    fresh = WireFileStreamReader(binding(src))  # as after a restart: no caches, no listing
    for start, end, out in first:
        again = [b for p in fresh.partitions(start, end) for b in fresh.read(p)]
        assert again == out["batches"]


def count_parses(monkeypatch) -> list[str]:
    """The names of the files parsed from now on, in order (``parse_file`` counted)."""
    calls: list[str] = []
    real = file_readers.parse_file

    def counting(path, spec):
        calls.append(os.path.basename(path))
        return real(path, spec)

    monkeypatch.setattr(file_readers, "parse_file", counting)
    return calls


def test_planner_parses_each_file_once(tmp_path, monkeypatch):
    write(tmp_path / "a.csv", csv_rows([(i, i, 1) for i in range(20)]))
    write(tmp_path / "b.csv", csv_rows([(i, i, 1) for i in range(20)]))
    calls = count_parses(monkeypatch)
    reader = WireFileStreamReader(binding(files(str(tmp_path / "*.csv"), format="csv")))
    start = reader.initialOffset()
    for _ in range(13):
        start = reader.latestOffset(start, ReadMaxRows(3))
    assert start["admitted"] == 39
    assert calls == ["a.csv", "b.csv"]


def test_unbounded_source_picks_up_new_files_and_never_ends(tmp_path):
    write(tmp_path / "a.csv", csv_rows([(1, 1000, 1), (2, 2000, 1)]))
    reader = WireFileStreamReader(binding(files(str(tmp_path), format="csv", bounded=False)))
    epochs = run(reader)
    assert [len(out["data"]) for *_, out in epochs] == [2]
    end = epochs[-1][1]
    assert reader.latestOffset(end, ReadMaxRows(3)) == end  # nothing new, not ended
    write(tmp_path / "b.csv", csv_rows([(3, 9000, 1)]))
    write(tmp_path / "notes.txt", "ignored: not a .csv file\n")
    more = run(reader, start=end)
    assert [r["id"] for r in more[0][2]["data"]] == [3]
    assert more[0][1]["watermark"] == 8000 and not more[-1][1]["ended"]


def test_available_now_reads_only_files_present_when_prepared(tmp_path):
    write(tmp_path / "a.csv", csv_rows([(1, 1000, 1)]))
    reader = WireFileStreamReader(binding(files(str(tmp_path), format="csv", bounded=False)))
    reader.prepareForTriggerAvailableNow()
    write(tmp_path / "b.csv", csv_rows([(2, 2000, 1)]))
    assert [[r["id"] for r in out["data"]] for *_, out in run(reader)] == [[1]]


# ------------------------------------------------------------------------------ malformed


def test_csv_dead_letters_with_reasons_lines_and_metrics(tmp_path):
    text = (
        "id,ts,v\n"
        "1,1000,1.5\n"
        "\n"  # blank lines are not records but count as lines
        "2,2000\n"
        "3,3000,abc\n"
        "4,,2.5\n"
        "5,4000,NA\n"
        "6,5000,7,8\n"
    )
    write(tmp_path / "a.csv", text)
    reader = WireFileStreamReader(
        binding(files(str(tmp_path / "a.csv"), format="csv", schema=SCHEMA), per_epoch=100)
    )
    [(_, end, out)] = run(reader)  # one epoch: all of it, and the end of input
    assert end["admitted"] == 6
    assert [(r["id"], r["v"], r["__et"]) for r in out["data"]] == [(1, 1.5, 1000), (5, None, 4000)]
    assert [r["__seq"] for r in out["data"]] == [0, 4]  # malformed records 1-3 take numbers too
    dead = out["sides"]["src.dead_letter"]
    path = str(tmp_path / "a.csv")
    assert [(d["step"], d["location"], d["reason"], d["record"]) for d in dead] == [
        ("src", f"{path}:4", "csv: expected 3 columns, got 2", "2,2000"),
        ("src", f"{path}:5", "csv: column v: cannot parse 'abc' as double", "3,3000,abc"),
        ("src", f"{path}:6", "event time missing", "4,,2.5"),
        ("src", f"{path}:8", "csv: expected 3 columns, got 4", "6,5000,7,8"),
    ]
    assert metrics(out) == {"records": 6, "events": 2, "malformed": 4}
    assert list(out["sides"]) == ["src.dead_letter", envelope.METRICS_PORT]


def test_csv_quoted_newlines_and_iso_event_times(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("note", pa.string()), ("at", pa.string())])
    write(
        tmp_path / "a.csv",
        'id;note;at\n1;"two\nlines";2013-01-01T10:00:00Z\n'
        '2;plain;2013-01-01T10:00:01\n3;x;yesterday\n4;"y";2013-01-01T12:00:00+01:00\n',
    )
    reader = WireFileStreamReader(
        binding(
            files(str(tmp_path / "a.csv"), format="csv", delimiter=";", schema=schema),
            schema,
            event_time="at",
            per_epoch=10,
        )
    )
    [(_, _, out)] = run(reader)
    base = 1357034400000  # 2013-01-01T10:00:00Z
    assert [(r["id"], r["__et"]) for r in out["data"]] == [(1, base), (2, base + 1000), (4, base + 3600_000)]
    assert out["data"][0]["note"] == "two\nlines"
    dead = out["sides"]["src.dead_letter"]
    assert [(d["location"].rsplit(":", 1)[1], d["reason"]) for d in dead] == [
        ("5", "event time not parseable: 'yesterday'")
    ]


def test_jsonl_dead_letters_and_timestamps(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ms")), ("tag", pa.string())])
    lines = [
        '{"id": 1, "at": "2013-01-01T10:00:00", "tag": "a"}',
        "",
        '{"id": 2, "at": "2013-01-01T10:00:05"}',
        "not json",
        "[1, 2]",
        '{"id": "three", "at": "2013-01-01T10:00:06", "tag": "c"}',
        '{"id": 4, "tag": "d"}',
        '{"id": 5, "at": "2013-01-01T10:00:07", "tag": 5}',
    ]
    write(tmp_path / "e.jsonl", "\n".join(lines) + "\n")
    reader = WireFileStreamReader(
        binding(files(str(tmp_path), format="jsonl", schema=schema), schema, event_time="at", per_epoch=100)
    )
    [(_, end, out)] = run(reader)
    assert end["admitted"] == 7
    base = 1357034400000
    assert [(r["id"], r["tag"], r["__et"]) for r in out["data"]] == [(1, "a", base), (2, None, base + 5000)]
    dead = [(d["location"].rsplit(":", 1)[1], d["reason"]) for d in out["sides"]["src.dead_letter"]]
    assert [loc for loc, _ in dead] == ["4", "5", "6", "7", "8"]
    assert dead[0][1].startswith("jsonl: invalid JSON: Expecting value")
    assert dead[1][1] == "jsonl: expected a JSON object, got list"
    assert dead[2][1] == "jsonl: field id: cannot convert 'three' to int64"
    assert dead[3][1] == "event time missing"
    assert dead[4][1] == "jsonl: field tag: cannot convert 5 to string"
    assert metrics(out) == {"records": 7, "events": 2, "malformed": 5}


def test_jsonl_clean_file_takes_the_fast_path(tmp_path):
    write(tmp_path / "e.jsonl", "".join(f'{{"id": {i}, "ts": {i * 10}}}\n' for i in range(5)))
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
    reader = WireFileStreamReader(
        binding(files(str(tmp_path / "*.jsonl"), format="jsonl"), schema, per_epoch=2, delay=5)
    )
    epochs = run(reader)
    assert [[r["id"] for r in out["data"]] for *_, out in epochs] == [[0, 1], [2, 3], [4]]
    assert [e["watermark"] for _, e, _ in epochs] == [5, 25, envelope.MAX_WATERMARK]
    assert epochs[-1][1]["partitions"]["all"]["watermark"] == 35


def test_parquet_rows_casts_and_unreadable_files(tmp_path):
    table = pa.table({"id": ["1", "2", "x"], "at": pa.array([1000, None, 3000], pa.timestamp("s"))})
    pq.write_table(table, tmp_path / "a.parquet")
    write(tmp_path / "b.parquet", "this is not parquet")
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("s"))])
    reader = WireFileStreamReader(
        binding(
            files(str(tmp_path / "*.parquet"), format="parquet", schema=schema),
            schema,
            event_time="at",
            per_epoch=100,
        )
    )
    [(_, end, out)] = run(reader)
    assert end["admitted"] == 4  # three rows, plus one record for the unreadable file
    assert [(r["id"], r["__et"]) for r in out["data"]] == [(1, 1_000_000)]
    dead = [(d["location"], d["reason"], d["record"]) for d in out["sides"]["src.dead_letter"]]
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    assert dead[0] == (f"{a}:1", "event time missing", '{"id": "2", "at": null}')
    assert dead[1] == (
        f"{a}:2",
        "parquet: column id: cannot convert 'x' to int64",
        '{"id": "x", "at": "1970-01-01 00:50:00"}',
    )
    assert dead[2][0] == b and dead[2][1].startswith("parquet: cannot read file:")


def test_batches_match_the_arrow_schema_spark_expects(tmp_path):
    schema = pa.schema([("id", pa.int32()), ("at", pa.timestamp("s", tz="UTC")), ("name", pa.large_string())])
    write(tmp_path / "a.csv", "id,at,name\n1,2013-01-01T10:00:00Z,x\n")
    reader = WireFileStreamReader(
        binding(files(str(tmp_path / "a.csv"), format="csv", schema=schema), schema, event_time="at")
    )
    expected = spark_row_schema(schema)
    for *_, out in run(reader):
        assert all(b.schema.equals(expected) for b in out["batches"])
    assert expected.field("at").type == pa.timestamp("us", tz="UTC")


def test_empty_source_ends_at_once(tmp_path):
    write(tmp_path / "a.csv", "id,ts,v\n")
    reader = WireFileStreamReader(binding(files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)))
    epochs = run(reader)
    assert len(epochs) == 1 and epochs[0][1]["ended"]
    assert FileSource.from_dict(files("x", format="csv").to_dict()) == files("x", format="csv")


# ------------------------------------------------------------------------------ split reads


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    per_epoch=st.integers(1, 30),
    split=st.integers(1, 6),
    cores=st.integers(1, 4),
    bad=st.sets(st.integers(0, 47), max_size=5),
)
def test_split_ranges_read_what_one_task_reads(tmp_path_factory, sizes, per_epoch, split, cores, bad):
    """An epoch's range split over tasks (``SPLIT_RECORDS``, ``read_tasks``) yields the same
    records with the same ``__seq`` numbers, the same dead letters, counters that add up to the
    same, and the same watermark rows as one task, for any files, epoch size and split; and
    as many tasks as the rule says."""
    root = tmp_path_factory.mktemp("split")
    seq = 0
    for f, n in enumerate(sizes):
        rows = []
        for _ in range(n):
            rows.append((seq, 1000 * seq, "x" if seq in bad else 1.5))
            seq += 1
        write(root / f"f{f}.csv", csv_rows(rows))
    src = files(str(root / "*.csv"), format="csv", schema=SCHEMA)

    def epochs(split_records, tasks):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(partitioned, "SPLIT_RECORDS", split_records)
            patch.setattr(partitioned, "read_tasks", lambda: tasks)
            patch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(4))
            reader = WireFileStreamReader(binding(src, per_epoch=per_epoch))
            out = []
            for start, end, got in run(reader):
                parts = reader.partitions(start, end)
                taken = end["admitted"] - start["admitted"]
                out.append((len(parts), taken, got))
            return out

    whole, cut = epochs(10**9, 1), epochs(split, cores)
    assert len(whole) == len(cut)
    for (n1, taken, one), (n2, taken2, many) in zip(whole, cut, strict=True):
        assert taken == taken2 and n1 == 1
        assert n2 == (max(1, min(cores, taken // split)) if taken else 1)
        assert sorted(one["data"], key=lambda r: r["__seq"]) == sorted(many["data"], key=lambda r: r["__seq"])
        dead = "src.dead_letter"
        assert sorted(map(str, one["sides"].get(dead, []))) == sorted(map(str, many["sides"].get(dead, [])))
        assert one["marks"] == many["marks"]
        if taken:
            assert counters(one) == counters(many)
            assert gauges(one) == gauges(many)


@pytest.mark.parametrize(("cores", "scans", "tasks"), [(2, 1, 2), (2, 2, 1), (4, 2, 2), (2, 3, 1), (8, 3, 2)])
def test_a_source_scanned_by_several_branches_splits_its_ranges_over_fewer_tasks(
        tmp_path, monkeypatch, cores, scans, tasks):
    """Each scan of a branching flow gets ``cores // scans`` tasks (at least one) of a range long
    enough to split, and the same records as one task."""
    write(tmp_path / "f.csv", csv_rows([(i, 1000 * i, 1.5) for i in range(40)]))
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    monkeypatch.setattr(partitioned, "SPLIT_RECORDS", 5)
    monkeypatch.setattr(partitioned, "read_tasks", lambda: cores)
    reader = WireFileStreamReader(replace(binding(src, per_epoch=40), scans=scans))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(40))
    parts = reader.partitions(start, end)
    assert len(parts) == tasks
    rows = sorted(r["id"] for p in parts for r in decode(list(reader.read(p)))["data"])
    assert rows == list(range(40))


def counters(out):
    """The epoch's counters summed over its tasks (gauges left out)."""
    total: dict[str, int] = {}
    for r in out["sides"][envelope.METRICS_PORT]:
        if not r["name"].startswith("gauge:"):
            total[r["name"]] = total.get(r["name"], 0) + r["value"]
    return total


def test_planner_indexes_the_next_file_ahead_once_and_pickles(tmp_path, monkeypatch):
    """After planning an epoch in file a, the next file in reading order is indexed in the
    background; planning it later parses nothing again; the reader still pickles."""
    write(tmp_path / "a.csv", csv_rows([(i, i, 1) for i in range(5)]))
    write(tmp_path / "b.csv", csv_rows([(i, 10 + i, 1) for i in range(5)]))
    calls = count_parses(monkeypatch)
    reader = WireFileStreamReader(binding(files(str(tmp_path / "*.csv"), format="csv")))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(3))
    assert end["admitted"] == 3
    reader._read_ahead.join(10)
    assert calls == ["a.csv", "b.csv"]  # b indexed ahead, while epoch 1 would run
    again = pickle.loads(pickle.dumps(reader))
    assert again._read_ahead is None and again._index_lock is not reader._index_lock
    for _ in range(4):
        end = reader.latestOffset(end, ReadMaxRows(3))
    assert end["admitted"] == 10 and calls == ["a.csv", "b.csv"]


# ------------------------------------------------------------------------------ the driver's warm-up


def test_the_planner_reads_the_parses_the_driver_warmed_up_and_parses_what_changed(tmp_path, monkeypatch):
    """``warm_up`` (driver) parses each partition's first file into the binding's spill directory;
    a planner with that binding then parses neither it again, and its epochs are those of a planner
    without a warm-up (rows, watermarks, dead letters). A file rewritten after the warm-up has
    another stamp: the planner parses it."""
    (tmp_path / "in").mkdir()
    write(tmp_path / "in" / "a.csv", csv_rows([(1, 1000, 1.5), (2, 2000, "x")]))
    write(tmp_path / "in" / "b.csv", csv_rows([(3, 3000, 2.5)]))
    src = files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA)
    warmed = replace(binding(src, per_epoch=2), local=True, spill_dir=str(tmp_path / "spills"))
    parsed: list[str] = []
    real = file_readers.parse_file
    monkeypatch.setattr(file_readers, "parse_file", lambda path, spec: (parsed.append(os.path.basename(path)),
                                                                          real(path, spec))[1])
    WireFileStreamReader(warmed).warm_up()
    first = parsed[:]
    assert len(first) == 1 and (tmp_path / "spills").is_dir()
    parsed.clear()
    with_warm_up = run(WireFileStreamReader(warmed))
    assert first[0] not in parsed  # the planner read the driver's parse
    monkeypatch.setattr(file_stream, "_EXECUTOR_CACHE", file_readers.ParseCache(4))
    without = run(WireFileStreamReader(replace(binding(src, per_epoch=2), local=True,
                                               spill_dir=str(tmp_path / "other"))))
    def seen(epochs):  # what the offsets admitted (not their processing times), rows, dead letters
        return [((end["admitted"], end["watermark"], end["partitions"]["all"]["next"]), out["data"],
                 out["marks"], sorted(map(str, out["sides"].get("src.dead_letter", []))))
                for _, end, out in epochs]

    assert seen(with_warm_up) == seen(without)
    assert sum(len(e[3]) for e in seen(without)) == 1  # "x" is one dead letter
    assert sum(len(e[1]) for e in seen(without)) == 2  # and two rows
    write(tmp_path / "in" / first[0], csv_rows([(7, 7000, 7.5)]))  # changed after the warm-up
    parsed.clear()
    WireFileStreamReader(warmed)._index(file_stream._stamp(str(tmp_path / "in" / first[0])), "", first[0])
    assert parsed == [first[0]]


def test_a_planner_started_during_the_warm_up_waits_for_its_parse(tmp_path, monkeypatch):
    """While the driver's warm-up holds its lock (``WarmUpLock``, taken before the query starts), a
    planner that misses the spill waits for the lock instead of parsing the same file at the same
    time, then reads the warm-up's parse; with the lock released and no spill it parses at once.
    The warm-up itself, holding the lock, does not wait for it."""
    write(tmp_path / "a.csv", csv_rows([(1, 1000, 1.5), (2, 2000, 2.5)]))
    src = files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA)
    spills = tmp_path / "spills"
    warmed = replace(binding(src, per_epoch=2), local=True, spill_dir=str(spills))
    parsed: list[str] = []
    real = file_readers.parse_file
    monkeypatch.setattr(file_readers, "parse_file", lambda path, spec: (parsed.append(os.path.basename(path)),
                                                                          real(path, spec))[1])
    lock = parsed_spill.WarmUpLock(str(spills))
    stamp = file_stream._stamp(str(tmp_path / "a.csv"))
    planner = WireFileStreamReader(warmed)
    got: list[object] = []
    waiting = threading.Thread(target=lambda: got.append(planner._index(stamp, "", "a.csv")))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and parsed == []  # waits, parses nothing
    started = time.monotonic()
    WireFileStreamReader(warmed).warm_up()  # the driver's warm-up: its own lock does not hold it up
    assert time.monotonic() - started < 5 and parsed == ["a.csv"]
    lock.release()
    waiting.join(10)
    assert not waiting.is_alive() and parsed == ["a.csv"]  # the planner read the warm-up's spill
    assert got[0].records == 2
    write(tmp_path / "b.csv", csv_rows([(3, 3000, 3.5)]))
    waits: list[str] = []
    monkeypatch.setattr(file_stream, "await_warm_up", lambda d: waits.append(d) or False)
    planner._index(file_stream._stamp(str(tmp_path / "b.csv")), "", "b.csv")
    assert waits == [] and parsed == ["a.csv", "b.csv"]  # awaited once: later misses parse at once
    other = replace(warmed, spill_dir=str(tmp_path / "no-warm-up"))
    parsed.clear()
    WireFileStreamReader(other)._index(stamp, "", "a.csv")
    assert parsed == ["a.csv"]
