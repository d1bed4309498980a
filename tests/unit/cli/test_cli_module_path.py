"""`wire run mymod:flow` imports ./mymod.py as `python -m` would (issue 26 item 9).

The console script is run in a subprocess from a temp directory, with PYTHONPATH naming
only Wire's sources: the flow's module is found through the current directory alone.
The checkpoint path is a file, so the run stops at its first check, before Spark starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import wire

WIRE_SRC = str(Path(wire.__file__).resolve().parents[1])
SCRIPT = Path(sys.executable).parent / "wire"  # the console script: no `-m`, no cwd on sys.path


def wire_run(cwd: Path, target: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": WIRE_SRC, "COLUMNS": "300"}
    (cwd / "ck").write_text("a file, not a directory")
    return subprocess.run(
        [str(SCRIPT), "run", target, "--checkpoint", "ck", "--no-dashboard", "--no-progress"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def text(done: subprocess.CompletedProcess[str]) -> str:
    """The output as one line: rich's box and line breaks removed."""
    return " ".join((done.stdout + done.stderr).replace("│", " ").split())


def test_a_module_in_the_current_directory_is_found(tmp_path):
    (tmp_path / "mymod.py").write_text(
        "import wire\n"
        "flow = wire.Flow('mine')\n"
        "flow.source(wire.sources.files('in', format='csv'), event_time='t')"
        ".sink(wire.sinks.parquet('out'))\n")
    done = wire_run(tmp_path, "mymod:flow")
    out = text(done)
    assert "No module named" not in out, out
    assert "running flow mine" in out  # imported; the run then stops at the checkpoint check
    assert "is a file, not a directory" in out and done.returncode == 1, out


def test_a_missing_module_names_where_it_was_looked_for(tmp_path):
    done = wire_run(tmp_path, "nomod:flow")
    out = text(done)
    assert done.returncode == 2, out
    assert "No module named 'nomod'" in out
    assert f"from the current directory ({tmp_path})" in out
    assert ("run `wire run` from the directory that holds nomod(.py), or add that directory to "
            "PYTHONPATH") in out
