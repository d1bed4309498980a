"""The file source: CSV, JSON Lines and Parquet files as a stream that carries its watermark.

The files form one or more partitions (``partition_by``: one, one per subdirectory, one
per file; :mod:`wire.sources.file_source.listing`); each partition reads its files in
arrival order (new files by name; :mod:`wire.sources.file_source.file_set`) and records in file
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
moves the watermark, an epoch carries only those control rows. A bounded source's
epoch that admits its last records carries :data:`~wire.core.envelope.MAX_WATERMARK`
instead (the end of input costs no epoch of its own); a bounded source that has nothing
left to admit ends with an epoch of those watermark rows only.
The stream reader itself is in :mod:`wire.sources.file_source.reader`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import replace
from typing import ClassVar

import pyarrow as pa
from pyspark.sql import SparkSession

from wire.core.time import NO_WATERMARK, Duration
from wire.sources.base.handoff import PREFIX, handoff_root
from wire.sources.base.source import (
    ALL_CAPABILITIES,
    BindingDataSource,
    BindingSource,
    Capability,
    ReadRequest,
    WarmUp,
    spark_row_schema,
    spark_struct,
    warn_legacy_watermark,
)
from wire.sources.file_source.config import FileConfig, SourceBinding
from wire.sources.file_source.formats import DEFAULT_MAX_FIELD_BYTES
from wire.sources.file_source.listing import FileFormat, PartitionBy
from wire.sources.file_source.parsed_spill import WarmUpLock
from wire.sources.file_source.reader import WireFileStreamReader

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


class FileSource(FileConfig, BindingSource):
    """The file source connector: its settings (:class:`FileConfig`) read by :class:`WireFileDataSource`.

    Build it with :func:`files`. Immutable; part of a flow plan.
    """

    capabilities: ClassVar[frozenset[Capability]] = ALL_CAPABILITIES | {"replay"}

    def data_source(self) -> type[BindingDataSource]:
        """The Spark data source that reads this source (:class:`WireFileDataSource`)."""
        return WireFileDataSource

    def bind(self, spark: SparkSession, request: ReadRequest) -> SourceBinding:
        """The step's binding; on a local master with a run's control file, naming the spill directory.

        The directory is ``<handoff_root()>/wire-handoff-<driver pid>-<digest of the control
        file and step>`` (:func:`~wire.sources.base.handoff.handoff_root`: memory when it has
        room): the same for both of a compilation's calls and for :meth:`warm_up`, and one per
        source step and run.
        """
        binding = super().bind(spark, request)
        assert isinstance(binding, SourceBinding)  # the data source's binding class
        if not binding.local or request.control_file is None:
            return binding
        key = f"{os.path.abspath(request.control_file)}\0{request.step}".encode()
        name = f"{PREFIX}{os.getpid()}-{hashlib.sha256(key).hexdigest()[:16]}"
        return replace(binding, spill_dir=os.path.join(handoff_root(), name))

    def warm_up(self, spark: SparkSession, request: ReadRequest) -> WarmUp | None:
        """Parse each partition's first file into the planner's spill directory (local master only).

        The planner's first ``latestOffset`` then reads the parse instead of making it (it
        parsed the first file, 0.17-0.30 s for 500,000 Nexmark events, and imported pandas
        on the way, 0.23 s, while the first epoch waited). Nothing is written elsewhere.
        """
        binding = self.bind(spark, request)
        return None if binding.spill_dir is None else _FirstParses(binding)


class _FirstParses:
    """:meth:`FileSource.warm_up`: the first files' parses, spilled; their directory removed at the end."""

    def __init__(self, binding: SourceBinding) -> None:
        self.binding = binding
        assert binding.spill_dir is not None
        self.lock = WarmUpLock(binding.spill_dir)
        """Held until the parses are spilled: a planner started meanwhile waits for them."""

    def run(self) -> None:
        """Parse and spill (:meth:`WireFileStreamReader.warm_up`), then release :attr:`lock`."""
        try:
            WireFileStreamReader(self.binding).warm_up()
        finally:
            self.lock.release()

    def close(self) -> None:
        """Remove the planner's spill directory (the planner may have ended without removing it)."""
        self.lock.release()
        if self.binding.spill_dir is not None:
            shutil.rmtree(self.binding.spill_dir, ignore_errors=True)


def files(
    path: str,
    *,
    format: FileFormat,
    schema: pa.Schema | None = None,
    delimiter: str = ",",
    null_values: tuple[str, ...] = ("", "NA", "null"),
    bounded: bool = True,
    partition_by: PartitionBy | None = None,
    idle_timeout: Duration | None = None,
    watermark_interval: Duration | None = None,
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
    UTC, :data:`wire.sources.base.conversions.MIN_EVENT_TIME_MS` ..
    :data:`~wire.sources.base.conversions.MAX_EVENT_TIME_MS`; so for timestamp and date
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
        its new content is not read (:mod:`wire.sources.file_source.file_set`).
    partition_by:
        None: all files are one partition. ``"directory"``: each immediate
        subdirectory of ``path`` (a directory, or a glob such as ``"in/*/*.csv"``
        whose first wildcard level names the partition) is a partition. ``"file"``:
        every file is a partition (a bounded multi-file input read concurrently).
    idle_timeout, watermark_interval:
        Deprecated: the step's watermark policy holds them,
        ``flow.source(..., watermark=wire.BoundedOutOfOrderness(max_delay, idle_timeout=...,
        interval=...))`` (:class:`wire.core.windowing.BoundedOutOfOrderness`). Given here they
        still apply (a ``DeprecationWarning``), forwarded into that policy when the flow
        compiles; a policy that sets a different value is a ``ConfigError`` then.
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
    >>> src = files("in/*/*.jsonl", format="jsonl", partition_by="directory")
    >>> src.partition_by, src.bounded
    ('directory', True)
    """
    warn_legacy_watermark("wire.sources.files", idle_timeout, watermark_interval)
    return FileSource(
        path, format, schema, delimiter, null_values, bounded, partition_by, idle_timeout, watermark_interval,  # type: ignore[arg-type]  # Duration: __post_init__ converts it to int ms
        max_field_bytes,
    )


class WireFileDataSource(BindingDataSource):
    """The Spark Python data source ``wire_files``; option ``binding``: a SourceBinding JSON."""

    format_name = DATA_SOURCE_NAME
    binding_class = SourceBinding
    source_class = FileSource
    reader_class = WireFileStreamReader
