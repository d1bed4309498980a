"""Property tests of the file readers: random, truncated and mutated CSV, JSON Lines and Parquet.

For any input, ``parse_file`` never raises and every record of the file ends up exactly
once, as an event or as a dead letter. The records are counted independently of the
reader (JSON Lines: non-blank physical lines; CSV: the rows written; Parquet: the rows
pyarrow reads, or one record for a file it cannot read), and where an oracle can be
written from the input alone (JSON Lines always, CSV and Parquet before mutation) each
record's fate and each event's values are checked against it.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.sources.file_source.formats import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS, ParseSpec, parse_file

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
NULLS = ("", "NA", "null")
INT64 = (-(2**63), 2**63 - 1)
_tmp = Path(tempfile.mkdtemp(prefix="wire-readers-fuzz-"))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(name: str, data: bytes, **options: object):
    path = _tmp / name
    path.write_bytes(data)
    fmt = name.rsplit(".", 1)[1]
    return parse_file(str(path), ParseSpec(fmt, SCHEMA, "ts", **options))  # type: ignore[arg-type]


def check_exactly_once(parsed) -> None:
    """Each record index once, as an event or a dead letter; the table is well formed."""
    valid = parsed.valid.tolist()
    bad = [m.record for m in parsed.malformed]
    assert sorted(valid + bad) == list(range(parsed.records))
    assert valid == sorted(valid) and bad == sorted(bad)
    assert parsed.table.num_rows == len(valid) == len(parsed.event_times)
    parsed.table.validate(full=True)  # e.g. no invalid UTF-8 in a string column
    assert all(MIN_EVENT_TIME_MS <= int(t) <= MAX_EVENT_TIME_MS for t in parsed.event_times)
    assert all(m.reason for m in parsed.malformed)


def fates(parsed) -> list[tuple | None]:
    """Per record: the event's (id, ts, v, event time), or None for a dead letter."""
    out: list[tuple | None] = [None] * parsed.records
    for row, record, et in zip(parsed.table.to_pylist(), parsed.valid, parsed.event_times, strict=True):
        out[int(record)] = (row["id"], row["ts"], row["v"], int(et))
    return out


def in_range(ms: int) -> bool:
    return MIN_EVENT_TIME_MS <= ms <= MAX_EVENT_TIME_MS


JUNK = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\ud800", b"\n", b"\r", b"\r\n", b"\x00", b'"', b",", b"{",
        b"}", b"1e999", b"NaN", b"\xef\xbb\xbf", b"[" * 3000, b"x" * 300]


def mutate(data: bytes, draw: st.DataObject) -> bytes:
    """Truncate, flip, insert or delete bytes at a drawn position."""
    kind = draw.draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
    at = draw.draw(st.integers(0, len(data)))
    if kind == "truncate":
        return data[:at]
    if kind == "delete":
        return data[:at] + data[at + draw.draw(st.integers(1, 8)):]
    if kind == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ draw.draw(st.integers(1, 255))]) + data[at + 1:]
    return data[:at] + draw.draw(st.sampled_from(JUNK)) + data[at:]


# ----------------------------------------------------------------------------------- JSON Lines

_int_text = st.one_of(
    st.integers(*INT64).map(str),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from([MIN_EVENT_TIME_MS - 1, MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS, MAX_EVENT_TIME_MS + 1])
    .map(str),
)
_number_text = st.one_of(
    _int_text,
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**6), 10**6).map(lambda i: f"{i}.0"),
    st.sampled_from(["1000.7", "2000.0", "4e3", "1E3", "-0.0", "5000.0000000000001", "1e400", "-1e400",
                     "9007199254740993.0", "NaN", "Infinity", "1e-400", "0.5e1", "12345678901234567890.0"]),
)
_json_value = st.one_of(
    _number_text,
    st.text(max_size=8).map(lambda s: json.dumps(s)),  # lone surrogates give \\udXXX escapes
    st.sampled_from(["null", "true", "false", "[]", "{}", '"12"', '"x"', '" 7"', '"1.5"', '[1,"a"]']),
)


@st.composite
def jsonl_line(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["object"] * 6 + ["junk", "blank", "array", "nested"]))
    if kind == "junk":
        return draw(st.text(max_size=12))
    if kind == "blank":
        return draw(st.sampled_from(["", " ", "\t", "  \t "]))
    if kind == "array":
        return "[1, 2]"
    if kind == "nested":
        return '{"id": 1, "ts": 2, "v": ' + "[" * 2000 + "]" * 2000 + "}"
    fields = {name: draw(_json_value) for name in draw(st.lists(st.sampled_from(["id", "ts", "v", "w"]),
                                                                   unique=True, max_size=4))}
    if draw(st.booleans()):
        fields["ts"] = draw(_int_text)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


def jsonl_oracle(data: bytes) -> list[tuple | None]:
    """The expected fate of each non-blank physical line, computed from the bytes alone."""
    out: list[tuple | None] = []
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark opening the file is skipped
        data = data[3:]
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        out.append(_json_record(line))
    return out


