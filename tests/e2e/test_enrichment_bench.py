"""bench/enrichment.py runs end to end at a tiny size (both engines, alternating order, a report)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "enrichment.py"


def test_the_enrichment_benchmark_smoke_run_writes_its_table(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH.parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    report = tmp_path / "enrichment.md"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--events", "4000", "--keys", "100", "--epoch-size", "1000",
         "--change-every", "0.3", "--repeats", "2", "--out", str(report)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    text = report.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 2
    assert "Wire, then plain" in rows[0] and "plain, then Wire" in rows[1]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1].endswith("x"), row  # the ratio comes first
        assert cells[-1] == "ok", row  # both engines wrote every order once
    published = sorted((tmp_path / "out" / "bench_enrichment" / "customer_versions").glob("v*.parquet"))
    assert len(published) > 1  # the table changed during the last run
