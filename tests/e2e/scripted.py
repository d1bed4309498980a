"""A hand-built arrival script as a TestStream, with the watermark each event arrived under."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from wire.testing import TestStream


def scripted(
    schema: pa.Schema, steps: list[tuple[list[dict], int | None]], event_time: str = "t"
) -> tuple[TestStream, pd.DataFrame]:
    """The TestStream of ``steps`` and its events with the watermark in force when each arrived.

    Each step is (events, watermark after them or None); an empty events list adds no epoch.
    The stream ends with the watermark at infinity. Column ``wm`` is None before the first
    watermark.
    """
    ts = TestStream(schema=schema, event_time=event_time)
    rows, wm = [], None
    for events, after in steps:
        if events:
            ts.add_events(events)
            rows += [{**e, "wm": wm} for e in events]
        if after is not None:
            ts.advance_watermark(after)
            wm = after
    ts.advance_watermark_to_infinity()
    return ts, pd.DataFrame(rows)
