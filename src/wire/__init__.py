"""Wire: event-time stream processing for Python on Apache Spark.

Public API::

    wire.Flow, wire.Stream                      # build a flow (an immutable plan)
    wire.Tumbling, wire.Sliding, wire.Session  # window assignment
    wire.BoundedOutOfOrderness                  # watermark policy
    wire.count, sum, min, max, mean, first, last, collect, aggregate   # aggregations
    wire.max_by, min_by, top_k                  # full-row aggregations
    wire.value_state, list_state, map_state     # per-key state of Stream.process
    wire.testing.TestStream                      # the test harness
    wire.sources.files(...)                      # source connectors
    wire.sinks.parquet / jsonl / console         # sink connectors
    wire.spark()                                 # the SparkSession Wire uses
    wire.read_state, read_key_groups, read_state_spark   # a keyed step's state, from a checkpoint
    wire.WireError and subclasses                # errors
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire import sinks, sources, testing
    from wire.api.flow import Flow, Stream, WindowedStream
    from wire.core.windowing import BoundedOutOfOrderness, Session, Sliding, Tumbling
    from wire.errors import CheckpointError, ConfigError, FlowFailed, PlanError, WireError
    from wire.runtime.runner import RunningFlow, RunSummary
    from wire.runtime.session import spark_session as spark
    from wire.runtime.state_reader import read_key_groups, read_state, read_state_spark
    from wire.state.aggregations import (
        aggregate,
        collect,
        count,
        first,
        last,
        max,
        max_by,
        mean,
        min,
        min_by,
        sum,
        top_k,
    )
    from wire.state.keyed_state import list_state, map_state, value_state

_LAZY: dict[str, tuple[str, str | None]] = {
    "sinks": ("wire.sinks", None),
    "sources": ("wire.sources", None),
    "testing": ("wire.testing", None),
    **{n: ("wire.api.flow", n) for n in ("Flow", "Stream", "WindowedStream")},
    **{n: ("wire.core.windowing", n) for n in ("BoundedOutOfOrderness", "Session", "Sliding", "Tumbling")},
    **{n: ("wire.errors", n)
       for n in ("CheckpointError", "ConfigError", "FlowFailed", "PlanError", "WireError")},
    **{n: ("wire.runtime.runner", n) for n in ("RunningFlow", "RunSummary")},
    "spark": ("wire.runtime.session", "spark_session"),
    **{n: ("wire.runtime.state_reader", n) for n in ("read_key_groups", "read_state", "read_state_spark")},
    **{n: ("wire.state.aggregations", n)
       for n in ("aggregate", "collect", "count", "first", "last", "max", "mean", "min", "sum",
                 "max_by", "min_by", "top_k")},
    **{n: ("wire.state.keyed_state", n) for n in ("list_state", "map_state", "value_state")},
}
"""Public name -> (module, attribute; None for the module itself).

The names load on first use (PEP 562), so a process that imports one Wire module (a
Spark Python worker unpickling the file source's reader, the data source planner on
the driver) does not import the whole package with PySpark's SQL layer, pandas and
every connector: each such process started ~1-3 s faster (issue 10, first epoch).
"""

__getattr__, __dir__ = lazy_names(__name__, _LAZY)


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
    "list_state",
    "map_state",
    "max",
    "max_by",
    "mean",
    "min",
    "min_by",
    "read_key_groups",
    "read_state",
    "read_state_spark",
    "sinks",
    "sources",
    "spark",
    "sum",
    "testing",
    "top_k",
    "value_state",
]
__version__ = "0.1.0"