def _exact_int(value: object) -> int | None:
    """The integer a JSON number denotes exactly, if it is one and fits int64."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value() or value.adjusted() > 19:
            return None
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        value = int(value)
    if isinstance(value, int) and INT64[0] <= value <= INT64[1]:
        return value
    return None


def _json_number(text: str) -> Decimal | float:
    """A JSON number with a fraction or exponent, exactly; one beyond Decimal's exponent range
    (``1e9991000000000000146``) as a float (infinite or zero): it is no exact integer either way."""
    try:
        return Decimal(text)
    except InvalidOperation:
        return float(text)


def _json_record(line: bytes) -> tuple | None:
    try:
        obj = json.loads(line.decode("utf-8"), parse_float=_json_number)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    try:
        json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape: no UTF-8 encoding
        return None
    ident, ts, v = obj.get("id"), obj.get("ts"), obj.get("v")
    exact_id = None if ident is None else _exact_int(ident)
    exact_ts = None if ts is None else _exact_int(ts)
    if (ident is not None and exact_id is None) or exact_ts is None or not in_range(exact_ts):
        return None
    if v is not None and not isinstance(v, str):
        return None
    return (exact_id, exact_ts, v, exact_ts)


@SETTINGS
@given(st.lists(jsonl_line(), max_size=8), st.sampled_from(["\n", "\r\n"]), st.booleans(),
       st.sampled_from(["utf-8", "surrogatepass"]))
def test_jsonl_every_line_once_with_exact_values(lines, newline, final_newline, encoding):
    text = newline.join(lines) + (newline if final_newline else "")
    data = text.encode("utf-8", "surrogatepass") if encoding == "surrogatepass" else text.encode(
        "utf-8", "replace")
    parsed = run("f.jsonl", data)
    check_exactly_once(parsed)
    assert fates(parsed) == jsonl_oracle(data)


@SETTINGS
@given(st.lists(jsonl_line(), max_size=6), st.data())
def test_jsonl_mutated_or_random_bytes(lines, draw):
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    for _ in range(draw.draw(st.integers(1, 3))):
        data = mutate(data, draw)
    if draw.draw(st.booleans()):
        data = draw.draw(st.binary(max_size=200))
    parsed = run("m.jsonl", data)
    check_exactly_once(parsed)
    assert fates(parsed) == jsonl_oracle(data)


def test_jsonl_numbers_beyond_decimal_range_in_any_field():
    """Exponents no Decimal holds (found by the test above): valid JSON, never an exact integer."""
    data = (b'{"id": 1, "ts": 1000, "v": "a", "w": -1e9991000000000000146}\n'
            b'{"id": 2, "ts": 1e9991000000000000146, "v": "b"}\n'
            b'{"id": 3e-9991000000000000146, "ts": 1000, "v": "c"}\n')
    parsed = run("big.jsonl", data)
    check_exactly_once(parsed)
    assert fates(parsed) == jsonl_oracle(data) == [(1, 1000, "a", 1000), None, None]


# ----------------------------------------------------------------------------------------- CSV

_raw_field = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=10),
    st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape")),  # invalid UTF-8 bytes
    st.sampled_from(["", "NA", "null", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "x" * 40]),
)
_int_field = st.one_of(_int_text, st.sampled_from(["", "NA", "1000.7", "1000.0", "1e3", "abc", "-", " 5"]))


@st.composite
def csv_table(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    extra = draw(st.booleans())
    header = ["id", "ts", "v", *(["extra"] if extra else [])]
    rows = []
    for _ in range(draw(st.integers(0, 8))):
        row = [draw(_int_field), draw(_int_field), draw(_raw_field)]
        if extra:
            row.append(draw(_raw_field))
        shape = draw(st.sampled_from(["ok"] * 8 + ["short", "long"]))
        row = row[:-1] if shape == "short" else [*row, "more"] if shape == "long" else row
        rows.append(row)
    return header, rows


def write_csv(header: list[str], rows: list[list[str]], newline: str) -> bytes:
    """Rows as CSV; a field holding a CR or LF is quoted whatever the line end.

    (Python's writer quotes only the characters of its own line terminator.)
    """
    lines = []
    for row in [header, *rows]:
        out = io.StringIO(newline="")
        csv.writer(out, lineterminator="\r\n").writerow(row)
        lines.append(out.getvalue()[:-2] + newline)
    return "".join(lines).encode("utf-8", "surrogateescape")


def csv_oracle(header: list[str], rows: list[list[str]], limit: int) -> list[tuple | None]:
    out: list[tuple | None] = []
    for row in rows:
        raw = [f.encode("utf-8", "surrogateescape") for f in row]
        if len(row) != len(header) or any(len(b) > limit for b in raw):
            out.append(None)
            continue
        try:
            for b in raw:
                b.decode("utf-8")
        except UnicodeDecodeError:
            out.append(None)
            continue
        ident, ts, v = (None if f in NULLS else f for f in row[:3])
        exact_id = None if ident is None else _exact_int(ident)
        exact_ts = None if ts is None else _exact_int(ts)
        if (ident is not None and exact_id is None) or exact_ts is None or not in_range(exact_ts):
            out.append(None)
        else:
            out.append((exact_id, exact_ts, v, exact_ts))
    return out


@SETTINGS
@given(csv_table(), st.sampled_from(["\n", "\r\n"]), st.sampled_from([8, 40, 131072]),
       st.sampled_from([0, 0, 0, 140_000]))
def test_csv_every_row_once_with_exact_values(table, newline, limit, huge):
    header, rows = table
    if huge and rows:
        rows[0][-1] = "h" * huge  # over the default limit of 131072 bytes
    data = write_csv(header, rows, newline)
    parsed = run("f.csv", data, max_field_bytes=limit)
    check_exactly_once(parsed)
    assert parsed.records == len(rows)
    assert fates(parsed) == csv_oracle(header, rows, limit)


@SETTINGS
@given(csv_table(), st.data())
def test_csv_mutated_or_random_bytes(table, draw):
    data = write_csv(*table, "\n")
    for _ in range(draw.draw(st.integers(1, 3))):
        data = mutate(data, draw)
    if draw.draw(st.booleans()):
        data = draw.draw(st.binary(max_size=200))
    limit_before = csv.field_size_limit()
    parsed = run("m.csv", data, max_field_bytes=draw.draw(st.sampled_from([4, 131072])))
    check_exactly_once(parsed)
    lines = [line for line in data.split(b"\n") if line.rstrip(b"\r")]
    assert parsed.records <= max(len(lines) - 1, 0)  # one record needs at least one line after the header
    assert csv.field_size_limit() == limit_before


# ------------------------------------------------------------------------------------- Parquet

_column_kinds = {
    "id": [pa.int64(), pa.float64()],
    "ts": [pa.int64(), pa.float64()],
    "v": [pa.string(), pa.binary()],
}


@st.composite
def parquet_bytes(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(0, 6))
    types = {name: draw(st.sampled_from(kinds)) for name, kinds in _column_kinds.items()}

    def values(typ: pa.DataType) -> list:
        if pa.types.is_integer(typ):
            item = st.integers(*INT64)
        elif pa.types.is_floating(typ):
            item = st.one_of(st.floats(), st.integers(-(10**6), 10**6).map(float), st.just(1e19))
        elif pa.types.is_binary(typ):
            item = st.binary(max_size=4)
        else:
            item = st.text(st.characters(blacklist_categories=("Cs",)), max_size=4)
        return draw(st.lists(st.one_of(st.none(), item), min_size=n, max_size=n))

    table = pa.table({name: pa.array(values(typ), typ) for name, typ in types.items()})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=draw(st.sampled_from(["none", "snappy"])),
                   row_group_size=draw(st.integers(1, 4)))
    return buf.getvalue()


def parquet_oracle(path: Path) -> list[tuple | None] | None:
    """Per row the expected fate, from pyarrow's own read; None if pyarrow cannot read the file."""
    try:
        table = pq.ParquetFile(path).read()
    except Exception:  # any failure to read: the whole file is one malformed record
        return None
    if any(c not in table.column_names for c in ("id", "ts", "v")):
        # a mutated footer can rename a column: a file without a payload column has every
        # row malformed (the reader's rule for CSV and Parquet alike)
        return [None] * table.num_rows
    out: list[tuple | None] = []
    v_bytes = table["v"].cast(pa.binary()).to_pylist()
    for ident, ts, raw in zip(table["id"].to_pylist(), table["ts"].to_pylist(), v_bytes, strict=True):
        exact_id = None if ident is None else _float_int(ident)
        exact_ts = None if ts is None else _float_int(ts)
        try:
            v = None if raw is None else raw.decode("utf-8")
        except UnicodeDecodeError:
            out.append(None)
            continue
        if (ident is not None and exact_id is None) or exact_ts is None or not in_range(exact_ts):
            out.append(None)
        else:
            out.append((exact_id, exact_ts, v, exact_ts))
    return out


def _float_int(value: float | int) -> int | None:
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            return None
        value = int(value)
    return value if INT64[0] <= value <= INT64[1] else None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parquet_bytes(), st.data())
def test_parquet_bytes_every_row_once(data, draw):
    mutations = draw.draw(st.integers(0, 3))
    for _ in range(mutations):
        data = mutate(data, draw)
    if draw.draw(st.integers(0, 9)) == 0:
        data = draw.draw(st.binary(max_size=100))
    path = _tmp / "f.parquet"
    path.write_bytes(data)
    expected = parquet_oracle(path)
    parsed = parse_file(str(path), ParseSpec("parquet", SCHEMA, "ts"))
    check_exactly_once(parsed)
    if expected is None:
        assert parsed.records == 1 and len(parsed.malformed) == 1
        assert parsed.malformed[0].reason.startswith("parquet: cannot read file")
    else:
        assert fates(parsed) == expected
