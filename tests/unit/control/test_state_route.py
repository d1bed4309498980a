"""GET /v1/flows/{id}/state/{step}?key=...: one key's state of a running flow (no Spark)."""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest
from test_server import TOKEN, FakeFlow

from wire.control import ControlPlane
from wire.errors import CheckpointError, ConfigError

AUTH = {"Authorization": f"Bearer {TOKEN}"}


class StateFlow(FakeFlow):
    """A fake running flow whose ``state(step, key)`` answers like ``RunningFlow.state``."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.calls: list[tuple[str, str]] = []
        self.error: Exception | None = None

    def state(self, step, key):
        self.calls.append((step, key))
        if self.error is not None:
            raise self.error
        table = pa.table({
            "key_group": pa.array([2, 2], pa.int32()), "k": [key, key],
            "window_start": pa.array([0, 10_000], pa.int64()),
            "window_end": pa.array([10_000, 20_000], pa.int64()),
            "n": pa.array([3, 1], pa.int64()), "acc": pa.array([b"\x00\x01", None], pa.binary()),
            "tags": pa.array([[("x", 1)], None], pa.map_(pa.string(), pa.int64())),
            "fired": [True, False],
        })
        meta = {b"wire.kind": b"window", b"wire.epoch": b"7", b"wire.input_watermark": b"15000",
                b"wire.output_watermark": str(-(2**63)).encode()}
        return table.replace_schema_metadata(meta)


@pytest.fixture
def served(tmp_path):
    flow = StateFlow(tmp_path)
    plane = ControlPlane({"orders": flow}, token=TOKEN)
    url = plane.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            yield flow, c
    finally:
        plane.stop()


def test_state_needs_the_token_even_on_loopback_and_reads_nothing_without_it(served):
    flow, api = served
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = api.get("/v1/flows/orders/state/hourly", params={"key": "a"}, headers=headers)
        assert r.status_code == 401
    assert flow.calls == []
    assert api.get("/v1/flows/nope/state/hourly", params={"key": "a"}, headers=AUTH).status_code == 404
    assert api.get("/v1/flows/orders/state/hourly", headers=AUTH).status_code == 422  # key= is required


def test_one_keys_rows_as_json(served):
    flow, api = served
    r = api.get("/v1/flows/orders/state/hourly", params={"key": "JFK"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert flow.calls == [("hourly", "JFK")]
    assert r.json() == {
        "id": "orders", "step": "hourly", "kind": "window", "key": "JFK", "epoch": 7, "key_group": 2,
        "input_watermark": 15000, "output_watermark": -(2**63),
        "columns": ["key_group", "k", "window_start", "window_end", "n", "acc", "tags", "fired"],
        "rows": [
            {"key_group": 2, "k": "JFK", "window_start": 0, "window_end": 10_000, "n": 3, "acc": "AAE=",
             "tags": [["x", 1]], "fired": True},
            {"key_group": 2, "k": "JFK", "window_start": 10_000, "window_end": 20_000, "n": 1, "acc": None,
             "tags": None, "fired": False},
        ],
    }


@pytest.mark.parametrize(("error", "status"), [
    (ConfigError("step", "nope", "a keyed (stateful) step of the flow: ['hourly']"), 404),
    (ConfigError("key", "abc", "a value of step 'hourly''s key column 'k' (bigint)"), 422),
    (CheckpointError("checkpoint 'ck' has no committed epoch: no state to read yet"), 409),
])
def test_errors_map_to_statuses_with_the_reason(served, error, status):
    flow, api = served
    flow.error = error
    r = api.get("/v1/flows/orders/state/hourly", params={"key": "abc"}, headers=AUTH)
    assert r.status_code == status
    assert r.json()["detail"] == str(error)


def test_a_stopped_flow_answers_409(served):
    flow, api = served
    flow.query.isActive = False
    r = api.get("/v1/flows/orders/state/hourly", params={"key": "a"}, headers=AUTH)
    assert r.status_code == 409 and "wire state" in r.json()["detail"]
    assert flow.calls == []
