"""End to end: a flow over directories of poison files finishes, and finishes again on restart.

Each poison file once crashed the flow on every start (a crash loop) or changed its data:
a 0-byte file (IndexError), non-UTF-8 JSON Lines (a window failed on them; Parquet
output could not be decoded), a CSV field over 128 KiB next to a multi-line record
(``_csv.Error``), event times outside Spark's and Python's range (``DATETIME_OVERFLOW``),
and a float event time (silently truncated). The expectations below are derived by hand
from the files.
"""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest

import wire

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])

JSONL = {
    "a_empty.jsonl": b"",
    "b_good.jsonl": b'{"ts":1000,"user":"a","amount":1}\n{"ts":2000,"user":"b","amount":2}\n'
                    b'{"ts":3000,"user":"a","amount":3}\n',
    "c_latin1.jsonl": b'{"ts":4000,"user":"caf\xe9","amount":1}\n{"ts":4500,"user":"b","amount":4}\n',
    "d_range.jsonl": b'{"ts":1700000000000000000,"user":"a","amount":1}\n'
                     b'{"ts":-9223372036854775808,"user":"a","amount":1}\n{"ts":5000,"user":"a","amount":5}\n',
    "e_float.jsonl": b'{"ts":6000.7,"user":"a","amount":1}\n{"ts":6000.0,"user":"b","amount":6}',
    "f_blank.jsonl": b"\n\r\n  \n",
}
HUGE = 200_000
CSV = {
    "a_empty.csv": b"",
    "b_header.csv": b"ts,user,amount\r\n",
    "c_good.csv": b"ts,user,amount\n1000,a,1.5\n2000,b,2.0\n",
    "d_huge.csv": b'ts,user,amount\n3000,"x\ny",1.0\n4000,' + b"z" * HUGE + b",1.0\n5000,a,2.0\n",
    "e_float.csv": b"ts,user,amount\n6000.7,a,1.0\n7000,b,1.0\n",
    "f_range.csv": b"ts,user,amount\n1700000000000000000,a,1.0\n8000,a,1.0\n",
    "g_latin1.csv": b"ts,user,amount\n9000,caf\xe9,1.0\n9500,b,1.0\n",
}
RANGE = "is outside the supported range 0001-01-01..9999-12-31"
EXPECTED_DEAD = [
    ("csv", "d_huge.csv:4", f"csv: field 2 is {HUGE} bytes, over max_field_bytes=131072"),
    ("csv", "e_float.csv:2", "csv: column ts: cannot parse '6000.7' as int64"),
    ("csv", "f_range.csv:2", f"event time 1700000000000000000 ms {RANGE}"),
    ("csv", "g_latin1.csv:2", "csv: invalid UTF-8"),
    ("jsonl", "c_latin1.jsonl:1", "jsonl: invalid UTF-8: byte 0xe9 at column 23"),
    ("jsonl", "d_range.jsonl:1", f"event time 1700000000000000000 ms {RANGE}"),
    ("jsonl", "d_range.jsonl:2", f"event time -9223372036854775808 ms {RANGE}"),
    ("jsonl", "e_float.jsonl:1", "jsonl: field ts: cannot convert 6000.7 to int64"),
]
EXPECTED_EVENTS = sorted([
    # JSON Lines
    (1000, "a", 1.0), (2000, "b", 2.0), (3000, "a", 3.0), (4500, "b", 4.0), (5000, "a", 5.0),
    (6000, "b", 6.0),
    # CSV
    (1000, "a", 1.5), (2000, "b", 2.0), (3000, "x\ny", 1.0), (5000, "a", 2.0), (7000, "b", 1.0),
    (8000, "a", 1.0), (9500, "b", 1.0),
])
# one tumbling window [0 s, 10 s) per user: count and sum of the events above
EXPECTED_WINDOWS = [("a", 6, 13.5), ("b", 6, 16.0), ("x\ny", 1, 1.0)]


def build(tmp_path, windowed: bool):
    """The sources over the poison files, then a window (JSON Lines results) or no window (raw Parquet)."""
    for folder, contents in (("jsonl", JSONL), ("csv", CSV)):
        (tmp_path / folder).mkdir(exist_ok=True)
        for name, data in contents.items():
            (tmp_path / folder / name).write_bytes(data)
    flow = wire.Flow("poison-files")
    streams = [
        flow.source(wire.sources.files(str(tmp_path / fmt), format=fmt, schema=SCHEMA), event_time="ts",
                    key="user", max_events_per_epoch=8, name=fmt)
        for fmt in ("jsonl", "csv")
    ]
    events = streams[0].union(streams[1])
    if windowed:
        totals = events.window(wire.Tumbling("10s")).aggregate(n=wire.count(), total=wire.sum("amount"),
                                                                name="totals")
        totals.sink(wire.sinks.jsonl(tmp_path / "out"), name="out")
    else:
        events.sink(wire.sinks.parquet(tmp_path / "out"), name="out")
    flow.dead_letters().sink(wire.sinks.jsonl(tmp_path / "dlq"), name="dlq")
    return flow


def read_jsonl(path):
    rows = []
    for f in sorted(path.glob("*/*.jsonl")):
        rows += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()]
    return rows


def check_outputs(tmp_path, windowed: bool) -> None:
    if windowed:
        totals = [(r["user"], r["n"], r["total"]) for r in read_jsonl(tmp_path / "out")]
        assert sorted(totals) == EXPECTED_WINDOWS
    else:
        events = duckdb.sql(f"SELECT ts, \"user\", amount FROM read_parquet('{tmp_path}/out/*/*.parquet')")
        assert sorted(events.fetchall()) == EXPECTED_EVENTS  # DuckDB decodes every string
    dlq = read_jsonl(tmp_path / "dlq")
    assert sorted((r["step"], r["location"].rsplit("/", 1)[1], r["reason"]) for r in dlq) == EXPECTED_DEAD
    huge = next(r for r in dlq if r["location"].endswith("d_huge.csv:4"))
    assert huge["record"] == "4000," + "z" * HUGE + ",1.0"  # the raw record is kept whole
    latin1 = next(r for r in dlq if r["location"].endswith("c_latin1.jsonl:1"))
    assert latin1["record"] == '{"ts":4000,"user":"caf\ufffd","amount":1}'


@pytest.mark.parametrize("windowed", [True, False], ids=["window", "no-window"])
def test_poison_files_go_to_the_dead_letters_and_a_restart_finishes(spark, tmp_path, windowed):
    checkpoint = str(tmp_path / "ck")
    first = build(tmp_path, windowed).run(checkpoint=checkpoint, spark=spark)
    check_outputs(tmp_path, windowed)
    assert first.total("malformed") == len(EXPECTED_DEAD)
    assert first.input_events == len(EXPECTED_EVENTS)

    # the same flow on the same checkpoint: it finishes, and writes nothing twice
    second = build(tmp_path, windowed).run(checkpoint=checkpoint, spark=spark)
    check_outputs(tmp_path, windowed)
    assert second.total("malformed") == 0 and second.input_events == 0
