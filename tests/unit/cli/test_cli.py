import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from wire.cli.main import app
from wire.control import ControlPlane

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
    out = r.invoke(app, ["pause", str(tmp_path / "ck")])
    assert out.exit_code == 0
    out = r.invoke(app, ["status"])
    assert out.exit_code == 2
