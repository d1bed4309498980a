"""A bounded run draws a rich progress bar of records admitted of the total (issue 16), on Spark.

Two Parquet files, 7 + 5 = 12 rows (the total comes from their footers before the run);
one row has no event time, so it is a dead letter: admitted, counted, not an event.
Four records per epoch: three epochs of records, then the source's final epoch that only
carries the end-of-input watermark. The bar is drawn on a captured rich Console forced
to be a terminal; its final state must show all 12 records of 12, the 4 epochs, the
source's watermark (max event time 1000 ms, no delay: 1970-01-01T00:00:01.000Z) and an
ETA of zero.
"""

from __future__ import annotations

import io
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import wire

pytestmark = pytest.mark.spark

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_bounded_run_ends_with_every_record_admitted_of_the_total(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    schema = pa.schema([("t", pa.int64()), ("k", pa.string())])
    pq.write_table(pa.table({"t": [0, 100, 200, None, 300, 400, 500], "k": ["a"] * 7}, schema=schema),
                   src / "a.parquet")
    pq.write_table(pa.table({"t": [600, 700, 800, 900, 1000], "k": ["b"] * 5}, schema=schema),
                   src / "b.parquet")
    flow = wire.Flow("progress")
    events = flow.source(wire.sources.files(str(src), format="parquet"), event_time="t", key="k",
                         max_events_per_epoch=4, name="events")
    events.window(wire.Tumbling(250)).aggregate(n=wire.count(), name="counts").sink(
        wire.sinks.parquet(tmp_path / "out"), name="windows")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    summary = flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2, progress=console)

    assert summary.input_events == 11 and summary.total("malformed") == 1
    frames = [ANSI.sub("", line).strip() for line in re.split(r"[\r\n]", out.getvalue())]
    final = [f for f in frames if f.startswith("progress")][-1]
    assert "12 of 12 records" in final, final
    # 12 records, 4 an epoch: the third epoch admits the last ones and ends the input
    assert "3 epochs" in final and summary.epochs == 3, (final, summary.epochs)
    # the sources' watermark gauge: the end of input, which that epoch carries
    assert "wm end of input" in final and "ETA 0:00:00" in final, final
    assert "0 of 12 records" in out.getvalue()  # it started from zero, with the total known
