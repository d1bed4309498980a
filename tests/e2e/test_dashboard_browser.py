"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

A running flow on Spark, the control plane serving it; the page must show the flow's
operator graph, a watermark plot whose points advance, refuse pause without the token
and say so, pause with the token (no new epoch, "paused" shown) and resume, and, with
the token, a malformed record's dead-letter reason among the recent dead letters.

Skipped, with the reason, when Playwright or Chromium is missing. Set
``WIRE_CHROMIUM`` to use another Chromium binary and ``WIRE_DASHBOARD_SCREENSHOT`` to a
path to keep a screenshot of the page (``docs/dashboard.png`` was taken so).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_control_plane import SCHEMA, wait_for, write_events

import wire
from wire.control import ControlPlane
from wire.core.control_file import read_control
from wire.runtime.checkpoint import epochs_settled

pytestmark = pytest.mark.spark

TOKEN = "browser-token"
STEPS = ("events", "valid", "per_50ms", "windows")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (it is in the dev extra: pip install -e '.[dev]')")
    path = os.environ.get("WIRE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium; or set WIRE_CHROMIUM)")
    with sync_playwright() as p:
        try:  # the system's Chromium: no browser download (no `playwright install`)
            b = p.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
        except Exception as e:
            pytest.skip(f"Chromium at {path} does not start: {str(e).splitlines()[0]}")
        yield b
        b.close()


def plotted_watermarks(page: Any) -> list[list[int]]:
    """The non-null points of each series of the watermark plot, as uPlot holds them."""
    return page.evaluate("""() => {
        const u = window.wireDashboard.plots.watermarks;
        return u ? u.data.slice(1).map((s) => s.filter((v) => v !== null)) : [];
    }""")


def test_dashboard_graph_plots_and_pause_resume_in_chromium(spark, browser, tmp_path):
    from playwright.sync_api import expect

    src = tmp_path / "in"
    src.mkdir()
    flow = wire.Flow("dash")
    source = wire.sources.files(str(src), format="jsonl", bounded=False, schema=SCHEMA)
    (flow.source(source, event_time="t", key="k", max_events_per_epoch=100, name="events")
     .filter("t >= 0", name="valid")
     .window(wire.Tumbling(50), emit="update").aggregate(n=wire.count(), name="per_50ms")
     .sink(wire.sinks.parquet(tmp_path / "out"), name="windows"))
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    plane = ControlPlane({"dash": running}, token=TOKEN, history_interval_s=0.2)
    url = plane.start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        write_events(src / "a.jsonl", range(0, 100))
        wait_for(lambda: running.summary.input_events == 100, "the first file")
        (src / "a_bad.tmp").write_text('[1, 2]\n')
        (src / "a_bad.tmp").rename(src / "a_bad.jsonl")  # its one line: a dead letter
        wait_for(lambda: running.summary.total("malformed") == 1, "the malformed record")
        page.goto(url + "/")

        # the graph shows the flow's steps, linked source -> filter -> window -> sink
        for step in STEPS:
            expect(page.locator(f'#graph g.node[data-step="{step}"] text.step')).to_have_text(step)
        assert page.locator("#graph path.edge").count() >= 3
        expect(page.locator("#flow-status")).to_have_text("running", timeout=30_000)
        # samples show record content: none without the token, and the page says why
        expect(page.locator("#samples-note")).to_contain_text("type the token")
        assert page.locator("#dead-letters tr.sample").count() == 0

        # the watermark plot's points advance as new events come
        write_events(src / "b.jsonl", range(100, 200))
        wait_for(lambda: running.summary.input_events == 200, "the second file")

        def advanced() -> bool:
            series = plotted_watermarks(page)
            return any(len(set(s)) >= 2 and s == sorted(s) and s[-1] == 199 for s in series)

        wait_for(advanced, "the watermark plot to show the watermark advance to 199", timeout_s=20)
        assert page.locator("#plot-watermarks canvas").count() >= 1

        # without the token the button is refused, and the page says so
        page.click("#pause-flow")
        expect(page.locator("#message")).to_contain_text("refused", timeout=10_000)
        expect(page.locator("#message")).to_contain_text("401")
        assert not read_control(running.control_file).get("paused")
        expect(page.locator("#flow-status")).to_have_text("running")

        # with the token: paused, no new epoch, and the page shows it
        page.fill("#token", TOKEN)
        page.click("#token-form button[type=submit]")
        dead = page.locator("#dead-letters tr.sample")
        expect(dead).to_have_count(1, timeout=10_000)
        expect(dead.locator("td.reason")).to_have_text("jsonl: expected a JSON object, got list")
        expect(dead.locator("td.location")).to_have_text(f"{src / 'a_bad.jsonl'}:1")
        expect(dead.locator("td.record")).to_have_text("[1, 2]")
        expect(page.locator("#samples-note")).to_have_text("")
        page.click("#pause-flow")
        expect(page.locator("#flow-status")).to_have_text("paused", timeout=10_000)
        assert read_control(running.control_file)["paused"] is True
        wait_for(lambda: epochs_settled(tmp_path / "ck"), "the epoch in flight to commit")
        epochs_at_pause = running.summary.epochs
        write_events(src / "c.jsonl", range(200, 280))
        time.sleep(2.5)  # several trigger intervals: a running flow would have read c.jsonl
        assert running.summary.epochs == epochs_at_pause and running.summary.input_events == 200
        expect(page.locator("#flow-status")).to_have_text("paused")  # still, after refreshes
        expect(page.locator('#sources tr[data-source="events"] .source-state')).to_have_text("paused")

        # resume continues from where it stopped
        page.click("#resume-flow")
        expect(page.locator("#flow-status")).to_have_text("running", timeout=10_000)
        wait_for(lambda: running.summary.input_events == 280, "the third file after resume")
        assert running.summary.epochs > epochs_at_pause

        # one source alone, from its row
        page.click('#sources tr[data-source="events"] .pause-source')
        expect(page.locator('#sources tr[data-source="events"] .source-state')).to_have_text("paused")
        assert read_control(running.control_file)["connectors"]["events"]["paused"] is True
        page.click('#sources tr[data-source="events"] .resume-source')
        expect(page.locator('#sources tr[data-source="events"] .source-state')).to_have_text("running")

        wait_for(lambda: 279 in {v for s in plotted_watermarks(page) for v in s}, "the plot to reach 279")
        shot = os.environ.get("WIRE_DASHBOARD_SCREENSHOT") or str(tmp_path / "dashboard.png")
        page.screenshot(path=shot, full_page=True)
        assert errors == [], errors
    finally:
        page.close()
        running.stop(graceful=True)
        plane.stop()


