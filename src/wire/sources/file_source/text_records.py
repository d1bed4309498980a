"""Format parsers for the file source's text formats: CSV and JSON Lines bytes to raw records.

A parser splits a file into records and parses their structure (fields, JSON), with
no conversion to the payload schema yet: that, and the event times, are
:mod:`wire.sources.file_source.formats`' job. Structurally broken records (wrong column
count, invalid JSON, invalid UTF-8, a CSV field over ``max_field_bytes``) are returned
with a reason. Nothing raises for a file's contents.

Physical lines end at LF (a CR before it is dropped). Arrow's readers are the fast path
for clean files; Python's ``csv`` and ``json`` modules take the rest, with the same
record numbering.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from wire.sources.base.conversions import ARROW_ERRORS, JsonNumber, short_repr

if TYPE_CHECKING:
    from wire.sources.file_source.parse_spec import ParseSpec

_BAD_UTF8 = re.compile("[\udc80-\udcff]")  # invalid bytes, decoded with surrogateescape
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # may encode a lone surrogate: check the value


Reason = Callable[[str, object, pa.DataType], str]


@dataclass
class RawRecords:
    """A format parser's output, before value conversion and event times."""

    records: int
    columns: dict[str, pa.Array | JsonValues]  # raw columns of the structurally sound records
    rows: np.ndarray  # record index of each of those rows
    bad: list[tuple[int, str]]  # (record index, reason) of structurally broken records
    locate: Callable[[int], tuple[str, str]]  # record index -> (location, raw text)
    reason: Reason  # message for a value that does not convert


def nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable (a malformed record's values are null)."""
    return pa.schema([f.with_nullable(True) for f in schema])


def _lines(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (without the newline and a trailing CR) of every physical line."""
    if not data:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    buf = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], nl + 1]).astype(np.int64)
    ends = np.concatenate([nl, [len(data)]]).astype(np.int64)
    if data.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    ends = np.where((ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13), ends - 1, ends)
    return starts, ends


def _bare_cr(data: bytes) -> bool:
    """Whether a CR stands anywhere but before a LF (Arrow's readers end a line there; Wire does not)."""
    return b"\r" in data and data.count(b"\r") != data.count(b"\r\n")  # most files have no CR: one scan


def _utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 (ASCII, the common case, is checked without decoding)."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _line_locator(
    path: str, data: bytes, starts: np.ndarray, ends: np.ndarray, record_lines: np.ndarray
) -> Callable[[int], tuple[str, str]]:
    def locate(record: int) -> tuple[str, str]:
        line = int(record_lines[record])
        text = data[starts[line] : ends[line]].decode("utf-8", errors="replace")
        return f"{path}:{line + 1}", text

    return locate


def _csv_reason(name: str, value: object, typ: pa.DataType) -> str:
    return f"csv: column {name}: cannot parse {short_repr(value)} as {typ}"


_CSV_LIMIT_LOCK = threading.Lock()


@contextlib.contextmanager
def _csv_field_limit(chars: int) -> Iterator[None]:
    """Lift Python's process-wide ``csv.field_size_limit`` to ``chars`` while parsing; restore it after.

    Wire checks field sizes itself (``max_field_bytes``); the lock keeps two parses from
    restoring each other's limit.
    """
    with _CSV_LIMIT_LOCK:
        before = csv.field_size_limit()
        csv.field_size_limit(max(before, chars))
        try:
            yield
        finally:
            csv.field_size_limit(before)


def _oversized(fields: list[str], limit: int) -> str | None:
    """The reason when a field is over ``limit`` UTF-8 bytes (invalid bytes count one each), else None."""
    for j, f in enumerate(fields):
        if len(f) * 4 > limit:
            size = len(f.encode("utf-8", "surrogateescape"))
            if size > limit:
                return f"csv: field {j + 1} is {size} bytes, over max_field_bytes={limit}"
    return None


def parse_csv(path: str, data: bytes, spec: ParseSpec) -> RawRecords:
    """Split a CSV file (header line first) into records of string fields; one record per row.

    Arrow reads a clean file (valid UTF-8, no bare CR, no record spanning lines, no
    repeated column name); anything else goes to Python's ``csv`` module.
    """
    starts, ends = _lines(data)
    nonempty = np.flatnonzero(ends > starts)
    record_lines = nonempty[1:]
    locate = _line_locator(path, data, starts, ends, record_lines)
    if len(nonempty) == 0:
        return RawRecords(0, {}, np.zeros(0, np.int64), [], locate, _csv_reason)
    if not _utf8(data):
        return _csv_slow(path, data, spec)
    if _bare_cr(data):
        return _csv_slow(path, data, spec)

    def fields_of(line: int) -> list[str]:
        text = data[starts[line] : ends[line]].decode("utf-8")
        with _csv_field_limit(len(text) + 1):
            return next(csv.reader([text], delimiter=spec.delimiter), [])

    try:
        header = fields_of(int(nonempty[0]))
    except csv.Error:
        return _csv_slow(path, data, spec)
    wanted = [n for n in spec.payload_schema.names if n in header]
    if len(set(header)) != len(header):
        return _csv_slow(path, data, spec)  # Arrow cannot pick one of two same-named columns
    invalid: list[tuple[int | None, int, int]] = []

    def on_invalid(row: pa_csv.InvalidRow) -> str:
        invalid.append((row.number, row.expected_columns, row.actual_columns))
        return "skip"

    try:
        table = pa_csv.read_csv(
            io.BytesIO(data),
            read_options=pa_csv.ReadOptions(use_threads=False),
            parse_options=pa_csv.ParseOptions(
                delimiter=spec.delimiter, newlines_in_values=True, invalid_row_handler=on_invalid
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={n: pa.string() for n in wanted},
                include_columns=wanted,
                null_values=list(spec.null_values),
                strings_can_be_null=True,
            ),
        )
    except ARROW_ERRORS:  # e.g. a row longer than Arrow's block
        return _csv_slow(path, data, spec)
    n = len(record_lines)
    numbers = [num for num, _, _ in invalid]
    if table.num_rows + len(invalid) != n or None in numbers:
        return _csv_slow(path, data, spec)  # a record spans lines: number them in Python
    # pyarrow numbers rows from 1 (the header), skipping empty lines: record = number - 2
    bad = [(num - 2, f"csv: expected {e} columns, got {a}") for num, e, a in invalid if num is not None]
    broken = {r for r, _ in bad}
    long_lines = np.flatnonzero(ends[record_lines] - starts[record_lines] > spec.max_field_bytes)
    for record in long_lines.tolist():  # only a line longer than the limit can hold a longer field
        if record not in broken:
            try:
                reason = _oversized(fields_of(int(record_lines[record])), spec.max_field_bytes)
            except csv.Error as e:
                reason = f"csv: {e}"
            if reason:
                bad.append((record, reason))
    bad.sort()
    keep = np.ones(n, dtype=bool)
    keep[[r for r, _ in bad]] = False
    in_table = np.ones(n, dtype=bool)  # Arrow's table holds every record but the broken ones
    in_table[sorted(broken)] = False
    if bad:
        mask = pa.array(keep[in_table])
        columns = {name: table[name].combine_chunks().filter(mask) for name in wanted}
    else:  # every record kept: no filter (a copy of every column)
        columns = {name: table[name].combine_chunks() for name in wanted}
    return RawRecords(n, columns, np.flatnonzero(keep), bad, locate, _csv_reason)


def _csv_slow(path: str, data: bytes, spec: ParseSpec) -> RawRecords:
    """Python's csv module: for quoted values spanning lines, invalid UTF-8, bare CRs, huge rows."""
    text = data.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    pieces = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    header: list[str] | None = None
    spans: list[tuple[int, int]] = []
    values: list[list[str]] = []
    rows: list[int] = []
    bad: list[tuple[int, str]] = []
    first = 0
    with _csv_field_limit(len(text) + 1):  # fields are checked against max_field_bytes below
        reader = csv.reader(pieces, delimiter=spec.delimiter)
        while True:
            try:
                fields = next(reader)
                error = None
            except StopIteration:
                break
            except csv.Error as e:  # e.g. a bare CR in an unquoted field: the lines read so far
                fields, error = [], f"csv: {e}"
            span, first = (first, reader.line_num), reader.line_num
            if error is None and not fields:
                continue  # a blank line
            if header is None:
                header = fields
                continue
            spans.append(span)
            record = len(spans) - 1
            if error is not None:
                bad.append((record, error))
            elif len(fields) != len(header):
                bad.append((record, f"csv: expected {len(header)} columns, got {len(fields)}"))
            elif any(_BAD_UTF8.search(f) for f in fields):
                bad.append((record, "csv: invalid UTF-8"))
            elif reason := _oversized(fields, spec.max_field_bytes):
                bad.append((record, reason))
            else:
                rows.append(record)
                values.append(fields)

    def locate(record: int) -> tuple[str, str]:
        a, b = spans[record]
        raw = "\n".join(line.rstrip("\r") for line in lines[a:b])
        return f"{path}:{a + 1}", raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")

    header = header or []
    nulls = set(spec.null_values)
    columns = {
        name: pa.array([None if r[j] in nulls else r[j] for r in values], pa.string())
        for j, name in enumerate(header)
        if name in spec.payload_schema.names
    }
    return RawRecords(len(spans), columns, np.array(rows, np.int64), bad, locate, _csv_reason)


def _jsonl_reason(name: str, value: object, typ: pa.DataType) -> str:
    return f"jsonl: field {name}: cannot convert {short_repr(value)} to {typ}"


def _lone_surrogate(obj: object) -> bool:
    """Whether a key or string anywhere in a parsed JSON value holds a lone surrogate (no UTF-8 form)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_jsonl(path: str, data: bytes, spec: ParseSpec) -> RawRecords:
    """Split a JSON Lines file into records: every line that is not blank is one JSON object.

    Arrow reads a clean file (valid UTF-8, no escaped surrogate, no bare CR) when every
    line fits the schema; otherwise each line is parsed with ``json`` (numbers with a
    fraction or an exponent as :class:`~wire.sources.base.conversions.JsonNumber`).
    """
    starts, ends = _lines(data)
    blank = [not data[a:b].strip() for a, b in zip(starts, ends, strict=True)]
    record_lines = np.flatnonzero(~np.array(blank, dtype=bool))
    locate = _line_locator(path, data, starts, ends, record_lines)
    n = len(record_lines)
    schema = nullable(spec.payload_schema)
    clean = _utf8(data) and not _SURROGATE_ESCAPE.search(data) and not _bare_cr(data)
    if clean:  # Arrow's reader takes invalid UTF-8 and ends lines at a bare CR: only clean files
        try:
            table = pa_json.read_json(
                io.BytesIO(data),
                read_options=pa_json.ReadOptions(use_threads=False),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
            if table.num_rows == n:
                columns = {name: table[name].combine_chunks() for name in schema.names}
                return RawRecords(n, columns, np.arange(n), [], locate, _jsonl_reason)
        except ARROW_ERRORS:
            pass
    objects: list[dict[str, object]] = []
    rows: list[int] = []
    bad: list[tuple[int, str]] = []
    for record, line in enumerate(record_lines):
        raw = data[starts[line] : ends[line]]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad.append((record, f"jsonl: invalid UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1}"))
            continue
        try:
            obj = json.loads(text, parse_float=JsonNumber)
        except RecursionError:
            bad.append((record, "jsonl: invalid JSON: nested too deeply"))
            continue
        except ValueError as e:
            bad.append((record, f"jsonl: invalid JSON: {e}"))
            continue
        if not isinstance(obj, dict):
            bad.append((record, f"jsonl: expected a JSON object, got {type(obj).__name__}"))
            continue
        if _SURROGATE_ESCAPE.search(raw) and _lone_surrogate(obj):
            bad.append((record, "jsonl: invalid UTF-8: a \\u escape encodes a lone surrogate"))
            continue
        objects.append(obj)
        rows.append(record)
    columns = {name: JsonValues([o.get(name) for o in objects]) for name in schema.names}
    return RawRecords(n, columns, np.array(rows, np.int64), bad, locate, _jsonl_reason)


class JsonValues(list[object]):
    """Parsed JSON values of one column, converted by :func:`.conversions.array_from_values`."""
