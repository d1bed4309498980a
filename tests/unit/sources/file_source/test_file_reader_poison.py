"""Poison files for the file readers: each case once crashed a flow or changed its data.

Expectations are derived by hand from the file contents: which records are events
(and with which values), which are dead letters, at which location, with which reason.
"""

from __future__ import annotations

import csv
import datetime as dt
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError
from wire.sources.file_source.formats import (
    DEFAULT_MAX_FIELD_BYTES,
    MAX_EVENT_TIME_MS,
    MIN_EVENT_TIME_MS,
    ParseSpec,
    event_times_ms,
    parse_file,
)
from wire.sources.file_source.source import FileSource, SourceBinding, files
from wire.sources.http_source.reader import parse_records
from wire.sources.redis_source.reader import decode_entries

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
RANGE = "0001-01-01..9999-12-31"


def parse(tmp_path, name: str, data: bytes | pa.Table, *, schema: pa.Schema = SCHEMA, **options):
    path = tmp_path / name
    if isinstance(data, pa.Table):
        pq.write_table(data, path)
    else:
        path.write_bytes(data)
    fmt = name.rsplit(".", 1)[1]
    return str(path), parse_file(str(path), ParseSpec(fmt, schema, "ts", **options))


def events(parsed) -> list[tuple]:
    rows = parsed.table.to_pylist()
    return [(*row.values(), int(et)) for row, et in zip(rows, parsed.event_times, strict=True)]


def dead(parsed) -> list[tuple[str, str]]:
    return [(m.location.rsplit(":", 1)[1], m.reason) for m in parsed.malformed]


def check_accounting(parsed) -> None:
    """Every record is exactly once an event or a dead letter."""
    seen = sorted([*parsed.valid.tolist(), *(m.record for m in parsed.malformed)])
    assert seen == list(range(parsed.records))
    assert parsed.table.num_rows == len(parsed.valid) == len(parsed.event_times)
    parsed.table.validate(full=True)  # e.g. every string is valid UTF-8


# --------------------------------------------------------------------------- empty and odd layouts


@pytest.mark.parametrize(
    ("data", "expected_events", "expected_lines"),
    [
        (b"", [], []),  # 0 bytes: was IndexError in _lines
        (b"id,ts,v", [], []),  # header only, no newline
        (b"id,ts,v\r\n", [], []),  # header only, CRLF
        (b"\n\n\r\n  \n", None, None),  # blank lines (and one of spaces: a 1-column record)
        # CRLF, no final newline
        (b"id,ts,v\r\n1,10,a\r\n2,20,b", [(1, 10, "a", 10), (2, 20, "b", 20)], ["2", "3"]),
        (b"\nid,ts,v\n\n1,10,a\n\n", [(1, 10, "a", 10)], ["4"]),
    ],
)
def test_csv_empty_header_only_blank_crlf(tmp_path, data, expected_events, expected_lines):
    _, parsed = parse(tmp_path, "a.csv", data)
    check_accounting(parsed)
    if expected_events is None:  # the line of spaces is the header; no record follows
        assert parsed.records == 0
        return
    assert events(parsed) == expected_events
    assert [int(i) for i in parsed.valid] == list(range(len(expected_lines)))
    assert parsed.malformed == ()


@pytest.mark.parametrize(
    ("data", "expected_events"),
    [
        (b"", []),  # 0 bytes: was IndexError in _lines
        (b"\n \n\t\r\n\r\n", []),  # blank lines only
        (b'{"id":1,"ts":10,"v":"a"}', [(1, 10, "a", 10)]),  # no final newline
        (b'{"id":1,"ts":10,"v":"a"}\r\n\r\n{"id":2,"ts":20,"v":"b"}\r\n',
         [(1, 10, "a", 10), (2, 20, "b", 20)]),
    ],
)
def test_jsonl_empty_blank_crlf(tmp_path, data, expected_events):
    _, parsed = parse(tmp_path, "a.jsonl", data)
    check_accounting(parsed)
    assert events(parsed) == expected_events
    assert parsed.records == len(expected_events) and parsed.malformed == ()


# --------------------------------------------------------------------------- invalid UTF-8


