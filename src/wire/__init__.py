"""Wire: event-time stream processing for Python on Apache Spark.

A flow is built in Python (sources, operators, sinks) as an immutable plan and runs as
one Spark Structured Streaming query with one checkpoint. Public names::

    wire.Flow, wire.Stream, wire.WindowedStream  # build a flow; Stream/WindowedStream come from it
    wire.Tumbling, wire.Sliding, wire.Session    # window assignment
    wire.BoundedOutOfOrderness                   # the source's watermark policy
    wire.count, sum, min, max, mean, first, last, collect, aggregate  # aggregations
    wire.max_by, min_by, top_k                   # full-row aggregations
    wire.value_state, list_state, map_state      # per-key state of Stream.process
    wire.RunSummary, wire.RunningFlow            # what Flow.run / Flow.start return
    wire.spark()                                 # the SparkSession Wire uses
    wire.sources                                 # files, kafka, redis_stream, http_ingest
    wire.sinks                                   # parquet, jsonl, delta, postgres, kafka, ...
    wire.testing                                 # TestStream, MemorySink: the test harness
    wire.tables                                  # postgres, delta, parquet: Stream.lookup_join's tables
    wire.sql(flow, query, **tables), sql_late    # streaming SQL over registered streams
    wire.read_state, read_key_groups, read_state_spark  # a keyed step's state, from a checkpoint
    wire.WireError and its subclasses            # errors (all in wire.errors)

Example (run by the test suite): every error Wire raises on purpose is a ``WireError``.

>>> import wire
>>> [name for name in wire.__all__ if name.endswith("Error")]  # doctest: +NORMALIZE_WHITESPACE
['CheckpointError', 'ConfigError', 'MissingExtraError', 'PlanError', 'ProcessFunctionError',
 'SqlError', 'WireError']
>>> wire.Flow("bad id!")  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
wire.errors.ConfigError: invalid flow_id='bad id!'; accepted: letters, digits, '_' and '-', ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire import sinks as sinks
    from wire import sources as sources
    from wire import tables as tables
    from wire import testing as testing
    from wire.api.flow import Flow as Flow
    from wire.api.flow import Stream as Stream
    from wire.api.flow import WindowedStream as WindowedStream
    from wire.core.windowing import BoundedOutOfOrderness as BoundedOutOfOrderness
    from wire.core.windowing import Session as Session
    from wire.core.windowing import Sliding as Sliding
    from wire.core.windowing import Tumbling as Tumbling
    from wire.errors import CheckpointError as CheckpointError
    from wire.errors import ConfigError as ConfigError
    from wire.errors import FlowFailed as FlowFailed
    from wire.errors import MissingExtraError as MissingExtraError
    from wire.errors import PlanError as PlanError
    from wire.errors import ProcessFunctionError as ProcessFunctionError
    from wire.errors import SqlError as SqlError
    from wire.errors import WireError as WireError
    from wire.runtime.runner import RunningFlow as RunningFlow
    from wire.runtime.runner import RunSummary as RunSummary
    from wire.runtime.session import spark_session
    from wire.runtime.state_reader import read_key_groups as read_key_groups
    from wire.runtime.state_reader import read_state as read_state
    from wire.runtime.state_reader import read_state_spark as read_state_spark
    from wire.state.aggregations import aggregate as aggregate
    from wire.state.aggregations import collect as collect
    from wire.state.aggregations import count as count
    from wire.state.aggregations import first as first
    from wire.state.aggregations import last as last
    from wire.state.aggregations import max as max
    from wire.state.aggregations import max_by as max_by
    from wire.state.aggregations import mean as mean
    from wire.state.aggregations import min as min
    from wire.state.aggregations import min_by as min_by
    from wire.state.aggregations import sum as sum
    from wire.state.aggregations import top_k as top_k
    from wire.state.keyed_state import list_state as list_state
    from wire.state.keyed_state import map_state as map_state
    from wire.state.keyed_state import value_state as value_state
    from wire.streaming_sql import sql as sql
    from wire.streaming_sql import sql_late as sql_late

    spark = spark_session

_LAZY: LazyTable = {
    "sinks": ("wire.sinks", None),
    "sources": ("wire.sources", None),
    "testing": ("wire.testing", None),
    "tables": ("wire.tables", None),
    **{n: ("wire.api.flow", n) for n in ("Flow", "Stream", "WindowedStream")},
    **{n: ("wire.core.windowing", n) for n in ("BoundedOutOfOrderness", "Session", "Sliding", "Tumbling")},
    **{n: ("wire.errors", n)
       for n in ("CheckpointError", "ConfigError", "FlowFailed", "MissingExtraError", "PlanError",
                 "ProcessFunctionError", "SqlError", "WireError")},
    **{n: ("wire.runtime.runner", n) for n in ("RunningFlow", "RunSummary")},
    "spark": ("wire.runtime.session", "spark_session"),
    **{n: ("wire.streaming_sql", n) for n in ("sql", "sql_late")},
    **{n: ("wire.runtime.state_reader", n) for n in ("read_key_groups", "read_state", "read_state_spark")},
    **{n: ("wire.state.aggregations", n)
       for n in ("aggregate", "collect", "count", "first", "last", "max", "mean", "min", "sum",
                 "max_by", "min_by", "top_k")},
    **{n: ("wire.state.keyed_state", n) for n in ("list_state", "map_state", "value_state")},
}
"""The one list of public names: name -> (module, attribute; None for the module itself).

``__all__`` is built from it. The names load on first use (PEP 562), so a process that
imports one Wire module (a Spark Python worker unpickling the file source's reader, the
data source planner on the driver) does not import the whole package with PySpark's SQL
layer, pandas and every connector: each such process started ~1-3 s faster (issue 10,
first epoch). The ``TYPE_CHECKING`` imports above repeat it for type checkers (which
cannot read a computed ``__all__``); ``tests/unit/test_public_surface.py`` checks that
the two agree.
"""

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = sorted(_LAZY)
__version__ = "0.1.0"
