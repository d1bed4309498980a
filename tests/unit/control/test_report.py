"""``wire report``: one self-contained HTML file from a checkpoint's epoch log (no Spark)."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

import wire
from wire.cli.main import app
from wire.control.report import render_report, report_data
from wire.plan.nodes import Plan, PortRef, SinkNode, SourceNode
from wire.runtime.checkpoint import META_FILE
from wire.runtime.epoch_log import EpochLog
from wire.runtime.runner import RunSummary


def summary_after(epochs):
    s = RunSummary("f", source_steps=("src",))
    s.epochs = epochs
    s.metrics.update({("src", "events"): 10 * epochs, ("w", "late"): epochs})
    s.gauges.update({("src", "watermark"): 1000 * epochs, ("src", "max_event_time"): 1000 * epochs + 40})
    return s


def recorded_checkpoint(tmp_path, epochs=3):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / META_FILE).write_text(json.dumps({"flow_id": "f", "key_groups": 2, "checkpoint_id": "x"}))
    policy = wire.BoundedOutOfOrderness(0)
    log = EpochLog(ck)
    log.write_graph(Plan("f", (SourceNode("src", None, "t", "k", policy, 10),
                               SinkNode("out", PortRef("src"), None))))
    for n in range(1, epochs + 1):
        log.append(summary_after(n), batch=n - 1, epoch_s=0.5)
    return ck


def test_report_data_is_the_dashboard_s_data_from_the_log(tmp_path):
    data = report_data(recorded_checkpoint(tmp_path))
    h = data["history"]
    assert h["epochs"] == [1, 2, 3] and h["watermarks"] == {"src": {"watermark": [1000, 2000, 3000]}}
    assert h["lag_ms"] == {"src": [40, 40, 40]} and h["late"] == {"w": [1, 2, 3]}
    assert h["epoch_ms"] == [500.0, 500.0, 500.0] and h["status"] == ["running", "running", "stopped"]
    assert data["status"]["sources"] == {"src": {"paused": False, "state": "stopped", "watermark": 3000,
                                                 "lag_ms": 40}}
    assert data["summary"] == {"id": "f", "status": "stopped", "epochs": 3, "input_events": 30, "runs": 1}
    assert [n["step"] for n in data["graph"]["nodes"]] == ["src", "out"]


def test_the_report_is_one_self_contained_file(tmp_path):
    page = render_report(recorded_checkpoint(tmp_path))
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing loaded from elsewhere
    assert "<style>" in page and "uPlot" in page and "wireDashboard" in page
    embedded = re.search(r'<script id="wire-data" type="application/json">(.*?)</script>', page, re.S)
    assert embedded and json.loads(embedded.group(1))["summary"]["id"] == "f"


def test_cli_writes_the_report_or_says_why_not(tmp_path):
    ck = recorded_checkpoint(tmp_path)
    out = CliRunner().invoke(app, ["report", str(ck)])
    assert out.exit_code == 0, out.output
    assert (ck / "report.html").read_text().startswith("<!doctype html>")
    target = tmp_path / "r.html"
    assert CliRunner().invoke(app, ["report", str(ck), "--out", str(target)]).exit_code == 0
    assert target.exists()
    for bad, why in ((tmp_path / "none", "not a Wire checkpoint"), (ck, "no recorded epoch")):
        if bad == ck:
            (ck / "epochs.jsonl").unlink()
        out = CliRunner().invoke(app, ["report", str(bad)])
        assert out.exit_code == 1 and why in " ".join(out.output.split()), out.output


def run_summary(epochs, events, malformed, rows):
    s = RunSummary("f", source_steps=("src",))
    s.epochs = epochs
    s.metrics.update({("src", "events"): events, ("src", "malformed"): malformed})
    s.gauges.update({("src", "watermark"): 10 * events})
    s.rows_written["out"] = rows
    return s


def test_report_counts_every_run_of_a_resumed_checkpoint_and_a_replayed_epoch_once(tmp_path):
    # Hand-derived (issue 26 item 3). Run 1 commits batches 0 and 1 and records batch 2,
    # then crashes before Spark commits it; run 2 replays batch 2 and runs batch 3.
    #   run 1 (its counters so far): b0 events 100 malformed 1 rows 5 | b1 300 3 9 | b2 450 4 12 (replayed)
    #   run 2 (restart from zero):   b2 events 150 malformed 1 rows 4 | b3 250 1 6
    # per epoch: b0 +100/+1/+5, b1 +200/+2/+4, b2 (run 2's) +150/+1/+4, b3 +100/+0/+2
    # totals: 4 epochs, 550 events, 4 dead letters (malformed), 15 rows; 2 runs
    ck = recorded_checkpoint(tmp_path, epochs=0)
    first, second = EpochLog(ck), EpochLog(ck)
    first.run_ms, second.run_ms = 1_000, 2_000
    for batch, (n, events, malformed, rows) in enumerate([(1, 100, 1, 5), (2, 300, 3, 9), (3, 450, 4, 12)]):
        first.append(run_summary(n, events, malformed, rows), batch=batch, epoch_s=0.1)
    for batch, (n, events, malformed, rows) in [(2, (1, 150, 1, 4)), (3, (2, 250, 1, 6))]:
        second.append(run_summary(n, events, malformed, rows), batch=batch, epoch_s=0.1)

    data = report_data(ck)
    status = data["status"]
    assert (status["epochs"], status["input_events"], status["runs"]) == (4, 550, 2)
    assert status["malformed"] == {"src": 4} and status["rows_written"] == {"out": 15}
    assert data["summary"] == {"id": "f", "status": "stopped", "epochs": 4, "input_events": 550, "runs": 2}
    h = data["history"]
    assert h["epochs"] == [1, 2, 3, 4] and h["malformed"] == {"src": [1, 3, 4, 4]}
    assert status["sources"]["src"]["state"] == status["status"] == "stopped"  # one state on the page


def test_report_of_a_finished_checkpoint_says_finished_on_every_source(tmp_path):
    ck = recorded_checkpoint(tmp_path)
    spark = ck / "spark"
    for d in ("offsets", "commits"):
        (spark / d).mkdir(parents=True)
    (spark / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"next": 3, "ended": true}')
    (spark / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    data = report_data(ck)
    assert data["status"]["status"] == "finished"
    assert {s["state"] for s in data["status"]["sources"].values()} == {"finished"}
