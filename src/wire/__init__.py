"""Wire: event-time stream processing for Python on Apache Spark.

Public API::

    wire.Flow, wire.Stream                      # build a flow (an immutable plan)
    wire.Tumbling, wire.Sliding, wire.Session  # window assignment
    wire.BoundedOutOfOrderness                  # watermark policy
    wire.count, sum, min, max, mean, first, last, collect, aggregate   # aggregations
    wire.testing.TestStream                      # the test harness
    wire.sources.files(...)                      # source connectors
    wire.sinks.parquet / jsonl / console         # sink connectors
    wire.spark()                                 # the SparkSession Wire uses
    wire.WireError and subclasses                # errors
"""

from __future__ import annotations

from wire import sinks, sources, testing
from wire.api.flow import Flow, Stream, WindowedStream
from wire.api.windowing import BoundedOutOfOrderness, Session, Sliding, Tumbling
from wire.errors import CheckpointError, ConfigError, FlowFailed, PlanError, WireError
from wire.runtime.runner import RunningFlow, RunSummary
from wire.runtime.session import spark_session as spark
from wire.state.aggregations import aggregate, collect, count, first, last, max, mean, min, sum

__all__ = [
    "BoundedOutOfOrderness",
    "CheckpointError",
    "ConfigError",
    "Flow",
    "FlowFailed",
    "PlanError",
    "RunSummary",
    "RunningFlow",
    "Session",
    "Sliding",
    "Stream",
    "Tumbling",
    "WindowedStream",
    "WireError",
    "aggregate",
    "collect",
    "count",
    "first",
    "last",
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
