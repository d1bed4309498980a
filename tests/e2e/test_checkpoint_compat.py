"""Resuming a checkpoint with a changed flow (issue 11): refused for state, allowed for filters.

Input: one key ``a``, events at t = 0 s, 1 s, ..., 29 s with ``x = t / 1000``, five per
epoch, watermark = newest event time. The first run stops after 3 epochs (events 0-14 s;
the window [0 s, 10 s) is final, 10-14 s are in the state of [10 s, 20 s)).
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.errors import CheckpointError

pytestmark = pytest.mark.spark


def build(tmp, *, size="10s", predicate="x >= 0"):
    flow = wire.Flow("compat")
    s = flow.source(wire.sources.files(str(tmp / "in"), format="jsonl"), event_time="t", key="k",
                    max_events_per_epoch=5, name="events")
    (s.filter(predicate, name="keep")
     .window(wire.Tumbling(size)).aggregate(n=wire.count(), name="hourly")
     .sink(wire.sinks.parquet(str(tmp / "out")), name="out"))
    return flow


def windows(tmp):
    files = sorted((tmp / "out").glob("epoch-*/*.parquet"))
    if not files:
        return []
    t = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    return sorted((r["window_start"].timestamp() * 1000, r["window_end"].timestamp() * 1000, r["n"],
                   r["emit"]) for r in t)


@pytest.fixture(scope="module")
def first_run(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compat")
    (tmp / "in").mkdir()
    (tmp / "in" / "e.jsonl").write_text(
        "".join(json.dumps({"t": t, "k": "a", "x": t // 1000}) + "\n" for t in range(0, 30_000, 1000)))
    summary = build(tmp).run(str(tmp / "ck"), spark=spark, key_groups=2, max_epochs=3)
    assert summary.epochs == 3
    assert windows(tmp) == [(0, 10_000, 10, "final")]
    return tmp


def test_changed_window_is_refused_and_changed_filter_resumes(spark, first_run):
    tmp = first_run
    ck = tmp / "ck"
    spark_files = sorted(str(p.relative_to(ck)) for p in (ck / "spark").rglob("*"))
    with pytest.raises(CheckpointError) as e:
        build(tmp, size="7s").run(str(ck), spark=spark, key_groups=2)
    msg = str(e.value)
    assert ("step 'hourly' changed: window Tumbling(size=10000 ms) -> Tumbling(size=7000 ms)"
            in msg), msg
    assert "wire run --fresh" in msg and str(ck) in msg
    # refused before Spark ran anything: no new epoch, the sink holds only 10 s windows
    assert sorted(str(p.relative_to(ck)) for p in (ck / "spark").rglob("*")) == spark_files
    assert windows(tmp) == [(0, 10_000, 10, "final")]

    # a changed filter is stateless: the flow resumes (epoch 3 is replayed under it)
    build(tmp, predicate="x % 2 = 0").run(str(ck), spark=spark, key_groups=2)
    # [10 s, 20 s): x = 10..14 counted before the change, then 16 and 18; [20 s, 30 s): 20..28 even
    assert windows(tmp) == [(0, 10_000, 10, "final"), (10_000, 20_000, 7, "final"),
                            (20_000, 30_000, 5, "final")]


def test_a_damaged_spark_log_is_refused_before_the_query_starts(spark, first_run, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(first_run / "ck", ck, ignore=shutil.ignore_patterns("kept"))
    latest = max(int(p.name) for p in (ck / "spark" / "offsets").iterdir() if p.name.isdigit())
    (ck / "spark" / "offsets" / str(latest)).write_text("garbage\n")
    before = windows(first_run)
    with pytest.raises(CheckpointError, match=rf"Spark log file {ck}/spark/offsets/{latest} does not "
                                              r"start with a version line like 'v1' \(found 'garbage'\)"):
        build(first_run).run(str(ck), spark=spark, key_groups=2)
    assert windows(first_run) == before
