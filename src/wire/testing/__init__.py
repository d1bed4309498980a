"""Test harness in the style of Beam's TestStream, running the real Spark engine (SPEC §9).

Example (from ``tests/e2e/test_testing_harness.py``)::

    ts = wire.testing.TestStream(
        schema=pa.schema([("t", pa.int64()), ("k", pa.string())]), event_time="t", key="k")
    ts.add_events([{"t": 1, "k": "a"}, {"t": 12, "k": "a"}])
    ts.advance_watermark(25)
    ts.add_events([{"t": 3, "k": "a"}])
    ts.advance_watermark_to_infinity()
    out = ts.run(lambda s: s.window(wire.Tumbling(10), allowed_lateness=100)
                              .aggregate(n=wire.count()))
    out["main"]   # list of dicts in emission order: k, window_start, window_end, n, emit, epoch
    out["late"]   # events beyond allowed lateness, with event_time, watermark, reason, epoch

Each ``add_events`` / ``advance_watermark`` call is its own epoch (epoch ``i`` is
the ``i``-th call), so a test can state what is emitted after which step. Integer
times are milliseconds. The watermark moves only when advanced (it starts at "none").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire.testing.harness import MemorySink, TestStream, TestStreamResult

_LAZY: LazyTable = {n: ("wire.testing.harness", n) for n in ("MemorySink", "TestStream", "TestStreamResult")}
__getattr__, __dir__ = lazy_names(__name__, _LAZY)
"""Lazy, so that a Spark worker unpickling the scripted source's reader
(:mod:`wire.testing.test_stream`) imports neither the API nor the runner."""

__all__ = ["MemorySink", "TestStream", "TestStreamResult"]