def test_jsonl_invalid_utf8_is_a_dead_letter_and_the_rest_is_read(tmp_path):
    data = (
        b'{"id":1,"ts":10,"v":"caf\xe9"}\n'  # Latin-1 byte: not UTF-8
        b'{"id":2,"ts":20,"v":"ok"}\n'
        b'{"id":3,"ts":30,"v":"\\ud800"}\n'  # a lone surrogate escape: no UTF-8 encoding
        b'{"id":4,"ts":40,"v":"\\ud83d\\ude00"}\n'  # a valid surrogate pair
        b"\xff\xfe{}\n"
        b'{"id":6,"ts":60,"v":"\xc3\xa9"}\n'  # é, valid
    )
    path, parsed = parse(tmp_path, "a.jsonl", data)
    check_accounting(parsed)
    assert events(parsed) == [(2, 20, "ok", 20), (4, 40, "\U0001f600", 40), (6, 60, "é", 60)]
    assert [loc for loc, _ in dead(parsed)] == ["1", "3", "5"]
    assert all("invalid UTF-8" in reason for _, reason in dead(parsed)), dead(parsed)
    assert parsed.malformed[0].raw == '{"id":1,"ts":10,"v":"caf\ufffd"}'  # shown with U+FFFD
    assert parsed.malformed[0].location == f"{path}:1"


def test_jsonl_invalid_utf8_in_an_otherwise_clean_file(tmp_path):
    # Arrow's JSON reader accepted these bytes as a string; a window later failed on them
    _, parsed = parse(tmp_path, "a.jsonl", b'{"id":1,"ts":10,"v":"caf\xe9"}\n{"id":2,"ts":20,"v":"x"}\n')
    check_accounting(parsed)
    assert events(parsed) == [(2, 20, "x", 20)]
    assert dead(parsed) == [("1", "jsonl: invalid UTF-8: byte 0xe9 at column 25")]


def test_csv_invalid_utf8_in_any_column_is_a_dead_letter(tmp_path):
    data = b"id,ts,v,extra\n1,10,a,caf\xe9\n2,20,b,ok\n3,30,\xff,x\n"
    _, parsed = parse(tmp_path, "a.csv", data)
    check_accounting(parsed)
    assert events(parsed) == [(2, 20, "b", 20)]
    assert dead(parsed) == [("2", "csv: invalid UTF-8"), ("4", "csv: invalid UTF-8")]
    # a column the schema does not name is checked too (Arrow's CSV reader skipped it)
    _, parsed = parse(tmp_path, "b.csv", b"id,ts,v,extra\n1,10,a,caf\xe9\n2,20,b,ok\n")
    assert events(parsed) == [(2, 20, "b", 20)]
    assert dead(parsed) == [("2", "csv: invalid UTF-8")]


# --------------------------------------------------------------------------- huge fields


def test_csv_field_over_the_default_limit_is_a_dead_letter(tmp_path):
    big = b"x" * (DEFAULT_MAX_FIELD_BYTES + 1)
    exact = b"y" * DEFAULT_MAX_FIELD_BYTES
    data = b"id,ts,v\n1,10," + big + b"\n2,20,ok\n3,30," + exact + b"\n"
    _, parsed = parse(tmp_path, "a.csv", data)
    check_accounting(parsed)
    assert [row[:2] for row in events(parsed)] == [(2, 20), (3, 30)]
    assert dead(parsed) == [("2", "csv: field 3 is 131073 bytes, over max_field_bytes=131072")]


@pytest.mark.parametrize("size", [200_000, 3_000_000])
def test_csv_huge_field_next_to_a_multiline_record_does_not_crash(tmp_path, size):
    # a quoted newline (or a field over Arrow's 1 MiB block) sends the file to Python's csv
    # module, whose process-global field_size_limit (128 Ki characters) raised _csv.Error
    limit_before = csv.field_size_limit()
    data = b'id,ts,v\n1,10,"two\nlines"\n2,20,' + b"z" * size + b"\n3,30,ok\n"
    _, parsed = parse(tmp_path, "a.csv", data)
    check_accounting(parsed)
    assert events(parsed) == [(1, 10, "two\nlines", 10), (3, 30, "ok", 30)]
    assert dead(parsed) == [("4", f"csv: field 3 is {size} bytes, over max_field_bytes=131072")]
    assert csv.field_size_limit() == limit_before  # the global limit is left as it was


