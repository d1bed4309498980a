"""``wire run`` asks Flow.run for a progress display; ``--no-progress`` turns it off (Flow.run faked)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import wire
from wire.api.flow import Flow
from wire.cli.main import app
from wire.runtime.runner import RunSummary


@pytest.mark.parametrize(("flag", "expected"), [([], True), (["--no-progress"], False)])
def test_run_passes_progress_to_flow_run(tmp_path, monkeypatch, flag, expected):
    (tmp_path / "flows_for_progress.py").write_text(
        "import wire\nflow = wire.Flow('f')\n"
        "flow.source(wire.sources.files('in', format='csv'), event_time='t')"
        ".sink(wire.sinks.parquet('out'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []
    monkeypatch.setattr(Flow, "run", lambda self, checkpoint, **kw: calls.append(kw) or RunSummary("f"))
    args = ["run", "flows_for_progress:flow", "--checkpoint", str(tmp_path / "ck"), "--no-dashboard", *flag]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    # CliRunner's output is not a terminal: plain lines per epoch (True), never a live bar
    assert calls[0]["progress"] is expected


def test_flow_run_refuses_an_invalid_progress_before_anything_starts(tmp_path):
    from wire.errors import ConfigError

    flow = Flow("f")
    flow.source(wire.sources.files(str(tmp_path), format="csv"), event_time="t").sink(
        wire.sinks.parquet(str(tmp_path / "out")))
    with pytest.raises(ConfigError, match="progress") as e:
        flow.run(str(tmp_path / "ck"), progress="bar")
    assert "'auto'" in str(e.value)
    assert not (tmp_path / "ck").exists()
