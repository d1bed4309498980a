"""Pause and resume a running flow over the REST control plane: no epoch while paused, no loss."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.control import ControlPlane, client
from wire.core.control_file import read_control
from wire.runtime.checkpoint import epochs_settled

pytestmark = pytest.mark.spark

TOKEN = "e2e-token"
SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])


def write_events(path, times):
    tmp = path.with_suffix(".tmp")  # the source lists *.jsonl only once the file is complete
    tmp.write_text("".join(json.dumps({"t": t, "k": "ab"[t % 2]}) + "\n" for t in times))
    tmp.rename(path)


def wait_for(cond: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def test_pause_and_resume_over_rest_lose_and_repeat_nothing(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    out = tmp_path / "out"
    flow = wire.Flow("ctl")
    source = wire.sources.files(str(src), format="jsonl", bounded=False, schema=SCHEMA)
    s = flow.source(source, event_time="t", key="k", max_events_per_epoch=40, name="events")
    s.window(wire.Tumbling(50), emit="update").aggregate(n=wire.count(), name="w").sink(
        wire.sinks.parquet(out), name="windows")
    first, second = range(0, 120), range(120, 270)

    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    plane = ControlPlane({"ctl": running}, token=TOKEN)
    url = plane.start()
    try:
        assert url.startswith("http://127.0.0.1:")
        assert client.status(url, "ctl")["status"] in ("starting", "running")
        write_events(src / "a.jsonl", first)
        wait_for(lambda: running.summary.input_events == len(first), "the first file")
        status = client.status(url, "ctl")
        assert status["status"] == "running" and status["epochs"] >= 3
        assert status["watermarks"]["w"]["input_watermark"] == first[-1]
        # lag = newest event time - watermark: 0 with a watermark delay of 0
        # one partition ("all": no partition_by), whose watermark is the source's; files report no offset lag
        assert status["sources"] == {"events": {"paused": False, "watermark": first[-1], "lag_ms": 0,
                                                "partitions": {"all": {"watermark": first[-1],
                                                                       "offset_lag": None}}}}

        assert client.pause(url, TOKEN, "ctl")["status"] == "paused"
        wait_for(lambda: epochs_settled(tmp_path / "ck"), "the epoch in flight to commit")
        epochs_at_pause = running.summary.epochs
        write_events(src / "b.jsonl", second)
        time.sleep(2.5)  # several trigger intervals: a running flow would have read b.jsonl by now
        assert running.summary.epochs == epochs_at_pause
        assert running.summary.input_events == len(first)
        status = client.status(url, "ctl")
        assert status["status"] == "paused" and status["sources"]["events"]["paused"]
        assert running.is_active()  # paused, not stopped: the Spark query is still there
        metrics = httpx.get(f"{url}/metrics").text
        assert 'wire_flow_paused{flow="ctl"} 1.0' in metrics
        assert f'wire_input_events_total{{flow="ctl"}} {float(len(first))}' in metrics

        with pytest.raises(wire.WireError) as e:
            client.resume(url, "not-the-token", "ctl")
        assert e.value.status_code == 401 and read_control(running.control_file)["paused"] is True

        assert client.resume(url, TOKEN, "ctl")["status"] == "running"
        wait_for(lambda: running.summary.input_events == len(first) + len(second), "the second file")
        assert running.summary.epochs > epochs_at_pause
    finally:
        summary = running.stop(graceful=True)
        try:
            assert client.status(url, "ctl")["status"] == "stopped"
        finally:
            plane.stop()

    assert summary.input_events == len(first) + len(second) and summary.total("late") == 0
    rows = pa.concat_tables([pq.read_table(f) for f in sorted(out.glob("*/*.parquet"))]).to_pylist()
    last: dict[tuple[str, object], tuple[int, int]] = {}
    for r in rows:  # emit="update": a window's latest row carries its count so far
        key = (r["k"], r["window_start"])
        if key not in last or r["epoch"] >= last[key][0]:
            last[key] = (r["epoch"], r["n"])
    assert sum(n for _, n in last.values()) == len(first) + len(second)
    assert len(last) == len({(t % 2, t // 50) for t in [*first, *second]})
