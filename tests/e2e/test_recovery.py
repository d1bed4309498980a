"""Recovery: supervisor restarts after a sink failure, graceful stop, checkpoint listing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import wire
from wire.cli.main import app
from wire.runtime.checkpoint import epochs_settled, list_epochs, open_checkpoint

pytestmark = pytest.mark.spark


@dataclass(frozen=True, eq=False)
class FlakySink(wire.sinks.Sink):
    """Raises in the middle of epoch ``fail_epoch`` the first ``failures`` times."""

    guarantee = "at_least_once"
    inner: wire.sinks.Sink = None  # type: ignore[assignment]
    fail_epoch: int = 2
    failures: int = 1
    seen: list = field(default_factory=list)

    def open(self, **kw):
        self.inner.open(**kw)

    def write_epoch(self, epoch, table):
        if epoch == self.fail_epoch and len(self.seen) < self.failures:
            self.seen.append(epoch)
            raise RuntimeError(f"sink down during epoch {epoch}")
        self.inner.write_epoch(epoch, table)

    def close(self):
        self.inner.close()


def events(tmp_path):
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    (d / "e.jsonl").write_text("".join(json.dumps({"t": t, "k": "ab"[t % 2]}) + "\n"
                                       for t in range(0, 200, 7)))
    return str(d)


def build(tmp_path, out, sink_wrapper=None):
    flow = wire.Flow("recovery")
    s = flow.source(wire.sources.files(events(tmp_path), format="jsonl"), event_time="t", key="k",
                    watermark=wire.BoundedOutOfOrderness(10), max_events_per_epoch=5)
    w = s.window(wire.Tumbling(20)).aggregate(n=wire.count(), name="w")
    sink = wire.sinks.parquet(out)
    w.sink(sink if sink_wrapper is None else sink_wrapper(sink))
    return flow


def read(out):
    return pa.concat_tables([pq.read_table(f) for f in sorted(out.glob("*/*.parquet"))])


def test_sink_failure_is_retried_without_skipping_the_epoch(spark, tmp_path):
    build(tmp_path, tmp_path / "ref").run(str(tmp_path / "ck_ref"), spark=spark, key_groups=2)
    flaky = build(tmp_path, tmp_path / "out", lambda s: FlakySink(inner=s))
    summary = flaky.run(str(tmp_path / "ck"), spark=spark, key_groups=2, max_restarts=2,
                        restart_backoff_s=0.1)
    assert summary.restarts == 1 and "sink down during epoch 2" in summary.failures[0]
    assert read(tmp_path / "out").equals(read(tmp_path / "ref"))


def test_failure_beyond_max_restarts_is_raised(spark, tmp_path):
    flaky = build(tmp_path, tmp_path / "out", lambda s: FlakySink(inner=s, failures=5))
    with pytest.raises(wire.FlowFailed, match="sink down"):
        flaky.run(str(tmp_path / "ck"), spark=spark, key_groups=2, max_restarts=1,
                  restart_backoff_s=0.1)


def test_graceful_stop_leaves_no_epoch_in_flight(spark, tmp_path):
    d = tmp_path / "live"
    d.mkdir()
    (d / "a.jsonl").write_text("".join(json.dumps({"t": t, "k": "a"}) + "\n" for t in range(500)))
    flow = wire.Flow("graceful")
    s = flow.source(wire.sources.files(str(d), format="jsonl", bounded=False), event_time="t",
                    key="k", max_events_per_epoch=20)
    s.window(wire.Tumbling(50)).aggregate(n=wire.count()).sink(wire.sinks.parquet(tmp_path / "o"))
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    while running.summary.epochs < 3:
        time.sleep(0.05)
    summary = running.stop(graceful=True)
    assert epochs_settled(tmp_path / "ck")
    epochs = list_epochs(tmp_path / "ck")
    assert epochs[-1].committed and summary.epochs == len(epochs)
    result = CliRunner().invoke(app, ["checkpoints", str(tmp_path / "ck")])
    assert result.exit_code == 0, result.output
    assert str(epochs[-1].epoch) in result.output and "yes" in result.output


def test_cli_pause_resume_and_errors(tmp_path):
    runner = CliRunner()
    not_yet = runner.invoke(app, ["pause", str(tmp_path)])  # no flow ever started there
    assert not_yet.exit_code == 1 and "not a Wire checkpoint" in " ".join(not_yet.output.split())
    assert not (tmp_path / "control.json").exists()
    open_checkpoint(tmp_path, flow_id="f", key_groups=None)
    assert runner.invoke(app, ["pause", str(tmp_path)]).exit_code == 0
    assert json.loads((tmp_path / "control.json").read_text())["paused"] is True
    assert runner.invoke(app, ["resume", str(tmp_path)]).exit_code == 0
    assert json.loads((tmp_path / "control.json").read_text())["paused"] is False
    bad = runner.invoke(app, ["checkpoints", str(tmp_path / "nope")])
    assert bad.exit_code == 1 and "not a Wire checkpoint" in bad.output