def test_max_field_bytes_counts_utf8_bytes_and_is_configurable(tmp_path):
    data = "id,ts,v\n1,10,abcdefghij\n2,20,abcdefghijk\n3,30,éééééé\n4,40,ééééé\n".encode()
    _, parsed = parse(tmp_path, "a.csv", data, max_field_bytes=10)
    check_accounting(parsed)
    assert events(parsed) == [(1, 10, "abcdefghij", 10), (4, 40, "ééééé", 40)]
    assert dead(parsed) == [
        ("3", "csv: field 3 is 11 bytes, over max_field_bytes=10"),
        ("4", "csv: field 3 is 12 bytes, over max_field_bytes=10"),  # 6 characters, 12 bytes
    ]
    # a much larger limit than Python's default also works, and the global one is untouched
    limit_before = csv.field_size_limit()
    data = b'id,ts,v\n1,10,"a\nb"\n2,20,' + b"q" * 300_000 + b"\n"
    _, parsed = parse(tmp_path, "b.csv", data, max_field_bytes=1 << 20)
    assert [row[:2] for row in events(parsed)] == [(1, 10), (2, 20)]
    assert csv.field_size_limit() == limit_before


def test_max_field_bytes_option_of_files(tmp_path):
    assert files("x", format="csv").max_field_bytes == 131072 == DEFAULT_MAX_FIELD_BYTES
    src = files("x", format="csv", max_field_bytes=1 << 20)
    assert FileSource.from_dict(src.to_dict()) == src
    binding = SourceBinding("s", src, SCHEMA, "ts", WatermarkPolicy(0), 10, 1)
    assert SourceBinding.from_json(binding.to_json(), FileSource).parse_spec().max_field_bytes == 1 << 20
    legacy = {k: v for k, v in files("x", format="csv").to_dict().items() if k != "max_field_bytes"}
    assert FileSource.from_dict(legacy).max_field_bytes == 131072  # offsets written before the option
    for bad in (0, -1, True, 1.5, "128k", None):
        with pytest.raises(ConfigError) as e:
            files("x", format="csv", max_field_bytes=bad)
        assert e.value.parameter == "max_field_bytes" and "int" in str(e.value)


# --------------------------------------------------------------------------- event time range


def test_supported_event_time_range_is_years_1_to_9999_utc():
    start = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
    end = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert MIN_EVENT_TIME_MS == (start - epoch) // dt.timedelta(milliseconds=1) == -62135596800000
    assert MAX_EVENT_TIME_MS == (end - epoch) // dt.timedelta(milliseconds=1) == 253402300799999


def out_of_range(ms: int) -> str:
    return f"event time {ms} ms is outside the supported range {RANGE}"


def test_jsonl_event_times_outside_the_supported_range_are_dead_letters(tmp_path):
    values = [
        1_700_000_000_000_000_000,  # ns read as ms
        -(2**63), 2**63 - 1,
        MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS,  # the bounds are inside
        MIN_EVENT_TIME_MS - 1, MAX_EVENT_TIME_MS + 1,
        1000,
    ]
    data = "".join(f'{{"id":{i},"ts":{v}}}\n' for i, v in enumerate(values)).encode()
    _, parsed = parse(tmp_path, "a.jsonl", data)
    check_accounting(parsed)
    assert [(row[0], row[-1]) for row in events(parsed)] == [
        (3, MIN_EVENT_TIME_MS), (4, MAX_EVENT_TIME_MS), (7, 1000)
    ]
    assert dead(parsed) == [
        ("1", out_of_range(1_700_000_000_000_000_000)),
        ("2", out_of_range(-(2**63))),
        ("3", out_of_range(2**63 - 1)),
        ("6", out_of_range(MIN_EVENT_TIME_MS - 1)),
        ("7", out_of_range(MAX_EVENT_TIME_MS + 1)),
    ]


