"""The file source's settings and binding: what its reader is given (no Spark data source here).

:class:`FileConfig` checks and holds the settings of ``wire.sources.files(...)``;
:class:`SourceBinding` is what the compiler hands to the Spark data source for one step.
The stream reader (:mod:`wire.sources.file_source.reader`) imports this module, never the
connector (:mod:`wire.sources.file_source.source`, which imports both): no import cycle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Self

import pyarrow as pa

from wire.errors import ConfigError, WireError
from wire.sources.base.source import (
    Binding,
    convert_legacy_watermark,
    schema_from_b64,
    schema_to_b64,
    spark_row_schema,
)
from wire.sources.file_source.formats import DEFAULT_MAX_FIELD_BYTES, ParseSpec, infer_schema
from wire.sources.file_source.listing import (
    EXTENSIONS,
    PARTITION_MODES,
    FileFormat,
    PartitionBy,
    directory_glob_problem,
    list_files,
    list_partitions,
)

__all__ = ["FileConfig", "SourceBinding"]


@dataclass(frozen=True)
class FileConfig:
    """The file source's settings, checked: files matched by a glob or held in a directory.

    The connector is :class:`wire.sources.file_source.source.FileSource` (built with
    :func:`~wire.sources.file_source.source.files`); its reader gets these settings
    through :class:`SourceBinding`. Immutable; part of a flow plan. Durations are held in
    ms (``idle_timeout``: None = partitions never go idle); ``max_field_bytes`` in bytes.
    """

    path: str
    format: FileFormat
    schema: pa.Schema | None = None
    delimiter: str = ","
    null_values: tuple[str, ...] = ("", "NA", "null")
    bounded: bool = True
    partition_by: PartitionBy | None = None
    idle_timeout: int | None = None
    """Deprecated (the watermark policy's ``idle_timeout``); ms, None: not given."""
    watermark_interval: int | None = None
    """Deprecated (the watermark policy's ``interval``); ms, None: not given."""
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
        convert_legacy_watermark(self)
        limit = self.max_field_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError("max_field_bytes", limit, "an int >= 1 (bytes; default 131072 = 128 KiB)")

    def matching_files(self) -> list[str]:
        """Return the matching files now, in name order (the arrival order)."""
        return list_files(self.path, self.format)

    def matching_partitions(self) -> dict[str, list[str]]:
        """Return the partitions now: name -> files in name order (see :mod:`.listing`).

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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """Inverse of :meth:`to_dict` (a dict without ``max_field_bytes`` gets the default)."""
        schema = None if d["schema"] is None else schema_from_b64(d["schema"])
        return cls(**{**d, "schema": schema, "null_values": tuple(d["null_values"])})


@dataclass(frozen=True)
class SourceBinding(Binding):
    """What the compiler hands to the Spark data source for one file-source step (:class:`Binding`).

    ``columns``: the payload columns the source produces (None: all). Records are still
    parsed and validated with every column of ``payload_schema`` (CSV, JSON Lines; Parquet
    reads a column it does not produce only if its values could fail to convert), so the
    same records are malformed, with the same reasons and raw text.
    """

    source: FileConfig
    spill_dir: str | None = None
    """Local master: the planner's directory of spilled parses (:mod:`.parsed_spill`), named by the
    driver so that it can spill the first files' parses there before the planner starts
    (:meth:`~wire.sources.file_source.reader.WireFileStreamReader.warm_up`); None: the planner
    makes its own."""

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


def _size(path: str) -> int | None:
    """The file's size in bytes (None: it vanished)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return None

