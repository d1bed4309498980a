"""One CSV record of invalid UTF-8 must not change the inferred schema (issue 26 item 4).

Arrow's CSV inference types a column ``binary`` when any value in its sample is not
UTF-8; the record is a dead letter when the file is read, so it must not take part in
the inference either. Expectations are derived by hand from the file contents.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from wire.sources.file_source.formats import ParseSpec, parse_file
from wire.sources.file_source.source import files

LINES = [b"ts,k,amount", b"1000,a,1.5", b"2000,b,2.5", None, b"4000,a,4.5", b"5000,\"c,d\",5.5"]
EXPECTED_SCHEMA = pa.schema([("ts", pa.int64()), ("k", pa.string()), ("amount", pa.float64())])
GOOD = [(1000, "a", 1.5), (2000, "b", 2.5), (4000, "a", 4.5), (5000, "c,d", 5.5)]


@pytest.mark.parametrize(("poison", "where"), [
    (b"3000,\xffx,3.5", "key column"),
    (b"3000,b,3.\xff5", "numeric column"),
    (b"\xfe\xff,b,3.5", "event time column"),
])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_a_poison_record_keeps_the_schema_and_goes_to_the_dead_letters(tmp_path, poison, where, newline):
    path = tmp_path / "log.csv"
    path.write_bytes(newline.join(poison if line is None else line for line in LINES) + newline)

    schema = files(str(path), format="csv").resolve_schema()
    assert schema == EXPECTED_SCHEMA, where

    parsed = parse_file(str(path), ParseSpec("csv", schema, "ts"))
    assert [tuple(r.values()) for r in parsed.table.to_pylist()] == GOOD
    assert [(m.location, m.reason) for m in parsed.malformed] == [(f"{path}:4", "csv: invalid UTF-8")]
    assert parsed.malformed[0].record == 2  # the third record (header not counted)


def test_a_clean_file_is_inferred_as_before(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"\n".join(line for line in LINES if line is not None) + b"\n")
    assert files(str(path), format="csv").resolve_schema() == EXPECTED_SCHEMA


def test_a_file_larger_than_the_sample_infers_from_whole_lines(tmp_path):
    path = tmp_path / "big.csv"
    rows = b"".join(b"%d,k%d,%d.25\n" % (i, i % 7, i) for i in range(120_000))  # > 1 MiB
    path.write_bytes(b"ts,k,amount\n" + b"3,\xff,1\n" + rows)
    assert files(str(path), format="csv").resolve_schema() == EXPECTED_SCHEMA
