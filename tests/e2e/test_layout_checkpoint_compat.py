"""A checkpoint written before sources/ and sinks/ were regrouped (issue 27) resumes with the new code.

The old code is Wire at commit :data:`BEFORE` (the last commit with the flat ``sources/``
drawer and the ``delivery/self_correcting*`` modules), exported with ``git archive`` and run
in a subprocess: it reads half of the input and stops (``max_epochs``). The current code
resumes that checkpoint and reads the rest. What a checkpoint records about sources and
sinks is exercised: the file source's offsets (per-partition file sets and positions,
watermarks), ``wire.json``'s plan fingerprint (connector and sink class names, sink
paths), the window state, the Parquet sink's epochs and the Delta sink's application
transactions. Both runs build the flow from the same code (:data:`FLOW`), which gives the
file source the connector's ``idle_timeout`` keyword (deprecated since, still accepted).

Input: two partitions (directories ``p0``, ``p1``), keys ``a`` / ``b``, event times
0 s .. 39 s, one event per second per partition, ``x = t / 1000``. Expected: per key and
10 s window the count and sum, computed here in Python, each window exactly once in each
sink although the first run stopped mid-way.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.spark]  # in `make test` (two sessions, ~20 s): once broken unseen when slow

BEFORE = "0ab8a100235a22c2496d61666f6fa9ed98c99a0b"
"""The commit before the regrouping: its src/wire writes the checkpoint."""

REPO = Path(__file__).resolve().parents[2]

FLOW = '''
import sys
import wire

def build(tmp):
    flow = wire.Flow("layout_compat")
    src = wire.sources.files(f"{tmp}/in", format="jsonl", partition_by="directory", idle_timeout="1h")
    s = flow.source(src, event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(0),
                    max_events_per_epoch=8, name="events")
    w = s.window(wire.Tumbling("10s")).aggregate(n=wire.count(), total=wire.sum("x"), name="w")
    w.sink(wire.sinks.parquet(f"{tmp}/ck/out"), name="out")
    w.sink(wire.sinks.delta(f"{tmp}/ck/lake"), name="lake")
    return flow

if __name__ == "__main__":
    tmp, epochs = sys.argv[1], int(sys.argv[2])
    summary = build(tmp).run(f"{tmp}/ck", key_groups=2, max_epochs=epochs, progress=False,
                             spark_conf={"spark.sql.shuffle.partitions": "2"}, master="local[2]")
    print(summary.epochs)
'''


def events() -> list[dict[str, object]]:
    return [{"t": t, "k": "a" if p == 0 else "b", "x": t // 1000, "p": p}
            for p in (0, 1) for t in range(0, 40_000, 1000)]


def expected() -> list[tuple[str, int, int, int]]:
    """(key, window start ms, count, sum of x) per key and 10 s window."""
    n: Counter[tuple[str, int]] = Counter()
    total: Counter[tuple[str, int]] = Counter()
    for e in events():
        w = (str(e["k"]), int(e["t"]) // 10_000 * 10_000)  # type: ignore[call-overload]
        n[w] += 1
        total[w] += int(e["x"])  # type: ignore[call-overload]
    return sorted((k, start, n[(k, start)], total[(k, start)]) for k, start in n)


def old_code(tmp: Path) -> Path:
    """``src/`` of :data:`BEFORE`, exported from the repository (skips where there is no history)."""
    try:
        data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", BEFORE, "src"],
                              capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"no git history with commit {BEFORE[:10]}: {e}")
    root = tmp / "old"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(root, filter="data")
    return root / "src"


def rows(tmp: Path) -> list[tuple[str, int, int, int]]:
    files = sorted((tmp / "ck" / "out").glob("epoch-*/*.parquet"))
    t = pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()
    return sorted((r["k"], int(r["window_start"].timestamp() * 1000), r["n"], r["total"]) for r in t)


def lake(tmp: Path) -> list[tuple[str, int, int, int]]:
    from deltalake import DeltaTable

    t = DeltaTable(str(tmp / "ck" / "lake")).to_pyarrow_table().to_pylist()
    return sorted((r["k"], int(r["window_start"].timestamp() * 1000), r["n"], r["total"]) for r in t)


def test_a_checkpoint_of_the_flat_layout_resumes(spark, tmp_path):
    pytest.importorskip("deltalake")
    for e in events():
        part = tmp_path / "in" / f"p{e['p']}"
        part.mkdir(parents=True, exist_ok=True)
        with open(part / "events.jsonl", "a") as f:
            f.write(json.dumps({k: v for k, v in e.items() if k != "p"}) + "\n")
    (tmp_path / "flow_def.py").write_text(FLOW)
    src = old_code(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(src)}
    first = subprocess.run([sys.executable, str(tmp_path / "flow_def.py"), str(tmp_path), "4"],
                           capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.split()[-1] == "4"
    meta = json.loads((tmp_path / "ck" / "wire.json").read_text())
    assert meta["steps"]["events"] == {"kind": "source", "connector": "FileSource"}
    assert meta["steps"]["lake"]["sink"]["kind"] == "DeltaSink"
    done = rows(tmp_path)
    assert done and done != expected()  # the old run stopped mid-way, with windows still open
    assert set(done) < set(expected())

    sys.path.insert(0, str(tmp_path))
    try:
        import flow_def  # the same flow, built by the current code
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.warns(DeprecationWarning, match="idle_timeout"):
        flow = flow_def.build(str(tmp_path))
    summary = flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2, progress=False)
    assert summary.epochs >= 1
    assert rows(tmp_path) == expected()
    assert lake(tmp_path) == expected()
    shutil.rmtree(tmp_path / "old")
