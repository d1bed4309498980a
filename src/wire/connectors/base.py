"""What a source connector provides to the compiler (SPEC §2, §5, §7).

A source connector is a frozen dataclass (it sits in the immutable plan) with:

* ``bounded``: whether its input ends (then the flow stops by itself);
* ``resolve_schema() -> pa.Schema``: its payload columns;
* ``read_stream(spark, **binding) -> DataFrame``: a streaming DataFrame of rows in
  the envelope format (:mod:`wire.runtime.envelope`), normally from a PySpark Python
  streaming data source. ``binding`` carries ``step`` (the source step id),
  ``event_time`` (column), ``key_groups``, ``max_delay_ms`` (bounded out-of-orderness),
  ``max_events_per_epoch`` (admission per epoch) and ``control_file`` (pause / stop,
  :mod:`wire.runtime.control`).

The data source computes the watermark while planning an epoch and records it in
the epoch's end offset, so that a replay sees the same watermark; it ends each epoch
with one watermark row per key group. ``commit(end)`` of the Spark stream reader
runs after the epoch committed: that is where a source acknowledges its input to
the external system (contraflow, SPEC §7).
"""

from __future__ import annotations

import base64
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession


@runtime_checkable
class SourceConnector(Protocol):
    """The protocol every source connector implements (see the module docstring)."""

    bounded: bool

    def resolve_schema(self) -> pa.Schema:
        """The payload schema of the source's events."""
        ...

    def read_stream(self, spark: SparkSession, **binding: Any) -> DataFrame:
        """The envelope DataFrame of the source."""
        ...


def schema_to_b64(schema: pa.Schema) -> str:
    """An Arrow schema as base64 text (for a data source's JSON options)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_b64(text: str) -> pa.Schema:
    """Inverse of :func:`schema_to_b64`."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