def test_event_times_ms_range_for_every_column_type():
    def run(values, typ):
        ms, errors = event_times_ms(pa.array(values, typ))
        ok = [int(ms[i]) for i in range(len(values)) if i not in errors]
        return ok, errors

    assert run([2**64 - 1, 5], pa.uint64()) == ([5], {0: out_of_range(2**64 - 1)})
    # seconds: 2**62 s overflows int64 ms (it used to wrap around silently)
    ok, errors = run([2**62, 253402300799, 253402300800, None], pa.timestamp("s"))
    assert ok == [253402300799000]
    assert errors == {
        0: out_of_range(2**62 * 1000), 2: out_of_range(253402300800000), 3: "event time missing"
    }
    # microseconds beyond year 9999 (Spark holds them, Python's datetime does not)
    ok, errors = run([2**62, 1_500], pa.timestamp("us", "UTC"))
    assert ok == [1] and errors == {0: out_of_range(2**62 // 1000)}
    # nanoseconds: every value fits; sub-millisecond parts round down (to the earlier ms)
    ok, errors = run([-(2**63) + 1, 2**63 - 1, -1, 1_999_999], pa.timestamp("ns"))
    assert ok == [(-(2**63) + 1) // 10**6, (2**63 - 1) // 10**6, -1, 1] and errors == {}
    days_1 = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
    days_9999 = (dt.date(9999, 12, 31) - dt.date(1970, 1, 1)).days
    ok, errors = run([days_1, days_9999, days_9999 + 1], pa.date32())
    assert ok == [MIN_EVENT_TIME_MS, days_9999 * 86_400_000]
    assert errors == {2: out_of_range((days_9999 + 1) * 86_400_000)}
    ok, errors = run(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999Z"], pa.string())
    assert ok == [MAX_EVENT_TIME_MS] and errors == {0: out_of_range(MIN_EVENT_TIME_MS - 3_600_000)}


def test_parquet_out_of_range_timestamps_do_not_raise(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")), ("at", pa.timestamp("us"))])
    big = 2**62  # µs: about year 146,000
    table = pa.table(
        {
            "id": [1, 2, 3],
            "ts": pa.array([big, 1_000_000, 2_000_000], pa.timestamp("us")),
            "at": pa.array([0, big, 0], pa.timestamp("us")),  # a payload timestamp, not the event time
        }
    )
    _, parsed = parse(tmp_path, "a.parquet", table, schema=schema)
    check_accounting(parsed)
    assert [(row[0], row[-1]) for row in events(parsed)] == [(3, 2000)]
    assert dead(parsed) == [
        ("0", out_of_range(big // 1000)),
        ("1", f"parquet: column at: {big // 1000} ms is outside the supported range {RANGE}"),
    ]
    assert str(big) in parsed.malformed[0].raw  # the raw row still renders


def test_http_ingest_and_redis_share_the_range_check():
    ingest = parse_records([(1, '{"t": 1700000000000000000}'), (2, '{"t": 5}')],
                           pa.schema([("t", pa.int64())]), "t")
    assert ingest.positions.tolist() == [1]  # the record with seq 2
    assert ingest.dead == [("wal:1", out_of_range(1_700_000_000_000_000_000), '{"t": 1700000000000000000}')]
    decoded = decode_entries([("1-0", {"t": str(2**63 - 1)}), ("2-0", {"t": "7"})],
                             schema=pa.schema([("t", pa.int64())]), event_time="t",
                             field_encoding="fields", stream="s")
    assert decoded.event_times.tolist() == [7]
    assert [(loc, reason) for loc, reason, _ in decoded.dead] == [("s:1-0", out_of_range(2**63 - 1))]


# --------------------------------------------------------------------------- non-integral numbers


def test_jsonl_float_for_an_int64_column_is_a_dead_letter(tmp_path):
    data = (
        b'{"id":1,"ts":1000.7,"v":"a"}\n'
        b'{"id":2,"ts":2000.0,"v":"b"}\n'  # integral: accepted
        b'{"id":3.5,"ts":3000,"v":"c"}\n'
        b'{"id":4,"ts":4e3,"v":"d"}\n'  # integral: accepted
        b'{"id":5,"ts":5000.0000000000001,"v":"e"}\n'  # a double rounds it to 5000.0; the text does not
        b'{"id":6,"ts":1e400,"v":"f"}\n'
        b'{"id":9007199254740993.0,"ts":7000,"v":"g"}\n'  # 2**53 + 1: kept exactly, not via a double
        b'{"id":-0.0,"ts":-8e0,"v":"h"}\n'
    )
    _, parsed = parse(tmp_path, "a.jsonl", data)
    check_accounting(parsed)
    assert events(parsed) == [
        (2, 2000, "b", 2000), (4, 4000, "d", 4000), (2**53 + 1, 7000, "g", 7000), (0, -8, "h", -8)
    ]
    assert dead(parsed) == [
        ("1", "jsonl: field ts: cannot convert 1000.7 to int64"),
        ("3", "jsonl: field id: cannot convert 3.5 to int64"),
        ("5", "jsonl: field ts: cannot convert 5000.0000000000001 to int64"),
        ("6", "jsonl: field ts: cannot convert 1e400 to int64"),
    ]


@pytest.mark.parametrize("bad_line", [b"", b'{"t":3,"x":1.5}\xff\n'])  # clean (Arrow's reader), or not
def test_jsonl_integer_for_a_double_column_is_the_nearest_double(tmp_path, bad_line):
    """As Arrow's CSV and JSON readers take it: 2**53 + 1 as 2**53, 10**400 (beyond doubles) as
    infinity (as Python's ``json`` parses ``1e400``); the same whether Arrow's reader reads the
    file or, for a file with an invalid line, the lines are parsed one by one."""
    schema = pa.schema([("t", pa.int64()), ("x", pa.float64())])
    big = b"1" + b"0" * 400
    data = (b'{"t":1,"x":9007199254740993}\n{"t":2,"x":-' + big + b'}\n' + bad_line
            + b'{"t":4,"x":' + big + b'}\n')
    (tmp_path / "a.jsonl").write_bytes(data)
    parsed = parse_file(str(tmp_path / "a.jsonl"), ParseSpec("jsonl", schema, "t"))
    assert parsed.table.to_pylist() == [{"t": 1, "x": 9007199254740992.0}, {"t": 2, "x": -math.inf},
                                        {"t": 4, "x": math.inf}]
    assert [m.record for m in parsed.malformed] == ([2] if bad_line else [])


def test_http_ingest_float_event_time_is_a_dead_letter():
    parsed = parse_records([(1, '{"t": 1000.7}'), (2, '{"t": 2000.0}')], pa.schema([("t", pa.int64())]), "t")
    assert parsed.event_times.tolist() == [2000]
    assert parsed.dead == [("wal:1", "field t: cannot convert 1000.7 to int64", '{"t": 1000.7}')]


def test_csv_non_integer_text_for_an_int64_column_is_a_dead_letter(tmp_path):
    # CSV integer columns take integer text only: "1000.0" is a dead letter too
    data = b"id,ts,v\n1,1000.7,a\n2,2000,b\n3.0,3000,c\n4,1e3,d\n"
    _, parsed = parse(tmp_path, "a.csv", data)
    check_accounting(parsed)
    assert events(parsed) == [(2, 2000, "b", 2000)]
    assert dead(parsed) == [
        ("2", "csv: column ts: cannot parse '1000.7' as int64"),
        ("4", "csv: column id: cannot parse '3.0' as int64"),
        ("5", "csv: column ts: cannot parse '1e3' as int64"),
    ]


def test_parquet_double_column_for_an_int64_column(tmp_path):
    table = pa.table(
        {
            "id": pa.array([1.0, 2.5, 3.0, float("nan"), 5.0]),
            "ts": pa.array([1000.7, 2000.0, 3000.0, 4000.0, 1e19]),
            "v": ["a", "b", "c", "d", "e"],
        }
    )
    _, parsed = parse(tmp_path, "a.parquet", table)
    check_accounting(parsed)
    assert events(parsed) == [(3, 3000, "c", 3000)]
    assert dead(parsed) == [
        ("0", "parquet: column ts: cannot convert 1000.7 to int64"),
        ("1", "parquet: column id: cannot convert 2.5 to int64"),
        ("3", "parquet: column id: cannot convert nan to int64"),
        ("4", "parquet: column ts: cannot convert 1e+19 to int64"),
    ]
    assert np.all(parsed.event_times == [3000])


def test_schema_inference_skips_0_byte_files(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"")  # sorts first; inferring from it failed ("Empty CSV file")
    (tmp_path / "b.csv").write_text("id,ts\n1,2\n")
    (tmp_path / "a.jsonl").write_bytes(b"")
    (tmp_path / "b.jsonl").write_text('{"id": 1, "ts": 2}\n')
    for fmt in ("csv", "jsonl"):
        schema = files(str(tmp_path), format=fmt).resolve_schema()
        assert schema.names == ["id", "ts"] and schema.field("ts").type == pa.int64()
