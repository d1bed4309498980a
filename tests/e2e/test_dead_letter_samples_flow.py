"""Recent dead letters and late events reach the control plane's samples (issue 16), on Spark.

One JSON Lines file, three records per epoch, watermark = max event time (no delay),
tumbling windows of 100 ms. Hand-derived:

====  ==========================  =====  ==========================================
line  record                      epoch  fate
====  ==========================  =====  ==========================================
1     t=1000 a                    0      window [1000, 1100)
2     t=2000 a                    0      window [2000, 2100); watermark -> 2000
3     ``not json``                0      dead letter: invalid JSON
4     t=500 b                     1      late: window end 600 <= watermark 2000
5     ``[1, 2]``                  1      dead letter: not a JSON object
6     t=3000 a                    1      window [3000, 3100); watermark -> 3000
7     t=2100 b                    2      late: window end 2200 <= 3000
8     t=2950 a                    2      late: window end 3000 <= 3000 (the boundary)
9     t=3000 a                    2      on time: window end 3100 > 3000
====  ==========================  =====  ==========================================

Neither side port is sunk, so both are kept under the checkpoint by executor sinks: the
samples come back with the epoch job's receipts, not from a driver sink.
"""

from __future__ import annotations

import json

import httpx
import pyarrow as pa
import pytest

import wire
from wire.control import ControlPlane
from wire.control.report import report_data
from wire.state.windows import LATE_REASON

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])
TOKEN = "samples-token"


def _json_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as e:
        return str(e)
    raise AssertionError("valid JSON")


def test_rest_samples_hold_exactly_the_dead_letters_and_late_events(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    lines = ['{"t": 1000, "k": "a"}', '{"t": 2000, "k": "a"}', "not json",
             '{"t": 500, "k": "b"}', "[1, 2]", '{"t": 3000, "k": "a"}',
             '{"t": 2100, "k": "b"}', '{"t": 2950, "k": "a"}', '{"t": 3000, "k": "a"}']
    path = src / "a.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    flow = wire.Flow("samples")
    events = flow.source(wire.sources.files(str(src), format="jsonl", schema=SCHEMA), event_time="t",
                         key="k", watermark=wire.BoundedOutOfOrderness(0), max_events_per_epoch=3,
                         name="events")
    (events.window(wire.Tumbling(100)).aggregate(n=wire.count(), name="per_100ms")
     .sink(wire.sinks.parquet(tmp_path / "out"), name="windows"))
    ck = tmp_path / "ck"
    running = flow.start(str(ck), spark=spark, key_groups=2)
    summary = running.await_termination()
    assert summary.total("malformed") == 2 and summary.total("late") == 3

    plane = ControlPlane({"samples": running}, token=TOKEN)
    url = plane.start()
    try:
        assert httpx.get(f"{url}/v1/flows/samples/samples").status_code == 401
        body = httpx.get(f"{url}/v1/flows/samples/samples",
                         headers={"Authorization": f"Bearer {TOKEN}"}).json()
    finally:
        plane.stop()

    got_dead = [(d["step"], d["location"], d["reason"], d["record"], d["epoch"], d["event_time"])
                for d in body["dead_letters"]]
    assert got_dead == [  # newest first
        ("events", f"{path}:5", "jsonl: expected a JSON object, got list", "[1, 2]", 1, None),
        ("events", f"{path}:3", f"jsonl: invalid JSON: {_json_error('not json')}", "not json", 0, None),
    ]
    got_late = sorted((d["step"], d["event_time"], d["watermark"], d["reason"], json.loads(d["record"])["k"],
                       d["epoch"]) for d in body["late"])
    assert got_late == [
        ("per_100ms", 500, 2000, LATE_REASON, "b", 1),
        ("per_100ms", 2100, 3000, LATE_REASON, "b", 2),
        ("per_100ms", 2950, 3000, LATE_REASON, "a", 2),
    ]
    assert [d["epoch"] for d in body["late"]] == [2, 2, 1]  # newest first
    times = [d["processing_time"] for d in body["dead_letters"]]
    assert times == sorted(times, reverse=True) and times[-1] > 1_600_000_000_000  # ms, Unix epoch

    # the same sample is kept next to the checkpoint for `wire report`
    recorded = report_data(ck)["samples"]
    assert [d["reason"] for d in recorded["dead_letters"]] == [d[2] for d in got_dead]
    assert len(recorded["late"]) == 3
