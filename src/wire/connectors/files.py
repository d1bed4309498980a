"""The file source: CSV, JSON Lines and Parquet files as a stream that carries its watermark.

Files are read in name order and records in file order; that is the arrival order.
The source admits at most ``max_events_per_epoch`` records per epoch (Spark's
``ReadMaxRows``), computes the watermark itself (bounded out-of-orderness:
``W = max event time seen - max_delay_ms``, monotonic) and records it in the epoch's
end offset, so Spark's offset log (``offsets/N``) holds every epoch's watermark and a
replay sees the same watermarks (SPEC §2, §10). Malformed records go to the step's
``dead_letter`` port instead of stopping the flow.

Rows use the envelope format (:mod:`wire.runtime.envelope`). Per epoch the source emits,
in this order: the valid records as data rows (``__et`` = event time,
``__wm`` = the watermark in force while they arrived, i.e. the epoch's start
watermark); one side row to ``f"{step}.dead_letter"`` with the malformed records (if
any); one metrics side row (``records``, ``events``, ``malformed``); and one watermark
row per key group carrying the epoch's end watermark. A bounded source ends with an
epoch of watermark rows only, at :data:`~wire.runtime.envelope.MAX_WATERMARK`.

The Spark source is single-partition: one Spark task reads an epoch, which keeps the
arrival order within the epoch.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from wire.connectors.file_readers import (
    EXTENSIONS,
    FileStamp,
    ParseCache,
    ParsedFile,
    ParseSpec,
    infer_schema,
    list_files,
)
from wire.errors import ConfigError, WireError
from wire.runtime import envelope

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NO_WATERMARK = -(2**63)
"""The watermark before any event was seen (the smallest int64)."""

DATA_SOURCE_NAME = "wire_files"

_EXECUTOR_CACHE = ParseCache(capacity=3)
"""Parsed files kept by an executor's Python worker across epochs (workers are reused)."""


