"""Parsing for the file source: infer, parse and slice CSV, JSON Lines and Parquet files.

Pure pyarrow/numpy functions, no Spark. A file parses into a :class:`ParsedFile`: every
*record* of the file is numbered in file order (valid and malformed together), so that
``(file, record index)`` is a stable position for offsets:

* CSV: every non-empty physical line after the header is one record (a quoted value
  spanning lines makes its lines one record); locations are 1-based physical lines.
* JSON Lines: every line that is not blank is one record; 1-based physical lines.
* Parquet: every row is one record; locations are 0-based row indexes. A file that
  cannot be read at all counts as one malformed record.

Malformed records (wrong column count, values that do not convert to the schema's
type, invalid JSON, missing or unparseable event time) are kept aside with a reason
and their raw text; they never raise.

A :class:`ParseSpec` may name the payload columns a flow reads (``columns``). The
parsed table then holds only those, but which records are malformed, and why, does
not change: CSV and JSON Lines records are still converted and checked in every
column; Parquet skips reading a column only when the file stores it with exactly the
schema's type (no value of it can fail to convert), and a malformed row's raw text
still shows the whole row.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import io
import itertools
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from wire.connectors.file_listing import FileStamp
from wire.errors import WireError

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
_BAD_UTF8 = re.compile("[\udc80-\udcff]")
_INFER_JSON_LINES = 1000


@dataclass(frozen=True)
class ParseSpec:
    """How to parse the files of one source: format, options, payload schema, event time (hashable)."""

    format: str
    payload_schema: pa.Schema
    event_time: str
    delimiter: str = ","
    null_values: tuple[str, ...] = ("", "NA", "null")
    columns: tuple[str, ...] | None = None
    """The payload columns kept in :attr:`ParsedFile.table` (None: all)."""

    @property
    def output_names(self) -> list[str]:
        """The names of the columns kept, in payload order."""
        names = self.payload_schema.names
        return names if self.columns is None else [n for n in names if n in self.columns]


@dataclass(frozen=True)
class Malformed:
    """A record that could not be admitted: its index in the file, where, why, and its text."""

    record: int
    location: str
    reason: str
    raw: str


@dataclass(frozen=True, eq=False)
class ParsedFile:
    """One parsed file: the valid records' payload and event times, and the malformed ones.

    ``table`` holds the valid records in file order (typed as the payload schema,
    restricted to the parse spec's ``columns``);
    ``valid[i]`` is the record index of ``table`` row ``i`` and ``event_times[i]`` its
    event time in ms. ``records`` counts valid and malformed records.
    """

    path: str
    records: int
    table: pa.Table
    valid: np.ndarray
    event_times: np.ndarray
    malformed: tuple[Malformed, ...]

    def rows(self, lo: int, hi: int) -> tuple[int, int]:
        """Return the ``table`` row range holding the valid records with index in ``[lo, hi)``."""
        a, b = np.searchsorted(self.valid, [lo, hi], side="left")
        return int(a), int(b)

    def max_event_time(self, lo: int, hi: int) -> int | None:
        """Return the largest event time of the valid records in ``[lo, hi)`` (None: none)."""
        a, b = self.rows(lo, hi)
        return int(self.event_times[a:b].max()) if b > a else None

    def malformed_in(self, lo: int, hi: int) -> list[Malformed]:
        """Return the malformed records with index in ``[lo, hi)``, in file order."""
        first = bisect.bisect_left(self.malformed, lo, key=lambda m: m.record)
        last = bisect.bisect_left(self.malformed, hi, key=lambda m: m.record)
        return list(self.malformed[first:last])

    def index_only(self) -> ParsedFile:
        """Return a copy without payload and malformed texts: what the planner keeps per file."""
        return replace(self, table=self.table.slice(0, 0), malformed=())


def infer_schema(path: str, fmt: str, *, delimiter: str, null_values: tuple[str, ...]) -> pa.Schema:
    """Infer the payload schema from one file (CSV: first block; JSONL: first 1,000 lines).

    Columns without any value are typed as strings; every field is nullable.

    Raises
    ------
    WireError
        When the file cannot be read or yields no columns.
    """
    try:
        if fmt == "csv":
            parse = pa_csv.ParseOptions(delimiter=delimiter, invalid_row_handler=lambda _row: "skip")
            convert = pa_csv.ConvertOptions(null_values=list(null_values), strings_can_be_null=True)
            with pa_csv.open_csv(path, parse_options=parse, convert_options=convert) as reader:
                schema = reader.schema
        elif fmt == "jsonl":
            objects: list[dict] = []
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in itertools.islice(f, _INFER_JSON_LINES):
                    with contextlib.suppress(ValueError):
                        objects.append(json.loads(line))
            schema = pa.Table.from_pylist([o for o in objects if isinstance(o, dict)]).schema
        else:
            schema = pq.read_schema(path)
    except (OSError, *_ARROW_ERRORS) as e:
        raise WireError(f"cannot infer a {fmt} schema from {path!r}: {e}; pass schema=") from e
    if not schema.names:
        raise WireError(f"cannot infer a {fmt} schema from {path!r}: no columns; pass schema=")
    return pa.schema([pa.field(f.name, pa.string() if pa.types.is_null(f.type) else f.type) for f in schema])


# ---------------------------------------------------------------------------- conversions


def _iso_to_ms(text: str) -> int:
    """Parse an ISO-8601 timestamp to ms since the epoch (UTC when it has no offset)."""
    dt = datetime.fromisoformat(text.strip())
    return ((dt if dt.tzinfo else dt.replace(tzinfo=UTC)) - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _cast(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    """Cast with Wire's rules: ISO strings without an offset are UTC for zoned timestamps."""
    if arr.type == typ:
        return arr
    try:
        return arr.cast(typ)
    except _ARROW_ERRORS:
        if not (pa.types.is_timestamp(typ) and typ.tz and pa.types.is_string(arr.type)):
            raise
    try:
        return arr.cast(pa.timestamp(typ.unit)).cast(typ)
    except _ARROW_ERRORS:
        pass
    try:
        ms = [None if v is None else _iso_to_ms(v) for v in arr.to_pylist()]
    except ValueError as e:
        raise pa.ArrowInvalid(str(e)) from e
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", typ.tz)).cast(typ)


def _cast_column(arr: pa.Array, typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Cast ``arr`` to ``typ``; values that do not convert become null and are flagged.

    Returns the cast array and a boolean mask of the failed rows (None if all converted).
    Only a failing column pays for the per-value search, over its distinct values.
    """
    try:
        return _cast(arr, typ), None
    except _ARROW_ERRORS:
        pass
    distinct = pc.unique(arr.drop_null())
    bad_values = []
    for i in range(len(distinct)):
        try:
            _cast(distinct.slice(i, 1), typ)
        except _ARROW_ERRORS:
            bad_values.append(distinct[i].as_py())
    bad = pc.fill_null(pc.is_in(arr, value_set=pa.array(bad_values, arr.type)), False)
    cleaned = pc.if_else(bad, pa.nulls(len(arr), arr.type), arr)
    return _cast(cleaned, typ), bad.to_numpy(zero_copy_only=False)


def _array_from_values(values: list, typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Build a ``typ`` array from parsed JSON values; flag values that do not fit.

    Only strings are parsed into other types (e.g. ISO timestamps); a number is not
    turned into a string, nor a boolean into a number.
    """
    try:
        return pa.array(values, typ), None
    except _ARROW_ERRORS:
        pass
    try:
        inferred = pa.array(values)
    except _ARROW_ERRORS:
        inferred = None
    if inferred is not None and pa.types.is_string(inferred.type):
        return _cast_column(inferred, typ)
    parts, bad = [], np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values):
        try:
            parts.append(pa.array([v], typ))
        except _ARROW_ERRORS:
            try:
                if not isinstance(v, str):
                    raise
                parts.append(_cast(pa.array([v]), typ))
            except _ARROW_ERRORS:
                parts.append(pa.nulls(1, typ))
                bad[i] = True
    return pa.concat_arrays(parts) if parts else pa.array([], typ), bad


def event_times_ms(arr: pa.Array) -> tuple[np.ndarray, dict[int, str]]:
    """Event times in ms since the epoch, and a reason per row whose event time is unusable.

    Accepts integer columns (already ms), timestamps (naive = UTC), dates, and strings
    with ISO-8601 timestamps (UTC when they carry no offset).
    """
    errors = {int(i): "event time missing" for i in np.flatnonzero(arr.is_null().to_numpy(False))}
    typ = arr.type
    if pa.types.is_timestamp(typ):
        ms_arr = arr.cast(pa.timestamp("ms", typ.tz), safe=False).cast(pa.int64())
    elif pa.types.is_date(typ):
        ms_arr = arr.cast(pa.date64()).cast(pa.int64())
    elif pa.types.is_integer(typ):
        ms_arr = arr.cast(pa.int64())
    elif not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        raise WireError(f"event time column of type {typ} is not supported")
    else:
        try:
            ms_arr = arr.cast(pa.timestamp("ms", "UTC")).cast(pa.int64())
        except _ARROW_ERRORS:
            try:
                ms_arr = arr.cast(pa.timestamp("ms")).cast(pa.int64())
            except _ARROW_ERRORS:  # mixed or bad values: parse each distinct value in Python
                ms_of: dict[str, int | None] = {}
                for v in pc.unique(arr.drop_null()).to_pylist():
                    try:
                        ms_of[v] = _iso_to_ms(v)
                    except (ValueError, OverflowError):
                        ms_of[v] = None
                values = arr.to_pylist()
                ms_arr = pa.array([None if v is None else ms_of[v] for v in values], pa.int64())
                for i, v in enumerate(values):
                    if v is not None and ms_of[v] is None:
                        errors[i] = f"event time not parseable: {v!r}"
    return pc.fill_null(ms_arr, 0).to_numpy(zero_copy_only=False).astype(np.int64), errors


# ---------------------------------------------------------------------------- parsing

_Reason = Callable[[str, object, pa.DataType], str]


@dataclass
class _Rows:
    """A format parser's output, before value conversion and event times."""

    records: int
    columns: dict[str, pa.Array]  # raw columns of the structurally sound records
    rows: np.ndarray  # record index of each of those rows
    bad: list[tuple[int, str]]  # (record index, reason) of structurally broken records
    locate: Callable[[int], tuple[str, str]]  # record index -> (location, raw text)
    reason: _Reason  # message for a value that does not convert


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def _lines(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (without the newline and a trailing CR) of every physical line."""
    buf = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], nl + 1]).astype(np.int64)
    ends = np.concatenate([nl, [len(data)]]).astype(np.int64)
    if data.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    if len(ends):
        ends = np.where((ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13), ends - 1, ends)
    return starts, ends


def _line_locator(
    path: str, data: bytes, starts: np.ndarray, ends: np.ndarray, record_lines: np.ndarray
) -> Callable[[int], tuple[str, str]]:
    def locate(record: int) -> tuple[str, str]:
        line = int(record_lines[record])
        text = data[starts[line] : ends[line]].decode("utf-8", errors="replace")
        return f"{path}:{line + 1}", text

    return locate


def _csv_reason(name: str, value: object, typ: pa.DataType) -> str:
    return f"csv: column {name}: cannot parse {value!r} as {typ}"


def _parse_csv(path: str, data: bytes, spec: ParseSpec) -> _Rows:
    starts, ends = _lines(data)
    nonempty = np.flatnonzero(ends > starts)
    record_lines = nonempty[1:]
    locate = _line_locator(path, data, starts, ends, record_lines)
    if len(nonempty) == 0:
        return _Rows(0, {}, np.zeros(0, np.int64), [], locate, _csv_reason)
    header_text = data[starts[nonempty[0]] : ends[nonempty[0]]].decode("utf-8", errors="replace")
    header = next(csv.reader([header_text], delimiter=spec.delimiter))
    invalid: list[tuple[int | None, int, int]] = []

    def on_invalid(row: pa_csv.InvalidRow) -> str:
        invalid.append((row.number, row.expected_columns, row.actual_columns))
        return "skip"

    wanted = [n for n in spec.payload_schema.names if n in header]
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
    except _ARROW_ERRORS:  # e.g. invalid UTF-8
        return _csv_slow(path, data, spec)
    n = len(record_lines)
    numbers = [num for num, _, _ in invalid]
    if table.num_rows + len(invalid) != n or None in numbers:
        return _csv_slow(path, data, spec)  # a record spans lines: number them in Python
    # pyarrow numbers rows from 1 (the header), skipping empty lines: record = number - 2
    bad = [(num - 2, f"csv: expected {e} columns, got {a}") for num, e, a in invalid]  # type: ignore[operator]
    keep = np.ones(n, dtype=bool)
    keep[[r for r, _ in bad]] = False
    columns = {name: table[name].combine_chunks() for name in wanted}
    return _Rows(n, columns, np.flatnonzero(keep), bad, locate, _csv_reason)


def _csv_slow(path: str, data: bytes, spec: ParseSpec) -> _Rows:
    """Python's csv module: for quoted values spanning lines and invalid UTF-8."""
    text = data.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=spec.delimiter)
    header: list[str] | None = None
    spans: list[tuple[int, int]] = []
    values: list[list[str]] = []
    rows: list[int] = []
    bad: list[tuple[int, str]] = []
    first = 0
    for fields in reader:
        span, first = (first, reader.line_num), reader.line_num
        if not fields or fields == [""]:
            continue
        if header is None:
            header = fields
            continue
        spans.append(span)
        if len(fields) != len(header):
            bad.append((len(spans) - 1, f"csv: expected {len(header)} columns, got {len(fields)}"))
        elif _BAD_UTF8.search("\n".join(lines[span[0] : span[1]])):
            bad.append((len(spans) - 1, "csv: invalid UTF-8"))
        else:
            rows.append(len(spans) - 1)
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
    return _Rows(len(spans), columns, np.array(rows, np.int64), bad, locate, _csv_reason)


def _jsonl_reason(name: str, value: object, typ: pa.DataType) -> str:
    return f"jsonl: field {name}: cannot convert {value!r} to {typ}"


def _parse_jsonl(path: str, data: bytes, spec: ParseSpec) -> _Rows:
    starts, ends = _lines(data)
    blank = [not data[a:b].strip() for a, b in zip(starts, ends, strict=True)]
    record_lines = np.flatnonzero(~np.array(blank, dtype=bool))
    locate = _line_locator(path, data, starts, ends, record_lines)
    n = len(record_lines)
    schema = _nullable(spec.payload_schema)
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
        if table.num_rows == n:
            columns = {name: table[name].combine_chunks() for name in schema.names}
            return _Rows(n, columns, np.arange(n), [], locate, _jsonl_reason)
    except _ARROW_ERRORS:
        pass
    objects: list[dict] = []
    rows: list[int] = []
    bad: list[tuple[int, str]] = []
    for record, line in enumerate(record_lines):
        try:
            obj = json.loads(data[starts[line] : ends[line]].decode("utf-8", errors="replace"))
        except ValueError as e:
            bad.append((record, f"jsonl: invalid JSON: {e}"))
            continue
        if not isinstance(obj, dict):
            bad.append((record, f"jsonl: expected a JSON object, got {type(obj).__name__}"))
            continue
        objects.append(obj)
        rows.append(record)
    columns = {name: _PyValues([o.get(name) for o in objects]) for name in schema.names}
    return _Rows(n, columns, np.array(rows, np.int64), bad, locate, _jsonl_reason)  # type: ignore[arg-type]


class _PyValues(list):
    """Parsed JSON values of one column, converted by :func:`_array_from_values`."""


def _parse_parquet(path: str, spec: ParseSpec) -> _Rows:
    def reason(name: str, value: object, typ: pa.DataType) -> str:
        return f"parquet: column {name}: cannot convert {value!r} to {typ}"

    try:
        pf = pq.ParquetFile(path)
        stored = pf.schema_arrow
        names = [n for n in spec.payload_schema.names if n in stored.names]
        skipped = _unread_parquet_columns(spec, stored, names)
        source = pf.read(columns=[n for n in names if n not in skipped])
    except (OSError, *_ARROW_ERRORS) as e:
        bad = [(0, f"parquet: cannot read file: {e}")]
        return _Rows(1, {}, np.zeros(0, np.int64), bad, lambda _r: (path, ""), reason)
    whole: list[pa.Table] = [] if skipped else [source]

    def locate(record: int) -> tuple[str, str]:
        if not whole:  # a malformed row shows all its columns, also those not read above
            whole.append(pq.ParquetFile(path).read(columns=names))
        return f"{path}:{record}", json.dumps(whole[0].slice(record, 1).to_pylist()[0], default=str)

    columns = {name: source[name].combine_chunks() for name in source.column_names}
    for name in skipped:  # never converted (the types match) and dropped after parsing
        columns[name] = pa.nulls(source.num_rows, spec.payload_schema.field(name).type)
    return _Rows(source.num_rows, columns, np.arange(source.num_rows), [], locate, reason)


def _unread_parquet_columns(spec: ParseSpec, stored: pa.Schema, present: list[str]) -> set[str]:
    """Columns of ``present`` a Parquet read can skip: not kept, and stored with the schema's type.

    Such a column cannot make a record malformed, so reading it would change nothing.
    The event-time column is always read; if every present column could be skipped,
    none is (a read of no column would not count the rows).
    """
    if spec.columns is None:
        return set()
    keep = {*spec.columns, spec.event_time}
    skip = {n for n in present if n not in keep and stored.field(n).type == spec.payload_schema.field(n).type}
    return skip if len(skip) < len(present) else set()


def _convert(parsed: _Rows, spec: ParseSpec, fmt: str) -> tuple[pa.Table, dict[int, str]]:
    """Convert the raw columns to the payload schema; a reason per row that fails."""
    n = len(parsed.rows)
    missing = [name for name in spec.payload_schema.names if name not in parsed.columns]
    if missing:
        errors = dict.fromkeys(range(n), f"{fmt}: file has no column(s) {missing}")
        return _nullable(spec.payload_schema).empty_table(), errors
    arrays, errors = [], {}
    for field in spec.payload_schema:
        values = parsed.columns[field.name]
        if isinstance(values, _PyValues):
            cast, bad = _array_from_values(values, field.type)
        else:
            cast, bad = _cast_column(values, field.type)
        for i in np.flatnonzero(bad) if bad is not None else ():
            value = values[int(i)]
            value = value.as_py() if isinstance(value, pa.Scalar) else value
            errors.setdefault(int(i), parsed.reason(field.name, value, field.type))
        arrays.append(cast)
    return pa.Table.from_arrays(arrays, schema=_nullable(spec.payload_schema)), errors


def parse_file(path: str, spec: ParseSpec) -> ParsedFile:
    """Parse one file into valid rows (with event times) and malformed records."""
    if spec.format == "parquet":
        parsed = _parse_parquet(path, spec)
    else:
        with open(path, "rb") as f:
            data = f.read()
        parsed = (_parse_csv if spec.format == "csv" else _parse_jsonl)(path, data, spec)
    table, errors = _convert(parsed, spec, spec.format)
    if table.num_rows:
        et, et_errors = event_times_ms(table[spec.event_time].combine_chunks())
        errors = et_errors | errors  # a conversion failure explains a missing event time
    else:
        et = np.zeros(0, np.int64)
    keep = np.ones(len(parsed.rows), dtype=bool)
    keep[list(errors)] = False
    bad = sorted([(int(parsed.rows[i]), r) for i, r in errors.items()] + parsed.bad)
    malformed = []
    for record, reason in bad:
        location, raw = parsed.locate(record)
        malformed.append(Malformed(record, location, reason, raw))
    rows = table.num_rows
    if spec.columns is not None:
        table = table.select(spec.output_names)
    return ParsedFile(
        path=path,
        records=parsed.records,
        table=table.filter(pa.array(keep)) if rows else table,
        valid=parsed.rows[keep].astype(np.int64),
        event_times=et[keep] if rows else et,
        malformed=tuple(malformed),
    )


class ParseCache:
    """A small LRU of parsed files keyed by (path, size, mtime, parse spec)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple, ParsedFile] = OrderedDict()

    def ensure_capacity(self, capacity: int) -> None:
        """Grow the cache to hold at least ``capacity`` files (e.g. one per source partition)."""
        self._capacity = max(self._capacity, capacity)

    def get(self, stamp: FileStamp, spec: ParseSpec, *, index_only: bool = False) -> ParsedFile:
        """Return the parsed file, parsing it on a miss (``index_only``: keep no payload)."""
        key = (stamp, spec)
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit
        parsed = parse_file(stamp.path, spec)
        if index_only:
            parsed = parsed.index_only()
        self._entries[key] = parsed
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return parsed
