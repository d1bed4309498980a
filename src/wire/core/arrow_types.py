"""Spark ↔ Arrow schema conversion for envelope DataFrames."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from wire.core.envelope import ENVELOPE_COLUMNS


def arrow_payload_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema of ``df``'s payload (non-envelope) columns; timestamps in UTC."""
    full = to_arrow_schema(df.schema, timezone="UTC")
    return pa.schema([f for f in full if f.name not in ENVELOPE_COLUMNS])


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark StructType of an Arrow schema (tz-aware timestamps → TimestampType)."""
    return from_arrow_schema(schema, prefer_timestamp_ntz=False)


def spark_round_trip(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Spark hands it back (e.g. timestamps in µs, UTC).

    A Python data source must yield batches in exactly this schema.
    """
    return to_arrow_schema(spark_schema(schema), timezone="UTC")
