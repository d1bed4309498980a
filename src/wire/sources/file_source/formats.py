"""Parsing for the file source: infer, parse and slice CSV, JSON Lines and Parquet files.

Pure pyarrow/numpy functions, no Spark. A file parses into a :class:`ParsedFile`: every
*record* of the file is numbered in file order (valid and malformed together), so that
``(file, record index)`` is a stable position for offsets:

* CSV: every non-empty physical line after the header is one record (a quoted value
  spanning lines makes its lines one record); locations are 1-based physical lines.
* JSON Lines: every line that is not blank is one record; 1-based physical lines.
* Parquet: every row is one record; locations are 0-based row indexes. A file that
  cannot be read at all counts as one malformed record.

Physical lines end at LF (a CR before it is dropped); a UTF-8 byte-order mark
at the start of a text file is skipped. An empty file has no records.

Malformed records are kept aside with a reason and their raw text; they never raise:
wrong column count, values that do not convert to the schema's type (an integer column
takes only integers: :mod:`wire.sources.base.conversions`), invalid JSON, invalid UTF-8
(anywhere in a CSV or JSON Lines record, also in a column the schema does not name),
a CSV field longer than ``max_field_bytes``, a missing or unparseable event time, or an
event time, timestamp or date outside the supported range
(:data:`~wire.sources.base.conversions.MIN_EVENT_TIME_MS` ..
:data:`~wire.sources.base.conversions.MAX_EVENT_TIME_MS`, years 0001..9999 UTC).

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
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from wire.errors import WireError
from wire.sources.base.conversions import (
    ARROW_ERRORS,
    MAX_EVENT_TIME_MS,
    MIN_EVENT_TIME_MS,
    SUPPORTED_RANGE,
    array_from_values,
    cast_column,
    event_times_ms,
    out_of_range_ms,
    short_repr,
)
from wire.sources.file_source.listing import FileStamp
from wire.sources.file_source.parse_spec import DEFAULT_MAX_FIELD_BYTES, ParseSpec
from wire.sources.file_source.text_records import (
    _BAD_UTF8,
    JsonValues,
    RawRecords,
    _csv_field_limit,
    nullable,
    parse_csv,
    parse_jsonl,
)

__all__ = [
    "DEFAULT_MAX_FIELD_BYTES",
    "MAX_EVENT_TIME_MS",
    "MIN_EVENT_TIME_MS",
    "Malformed",
    "ParseCache",
    "ParseSpec",
    "ParsedFile",
    "event_times_ms",
    "infer_schema",
    "parse_file",
]

_BOM = b"\xef\xbb\xbf"
_INFER_JSON_LINES = 1000
_INFER_CSV_BYTES = 1 << 20
"""CSV schemas are inferred from the records in the file's first MiB (Arrow's first block)."""
# Exception tuples spelled out once: mypy does not accept a starred tuple in an except clause.
_INFER_ERRORS: tuple[type[Exception], ...] = (OSError, TypeError, ValueError, *ARROW_ERRORS)
_CELL_ERRORS: tuple[type[Exception], ...] = (ValueError, OverflowError, *ARROW_ERRORS)
_CELL_CAST_ERRORS: tuple[type[Exception], ...] = (ValueError, *ARROW_ERRORS)
_PARQUET_ERRORS: tuple[type[Exception], ...] = (OSError, KeyError, ValueError, *ARROW_ERRORS)
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
    """Infer the payload schema from one file (CSV: first 1 MiB; JSONL: first 1,000 lines).

    Columns without any value are typed as strings; every field is nullable. Records
    that are dead letters when read do not take part: a CSV record with invalid UTF-8
    (it would make its columns ``binary`` for every record), a JSON line that does not
    parse.

    Raises
    ------
    WireError
        When the file cannot be read or yields no columns.
    """
    try:
        if fmt == "csv":
            parse = pa_csv.ParseOptions(delimiter=delimiter, invalid_row_handler=lambda _row: "skip")
            convert = pa_csv.ConvertOptions(null_values=list(null_values), strings_can_be_null=True)
            read = pa_csv.ReadOptions(block_size=_INFER_CSV_BYTES)
            with pa_csv.open_csv(_csv_sample(path, delimiter), read_options=read, parse_options=parse,
                                 convert_options=convert) as reader:
                schema = reader.schema
        elif fmt == "jsonl":
            objects: list[object] = []
            with open(path, encoding="utf-8-sig", errors="replace") as f:
                for line in itertools.islice(f, _INFER_JSON_LINES):
                    with contextlib.suppress(ValueError, RecursionError):
                        objects.append(json.loads(line))
            schema = pa.Table.from_pylist([o for o in objects if isinstance(o, dict)]).schema
        else:
            schema = pq.read_schema(path)
    except _INFER_ERRORS as e:
        raise WireError(f"cannot infer a {fmt} schema from {path!r}: {e}; pass schema=") from e
    if not schema.names:
        raise WireError(f"cannot infer a {fmt} schema from {path!r}: no columns; pass schema=")
    return pa.schema([pa.field(f.name, pa.string() if pa.types.is_null(f.type) else f.type) for f in schema])


def _csv_sample(path: str, delimiter: str) -> io.BytesIO:
    """The first :data:`_INFER_CSV_BYTES` of a CSV file, without its records of invalid UTF-8.

    Such a record is a dead letter when the file is read
    (:func:`wire.sources.file_source.text_records.parse_csv`); left in the sample, Arrow
    would type every column it touches as ``binary``. The sample ends at the last whole
    line; a file whose sample is valid UTF-8 is taken as is.
    """
    with open(path, "rb") as f:
        data = f.read(_INFER_CSV_BYTES)
        more = f.read(1) != b""
    if more and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    try:
        data.decode("utf-8")
        return io.BytesIO(data)
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    with _csv_field_limit(len(text) + 1):
        for record in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter):
            if not any(_BAD_UTF8.search(field) for field in record):
                writer.writerow(record)
    return io.BytesIO(out.getvalue().encode("utf-8"))


# ---------------------------------------------------------------------------- Parquet


def _cell_text(column: pa.ChunkedArray | pa.Array, i: int) -> object:
    """One value of a column as a JSON-ready Python value, also when Python cannot hold it."""
    cell = column.slice(i, 1)
    try:
        return cell.to_pylist()[0]
    except _CELL_ERRORS:  # e.g. a timestamp after year 9999
        pass
    try:
        return cell.cast(pa.string()).to_pylist()[0]
    except _CELL_CAST_ERRORS:
        pass
    try:
        raw = cell.cast(pa.binary()).to_pylist()[0]  # e.g. invalid UTF-8 in a string column
        return None if raw is None else raw.decode("utf-8", "replace")
    except _CELL_CAST_ERRORS:
        return f"<{column.type} value>"


def _parse_parquet(path: str, spec: ParseSpec) -> RawRecords:
    def reason(name: str, value: object, typ: pa.DataType) -> str:
        return f"parquet: column {name}: cannot convert {short_repr(value)} to {typ}"

    try:
        pf = pq.ParquetFile(path)
        stored = pf.schema_arrow
        names = [n for n in spec.payload_schema.names if n in stored.names]
        skipped = _unread_parquet_columns(spec, stored, names)
        source = pf.read(columns=[n for n in names if n not in skipped])
        columns = {name: source[name].combine_chunks() for name in source.column_names}
    except _PARQUET_ERRORS as e:
        bad = [(0, f"parquet: cannot read file: {short_repr(str(e), 300)[1:-1]}")]
        return RawRecords(1, {}, np.zeros(0, np.int64), bad, lambda _r: (path, ""), reason)
    whole: list[pa.Table] = [] if skipped else [source]

    def locate(record: int) -> tuple[str, str]:
        if not whole:  # a malformed row shows all its columns, also those not read above
            whole.append(pq.ParquetFile(path).read(columns=names))
        table = whole[0]
        row = {name: _cell_text(table.column(j), record) for j, name in enumerate(table.column_names)}
        return f"{path}:{record}", json.dumps(row, default=str)

    for name in skipped:  # never converted (the types match) and dropped after parsing
        columns[name] = pa.nulls(source.num_rows, spec.payload_schema.field(name).type)
    return RawRecords(source.num_rows, columns, np.arange(source.num_rows), [], locate, reason)


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


def _value(values: object, i: int) -> object:
    """Row ``i`` of a raw column, as a Python value for a reason."""
    if isinstance(values, list):
        return values[i]
    return _cell_text(values, i)


def _convert(parsed: RawRecords, spec: ParseSpec, fmt: str) -> tuple[pa.Table, dict[int, str]]:
    """Convert the raw columns to the payload schema; a reason per row that fails.

    Besides values that do not convert: a timestamp or date outside the supported range
    (the event-time column's own check is :func:`event_times_ms`), and a string that is
    not valid UTF-8 (e.g. stored so in a Parquet file).
    """
    n = len(parsed.rows)
    missing = [name for name in spec.payload_schema.names if name not in parsed.columns]
    if missing:
        errors = dict.fromkeys(range(n), f"{fmt}: file has no column(s) {missing}")
        return nullable(spec.payload_schema).empty_table(), errors
    arrays, errors = [], {}
    for field in spec.payload_schema:
        values = parsed.columns[field.name]
        if isinstance(values, JsonValues):
            converted, bad = array_from_values(values, field.type)
        else:
            converted, bad = cast_column(values, field.type)
        for i in np.flatnonzero(bad) if bad is not None else ():
            errors.setdefault(int(i), parsed.reason(field.name, _value(values, int(i)), field.type))
        temporal = pa.types.is_timestamp(field.type) or pa.types.is_date(field.type)
        if temporal and field.name != spec.event_time:
            for i, ms in out_of_range_ms(converted).items():
                errors.setdefault(i, f"{fmt}: column {field.name}: {ms} ms is outside the supported range "
                                     f"{SUPPORTED_RANGE}")
        for i in _invalid_utf8_rows(converted):
            errors.setdefault(i, f"{fmt}: column {field.name}: invalid UTF-8")
        arrays.append(converted)
    return pa.Table.from_arrays(arrays, schema=nullable(spec.payload_schema)), errors


def _invalid_utf8_rows(arr: pa.Array) -> list[int]:
    """Rows of ``arr`` holding invalid UTF-8 (in a string, also nested); usually none, checked at once."""
    try:
        arr.validate(full=True)
        return []
    except ARROW_ERRORS:
        pass
    bad = []
    for i in range(len(arr)):
        try:
            arr.slice(i, 1).validate(full=True)
        except ARROW_ERRORS:
            bad.append(i)
    return bad


def parse_file(path: str, spec: ParseSpec) -> ParsedFile:
    """Parse one file into valid rows (with event times) and malformed records.

    Never raises for the file's contents (see the module docstring for what makes a
    record malformed); an I/O error reading a CSV or JSON Lines file is raised.
    """
    if spec.format == "parquet":
        parsed = _parse_parquet(path, spec)
    else:
        with open(path, "rb") as f:
            data = f.read()
        if data.startswith(_BOM):
            data = data[len(_BOM) :]  # offsets within the first line shift; line numbers do not
        parsed = (parse_csv if spec.format == "csv" else parse_jsonl)(path, data, spec)
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
    if errors and rows:  # else every converted row is kept: no copy (a filter copies every buffer)
        table, et = table.filter(pa.array(keep)), et[keep]
    return ParsedFile(
        path=path,
        records=parsed.records,
        table=table,
        valid=parsed.rows[keep].astype(np.int64),
        event_times=et,
        malformed=tuple(malformed),
    )


class ParseCache:
    """A small LRU of parsed files keyed by (path, size, mtime, parse spec)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[FileStamp, ParseSpec], ParsedFile] = OrderedDict()

    def ensure_capacity(self, capacity: int) -> None:
        """Grow the cache to hold at least ``capacity`` files (e.g. one per source partition)."""
        self._capacity = max(self._capacity, capacity)

    def holds(self, stamp: FileStamp, spec: ParseSpec) -> bool:
        """True when the file's parse is cached (no parsing, no change to the LRU order)."""
        return (stamp, spec) in self._entries

    def get(
        self,
        stamp: FileStamp,
        spec: ParseSpec,
        *,
        index_only: bool = False,
        load: Callable[[], ParsedFile | None] | None = None,
        on_parse: Callable[[ParsedFile], None] | None = None,
    ) -> ParsedFile:
        """Return the parsed file; on a miss, ``load()`` it or else parse it.

        ``index_only``: keep no payload. ``load``: what another process already parsed
        (None: parse); ``on_parse``: called with each whole parse made here, before
        ``index_only`` drops its payload.
        """
        key = (stamp, spec)
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit
        parsed = load() if load is not None else None
        if parsed is None:
            parsed = parse_file(stamp.path, spec)
            if on_parse is not None:
                on_parse(parsed)
        if index_only:
            parsed = parsed.index_only()
        self._entries[key] = parsed
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return parsed
