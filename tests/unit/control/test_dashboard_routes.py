"""The dashboard's routes: page and assets, graph, history; auth as the REST API (no Spark)."""

from __future__ import annotations

import time

import httpx
import pytest
from test_server import TOKEN, FakeFlow

import wire
from wire.control import ControlPlane
from wire.plan.graph import graph_of
from wire.plan.nodes import ALL_STEPS, DEAD_LETTER, LATE, Plan, PortRef, SinkNode, UnionNode

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def wait_for(cond, what, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_graph_lists_steps_and_edges_with_their_ports(tmp_path):
    flow = FakeFlow(tmp_path)
    plan = Plan("g", (*flow.plan.nodes,
                      UnionNode("both", ("src", "clicks")),
                      SinkNode("late_out", PortRef("keyed", LATE), None),
                      SinkNode("dead", PortRef(ALL_STEPS, DEAD_LETTER), None, kept=True)))
    g = graph_of(plan)
    assert [(n["step"], n["kind"]) for n in g["nodes"]] == [
        ("*", "all"), ("src", "source"), ("clicks", "source"), ("keyed", "key_by"), ("out", "sink"),
        ("both", "union"), ("late_out", "sink"), ("dead", "sink")]
    assert g["edges"] == [
        {"source": "src", "target": "keyed", "port": "out"},
        {"source": "keyed", "target": "out", "port": "out"},
        {"source": "src", "target": "both", "port": "out"},
        {"source": "clicks", "target": "both", "port": "out"},
        {"source": "keyed", "target": "late_out", "port": "late"},
        {"source": "*", "target": "dead", "port": "dead_letter"},
    ]
    assert g["nodes"][3]["detail"] == "key k" and "(kept)" in g["nodes"][-1]["detail"]


def test_page_assets_graph_and_history_on_loopback(tmp_path):
    flow = FakeFlow(tmp_path)
    plane = ControlPlane({"orders": flow}, token=TOKEN, history_interval_s=0.05, history_max_samples=50)
    url = plane.start()
    try:
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert "/dashboard/vendor/uPlot.iife.min.js" in page.text and "http" not in page.text.lower().replace(
            "http-equiv", "")  # nothing fetched from elsewhere
        for asset in ("dashboard.js", "dashboard.css", "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css"):
            r = httpx.get(f"{url}/dashboard/{asset}", timeout=10)
            assert r.status_code == 200 and len(r.content) > 100, asset
        for bad in ("../server.py", "vendor/uPlot.LICENSE", "index.html%2F..%2F..%2Fserver.py"):
            assert httpx.get(f"{url}/dashboard/{bad}", timeout=10).status_code == 404, bad

        assert httpx.get(url + "/v1/flows/orders/graph", timeout=10).json() == graph_of(flow.plan)
        for _ in range(3):
            flow.run_epoch()
            time.sleep(0.12)
        wait_for(lambda: len(plane.history("orders")) >= 5, "samples")
        h = httpx.get(url + "/v1/flows/orders/history", params={"minutes": 1}, timeout=10).json()
        assert h["id"] == "orders" and h["max_samples"] == 50 and h["interval_s"] == 0.05
        assert len(h["t"]) == len(h["epochs"]) >= 5 and h["t"] == sorted(h["t"])
        assert abs(h["t"][-1] - time.time() * 1000) < 5_000  # ms since the Unix epoch
        wm = [w for w in h["watermarks"]["src"]["watermark"] if w is not None]
        assert wm == sorted(wm) and wm[-1] == 15_000
        assert h["epochs"][-1] == 3 and h["status"][-1] == "running"
        zero = httpx.get(url + "/v1/flows/orders/history", params={"minutes": 0}, timeout=10)
        assert zero.status_code == 422
        assert httpx.get(url + "/v1/flows/nope/history", timeout=10).status_code == 404
        assert httpx.get(url + "/v1/flows/nope/graph", timeout=10).status_code == 404
        schema = httpx.get(url + "/openapi.json", timeout=10).json()
        assert {"/v1/flows/{flow_id}/history", "/v1/flows/{flow_id}/graph"} <= set(schema["paths"])
        assert "/" not in schema["paths"]
    finally:
        plane.stop()
    n = len(plane.history("orders"))
    time.sleep(0.2)
    assert len(plane.history("orders")) == n  # sampling stops with the server


def test_bound_remote_the_page_is_open_but_its_data_needs_the_token(tmp_path):
    plane = ControlPlane({"orders": FakeFlow(tmp_path)}, host="0.0.0.0", token=TOKEN, allow_remote=True)
    base = plane.start().replace("0.0.0.0", "127.0.0.1")
    try:
        assert httpx.get(base + "/", timeout=10).status_code == 200  # holds no flow data
        assert httpx.get(base + "/dashboard/dashboard.js", timeout=10).status_code == 200
        for path in ("/v1/flows/orders/history", "/v1/flows/orders/graph"):
            assert httpx.get(base + path, timeout=10).status_code == 401, path
            assert httpx.get(base + path, headers=AUTH, timeout=10).status_code == 200, path
    finally:
        plane.stop()


def test_replace_keeps_the_history_of_a_restarted_flow(tmp_path):
    plane = ControlPlane(token=TOKEN)
    first, second = FakeFlow(tmp_path), FakeFlow(tmp_path)
    plane.add(first)
    plane.sampler.sample_once()
    with pytest.raises(wire.ConfigError, match="flow_id"):
        plane.add(second)
    plane.add(second, replace=True)
    plane.sampler.sample_once()
    assert plane.flows()["orders"] is second and len(plane.history("orders")) == 2
    plane.remove("orders")
    assert plane.history("orders") is None
