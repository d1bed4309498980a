"""Ctrl-C on a running flow stops it gracefully, quietly (issue 26 item 6).

Before: PySpark's SIGINT handler cancelled every Spark job through py4j from inside the
signal handler, on the connection the interrupted wait was reading (``RuntimeError:
reentrant call inside <_io.BufferedReader name=9>``): some 50 lines of py4j tracebacks
before the summary. Now ``wire run`` on an unbounded flow, sent SIGINT as a terminal
sends it (to the whole foreground process group: the driver, the JVM, Spark's Python
workers), lets the epoch in flight commit, prints the summary only and exits 130; the
checkpoint has no epoch in flight, and a second run resumes after it: the two runs
together read every event exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from wire.runtime.checkpoint import epochs_settled, log_batches

pytestmark = [pytest.mark.spark]  # in `make test` (about 45 s): a start-up change once broke it unseen

EVENTS = 3000

FLOW_MODULE = textwrap.dedent(
    """
    import pyarrow as pa
    import wire

    SRC, OUT = {src!r}, {out!r}

    def flow():
        schema = pa.schema([("t", pa.int64()), ("k", pa.string())])
        f = wire.Flow("ctrlc")
        events = f.source(wire.sources.files(SRC, format="jsonl", schema=schema, bounded=False),
                          event_time="t", key="k", max_events_per_epoch=50, name="events")
        events.window(wire.Tumbling(100)).aggregate(n=wire.count(), name="w").sink(
            wire.sinks.jsonl(OUT), name="out")
        return f
    """
)


def start_run(tmp_path: Path, ck: Path) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, "-c", "from wire.cli.main import app; app()", "run", "flowmod:flow",
         "--checkpoint", str(ck), "--master", "local[1]", "--no-dashboard", "--no-progress",
         "--max-restarts", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        start_new_session=True,  # its own process group, signalled as a terminal signals its job
    )


def interrupt_after(proc: subprocess.Popen[str], ck: Path, epochs: int) -> tuple[str, str]:
    deadline = time.monotonic() + 180
    while len(log_batches(ck / "spark" / "commits")) < epochs:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no epoch completed in 180 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    return proc.communicate(timeout=180)


def test_ctrl_c_stops_gracefully_prints_the_summary_only_and_exits_130(tmp_path):
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    src.mkdir()
    (tmp_path / "flowmod.py").write_text(FLOW_MODULE.format(src=str(src), out=str(out)))
    (src / "a.jsonl").write_text("".join(json.dumps({"t": t, "k": "ab"[t % 2]}) + "\n"
                                         for t in range(EVENTS)))

    proc = start_run(tmp_path, ck)
    stdout, stderr = interrupt_after(proc, ck, 2)
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr and "reentrant" not in stderr and "py4j" not in stderr, stderr
    assert "Traceback" not in stdout, stdout
    assert "flow ctrlc:" in stdout and "stopped by Ctrl-C" in stdout
    assert epochs_settled(ck), "the epoch in flight was not committed"
    first = len(log_batches(ck / "spark" / "commits"))
    assert first * 50 < EVENTS, "the input was consumed before the interrupt: nothing tested"

    # the second run resumes after the last committed epoch; interrupted once it consumed it all
    proc = start_run(tmp_path, ck)
    deadline = time.monotonic() + 240
    rows: list[dict[str, Any]] = []
    while True:  # windows [0, 2900) close once the watermark reaches 2999 (tumbling 100 ms, delay 0)
        rows = [json.loads(line) for f in out.glob("*/*.jsonl") for line in f.read_text().splitlines()]
        if sum(int(r["n"]) for r in rows) >= EVENTS - 100 or proc.poll() is not None:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130 and "Traceback" not in stderr, (stdout, stderr)
    counts = {(r["k"], r["window_start"]): r["n"] for r in rows}
    assert len(counts) == len(rows), "a window was written twice"
    assert sum(counts.values()) == EVENTS - 100  # every event once, the last window still open
