"""End to end (issue 11): an unbounded file source reads a new file whatever its name, reports a
rewritten file on the dead-letter output, and restarts on its checkpoint without reading
anything twice.

Run 1 reads ``b.csv``. Before run 2, ``a.csv`` (a name that sorts before ``b.csv``) arrives
and ``b.csv`` is rewritten shorter: run 2 delivers ``a.csv``'s events to the sink and one
dead letter for ``b.csv``. Before run 3 ``c.csv`` arrives: only its events are new. Every
expectation is written out by hand.
"""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest

import wire

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("user", pa.string())])
T0 = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z, in ns


def put(path, rows, *, mtime_s):
    text = "id,ts,user\n" + "".join(f"{i},{ts},{u}\n" for i, ts, u in rows)
    path.write_text(text)
    os.utime(path, ns=(T0 + mtime_s * 10**9,) * 2)
    return len(text)


def read(path):
    rows = []
    for f in sorted(path.glob("*/*.jsonl")):
        rows += [json.loads(line) for line in f.read_text().splitlines()]
    return rows


def run_until(tmp_path, spark, done):
    """Start the flow on its checkpoint, wait until ``done(out, dlq)``, stop it gracefully."""
    flow = wire.Flow("file-set")
    events = flow.source(
        wire.sources.files(str(tmp_path / "in"), format="csv", schema=SCHEMA, bounded=False),
        event_time="ts", key="user", max_events_per_epoch=100,
    )
    events.sink(wire.sinks.jsonl(tmp_path / "out"))
    flow.dead_letters().sink(wire.sinks.jsonl(tmp_path / "dlq"))
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    deadline = time.monotonic() + 120
    try:
        while not done(read(tmp_path / "out"), read(tmp_path / "dlq")):
            assert running.is_active and time.monotonic() < deadline, running.last_error
            time.sleep(0.1)
        time.sleep(1.0)  # room for a wrong extra epoch (a repeat) to show up
    finally:
        summary = running.stop(graceful=True)
    return summary


def test_earlier_name_is_read_rewrite_is_a_dead_letter_and_restart_reads_nothing_twice(spark, tmp_path):
    (tmp_path / "in").mkdir()
    put(tmp_path / "in" / "b.csv", [(1, 1000, "x"), (2, 2000, "y"), (3, 3000, "x")], mtime_s=0)
    run_until(tmp_path, spark, lambda out, dlq: len(out) >= 3)
    assert sorted(r["id"] for r in read(tmp_path / "out")) == [1, 2, 3]

    put(tmp_path / "in" / "a.csv", [(4, 4000, "y"), (5, 5000, "x")], mtime_s=1)  # sorts before b.csv
    assert put(tmp_path / "in" / "b.csv", [(9, 9000, "x")], mtime_s=2) == 20  # was 38 bytes
    run_until(tmp_path, spark, lambda out, dlq: len(out) >= 5 and len(dlq) >= 1)
    assert sorted(r["id"] for r in read(tmp_path / "out")) == [1, 2, 3, 4, 5]  # not 9: never read
    dlq = read(tmp_path / "dlq")
    assert [(r["step"], r["location"], r["reason"]) for r in dlq] == [(
        "source_1", str(tmp_path / "in" / "b.csv"),
        "file changed after it was read: size 38 -> 20 bytes, mtime 2024-01-01T00:00:00.000000000Z -> "
        "2024-01-01T00:00:02.000000000Z; its new content is not read",
    )]

    put(tmp_path / "in" / "c.csv", [(6, 6000, "y")], mtime_s=3)
    run_until(tmp_path, spark, lambda out, dlq: len(out) >= 6)
    assert sorted(r["id"] for r in read(tmp_path / "out")) == [1, 2, 3, 4, 5, 6]
    assert len(read(tmp_path / "dlq")) == 1  # the change is reported once, also across restarts