@dataclass(frozen=True)
class FileSource:
    """Files matched by a glob or held in a directory, read as one stream.

    Build it with :func:`files`. Immutable; part of a flow plan.
    """

    path: str
    format: str
    schema: pa.Schema | None = None
    delimiter: str = ","
    null_values: tuple[str, ...] = ("", "NA", "null")
    bounded: bool = True

    def __post_init__(self) -> None:
        if self.format not in EXTENSIONS:
            raise ConfigError("format", self.format, "'csv', 'jsonl' or 'parquet'")
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError("path", self.path, "a non-empty glob or directory path")
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise ConfigError("delimiter", self.delimiter, "a single character")
        if self.schema is not None and not isinstance(self.schema, pa.Schema):
            raise ConfigError("schema", self.schema, "a pyarrow.Schema or None (infer)")
        nulls = self.null_values
        if isinstance(nulls, str) or not all(isinstance(v, str) for v in nulls):
            raise ConfigError("null_values", nulls, "a tuple of strings")
        object.__setattr__(self, "null_values", tuple(nulls))
        if not isinstance(self.bounded, bool):
            raise ConfigError("bounded", self.bounded, "True or False")

    def matching_files(self) -> list[str]:
        """Return the matching files now, in name order (the arrival order)."""
        return list_files(self.path, self.format)

    def resolve_schema(self) -> pa.Schema:
        """Return the payload schema: the given one, or inferred from the first file by name.

        Raises
        ------
        WireError
            When no file matches the path, or the first file cannot be read.
        """
        if self.schema is not None:
            return self.schema
        found = self.matching_files()
        if not found:
            raise WireError(f"no {self.format} file matches {self.path!r}")
        return infer_schema(found[0], self.format, delimiter=self.delimiter, null_values=self.null_values)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serializable form (see :meth:`from_dict`)."""
        return {
            "path": self.path,
            "format": self.format,
            "schema": None if self.schema is None else _schema_to_b64(self.schema),
            "delimiter": self.delimiter,
            "null_values": list(self.null_values),
            "bounded": self.bounded,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> FileSource:
        """Inverse of :meth:`to_dict`."""
        schema = None if d["schema"] is None else _schema_from_b64(d["schema"])
        return FileSource(**{**d, "schema": schema, "null_values": tuple(d["null_values"])})


def files(
    path: str,
    *,
    format: str,
    schema: pa.Schema | None = None,
    delimiter: str = ",",
    null_values: tuple[str, ...] = ("", "NA", "null"),
    bounded: bool = True,
) -> FileSource:
    """Read CSV, JSON Lines or Parquet files as a stream of events.

    Output columns: the payload columns of ``schema`` (plus Wire's envelope columns
    inside a compiled flow). Files are read in name order, records in file order.
    Malformed records (wrong column count, values that do not fit the schema, invalid
    JSON, missing or unparseable event time) go to the step's ``dead_letter`` port
    with the location (``file:line``; Parquet: ``file:row``), the reason and the raw
    record. No state is kept beyond the read position, which lives in the offsets.

    Parameters
    ----------
    path:
        A glob (``"data/*.csv"``; ``**`` recurses) or a directory (all its files with
        the format's extension: ``.csv``; ``.jsonl``/``.ndjson``; ``.parquet``).
        Files whose name starts with ``.`` or ``_`` are skipped.
    format:
        ``"csv"`` (with a header line), ``"jsonl"`` (one JSON object per line) or
        ``"parquet"``.
    schema:
        The payload schema; None infers it from the first file by name.
    delimiter:
        CSV field delimiter, one character.
    null_values:
        CSV strings read as null.
    bounded:
        True: the stream ends once the files present when it started are read (a final
        epoch carries the maximal watermark, closing every window). False: keep
        watching for new files whose names sort after the current one; never end.

    Returns
    -------
    FileSource
        An immutable source description.

    Raises
    ------
    ConfigError
        On an unknown format, an empty path or a delimiter that is not one character.

    Examples
    --------
    >>> src = files("data/flights/*.csv", format="csv", null_values=("", "NA"))
    >>> src.format, src.bounded
    ('csv', True)
    """
    return FileSource(path, format, schema, delimiter, null_values, bounded)


@dataclass(frozen=True)
class SourceBinding:
    """What the compiler hands to the Spark data source for one file-source step.

    Serialized into the ``binding`` option with :meth:`to_json`.
    """

    step: str
    source: FileSource
    payload_schema: pa.Schema
    event_time: str
    max_delay_ms: int
    max_events_per_epoch: int
    key_groups: int

    def __post_init__(self) -> None:
        step = self.step
        if not isinstance(step, str) or not step:
            raise ConfigError("step", step, "a non-empty step id")
        names = self.payload_schema.names
        if self.event_time not in names:
            raise ConfigError("event_time", self.event_time, f"a payload column: {names}", step=step)
        typ = self.payload_schema.field(self.event_time).type
        if not (
            pa.types.is_integer(typ)
            or pa.types.is_timestamp(typ)
            or pa.types.is_date(typ)
            or pa.types.is_string(typ)
            or pa.types.is_large_string(typ)
        ):
            accepted = "a column of int64 ms, timestamp, date or ISO-8601 strings"
            raise ConfigError("event_time", f"{self.event_time} ({typ})", accepted, step=step)
        for name, value, least in (
            ("max_delay_ms", self.max_delay_ms, 0),
            ("max_events_per_epoch", self.max_events_per_epoch, 1),
            ("key_groups", self.key_groups, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(name, value, f"an int >= {least}", step=step)
        try:
            spark_row_schema(self.payload_schema)
        except (ValueError, TypeError) as e:
            accepted = f"Spark-compatible column types and no '__' envelope names ({e})"
            raise ConfigError("schema", str(self.payload_schema), accepted, step=step) from e

    def parse_spec(self) -> ParseSpec:
        """Return how to parse this source's files."""
        src = self.source
        return ParseSpec(src.format, self.payload_schema, self.event_time, src.delimiter, src.null_values)

    def to_json(self) -> str:
        """Serialize to a JSON string (the ``binding`` option of the Spark source)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(source=self.source.to_dict(), payload_schema=_schema_to_b64(self.payload_schema))
        return json.dumps(d)

    @staticmethod
    def from_json(text: str) -> SourceBinding:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        d["source"] = FileSource.from_dict(d["source"])
        d["payload_schema"] = _schema_from_b64(d["payload_schema"])
        return SourceBinding(**d)


def _schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def spark_struct(payload: pa.Schema) -> StructType:
    """Return the Spark schema of the source's rows: nullable payload, then the envelope."""
    return from_arrow_schema(envelope.with_envelope(_nullable(payload)))


def spark_row_schema(payload: pa.Schema) -> pa.Schema:
    """Return the Arrow schema that ``read()`` batches must have (Spark's own round trip)."""
    return to_arrow_schema(spark_struct(payload), timezone="UTC")


# ---------------------------------------------------------------------------- Spark source


@dataclass
class FileEpoch(InputPartition):
    """One epoch's work: record ranges ``(path, size, mtime_ns, lo, hi)`` and watermarks."""

    segments: tuple[tuple[str, int, int, int, int], ...]
    start_watermark: int
    end_watermark: int
    final: bool

    def __post_init__(self) -> None:
        super().__init__(None)


def _offset(
    file: str, record: int, admitted: int, max_et: int | None, watermark: int, ended: bool
) -> dict[str, Any]:
    return dict(
        file=file, record=record, admitted=admitted, max_event_time=max_et, watermark=watermark, ended=ended
    )


class WireFileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of the file source (single partition per epoch).

    Offsets are JSON dicts: ``file`` (path of the current file, ``""`` before the
    first), ``record`` (index of the next record in it), ``admitted`` (records admitted
    so far), ``max_event_time`` (ms or null), ``watermark`` (ms after the epoch;
    :data:`NO_WATERMARK` at first) and ``ended``. The planner methods run in Spark's
    long-lived planner process on the driver and cache per-file event-time indexes;
    :meth:`read` runs in executor workers and uses only the binding.
    """

    def __init__(self, binding: SourceBinding) -> None:
        self._binding = binding
        self._spec = binding.parse_spec()
        self._row_schema = spark_row_schema(binding.payload_schema)
        self._index_cache = ParseCache(capacity=64)
        self._snapshot: list[str] | None = None

    # -- planner (driver) --------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Return the position before the first file; called once when a query starts fresh."""
        return _offset("", 0, 0, None, NO_WATERMARK, False)

    def getDefaultReadLimit(self) -> ReadLimit:
        """Return ``ReadMaxRows(max_events_per_epoch)``: the admission limit per epoch."""
        return ReadMaxRows(self._binding.max_events_per_epoch)

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the file list: an ``availableNow`` query reads only the files present now."""
        self._snapshot = self._binding.source.matching_files()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Admit the next records after ``start``, at most ``limit`` of them, across files.

        Called by Spark before each epoch; the returned offset is written to the offset
        log before the epoch runs, with the watermark after the epoch. Returns ``start``
        when there is nothing new (no epoch runs); a bounded source whose files are all
        read returns, once, an ``ended`` offset with the maximal watermark.
        """
        if start["ended"]:
            return start
        if isinstance(limit, ReadAllAvailable):
            budget = None
        elif isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        else:
            budget = self._binding.max_events_per_epoch
        file, record, taken, max_et = start["file"], start["record"], 0, start["max_event_time"]
        for path in self._listing():
            if budget is not None and taken >= budget:
                break
            if path < start["file"]:
                continue
            parsed = self._index(path)
            lo = start["record"] if path == start["file"] else 0
            hi = parsed.records if budget is None else min(parsed.records, lo + budget - taken)
            if hi <= lo:
                continue
            seen = parsed.max_event_time(lo, hi)
            if seen is not None:
                max_et = seen if max_et is None else max(max_et, seen)
            file, record, taken = path, hi, taken + hi - lo
        if taken == 0:
            if self._binding.source.bounded and budget != 0:
                ended = dict(start, ended=True, watermark=envelope.MAX_WATERMARK)
                return ended
            return start
        watermark = start["watermark"]
        if max_et is not None:
            watermark = max(watermark, max_et - self._binding.max_delay_ms)
        return _offset(file, record, start["admitted"] + taken, max_et, watermark, False)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Plan the epoch ``(start, end]`` as one partition; called on the driver per epoch.

        Also called on a replay after a restart, with offsets from the offset log.
        """
        if start == end:
            return []
        if end["ended"]:
            return [FileEpoch((), start["watermark"], end["watermark"], True)]
        segments = []
        for path in self._listing():
            if not start["file"] <= path <= end["file"]:
                continue
            lo = start["record"] if path == start["file"] else 0
            hi = end["record"] if path == end["file"] else self._index(path).records
            if hi > lo:
                stamp = FileStamp.of(path)
                segments.append((path, stamp.size, stamp.mtime_ns, lo, hi))
        planned = sum(hi - lo for *_, lo, hi in segments)
        if planned != end["admitted"] - start["admitted"]:
            raise WireError(
                f"file source {self._binding.step!r}: the files changed between offsets "
                f"{start} and {end} ({planned} records found, "
                f"{end['admitted'] - start['admitted']} admitted); files must not change "
                "once visible and new files must sort after the ones already read"
            )
        return [FileEpoch(tuple(segments), start["watermark"], end["watermark"], False)]

    def commit(self, end: dict) -> None:
        """Nothing to do: files are immutable; called after each epoch commits."""

    def _listing(self) -> list[str]:
        if self._snapshot is not None:
            return self._snapshot
        found = self._binding.source.matching_files()
        if self._binding.source.bounded:
            self._snapshot = found
        return found

    def _index(self, path: str) -> ParsedFile:
        return self._index_cache.get(FileStamp.of(path), self._spec, index_only=True)

    # -- executor ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the epoch's rows as Arrow batches in the envelope format; runs on executors.

        Data rows, then the dead-letter side row (if any record was malformed), the
        metrics side row and one watermark row per key group (the epoch's end watermark).
        """
        if not isinstance(partition, FileEpoch):
            raise TypeError(f"expected a FileEpoch partition, got {type(partition).__name__}")
        schema, step = self._row_schema, self._binding.step
        valid, malformed = 0, []
        for path, size, mtime_ns, lo, hi in partition.segments:
            parsed = _EXECUTOR_CACHE.get(FileStamp(path, size, mtime_ns), self._spec)
            if parsed.records < hi:
                raise WireError(f"file {path!r} has {parsed.records} records, expected {hi}")
            a, b = parsed.rows(lo, hi)
            if b > a:
                valid += b - a
                yield from self._data_rows(parsed.table.slice(a, b - a), parsed.event_times[a:b], partition)
            malformed.extend(parsed.malformed_in(lo, hi))
        if malformed:
            dead = pa.table(
                {
                    "step": [step] * len(malformed),
                    "location": [m.location for m in malformed],
                    "reason": [m.reason for m in malformed],
                    "record": [m.raw for m in malformed],
                },
                schema=envelope.DEAD_LETTER_SCHEMA,
            )
            yield envelope.side_batch(schema, f"{step}.dead_letter", dead)
        if not partition.final:
            n = valid + len(malformed)
            counts = {"records": n, "events": valid, "malformed": len(malformed)}
            yield envelope.side_batch(schema, envelope.METRICS_PORT, envelope.metrics_table(step, counts))
        groups = range(self._binding.key_groups)
        yield envelope.watermark_batch(schema, partition.end_watermark, groups)

    def _data_rows(
        self, payload: pa.Table, event_times: np.ndarray, epoch: FileEpoch
    ) -> Iterator[pa.RecordBatch]:
        schema, n = self._row_schema, payload.num_rows
        columns = [payload[name].cast(schema.field(name).type) for name in payload.column_names]
        columns += [
            pa.array(np.zeros(n, np.int32)),
            pa.array(event_times, pa.int64()),
            pa.array(np.full(n, epoch.start_watermark, np.int64)),
            pa.nulls(n, pa.int32()),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.int64()),
        ]
        yield from pa.Table.from_arrays(columns, schema=schema).combine_chunks().to_batches()


class WireFileDataSource(DataSource):
    """The Spark Python data source ``wire_files``; option ``binding``: a SourceBinding JSON."""

    @classmethod
    def name(cls) -> str:
        """Return the format name used with ``spark.readStream.format``."""
        return DATA_SOURCE_NAME

    def schema(self) -> StructType:
        """Return the row schema: the payload columns followed by the envelope columns."""
        return spark_struct(SourceBinding.from_json(self.options["binding"]).payload_schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Return the stream reader; Spark calls this in the planner and executor processes."""
        return WireFileStreamReader(SourceBinding.from_json(self.options["binding"]))


def register(spark: SparkSession) -> None:
    """Register the ``wire_files`` data source with ``spark`` (idempotent)."""
    spark.dataSource.register(WireFileDataSource)


def read_stream(spark: SparkSession, binding: SourceBinding) -> DataFrame:
    """Return the streaming DataFrame of one file-source step, in the envelope format."""
    register(spark)
    return spark.readStream.format(DATA_SOURCE_NAME).option("binding", binding.to_json()).load()
