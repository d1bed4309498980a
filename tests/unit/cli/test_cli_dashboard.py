"""``wire run`` serves the dashboard by default; ``--no-dashboard`` turns it off (Flow.run faked)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from wire.api.flow import Flow
from wire.cli.main import app
from wire.runtime.runner import RunSummary


@pytest.mark.parametrize(("flag", "expected"),
                         [([], True), (["--no-dashboard"], False), (["--dashboard"], True)])
def test_run_passes_the_dashboard_flag_to_flow_run(tmp_path, monkeypatch, flag, expected):
    (tmp_path / "flows_for_dashboard.py").write_text(
        "import wire\nflow = wire.Flow('f')\n"
        "flow.source(wire.sources.files('in', format='csv'), event_time='t')"
        ".sink(wire.sinks.parquet('out'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def fake_run(self, checkpoint, **kwargs):
        calls.append(kwargs)
        return RunSummary(self.flow_id)

    monkeypatch.setattr(Flow, "run", fake_run)
    args = ["run", "flows_for_dashboard:flow", "--checkpoint", str(tmp_path / "ck"), *flag]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert calls and calls[0]["dashboard"] is expected


def test_run_without_the_control_extra_runs_without_the_dashboard(tmp_path, monkeypatch):
    from wire.errors import EXTRAS

    (tmp_path / "flows_for_no_extra.py").write_text(
        "import wire\nflow = wire.Flow('f')\n"
        "flow.source(wire.sources.files('in', format='csv'), event_time='t')"
        ".sink(wire.sinks.parquet('out'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    calls = []
    monkeypatch.setitem(EXTRAS, "control", ("fastapi_not_installed_here",))  # as if it were missing
    monkeypatch.setattr(Flow, "run", lambda self, checkpoint, **kw: calls.append(kw) or RunSummary("f"))
    out = CliRunner().invoke(app, ["run", "flows_for_no_extra:flow", "--checkpoint", str(tmp_path / "ck")])
    assert out.exit_code == 0, out.output
    assert calls[0]["dashboard"] is False
    assert "no dashboard" in out.output and "wire[control]" in " ".join(out.output.split())