def test_wire_report_of_a_finished_run_opens_in_chromium(spark, browser, tmp_path):
    from playwright.sync_api import expect
    from typer.testing import CliRunner

    from wire.cli.main import app

    src = tmp_path / "in"
    src.mkdir()
    write_events(src / "a.jsonl", range(0, 150))
    flow = wire.Flow("report")
    source = wire.sources.files(str(src), format="jsonl", schema=SCHEMA)  # bounded: the run ends
    (flow.source(source, event_time="t", key="k", max_events_per_epoch=50, name="events")
     .window(wire.Tumbling(50)).aggregate(n=wire.count(), name="per_50ms")
     .sink(wire.sinks.parquet(tmp_path / "out"), name="windows"))
    ck = tmp_path / "ck"
    summary = flow.run(str(ck), spark=spark, key_groups=2)
    assert summary.input_events == 150
    result = CliRunner().invoke(app, ["report", str(ck)])
    assert result.exit_code == 0, result.output

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto((ck / "report.html").as_uri())
        expect(page.locator("#flow-status")).to_have_text("finished", timeout=10_000)
        expect(page.locator("#stat-events")).to_have_text("150")
        for step in ("events", "per_50ms", "windows"):
            expect(page.locator(f'#graph g.node[data-step="{step}"] text.step')).to_have_text(step)
        series = plotted_watermarks(page)
        source_marks = max(series, key=len)
        assert len(source_marks) >= 3 and source_marks == sorted(source_marks), series
        assert page.locator("#pause-flow").is_hidden() and page.locator("#token").is_hidden()
        assert errors == [], errors
    finally:
        page.close()


# ---- issue 26 item 12: no Spark below (a flow that is starting, a report from a written log)


def starting_plane(tmp_path: Any) -> ControlPlane:
    from wire.control.status import StartingFlow

    flow = wire.Flow("boot")
    source = wire.sources.files(str(tmp_path / "in"), format="jsonl", bounded=False, schema=SCHEMA)
    flow.source(source, event_time="t", key="k", name="events").sink(
        wire.sinks.parquet(tmp_path / "out"), name="out")
    plane = ControlPlane(token=TOKEN)
    plane.add(StartingFlow(flow.plan(), str(tmp_path / "ck")))  # what Flow.run(dashboard=True) does
    return plane


