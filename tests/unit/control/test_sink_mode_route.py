"""PATCH / GET /v1/flows/{id}/sinks/{sink}: a self-correcting sink's mode switch and counters (no Spark)."""

from __future__ import annotations

import httpx
import pyarrow as pa
import pytest
from test_server import TOKEN, FakeFlow

import wire
from wire.control import ControlPlane
from wire.core.control_file import read_control
from wire.core.envelope import metrics_table
from wire.plan.nodes import Plan, PortRef, SinkNode

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path):
    flow = FakeFlow(tmp_path)
    sink = wire.sinks.self_correcting(str(tmp_path / "delta"), key="k", read_only=True)
    flow.plan = Plan("orders", (*flow.plan.nodes, SinkNode("table", PortRef("keyed"), sink)))
    sink.bind_checkpoint(flow.checkpoint)
    sink.open(flow_id="orders", sink_id="table", checkpoint_id="c1")
    plane = ControlPlane({"orders": flow}, token=TOKEN)
    url = plane.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            yield flow, sink, c
    finally:
        plane.stop()
        sink.close()


def test_switch_mode_over_rest(served):
    flow, sink, api = served
    assert api.get("/v1/flows/orders/sinks/table").json()["mode"] == "read_only"
    assert api.patch("/v1/flows/orders/sinks/table", json={"mode": "write"}).status_code == 401
    assert api.patch("/v1/flows/orders/sinks/out", json={"mode": "write"}, headers=AUTH).status_code == 404
    assert api.patch("/v1/flows/orders/sinks/table", json={"mode": "fast"}, headers=AUTH).status_code == 422
    got = api.patch("/v1/flows/orders/sinks/table", json={"mode": "write"}, headers=AUTH)
    assert got.status_code == 200 and got.json()["mode"] == "write"
    assert read_control(flow.control_file)["sinks"]["table"] == {"mode": "write"}
    assert sink.mode() == "write"
    # an epoch's counters, folded into the summary as the runner does, show in the status and /metrics
    sink.write_epoch(0, pa.table({"k": ["a", "b"], "n": [1, 2]}))
    flow.summary.add_metrics(metrics_table("table", sink.epoch_metrics()))
    body = api.get("/v1/flows/orders/sinks/table").json()
    assert body["counters"]["sc_corrections"] == 2 and body["gauges"]["sc_read_only"] == 0
    assert body["gauges"]["sc_table_upper"] == 1
    # the flow's own status carries the same under self_correcting.<sink>
    status = api.get("/v1/flows/orders").json()["self_correcting"]
    assert status == {"table": {"mode": "write", "counters": body["counters"], "gauges": body["gauges"]}}
    text = api.get("/metrics").text
    assert 'wire_step_events_total{counter="sc_corrections",flow="orders",step="table"} 2.0' in text
    assert 'wire_step_gauge{flow="orders",name="sc_read_only",step="table"} 0.0' in text
    flow.query.isActive = False
    stopped = api.patch("/v1/flows/orders/sinks/table", json={"mode": "read_only"}, headers=AUTH)
    assert stopped.status_code == 409


def test_cli_sink_mode(served, tmp_path):
    from typer.testing import CliRunner

    from wire.cli.main import app

    _, sink, api = served
    url = str(api.base_url)
    run = CliRunner().invoke
    assert run(app, ["sink-mode", "orders", "table", "write", "--url", url, "--token", TOKEN]).exit_code == 0
    assert sink.mode() == "write"
    assert run(app, ["sink-mode", "orders", "table", "sideways"]).exit_code == 2
    assert run(app, ["sink-mode", "orders", "nope", "write", "--url", url, "--token", TOKEN]).exit_code == 1
    assert run(app, ["sink-mode", str(tmp_path / "not-a-checkpoint"), "table", "write"]).exit_code == 1
    (tmp_path / "orders").mkdir(exist_ok=True)
    (tmp_path / "orders" / "wire.json").write_text('{"flow_id": "orders"}')
    assert run(app, ["sink-mode", str(tmp_path / "orders"), "table", "read_only"]).exit_code == 0
    assert sink.mode() == "read_only"
