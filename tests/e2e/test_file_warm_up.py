"""The driver's warm-up of the file source (``FileSource.warm_up``): the first file parsed and
spilled in a driver thread while the query starts, so that the planner's first epoch reads it.

Only a run that starts fresh warms up; the results are pandas' over the same files either way,
and the spill directory is gone when the run ends."""

from __future__ import annotations

import glob
import os

import pandas as pd
import pyarrow as pa
import pytest

import wire
from wire.sources.base.handoff import PREFIX, handoff_root
from wire.sources.file_source import source as file_source
from wire.testing import MemorySink

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.int64())])


def spill_dirs() -> set[str]:
    return set(glob.glob(os.path.join(handoff_root(), f"{PREFIX}{os.getpid()}-*")))


def run(spark, path, sink, max_epochs: int | None = None) -> None:
    flow = wire.Flow("warm-up")
    events = flow.source(wire.sources.files(str(path / "in" / "*.csv"), format="csv", schema=SCHEMA),
                         event_time="ts", key="user", watermark=wire.BoundedOutOfOrderness(0),
                         max_events_per_epoch=4, name="events")
    events.window(wire.Tumbling(10)).aggregate(n=wire.count(), total=wire.sum("amount"), name="w").sink(sink)
    flow.run(checkpoint=str(path / "ck"), spark=spark, progress=False, max_epochs=max_epochs)



def test_a_fresh_run_warms_up_a_restart_does_not_and_both_equal_pandas(spark, tmp_path, monkeypatch):
    (tmp_path / "in").mkdir()
    rows = [(t, "ab"[t % 2], t * 3) for t in range(0, 90, 3)]
    for i, part in enumerate((rows[:12], rows[12:])):  # the stop after two epochs of 4 is in p1.csv
        (tmp_path / "in" / f"p{i + 1}.csv").write_text(
            "ts,user,amount\n" + "".join(f"{t},{u},{a}\n" for t, u, a in part))
    warmed: list[str] = []
    real = file_source._FirstParses.run
    monkeypatch.setattr(file_source._FirstParses, "run",
                        lambda self: (warmed.append(str(self.binding.spill_dir)), real(self))[1])
    before = spill_dirs()
    first = MemorySink()
    run(spark, tmp_path, first, max_epochs=2)  # stops after two epochs, before the input's end
    assert len(warmed) == 1 and warmed[0].startswith(os.path.join(handoff_root(), PREFIX))
    assert spill_dirs() <= before  # removed when the run ended
    second = MemorySink()
    run(spark, tmp_path, second)  # goes on from the checkpoint's offsets: no warm-up
    assert len(warmed) == 1
    got = sorted((r["user"], r["window_start"].timestamp() * 1000, r["n"], r["total"])
                 for r in [*first.rows(), *second.rows()])
    d = pd.DataFrame(rows, columns=["ts", "user", "amount"]).assign(start=lambda x: x.ts - x.ts % 10)
    want = sorted((u, float(s), int(g.ts.size), int(g.amount.sum()))
                  for (u, s), g in d.groupby(["user", "start"]))
    assert got == want
