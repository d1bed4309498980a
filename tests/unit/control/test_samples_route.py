"""GET /v1/flows/{id}/samples: recent dead letters and late events (no Spark)."""

from __future__ import annotations

import httpx
import pytest
from test_server import TOKEN, FakeFlow

from wire.control import ControlPlane
from wire.control.report import report_data
from wire.runtime.epoch_log import EpochLog

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def dead(i: int) -> dict:
    return {"kind": "dead_letter", "step": "src", "reason": f"bad {i}", "record": f"r{i}",
            "location": f"in/a.jsonl:{i}", "event_time": None, "watermark": None}


LATE = {"kind": "late", "step": "hourly", "reason": "window closed", "record": '{"k": "a"}',
        "location": None, "event_time": 500, "watermark": 2000}


@pytest.fixture
def served(tmp_path):
    flow = FakeFlow(tmp_path)
    plane = ControlPlane({"orders": flow}, token=TOKEN)
    url = plane.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            yield flow, c
    finally:
        plane.stop()


def test_samples_need_the_token_even_on_loopback(served):
    _, api = served
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        assert api.get("/v1/flows/orders/samples", headers=headers).status_code == 401
    assert api.get("/v1/flows/orders").status_code == 200  # counters stay open on loopback
    assert api.get("/v1/flows/nope/samples", headers=AUTH).status_code == 404


def test_samples_are_newest_first_with_epoch_and_processing_time(served):
    flow, api = served
    assert api.get("/v1/flows/orders/samples", headers=AUTH).json() == {
        "id": "orders", "size": 50, "dead_letters": [], "late": []}
    flow.summary.samples.add([dead(1), LATE], epoch=0, now_ms=1_700_000_000_000)
    flow.summary.samples.add([dead(2)], epoch=1, now_ms=1_700_000_001_000)
    body = api.get("/v1/flows/orders/samples", headers=AUTH).json()
    assert body["dead_letters"] == [
        {**dead(2), "epoch": 1, "processing_time": 1_700_000_001_000},
        {**dead(1), "epoch": 0, "processing_time": 1_700_000_000_000},
    ]
    assert body["late"] == [{**LATE, "epoch": 0, "processing_time": 1_700_000_000_000}]
    for i in range(3, 80):
        flow.summary.samples.add([dead(i)], epoch=i, now_ms=i)
    body = api.get("/v1/flows/orders/samples", headers=AUTH).json()
    assert len(body["dead_letters"]) == 50 and body["dead_letters"][0]["reason"] == "bad 79"
    assert body["dead_letters"][-1]["reason"] == "bad 30"


def test_the_report_embeds_the_last_runs_samples(tmp_path):
    flow = FakeFlow(tmp_path)
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "wire.json").write_text('{"flow_id": "orders"}')
    log = EpochLog(ck)
    flow.run_epoch()
    log.append(flow.summary, 0, 0.5)
    flow.summary.samples.add([dead(7), LATE], epoch=0, now_ms=5)
    log.write_samples(flow.summary.samples)
    samples = report_data(ck)["samples"]
    assert samples["id"] == "orders"
    assert [d["reason"] for d in samples["dead_letters"]] == ["bad 7"]
    assert samples["late"][0]["watermark"] == 2000
