import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wire.cli.main import app
from wire.control import ControlPlane
from wire.runtime.checkpoint import open_checkpoint

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
from test_server import FakeFlow


def test_cli(tmp_path):
    flow = FakeFlow(tmp_path)
    flow.run_epoch()
    r = CliRunner()
    with ControlPlane({"orders": flow}, token="tok") as plane:
        out = r.invoke(app, ["status", "--url", plane.url])
        assert out.exit_code == 0, out.output
        assert "orders" in out.output and "running" in out.output
        out = r.invoke(app, ["status", "orders", "--url", plane.url])
        assert out.exit_code == 0, out.output
        print(out.output)
        out = r.invoke(app, ["pause", "orders", "--url", plane.url, "--token", "bad"])
        assert out.exit_code == 1 and "401" in out.output, out.output
        out = r.invoke(app, ["pause", "orders", "--url", plane.url], env={"WIRE_TOKEN": "tok"})
        assert out.exit_code == 0 and "paused" in out.output, out.output
        out = r.invoke(app, ["resume", "orders", "--connector", "src", "--url", plane.url, "--token", "tok"])
        assert out.exit_code == 0, out.output
        doc = json.loads(Path(flow.control_file).read_text())
        assert doc == {"paused": True, "connectors": {"src": {"paused": False}}}
        out = r.invoke(app, ["status", "nope", "--url", plane.url])
        assert out.exit_code == 1 and "404" in out.output
        out = r.invoke(app, ["pause", "orders", "--url", plane.url], env={"WIRE_TOKEN": ""})
        assert out.exit_code == 2
    out = r.invoke(app, ["status"])
    assert out.exit_code == 2


def test_pause_and_resume_a_checkpoint_directory(tmp_path):
    ck = tmp_path / "ck"
    open_checkpoint(ck, flow_id="orders", key_groups=None)
    r = CliRunner()
    out = r.invoke(app, ["pause", str(ck)])
    assert out.exit_code == 0, out.output
    assert json.loads((ck / "control.json").read_text()) == {"paused": True}
    out = r.invoke(app, ["resume", str(ck), "--connector", "src"])
    assert out.exit_code == 0, out.output
    doc = json.loads((ck / "control.json").read_text())
    assert doc == {"paused": True, "connectors": {"src": {"paused": False}}}


@pytest.mark.parametrize("command", ["pause", "resume"])
@pytest.mark.parametrize("make", ["missing", "empty dir", "a file", "other dir"])
def test_pause_or_resume_of_a_path_that_is_no_checkpoint_fails_and_creates_nothing(tmp_path, command, make):
    target = tmp_path / "ck"
    if make == "empty dir":
        target.mkdir()
    elif make == "a file":
        target.write_text("x")
    elif make == "other dir":
        target.mkdir()
        (target / "data.csv").write_text("a,b\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = CliRunner().invoke(app, [command, str(target)])
    assert out.exit_code == 1, out.output
    flat = "".join(out.output.split())  # rich wraps long lines
    assert "notaWirecheckpoint" in flat and str(target) in flat
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_status_sends_the_token_to_a_remote_plane(tmp_path):
    flow = FakeFlow(tmp_path)
    r = CliRunner()
    with ControlPlane({"orders": flow}, host="0.0.0.0", token="tok", allow_remote=True) as plane:
        url = plane.url.replace("0.0.0.0", "127.0.0.1")
        out = r.invoke(app, ["status", "--url", url])
        assert out.exit_code == 1 and "401" in out.output, out.output
        out = r.invoke(app, ["status", "--url", url, "--token", "tok"])
        assert out.exit_code == 0 and "orders" in out.output, out.output
        out = r.invoke(app, ["status", "orders", "--url", url], env={"WIRE_TOKEN": "tok"})
        assert out.exit_code == 0, out.output


@pytest.mark.parametrize("make", ["a file", "a data dir"])
def test_run_fresh_never_deletes_what_is_not_a_checkpoint(tmp_path, monkeypatch, make):
    (tmp_path / "flows_for_fresh.py").write_text(
        "import wire\nflow = wire.Flow('f')\n"
        "flow.source(wire.sources.files('in', format='csv'), event_time='t')"
        ".sink(wire.sinks.parquet('out'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = tmp_path / "ck"
    if make == "a file":
        target.write_text("precious")
    else:
        target.mkdir()
        (target / "data.csv").write_text("precious")
    out = CliRunner().invoke(app, ["run", "flows_for_fresh:flow", "--checkpoint", str(target), "--fresh"])
    assert out.exit_code == 1, out.output
    assert "not a Wire checkpoint" in " ".join(out.output.split())  # rich wraps long lines
    kept = target if make == "a file" else target / "data.csv"
    assert kept.read_text() == "precious"


def test_error_messages_keep_square_brackets(tmp_path):
    """Rich markup must not eat text such as ``wire[postgres]`` from an error message."""
    odd = tmp_path / "ck[postgres]"
    odd.mkdir()
    out = CliRunner().invoke(app, ["report", str(odd)])
    assert out.exit_code == 1
    assert "ck[postgres]" in out.output.replace("\n", "")
