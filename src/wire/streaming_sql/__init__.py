"""Streaming SQL on Wire's semantics: ``wire.sql(flow, query, **tables)`` (issue 30).

A query is parsed with sqlglot and recorded as the same plan nodes as the Python API
(``filter``, ``select``, ``union``, ``window(...).aggregate(...)``, ``interval_join``,
``join``, ``temporal_join``), so it has the same watermarks, late ports and results. docs/sql.md lists
what is supported. Example::

    flow = wire.Flow("hot")
    events = flow.source(wire.examples.nexmark_source.nexmark(events=10_000), event_time="date_time")
    flow.table("bids", events.filter("kind = 'bid'"))
    counts = wire.sql(flow, '''
        SELECT auction_id, count(*) AS bids, window_start, window_end
        FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
        GROUP BY auction_id, window_start, window_end''')
    counts.sink(wire.sinks.parquet("out/counts"))
    counts.late().sink(wire.sinks.parquet("out/late"))   # the late table

``wire.sql`` and ``wire.sql_late`` are this package's :func:`sql` and :func:`sql_late`.
"""

from __future__ import annotations

from wire.errors import SqlError
from wire.streaming_sql.api import SqlResult, sql, sql_late

__all__ = ["SqlError", "SqlResult", "sql", "sql_late"]
