"""The file source: CSV, JSON Lines and Parquet files as a stream that carries its watermark.

The files form one or more partitions (``partition_by``: one, one per subdirectory, one
per file; :mod:`wire.sources.file_listing`); each partition reads its files in
arrival order (new files by name; :mod:`wire.sources.file_set`) and records in file
order, which is the partition's arrival order. The source
admits at most ``max_events_per_epoch`` records per epoch (Spark's ``ReadMaxRows``),
shared fairly by the partitions that have records, and computes the watermark itself:
per partition ``W_p = max event time - max_delay_ms``, for the source the minimum over
the partitions that are not idle (:mod:`wire.core.watermarks`), monotonic. All of
it is recorded in the epoch's end offset, so Spark's offset log (``offsets/N``) holds
every epoch's watermark and a replay sees the same watermarks (SPEC §2, §10).
Malformed records go to the step's ``dead_letter`` port instead of stopping the flow.

Rows use the envelope format (:mod:`wire.core.envelope`). Per epoch, each source
partition with admitted records is read by its own Spark task, which emits the valid
records as data rows (``__et`` = event time, ``__wm`` = the epoch's start watermark,
``__seq`` = the record's global arrival number: records admitted before it, malformed
ones included, with the partitions of an epoch numbered in name order) and one side
row to ``f"{step}.dead_letter"`` with its malformed records (if any). One task per
epoch also emits one metrics side row (counters ``records``, ``events``,
``malformed``; gauges ``gauge:watermark`` and ``gauge:watermark:<partition>``) and one
watermark row per key group carrying the epoch's end watermark. When idleness alone
moves the watermark, an epoch carries only those control rows. A bounded source ends
with an epoch of watermark rows only, at :data:`~wire.core.envelope.MAX_WATERMARK`.
The stream reader itself is in :mod:`wire.sources.file_stream`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from wire.core.time import NO_WATERMARK, Duration, to_millis
from wire.errors import ConfigError, WireError
from wire.sources.base import (
    ALL_CAPABILITIES,
    Binding,
    BindingDataSource,
    BindingSource,
    Capability,
    schema_from_b64,
    schema_to_b64,
    spark_row_schema,
    spark_struct,
)
from wire.sources.file_listing import (
    EXTENSIONS,
    PARTITION_MODES,
    directory_glob_problem,
    list_files,
    list_partitions,
)
from wire.sources.file_readers import DEFAULT_MAX_FIELD_BYTES, ParseSpec, infer_schema
from wire.sources.file_stream import WireFileStreamReader

if TYPE_CHECKING:
    pass

__all__ = [
    "DATA_SOURCE_NAME",
    "NO_WATERMARK",
    "FileSource",
    "SourceBinding",
    "WireFileDataSource",
    "WireFileStreamReader",
    "files",
    "spark_row_schema",
    "spark_struct",
]

DATA_SOURCE_NAME = "wire_files"


@dataclass(frozen=True)
class FileSource(BindingSource):
    """Files matched by a glob or held in a directory, read as one stream of partitions.

    Build it with :func:`files`. Immutable; part of a flow plan. Durations are held in
    ms (``idle_timeout``: None = partitions never go idle); ``max_field_bytes`` in bytes.
    """

    capabilities: ClassVar[frozenset[Capability]] = ALL_CAPABILITIES | {"replay"}

    path: str
    format: str
    schema: pa.Schema | None = None
    delimiter: str = ","
    null_values: tuple[str, ...] = ("", "NA", "null")
    bounded: bool = True
    partition_by: str | None = None
    idle_timeout: int | None = None
    watermark_interval: int = 200
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES

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
        if self.partition_by not in PARTITION_MODES:
            raise ConfigError("partition_by", self.partition_by, "None, 'directory' or 'file'")
        if self.partition_by == "directory" and (problem := directory_glob_problem(self.path)):
            accepted = f"a directory or a glob like 'in/*/*.csv' ({self.path!r}: {problem})"
            raise ConfigError("path", self.path, accepted)
        if self.idle_timeout is not None:
            idle = to_millis(self.idle_timeout, parameter="idle_timeout", allow_zero=False)
            object.__setattr__(self, "idle_timeout", idle)
        interval = to_millis(self.watermark_interval, parameter="watermark_interval")
        object.__setattr__(self, "watermark_interval", interval)
        limit = self.max_field_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError("max_field_bytes", limit, "an int >= 1 (bytes; default 131072 = 128 KiB)")

    def matching_files(self) -> list[str]:
        """Return the matching files now, in name order (the arrival order)."""
        return list_files(self.path, self.format)

    def matching_partitions(self) -> dict[str, list[str]]:
        """Return the partitions now: name -> files in name order (see :mod:`.file_listing`).

        Raises
        ------
        WireError
            When ``partition_by="directory"`` and the path is not a directory.
        """
        try:
            return list_partitions(self.path, self.format, self.partition_by)
        except ValueError as e:
            raise WireError(str(e)) from e

    def total_records(self) -> int | None:
        """The records a bounded Parquet source will admit: its files' rows, from their footers.

        For the console's progress bar (:func:`wire.runtime.progress.total_records`); read
        once when a run starts, from the files matching now (those a bounded source reads).
        None for CSV and JSON Lines (counting their records means parsing them) and for an
        unbounded source.

        Raises
        ------
        OSError, ValueError
            If a file cannot be opened or its footer read (pyarrow's ``ArrowInvalid`` is a
            ``ValueError``).
        """
        if not self.bounded or self.format != "parquet":
            return None
        import pyarrow.parquet as pq

        total: int = sum(pq.ParquetFile(f).metadata.num_rows
                         for fs in self.matching_partitions().values() for f in fs)
        return total

    def resolve_schema(self) -> pa.Schema:
        """Return the payload schema: the given one, or inferred from the first non-empty file by name.

        Raises
        ------
        WireError
            When no file matches the path, or the first file cannot be read.
        """
        if self.schema is not None:
            return self.schema
        found = sorted(f for fs in self.matching_partitions().values() for f in fs)
        if not found:
            raise WireError(f"no {self.format} file matches {self.path!r}")
        sized = [f for f in found if _size(f) != 0]  # a 0-byte file has no schema to infer
        first = (sized or found)[0]
        return infer_schema(first, self.format, delimiter=self.delimiter, null_values=self.null_values)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serializable form (see :meth:`from_dict`)."""
        return {
            "path": self.path,
            "format": self.format,
            "schema": None if self.schema is None else schema_to_b64(self.schema),
            "delimiter": self.delimiter,
            "null_values": list(self.null_values),
            "bounded": self.bounded,
            "partition_by": self.partition_by,
            "idle_timeout": self.idle_timeout,
            "watermark_interval": self.watermark_interval,
            "max_field_bytes": self.max_field_bytes,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> FileSource:
        """Inverse of :meth:`to_dict` (a dict without ``max_field_bytes`` gets the default)."""
        schema = None if d["schema"] is None else schema_from_b64(d["schema"])
        return FileSource(**{**d, "schema": schema, "null_values": tuple(d["null_values"])})

    def data_source(self) -> type[BindingDataSource]:
        """The Spark data source that reads this source (:class:`WireFileDataSource`)."""
        return WireFileDataSource


def files(
    path: str,
    *,
    format: str,
    schema: pa.Schema | None = None,
    delimiter: str = ",",
    null_values: tuple[str, ...] = ("", "NA", "null"),
    bounded: bool = True,
    partition_by: str | None = None,
    idle_timeout: Duration | None = None,
    watermark_interval: Duration = 200,
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES,
) -> FileSource:
    """Read CSV, JSON Lines or Parquet files as a stream of events.

    Output columns: the payload columns of ``schema`` (plus Wire's envelope columns
    inside a compiled flow). The files form one or more partitions (``partition_by``);
    each partition reads its files in arrival order (the file being read, then new
    files by name, whatever their names), records in file order. Partitions are
    read in parallel and share the per-epoch admission budget fairly; each keeps its
    own watermark and the source's watermark is the minimum over the partitions that
    are not idle (SPEC §2; the exact rules are in :mod:`wire.core.watermarks`).
    Malformed records go to the step's ``dead_letter`` port with the location
    (``file:line``; Parquet: ``file:row``), the reason and the raw record; the rest of
    the file is read. Malformed are: a wrong column count, a value that does not fit
    the schema (an integer column takes integers only: ``1000.7`` is malformed, never
    truncated; JSON numbers such as ``1000.0`` or ``1e3`` denote integers and are
    taken exactly, CSV takes integer text only), invalid JSON, invalid UTF-8 in a CSV or
    JSON Lines record, a CSV field longer than ``max_field_bytes``, and a missing,
    unparseable or out-of-range event time (the supported range is years 0001..9999
    UTC, :data:`wire.sources.conversions.MIN_EVENT_TIME_MS` ..
    :data:`~wire.sources.conversions.MAX_EVENT_TIME_MS`; so for timestamp and date
    columns). Empty files, blank lines, CRLF line ends and a missing final newline are
    fine. No state is kept beyond the read position and the set of files read, which
    live in the offsets.

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
        The payload schema; None infers it from the first non-empty file by name.
    delimiter:
        CSV field delimiter, one character.
    null_values:
        CSV strings read as null.
    bounded:
        True: the stream ends once the files present when it started are read (a final
        epoch carries the maximal watermark, closing every window). False: keep
        watching for new files, whatever their names (per partition; new partitions
        may appear too); never end. Files must be complete when they appear: one that
        changes after its reading began is reported on the ``dead_letter`` port and
        its new content is not read (:mod:`wire.sources.file_set`).
    partition_by:
        None: all files are one partition. ``"directory"``: each immediate
        subdirectory of ``path`` (a directory, or a glob such as ``"in/*/*.csv"``
        whose first wildcard level names the partition) is a partition. ``"file"``:
        every file is a partition (a bounded multi-file input read concurrently).
    idle_timeout:
        Processing time after which a partition without new records stops holding the
        watermark back (it is active again when records arrive); when every partition
        is idle, the watermark advances with processing time. None: never idle.
    watermark_interval:
        Minimum processing time between two epochs that only advance the watermark
        (no new records), e.g. ``"200ms"``.
    max_field_bytes:
        CSV: the longest field, in UTF-8 bytes after unquoting (default 131072, 128 KiB).
        A record with a longer field goes to the dead-letter output. Larger limits cost
        only memory: each file is parsed whole.

    Returns
    -------
    FileSource
        An immutable source description.

    Raises
    ------
    ConfigError
        On an unknown format, an empty path, a delimiter that is not one character, an
        unknown ``partition_by`` (or a glob whose first wildcard level names files, with
        ``"directory"``), an invalid duration, or a ``max_field_bytes`` that is not an
        int >= 1.

    Examples
    --------
    >>> src = files("data/flights/*.csv", format="csv", null_values=("", "NA"))
    >>> src.format, src.bounded
    ('csv', True)
    >>> src = files("in/*/*.jsonl", format="jsonl", partition_by="directory", idle_timeout="30s")
    >>> src.partition_by, src.idle_timeout, src.watermark_interval
    ('directory', 30000, 200)
    """
    return FileSource(
        path, format, schema, delimiter, null_values, bounded, partition_by, idle_timeout, watermark_interval,  # type: ignore[arg-type]  # Duration: __post_init__ converts it to int ms
        max_field_bytes,
    )


@dataclass(frozen=True)
class SourceBinding(Binding):
    """What the compiler hands to the Spark data source for one file-source step (:class:`Binding`).

    ``columns``: the payload columns the source produces (None: all). Records are still
    parsed and validated with every column of ``payload_schema`` (CSV, JSON Lines; Parquet
    reads a column it does not produce only if its values could fail to convert), so the
    same records are malformed, with the same reasons and raw text.
    """

    source_class: ClassVar[type] = FileSource
    source: FileSource

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            spark_row_schema(self.payload_schema)
        except (ValueError, TypeError) as e:
            accepted = f"Spark-compatible column types and no '__' envelope names ({e})"
            raise ConfigError("schema", str(self.payload_schema), accepted, step=self.step) from e

    def parse_spec(self) -> ParseSpec:
        """Return how to parse this source's files."""
        src = self.source
        return ParseSpec(
            src.format, self.payload_schema, self.event_time, src.delimiter, src.null_values, self.columns,
            src.max_field_bytes,
        )


class WireFileDataSource(BindingDataSource):
    """The Spark Python data source ``wire_files``; option ``binding``: a SourceBinding JSON."""

    format_name = DATA_SOURCE_NAME
    binding_class = SourceBinding
    reader_class = WireFileStreamReader


def _size(path: str) -> int | None:
    """The file's size in bytes (None: it vanished)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return None

