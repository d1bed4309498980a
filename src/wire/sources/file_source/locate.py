"""Where a valid record of a file is, and its raw text: for dead letters decided after parsing.

The parser (:mod:`wire.sources.file_source.formats`) keeps locations only for malformed
records. A record that parsed but is rejected later (an event time beyond
``max_future``) needs the same ``location`` and ``record`` text: this module finds
them again, numbering records exactly as the parser does (CSV: non-empty records
after the header, a quoted value spanning lines makes its lines one record; JSON
Lines: non-blank lines; locations are 1-based physical lines. Parquet: 0-based row
indexes, the row as a JSON object). It reads the file again, so it is meant for the
rare rejected record, not for every row.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable

import pyarrow.parquet as pq


def _csv_spans(text: str, delimiter: str) -> list[tuple[int, int]]:
    """Per CSV record (after the header): its physical lines ``[a, b)`` (0-based)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    spans: list[tuple[int, int]] = []
    header, first = False, 0
    for fields in reader:
        span, first = (first, reader.line_num), reader.line_num
        if not fields or fields == [""]:
            continue
        if not header:
            header = True
            continue
        spans.append(span)
    return spans


def _line_spans(lines: list[str], *, skip_header: bool) -> list[tuple[int, int]]:
    """Per record: non-blank (JSON Lines) or non-empty (CSV, after the header) physical lines."""
    if skip_header:
        kept = [i for i, line in enumerate(lines) if line.rstrip("\r")]
        return [(i, i + 1) for i in kept[1:]]
    return [(i, i + 1) for i, line in enumerate(lines) if line.strip()]


def locate_records(
    path: str, fmt: str, records: Iterable[int], *, delimiter: str = ","
) -> dict[int, tuple[str, str]]:
    """Return ``record index -> (location, raw text)`` for the given records of ``path``.

    ``fmt`` is ``"csv"``, ``"jsonl"`` or ``"parquet"``. A record the file no longer
    holds gets location ``"<path>#<record>"`` and empty text.
    """
    wanted = sorted(set(records))
    out: dict[int, tuple[str, str]] = {}
    if fmt == "parquet":
        table = pq.read_table(path)
        for r in wanted:
            if r < table.num_rows:
                out[r] = (f"{path}:{r}", json.dumps(table.slice(r, 1).to_pylist()[0], default=str))
    else:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        spans = None
        if fmt == "csv":
            try:
                spans = _csv_spans(text, delimiter)
            except csv.Error:  # e.g. a field over the csv module's limit: one line per record
                spans = None
        if spans is None:
            spans = _line_spans(lines, skip_header=fmt == "csv")
        for r in wanted:
            if r < len(spans):
                a, b = spans[r]
                raw = "\n".join(line.rstrip("\r") for line in lines[a:b])
                out[r] = (f"{path}:{a + 1}", raw)
    for r in wanted:
        out.setdefault(r, (f"{path}#{r}", ""))
    return out
