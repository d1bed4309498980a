"""Wire: event-time stream processing for Python on Apache Spark.

Public API::

    wire.Flow, wire.Stream                      # build a flow (an immutable plan)
    wire.Tumbling, wire.BoundedOutOfOrderness   # windows and watermark policy
    wire.count, wire.sum, wire.min, wire.max, wire.mean   # aggregations
    wire.sources.files(...)                      # source connectors
    wire.sinks.parquet / jsonl / console         # sink connectors
    wire.spark()                                 # the SparkSession Wire uses
    wire.WireError and subclasses                # errors
"""

from __future__ import annotations

from wire import sinks, sources, testing
from wire.api.flow import Flow, Stream, WindowedStream
from wire.api.windowing import BoundedOutOfOrderness, Tumbling
from wire.errors import CheckpointError, ConfigError, FlowFailed, PlanError, WireError
from wire.runtime.runner import RunSummary
from wire.runtime.session import spark_session as spark
from wire.state.aggregations import count, max, mean, min, sum

__all__ = [
    "BoundedOutOfOrderness",
    "CheckpointError",
    "ConfigError",
    "Flow",
    "FlowFailed",
    "PlanError",
    "RunSummary",
    "Stream",
    "Tumbling",
    "WindowedStream",
    "WireError",
    "count",
    "max",
    "mean",
    "min",
    "sinks",
    "sources",
    "spark",
    "sum",
    "testing",
]
__version__ = "0.1.0"
