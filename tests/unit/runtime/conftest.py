"""Fixtures of the runtime tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv
import pytest


@pytest.fixture
def small_window_flow(tmp_path: Path) -> object:
    """A flow through every kind of Python stage: a file source, a window's pre-stage and state stage.

    Three CSV events (``ts`` in ms, ``user``), a 10 s tumbling count per user, Parquet output
    under ``tmp_path / "out"``; bounded, so ``flow.run`` returns once the input is read.
    """
    import wire

    (tmp_path / "in").mkdir()
    rows = pa.table({"ts": [1000, 2000, 30_000], "user": ["a", "b", "a"]})
    pa.csv.write_csv(rows, tmp_path / "in" / "e.csv")
    flow = wire.Flow("small-window")
    events = flow.source(wire.sources.files(str(tmp_path / "in" / "*.csv"), format="csv"), event_time="ts",
                         key="user", watermark=wire.BoundedOutOfOrderness("1s"))
    events.window(wire.Tumbling("10s")).aggregate(n=wire.count()).sink(wire.sinks.parquet(tmp_path / "out"))
    return flow
