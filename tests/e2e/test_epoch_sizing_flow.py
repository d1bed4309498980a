"""End to end: a file source sized by ``target_epoch_duration`` on Spark.

10,000 in-order events (``ts = 10 * i`` ms, keys ``i % 3``), ``max_events_per_epoch=4000``
and a target of 1 ms, which every epoch overruns: by the rule of
``wire.sources.base.epoch_sizing`` the epochs admit 4,000 (the first, not measured),
4,000 (its successor measures it: x0.25), then 1,000 and 1,000 (read back from Spark's
offset log), whatever the machine's speed, since an epoch always takes more than 4 ms.
The per-key 1 s counts equal a pandas oracle: the events are in order, so no split makes
one late.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from test_csv_flow import ms, read

import wire

pytestmark = pytest.mark.spark

N = 10_000


def admitted_per_epoch(checkpoint: Path) -> list[int]:
    """Records each epoch admitted, from Spark's offset log (the source's ``admitted`` count)."""
    logs = sorted(checkpoint.rglob("offsets/[0-9]*"), key=lambda p: int(p.name))
    totals = [json.loads(p.read_text().splitlines()[2])["admitted"] for p in logs]
    steps = [b - a for a, b in zip([0, *totals], totals, strict=False)]
    return [n for n in steps if n]  # the end-of-input epoch admits nothing


def test_epochs_shrink_towards_the_target_and_results_equal_the_oracle(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "events.csv").write_text("id,ts,k\n" + "".join(f"{i},{10 * i},k{i % 3}\n" for i in range(N)))
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("k", pa.string())])
    flow = wire.Flow("sized")
    events = flow.source(wire.sources.files(str(src), format="csv", schema=schema), event_time="ts",
                         key="k", max_events_per_epoch=4_000, target_epoch_duration=1)
    counts = events.window(wire.Tumbling("1s")).aggregate(n=wire.count(), name="counts")
    counts.sink(wire.sinks.jsonl(tmp_path / "counts"), name="counts_out")
    summary = flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
    assert summary.input_events == N

    assert admitted_per_epoch(tmp_path / "ck") == [4_000, 4_000, 1_000, 1_000]

    df = pd.DataFrame({"k": [f"k{i % 3}" for i in range(N)], "w": [10 * i // 1000 * 1000 for i in range(N)]})
    oracle = Counter({(k, w): n for (k, w), n in df.groupby(["k", "w"]).size().items()})
    out = read(tmp_path / "counts")
    assert all(r["emit"] == "final" for r in out)
    assert Counter({(r["k"], ms(r["window_start"])): r["n"] for r in out}) == oracle


class _FixedSource:
    """A connector without the ``"target_epoch_ms"`` capability: it cannot size its epochs."""

    bounded = True

    def resolve_schema(self) -> pa.Schema:
        return pa.schema([("ts", pa.int64())])

    def read_stream(self, spark, request):
        raise AssertionError("not reached: the compiler refuses the flow first")


def test_a_source_that_cannot_size_its_epochs_is_refused_before_the_flow_runs(spark, tmp_path):
    flow = wire.Flow("unsized")
    flow.source(_FixedSource(), event_time="ts", target_epoch_duration="2s", name="fixed").sink(
        wire.sinks.jsonl(tmp_path / "out"))
    with pytest.raises(wire.ConfigError, match=r"target_epoch_duration.*does not size its epochs"):
        flow.run(checkpoint=str(tmp_path / "ck"), spark=spark)
