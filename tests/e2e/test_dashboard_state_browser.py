"""The dashboard links each stateful node of the graph to its state by key (issue 29), in Chromium.

No Spark: the control plane serves a flow handle whose ``state(step, key)`` answers as
``RunningFlow.state`` does. Clicking the window's node picks it in "State by key"; the
read needs the token (state holds record content) and then shows the key's rows.
Skipped, with the reason, when Playwright or Chromium is missing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from test_control_plane import SCHEMA
from test_dashboard_browser import TOKEN, browser  # noqa: F401 (the browser fixture)

import wire
from wire.control import ControlPlane
from wire.core.control_file import control_path
from wire.runtime.runner import RunSummary


class Query:
    isActive = True
    lastProgress = None

    def exception(self) -> None:
        return None


class StatefulFlow:
    """Duck-typed like ``wire.RunningFlow`` for the control plane, with ``state``."""

    def __init__(self, plan: Any, checkpoint: str) -> None:
        self.plan = plan
        self.control_file = control_path(checkpoint)
        self.summary = RunSummary(plan.flow_id, source_steps=("events",))
        self.query = Query()
        self.reads: list[tuple[str, str]] = []

    @property
    def flow_id(self) -> str:
        return self.plan.flow_id

    def is_active(self) -> bool:
        return True

    def state(self, step: str, key: str) -> pa.Table:
        self.reads.append((step, key))
        table = pa.table({"key_group": pa.array([1], pa.int32()), "k": [key],
                          "window_start": pa.array([60_000], pa.int64()),
                          "window_end": pa.array([120_000], pa.int64()), "n": pa.array([3], pa.int64()),
                          "fired": [False]})
        return table.replace_schema_metadata({b"wire.kind": b"window", b"wire.epoch": b"12",
                                              b"wire.input_watermark": b"90000",
                                              b"wire.output_watermark": b"60000"})


def test_a_stateful_node_links_to_its_state_by_key(browser, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    flow = wire.Flow("orders")
    source = wire.sources.files(str(tmp_path / "in"), format="jsonl", bounded=False, schema=SCHEMA)
    events = flow.source(source, event_time="t", key="k", name="events")
    (events.window(wire.Tumbling(60_000)).aggregate(n=wire.count(), name="per_minute")
     .sink(wire.sinks.parquet(tmp_path / "out"), name="out"))
    handle = StatefulFlow(flow.plan(), str(tmp_path / "ck"))
    plane = ControlPlane({"orders": handle}, token=TOKEN)
    url = plane.start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        node = page.locator('#graph g.node[data-step="per_minute"]')
        expect(node).to_have_class("node kind-window stateful", timeout=10_000)
        expect(page.locator('#graph g.node[data-step="events"]')).not_to_have_class("stateful")
        expect(page.locator("#state")).to_be_visible()
        node.click()
        expect(page.locator("#state-step")).to_have_value("per_minute")
        expect(page.locator("#state-key")).to_be_focused()

        page.fill("#state-key", "a")
        page.click("#state-form button[type=submit]")  # no token: nothing is read
        expect(page.locator("#state-note")).to_contain_text("type the token")
        assert handle.reads == []

        page.fill("#token", TOKEN)
        page.click("#token-form button[type=submit]")
        expect(page.locator("#token-state")).to_have_text("token accepted for this tab", timeout=10_000)
        page.click("#state-form button[type=submit]")
        expect(page.locator("#state-note")).to_contain_text("window per_minute, key a: 1 row at epoch 12",
                                                            timeout=10_000)
        expect(page.locator("#state-rows thead th")).to_have_text(
            ["key_group", "k", "window_start", "window_end", "n", "fired"])
        expect(page.locator("#state-rows tbody tr.state-row td")).to_have_text(
            ["1", "a", "60000", "120000", "3", "false"])
        assert handle.reads == [("per_minute", "a")]
        assert errors == [], errors
    finally:
        page.close()
        plane.stop()
