"""The epoch log under the checkpoint (``wire report``'s data): records, bound, replays, errors."""

from __future__ import annotations

import json

import wire
from wire.plan.graph import graph_of
from wire.plan.nodes import Plan, PortRef, SinkNode, SourceNode
from wire.runtime.epoch_log import EPOCH_LOG, GRAPH_FILE, EpochLog, read_epoch_log
from wire.runtime.runner import RunSummary


def summary_after(epochs: int) -> RunSummary:
    s = RunSummary("f", source_steps=("src",))
    s.epochs = epochs
    s.metrics[("src", "events")] = 10 * epochs
    s.metrics[("w", "late")] = epochs
    s.gauges[("src", "watermark")] = 1000 * epochs
    s.rows_written["out"] = 3 * epochs
    return s


def test_one_record_per_epoch_with_the_run_counters(tmp_path):
    log = EpochLog(tmp_path)
    for n in (1, 2):
        log.append(summary_after(n), batch=n - 1, epoch_s=0.25)
    records = read_epoch_log(tmp_path)
    assert [r["batch"] for r in records] == [0, 1] and records[1]["epochs"] == 2
    assert records[1]["metrics"] == [["src", "events", 20], ["w", "late", 2]]
    assert records[1]["gauges"] == [["src", "watermark", 2000]] and records[1]["rows_written"] == {"out": 6}
    assert records[0]["epoch_ms"] == 250.0 and records[0]["source_steps"] == ["src"]
    assert records[0]["t_ms"] >= records[0]["run"] > 1.6e12  # ms since the Unix epoch


def test_the_log_stays_bounded_keeps_the_newest_and_the_last_replay(tmp_path):
    log = EpochLog(tmp_path, max_records=5)
    for b in range(23):
        log.append(summary_after(b + 1), batch=b, epoch_s=0.1)
        assert len((tmp_path / EPOCH_LOG).read_text().splitlines()) < 10
    assert [r["batch"] for r in read_epoch_log(tmp_path)][-1] == 22
    again = EpochLog(tmp_path, max_records=5)  # a restart replays batch 22, then goes on
    again.append(summary_after(1), batch=22, epoch_s=0.1)
    again.append(summary_after(2), batch=23, epoch_s=0.1)
    records = read_epoch_log(tmp_path)
    assert [r["batch"] for r in records][-2:] == [22, 23] and records[-2]["epochs"] == 1
    with (tmp_path / EPOCH_LOG).open("a") as f:
        f.write('{"batch": 24, "t_m')  # torn by a crash
    assert [r["batch"] for r in read_epoch_log(tmp_path)][-1] == 23


def test_a_write_error_never_fails_the_flow(tmp_path):
    (tmp_path / EPOCH_LOG).mkdir()  # cannot be opened for appending
    log = EpochLog(tmp_path)
    log.append(summary_after(1), batch=0, epoch_s=0.1)
    assert log.error is not None and EPOCH_LOG in log.error
    log.append(summary_after(2), batch=1, epoch_s=0.1)  # stays off, no raise


def test_the_graph_is_written_next_to_the_log(tmp_path):
    policy = wire.BoundedOutOfOrderness(0)
    plan = Plan("f", (SourceNode("src", None, "t", "k", policy, 10), SinkNode("out", PortRef("src"), None)))
    EpochLog(tmp_path).write_graph(plan)
    assert json.loads((tmp_path / GRAPH_FILE).read_text()) == graph_of(plan)
    assert read_epoch_log(tmp_path / "nowhere") == []
