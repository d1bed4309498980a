"""The REST control plane against a fake running flow (no Spark)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import wire
from wire.control import ControlPlane, ControlPlaneError, client
from wire.control.status import RateMeter
from wire.core.control_file import control_path, read_control
from wire.plan.nodes import KeyByNode, Plan, PortRef, SinkNode, SourceNode
from wire.runtime.runner import RunSummary

NO_WM = -(2**63)
TOKEN = "s3cret-token"


class FakeQuery:
    def __init__(self):
        self.isActive = True
        self.error = None
        self.lastProgress = None

    def exception(self):
        return self.error


class FakeFlow:
    """Duck-typed like wire.RunningFlow: plan, control_file, summary, query, is_active()."""

    def __init__(self, tmp_path, flow_id="orders"):
        policy = wire.BoundedOutOfOrderness(0)
        self.plan = Plan(flow_id, (
            SourceNode("src", None, "t", "k", policy, 10),
            SourceNode("clicks", None, "t", "k", policy, 10),
            KeyByNode("keyed", "src", "k"),
            SinkNode("out", PortRef("keyed"), None),
        ))
        self.checkpoint = str(tmp_path / flow_id)
        self.control_file = control_path(self.checkpoint)
        self.summary = RunSummary(flow_id, source_steps=("src", "clicks"))
        self.query = FakeQuery()

    @property
    def flow_id(self):
        return self.plan.flow_id

    def is_active(self):
        return self.query.isActive

    def run_epoch(self, events=10, late=1):
        s = self.summary
        s.epochs += 1
        s.metrics[("src", "events")] += events
        s.metrics[("src", "records")] += events + 1
        s.metrics[("src", "malformed")] += 1
        s.metrics[("hourly", "late")] += late
        s.rows_written["out"] += 3
        s.emitted["final"] += 3
        s.gauges.update({
            ("src", "watermark"): 5000 * s.epochs,
            ("src", "watermark:p0"): 5000 * s.epochs,
            ("clicks", "watermark"): NO_WM,
            ("hourly", "input_watermark"): 5000 * s.epochs,
            ("hourly", "output_watermark"): 2**63 - 1,
            ("hourly", "open_windows"): 4,
        })


@pytest.fixture
def flow(tmp_path):
    return FakeFlow(tmp_path)


@pytest.fixture
def plane(flow):
    return ControlPlane({"orders": flow}, token=TOKEN)


@pytest.fixture
def api(plane):
    """An HTTP client on the plane served by uvicorn (starlette's TestClient wants httpx2)."""
    url = plane.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            yield c
    finally:
        plane.stop()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_list_and_get_flow_states(api, flow):
    assert api.get("/v1/flows").json() == [
        {"id": "orders", "status": "starting", "epochs": 0, "input_events": 0}
    ]
    flow.run_epoch()
    body = api.get("/v1/flows/orders").json()
    assert body["status"] == "running" and body["epochs"] == 1 and body["input_events"] == 10
    assert body["watermarks"] == {
        "clicks": {"watermark": None},
        "hourly": {"input_watermark": 5000, "output_watermark": 2**63 - 1},
        "src": {"watermark": 5000, "watermark:p0": 5000},
    }
    assert body["late"] == {"hourly": 1} and body["malformed"] == {"src": 1}
    assert body["rows_written"] == {"out": 3}
    assert body["breakers"] == {} and body["error"] is None and body["spark"] is None
    assert body["sources"] == {
        "src": {"paused": False, "watermark": 5000, "lag_ms": None,
                "partitions": {"p0": {"watermark": 5000, "offset_lag": None}}},
        "clicks": {"paused": False, "watermark": None, "lag_ms": None, "partitions": {}},
    }
    flow.query.isActive = False
    assert api.get("/v1/flows/orders").json()["status"] == "stopped"
    flow.query.error = RuntimeError("sink down")
    body = api.get("/v1/flows/orders").json()
    assert body["status"] == "failing" and "sink down" in body["error"]


def test_unknown_flow_is_404(api):
    r = api.get("/v1/flows/nope")
    assert r.status_code == 404 and "orders" in r.json()["detail"]
    assert api.patch("/v1/flows/nope", json={"status": "paused"}, headers=AUTH).status_code == 404
    r = api.patch("/v1/flows/orders/connectors/out", json={"status": "paused"}, headers=AUTH)
    assert r.status_code == 404 and "['src', 'clicks']" in r.json()["detail"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_patch_without_the_right_token_is_401_and_changes_nothing(api, flow, headers):
    bodies = ({"json": {"status": "paused"}}, {"json": {"status": "bogus"}}, {"content": b"{not json"})
    for path in ("/v1/flows/orders", "/v1/flows/orders/connectors/src", "/v1/flows/nope"):
        for body in bodies:  # auth is checked first, whatever the body
            r = api.patch(path, headers={"Content-Type": "application/json", **headers}, **body)
            assert r.status_code == 401, (path, body, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
    assert read_control(flow.control_file) == {}
    assert api.get("/v1/flows/orders").json()["status"] == "starting"


def test_pause_then_resume_writes_the_control_file(api, flow):
    flow.run_epoch()
    r = api.patch("/v1/flows/orders", json={"status": "paused"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "paused"
    assert json.loads(Path(flow.control_file).read_text()) == {"paused": True}
    assert api.get("/v1/flows").json()[0]["status"] == "paused"
    assert all(s["paused"] for s in api.get("/v1/flows/orders").json()["sources"].values())
    r = api.patch("/v1/flows/orders", json={"status": "running"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "running"
    assert read_control(flow.control_file) == {"paused": False}


def test_connector_pause_affects_only_that_source(api, flow):
    flow.run_epoch()
    r = api.patch("/v1/flows/orders/connectors/clicks", json={"status": "paused"}, headers=AUTH)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "running"
    assert {k: v["paused"] for k, v in body["sources"].items()} == {"src": False, "clicks": True}
    assert read_control(flow.control_file) == {"connectors": {"clicks": {"paused": True}}}
    api.patch("/v1/flows/orders/connectors/clicks", json={"status": "running"}, headers=AUTH)
    assert read_control(flow.control_file) == {"connectors": {"clicks": {"paused": False}}}


@pytest.mark.parametrize("body", [{"status": "stopped"}, {}, {"status": "paused", "extra": 1}, ["paused"]])
def test_bad_body_is_422_naming_the_accepted_values(api, flow, body):
    r = api.patch("/v1/flows/orders", json=body, headers=AUTH)
    assert r.status_code == 422
    if body == {"status": "stopped"}:
        assert "'paused' or 'running'" in r.text
    assert read_control(flow.control_file) == {}


def test_stopped_flow_cannot_be_paused(api, flow):
    flow.query.isActive = False
    r = api.patch("/v1/flows/orders", json={"status": "paused"}, headers=AUTH)
    assert r.status_code == 409 and "stopped" in r.json()["detail"]
    assert read_control(flow.control_file) == {}


def scrape(api):
    r = api.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }


def test_metrics_parse_and_follow_the_flow(api, flow):
    flow.run_epoch()
    flow.run_epoch(events=5, late=2)
    m = scrape(api)
    f = (("flow", "orders"),)
    assert m[("wire_epochs_total", f)] == 2
    assert m[("wire_input_events_total", f)] == 15
    assert m[("wire_late_events_total", (("flow", "orders"), ("step", "hourly")))] == 3
    assert m[("wire_malformed_events_total", (("flow", "orders"), ("step", "src")))] == 2
    assert m[("wire_step_events_total", (("counter", "records"), ("flow", "orders"), ("step", "src")))] == 17
    assert m[("wire_rows_written_total", (("flow", "orders"), ("sink", "out")))] == 6
    assert m[("wire_windows_emitted_total", (("emit", "final"), ("flow", "orders")))] == 6
    wm = "wire_watermark_ms"
    assert m[(wm, (("flow", "orders"), ("kind", "input_watermark"), ("step", "hourly")))] == 10000
    assert m[(wm, (("flow", "orders"), ("kind", "output_watermark"), ("step", "hourly")))] == math.inf
    assert m[(wm, (("flow", "orders"), ("kind", "watermark"), ("step", "clicks")))] == -math.inf
    assert m[("wire_step_gauge", (("flow", "orders"), ("name", "open_windows"), ("step", "hourly")))] == 4
    assert m[("wire_flow_paused", f)] == 0
    assert m[("wire_flow_status", (("flow", "orders"), ("status", "running")))] == 1
    assert m[("wire_flow_status", (("flow", "orders"), ("status", "paused")))] == 0

    api.patch("/v1/flows/orders/connectors/src", json={"status": "paused"}, headers=AUTH)
    m = scrape(api)
    assert m[("wire_connector_paused", (("connector", "src"), ("flow", "orders")))] == 1
    assert m[("wire_connector_paused", (("connector", "clicks"), ("flow", "orders")))] == 0
    api.patch("/v1/flows/orders", json={"status": "paused"}, headers=AUTH)
    m = scrape(api)
    assert m[("wire_flow_paused", f)] == 1
    assert m[("wire_flow_status", (("flow", "orders"), ("status", "paused")))] == 1


def test_lag_and_breakers_hooks(api, flow):
    flow.run_epoch()
    flow.summary.gauges[("src", "max_event_time")] = 5750
    flow.breakers = lambda: {"out": "open"}
    body = api.get("/v1/flows/orders").json()
    assert body["sources"]["src"]["lag_ms"] == 750
    assert body["breakers"] == {"out": "open"}
    m = scrape(api)
    assert m[("wire_source_lag_ms", (("flow", "orders"), ("step", "src")))] == 750
    assert m[("wire_breaker_state", (("flow", "orders"), ("sink", "out"), ("state", "open")))] == 1
    assert m[("wire_breaker_state", (("flow", "orders"), ("sink", "out"), ("state", "closed")))] == 0


def test_spark_progress_is_reported_without_nan(api, flow):
    nan = float("nan")
    flow.query.lastProgress = {"batchId": 7, "inputRowsPerSecond": 12.5, "processedRowsPerSecond": nan}
    spark = api.get("/v1/flows/orders").json()["spark"]
    assert spark == {"batch_id": 7, "input_rows_per_second": 12.5, "processed_rows_per_second": None}


def test_rate_meter_reports_events_per_second_over_its_window():
    now = [0.0]
    meter = RateMeter(window_s=10, min_interval_s=0.5, clock=lambda: now[0])
    assert meter.observe(0) is None
    now[0] = 0.2
    assert meter.observe(50) is None
    now[0] = 2.0
    assert meter.observe(200) == 100.0
    now[0] = 30.0
    assert meter.observe(200) == pytest.approx(0.0)  # nothing in the last window
    now[0] = 32.0
    assert meter.observe(400) == pytest.approx(200 / 30)  # since the newest sample before the window
    for t in range(33, 60):  # polled every second at 50 events/s: the rate covers the last 10 s
        now[0] = float(t)
        rate = meter.observe(400 + 50 * (t - 32))
    assert rate == pytest.approx(50.0) and len(meter._samples) == 11
    now[0] = 61.0
    assert meter.observe(10) is None  # the count went down: a restart, start over


def test_openapi_lists_the_routes_and_the_bearer_scheme(api):
    schema = api.get("/openapi.json").json()
    paths = schema["paths"]
    assert set(paths) >= {"/v1/flows", "/v1/flows/{flow_id}", "/v1/flows/{flow_id}/connectors/{connector}",
                          "/metrics"}
    assert set(paths["/v1/flows/{flow_id}"]) == {"get", "patch"}
    assert "security" in paths["/v1/flows/{flow_id}"]["patch"]
    assert "security" not in paths["/v1/flows/{flow_id}"]["get"]
    status = schema["components"]["schemas"]["StatusChange"]["properties"]["status"]
    assert status["enum"] == ["paused", "running"]


def test_served_on_loopback_with_generated_token_and_client(flow, capsys):
    plane = ControlPlane({"orders": flow})
    assert plane.host == "127.0.0.1" and len(plane.token) >= 32
    url = plane.start()
    try:
        assert url.startswith("http://127.0.0.1:") and plane.token in capsys.readouterr().err
        assert client.status(url) == [{"id": "orders", "status": "starting", "epochs": 0, "input_events": 0}]
        assert client.status(url, "orders")["id"] == "orders"
        with pytest.raises(ControlPlaneError) as e:
            client.pause(url, "wrong", "orders")
        assert e.value.status_code == 401 and read_control(flow.control_file) == {}
        with pytest.raises(ControlPlaneError) as e:
            client.status(url, "nope")
        assert e.value.status_code == 404 and isinstance(e.value, wire.WireError)
        assert client.pause(url, plane.token, "orders")["status"] == "paused"
        assert client.pause(url, plane.token, "orders", "src")["sources"]["src"]["paused"]
        assert client.resume(url, plane.token, "orders")["status"] == "starting"
        assert read_control(flow.control_file) == {"paused": False, "connectors": {"src": {"paused": True}}}
        assert "wire_epochs_total" in httpx.get(f"{url}/metrics").text
        with pytest.raises(wire.WireError, match="already serving"):
            plane.start()
    finally:
        plane.stop()
    with pytest.raises(ControlPlaneError) as e:
        client.status(url)
    assert e.value.status_code is None


def test_registration_and_config_errors(tmp_path, flow):
    plane = ControlPlane(token=TOKEN)
    assert plane.add(flow) == "orders" and plane.add(flow) == "orders"
    with pytest.raises(wire.ConfigError, match="flow_id"):
        plane.add(FakeFlow(tmp_path))
    plane.add(FakeFlow(tmp_path, "other"))
    with plane:
        assert [f["id"] for f in client.status(plane.url)] == ["orders", "other"]
        plane.remove("other")
        assert [f["id"] for f in client.status(plane.url)] == ["orders"]
    with pytest.raises(wire.ConfigError, match="token"):
        ControlPlane(token="")
    with pytest.raises(wire.ConfigError, match="port"):
        ControlPlane(port=70000)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "ctl.example.com"])
def test_a_non_loopback_host_needs_an_explicit_token_and_allow_remote(flow, host):
    with pytest.raises(wire.ConfigError, match="allow_remote") as e:
        ControlPlane({"orders": flow}, host=host)
    assert "True" in str(e.value) and host in str(e.value)
    with pytest.raises(wire.ConfigError, match="allow_remote"):
        ControlPlane({"orders": flow}, host=host, token=TOKEN)
    with pytest.raises(wire.ConfigError, match="token"):  # a generated token is not enough
        ControlPlane({"orders": flow}, host=host, allow_remote=True)
    plane = ControlPlane({"orders": flow}, host=host, token=TOKEN, allow_remote=True)
    assert plane.host == host and plane.remote


def test_loopback_hosts_keep_open_reads(flow):
    for host in ("127.0.0.1", "::1", "localhost"):
        plane = ControlPlane({"orders": flow}, host=host)
        assert not plane.remote


def test_bound_remote_every_read_needs_the_token(flow):
    plane = ControlPlane({"orders": flow}, host="0.0.0.0", token=TOKEN, allow_remote=True)
    url = plane.start()
    try:
        base = url.replace("0.0.0.0", "127.0.0.1")
        for path in ("/v1/flows", "/v1/flows/orders", "/metrics"):
            r = httpx.get(base + path, timeout=10)
            assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", path
            wrong = {"Authorization": "Bearer nope"}
            assert httpx.get(base + path, headers=wrong, timeout=10).status_code == 401
            assert httpx.get(base + path, headers=AUTH, timeout=10).status_code == 200, path
        with pytest.raises(ControlPlaneError) as e:
            client.status(base)
        assert e.value.status_code == 401
        assert client.status(base, token=TOKEN)[0]["id"] == "orders"
        assert client.status(base, "orders", token=TOKEN)["id"] == "orders"
        schema = httpx.get(base + "/openapi.json", timeout=10).json()
        assert "security" in schema["paths"]["/v1/flows/{flow_id}"]["get"]
    finally:
        plane.stop()


def test_a_token_is_checked_without_changing_anything(api, flow):
    assert api.get("/v1/token", headers=AUTH).json() == {"valid": True}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        assert api.get("/v1/token", headers=headers).status_code == 401
    assert read_control(flow.control_file) == {}


def test_a_flow_whose_run_is_starting_is_listed_as_starting_and_cannot_be_paused(tmp_path):
    from wire.control.status import StartingFlow

    fake = FakeFlow(tmp_path)
    plane = ControlPlane(token=TOKEN)
    starting = StartingFlow(fake.plan, str(tmp_path / "ck"))
    plane.add(starting)
    url = plane.start()
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            assert c.get("/v1/flows").json() == [{"id": fake.plan.flow_id, "status": "starting", "epochs": 0,
                                                  "input_events": 0}]
            status = c.get(f"/v1/flows/{fake.plan.flow_id}").json()
            assert status["status"] == "starting" and set(status["sources"]) == {"src", "clicks"}
            r = c.patch(f"/v1/flows/{fake.plan.flow_id}", json={"status": "paused"}, headers=AUTH)
            assert r.status_code == 409 and "starting" in r.json()["detail"]
            plane.add(fake, flow_id=fake.plan.flow_id, replace=True)  # the run took its place
            r = c.patch(f"/v1/flows/{fake.plan.flow_id}", json={"status": "paused"}, headers=AUTH)
            assert r.status_code == 200 and r.json()["status"] == "paused"
    finally:
        plane.stop()
