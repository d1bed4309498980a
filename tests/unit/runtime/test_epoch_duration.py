"""An epoch's duration leaves out the time the flow waited before it, e.g. paused (issue 26 item 12).

The dashboard drew the time between two epoch completions, so an epoch after a 10 s
pause showed as a 10 s epoch. An epoch now lasts from when Spark recorded its offsets
(``offsets/<batch>``, written once the sources planned it) to its commit.
"""

from __future__ import annotations

import os
import time

from wire.runtime.dispatcher import EpochDispatcher

NOW = 1_000.0  # perf_counter() seconds of "now" (any value: only differences count)


def dispatcher(spark_dir, last_ago_s: float) -> EpochDispatcher:
    d = EpochDispatcher.__new__(EpochDispatcher)  # the duration needs only these two fields
    d.spark_dir = spark_dir
    d._last = NOW - last_ago_s
    return d


def planned(spark_dir, batch: int, ago_s: float) -> None:
    f = spark_dir / "offsets" / str(batch)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("v1\n{}\n{}")
    t = time.time() - ago_s
    os.utime(f, (t, t))


def test_an_epoch_planned_after_a_pause_lasts_from_its_planning(tmp_path):
    planned(tmp_path, 7, ago_s=0.3)
    d = dispatcher(tmp_path, last_ago_s=10.3)  # the previous epoch committed 10 s before: paused
    took = d.epoch_duration(7, NOW)
    assert 0.3 <= took < 10.0  # 0.3 s and the moments this test took: not the 10 s paused


def test_a_replayed_epoch_lasts_at_most_since_the_run_started(tmp_path):
    planned(tmp_path, 3, ago_s=3600)  # planned by an earlier run
    d = dispatcher(tmp_path, last_ago_s=2.0)
    assert d.epoch_duration(3, NOW) == 2.0


def test_without_the_offset_file_the_time_since_the_previous_commit(tmp_path):
    assert dispatcher(tmp_path, last_ago_s=1.5).epoch_duration(9, NOW) == 1.5
    assert dispatcher(None, last_ago_s=1.5).epoch_duration(9, NOW) == 1.5