def test_a_starting_flow_shows_starting_and_a_token_is_checked_when_typed(browser, tmp_path):
    from playwright.sync_api import expect

    plane = starting_plane(tmp_path)
    url = plane.start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url + "/")
        expect(page.locator("#flow-status")).to_have_text("starting", timeout=10_000)
        expect(page.locator("#flow-id")).to_have_text("boot")
        expect(page.locator('#sources tr[data-source="events"] .source-state')).to_have_text("starting")
        expect(page.locator("#load-error")).to_have_text("")
        expect(page.locator('#graph g.node[data-step="events"] text.step')).to_have_text("events")

        # a wrong token is refused when typed, and not kept
        page.fill("#token", "not-the-token")
        page.click("#token-form button[type=submit]")
        expect(page.locator("#message")).to_contain_text("wrong token", timeout=10_000)
        expect(page.locator("#message")).to_contain_text("401")
        expect(page.locator("#token-state")).to_have_text("no token: read only")
        assert page.evaluate("() => sessionStorage.getItem('wire-token')") is None

        # the right one is accepted and kept
        page.fill("#token", TOKEN)
        page.click("#token-form button[type=submit]")
        expect(page.locator("#token-state")).to_have_text("token accepted for this tab", timeout=10_000)
        expect(page.locator("#message")).to_have_text("token accepted by the control plane")
        assert page.evaluate("() => sessionStorage.getItem('wire-token')") == TOKEN

        # pausing a flow that is still starting is refused (its run would reset the pause)
        page.click("#pause-flow")
        expect(page.locator("#message")).to_contain_text("409", timeout=10_000)
        expect(page.locator("#message")).to_contain_text("starting")

        # a token kept in the tab but wrong (another plane's) is checked on load and dropped
        page.evaluate("() => sessionStorage.setItem('wire-token', 'stale')")
        page.reload()
        expect(page.locator("#message")).to_contain_text("refused", timeout=10_000)
        expect(page.locator("#token-state")).to_have_text("no token: read only")
        assert errors == [], errors
    finally:
        page.close()
        plane.stop()


def written_report(tmp_path: Any) -> Any:
    """A report of two runs whose counts need wide axis labels and span two hours of real time."""
    from wire.control.report import write_report
    from wire.plan.nodes import Plan, PortRef, SinkNode, SourceNode
    from wire.runtime.checkpoint import META_FILE
    from wire.runtime.epoch_log import EpochLog
    from wire.runtime.runner import RunSummary

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / META_FILE).write_text('{"flow_id": "wide", "key_groups": 2, "checkpoint_id": "x"}')
    log = EpochLog(ck)
    log.write_graph(Plan("wide", (SourceNode("src", None, "t", "k", wire.BoundedOutOfOrderness(0), 10),
                                  SinkNode("out", PortRef("src"), None))))
    t0 = 1_764_230_400_000  # 2025-11-27 08:00 UTC: dates on the axes
    for n in range(1, 41):
        s = RunSummary("wide", source_steps=("src",))
        s.epochs = n
        s.metrics.update({("src", "events"): 12_345_678 * n, ("src", "malformed"): 1_000_003 * n})
        s.gauges.update({("src", "watermark"): t0 + 180_000 * n, ("src", "max_event_time"): t0 + 180_000 * n})
        s.rows_written["out"] = 1  # one row in all: "1 row"
        log.append(s, batch=n - 1, epoch_s=0.5 + n % 3)
    # the records' processing times: one every 3 minutes (the log writes "now": set them)
    lines = (ck / "epochs.jsonl").read_text().splitlines()
    fixed = []
    for i, line in enumerate(lines):
        r = json.loads(line)
        r["t_ms"] = t0 + 180_000 * i
        fixed.append(json.dumps(r))
    (ck / "epochs.jsonl").write_text("\n".join(fixed) + "\n")
    return write_report(ck)


def axes_layout(page: Any, name: str) -> dict[str, Any]:
    """Plot ``name``'s y-axis width and widest label, and its x labels' extents (CSS px)."""
    return page.evaluate("""(name) => {
        const u = window.wireDashboard.plots[name];
        const ratio = uPlot.pxRatio || window.devicePixelRatio || 1;
        const ctx = document.createElement("canvas").getContext("2d");
        const width = (axis, v) => {
            ctx.font = Array.isArray(axis.font) ? axis.font[0] : axis.font;
            return Math.max(...String(v).split("\\n").map((l) => ctx.measureText(l).width)) / ratio;
        };
        const y = u.axes[1], x = u.axes[0];
        const xs = x._splits.map((v, i) => {
            const c = u.valToPos(v, "x"), w = width(x, x._values[i]);
            return [c - w / 2, c + w / 2];
        }).filter(([a, b]) => b >= 0 && a <= u.bbox.width / ratio);
        return {ySize: y._size / 1, yWidest: Math.max(...y._values.map((v) => width(y, v))),
                yLabels: y._values, xLabels: x._values, xs};
    }""", name)


def test_report_axes_fit_their_labels_date_ticks_do_not_overlap_and_one_row_is_singular(browser, tmp_path):
    from playwright.sync_api import expect

    report = written_report(tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(report.as_uri())
        expect(page.locator("#stat-events")).to_have_text(f"{12_345_678 * 40:,}", timeout=10_000)
        expect(page.locator('#graph g.node[data-step="out"] text.live')).to_have_text("1 row")
        expect(page.locator("#report-note")).to_contain_text("1 run,")
        for name in ("watermarks", "throughput", "late", "epochs"):
            layout = axes_layout(page, name)
            # the y axis (labels right-aligned against the plot) is wider than its widest label
            assert layout["ySize"] >= layout["yWidest"] + 10, (name, layout)
            # the x (time) labels do not overlap one another
            xs = layout["xs"]
            assert len(xs) >= 2, (name, layout)
            for (_, right), (left, _) in itertools.pairwise(xs):
                assert right + 4 <= left, (name, layout)
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        assert errors == [], errors
    finally:
        page.close()
