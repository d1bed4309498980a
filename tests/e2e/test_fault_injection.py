"""Proof of exactly-once under crashes: SIGKILL the driver at random moments, restart.

The driver (``faults/driver.py``) writes the flights windows to Delta (exactly-once),
PostgreSQL append (exactly-once) and upsert (idempotent), and Parquet (exactly-once).
After every kill it is restarted on the same checkpoint until it finishes; the final
tables must equal those of an uninterrupted run exactly. ``make test`` runs a bounded
variant (3 kills), and the same for a stateless flow (``pass``: a filter and a projection,
whose source's tasks stage every sink's rows, ``wire.compiler.sink_fusion``); the slow
variant injects 24 seeded kills.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from wire.examples.flights import prepare_flights
from wire.runtime.checkpoint import list_epochs
from wire.testing.postgres import PostgresServer

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).parent / "faults" / "driver.py"


@pytest.fixture(scope="module")
def pg():
    ok, reason = PostgresServer.available()
    if not ok:
        pytest.skip(f"PostgreSQL server binaries unavailable: {reason}")
    with PostgresServer() as server:
        yield server


def _dsn(server: PostgresServer, db: str) -> str:
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{db}"')
    return server.dsn.replace("dbname=postgres", f"dbname={db}")


def _start(glob: str, out: Path, dsn: str, mode: tuple[str, ...] = ()) -> subprocess.Popen:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, str(DRIVER), glob, str(out), dsn, *mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _committed(out: Path) -> int:
    try:
        return sum(1 for e in list_epochs(out / "_checkpoint") if e.committed)
    except Exception:
        return 0


def _in_flight(out: Path) -> bool:
    try:
        epochs = list_epochs(out / "_checkpoint")
    except Exception:
        return False
    return bool(epochs) and not epochs[-1].committed


def run_with_kills(glob: str, out: Path, dsn: str, kills: int, seed: int, mode: tuple[str, ...] = ()) -> dict:
    rng = random.Random(seed)
    stats = {"kills": 0, "mid_epoch": 0, "recovery_s": []}
    after_kill = True  # no recovery to time before the first kill
    while True:
        proc = _start(glob, out, dsn, mode)
        started = time.monotonic()
        before = _committed(out)
        recovered = after_kill
        if stats["kills"] < kills:
            # Kill by progress, not by the clock, so that every kill lands whatever the machine's
            # speed: during Spark's start-up (k = 0: 0-6 s after the launch), or k = 1 or 2 epochs
            # committed into this life and then 0-1 s more (mid-epoch or between epochs). A life
            # then commits at most a few epochs, and the input holds more than ``kills`` lives
            # can use up (a clock-timed kill let a fast life finish first: 2 kills of 3).
            k = rng.choice((0, 1, 2))
            extra = rng.uniform(0.0, 6.0) if k == 0 else rng.uniform(0.0, 1.0)
            reached = started if k == 0 else None
            while proc.poll() is None:
                now, done = time.monotonic(), _committed(out)
                if not recovered and done > before:
                    stats["recovery_s"].append(now - started)
                    recovered = True
                if reached is None and done >= before + k:
                    reached = now
                if reached is not None and now - reached >= extra:
                    break
                time.sleep(0.05)
            if proc.poll() is None:
                mid = _in_flight(out)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                stats["kills"] += 1
                stats["mid_epoch"] += int(mid)
                after_kill = False
                continue
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output[-3000:]
        assert "DONE" in output
        return stats


def _table(dsn: str, name: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return c.execute(f"SELECT * FROM {name} ORDER BY 1, 2, 3, 4, 5").fetchall()


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names])


def _parquet(d: Path) -> pa.Table:
    files = sorted(d.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files])


def compare(a: Path, b: Path, dsn_a: str, dsn_b: str) -> int:
    rows = 0
    da, db = (_sorted(DeltaTable(str(p / "delta")).to_pyarrow_table()) for p in (a, b))
    assert da.equals(db) and da.num_rows > 0
    rows += da.num_rows
    for t in ("hourly_append", "hourly_upsert"):
        ta, tb = _table(dsn_a, t), _table(dsn_b, t)
        assert ta == tb and len(ta) > 0, t
        rows += len(ta)
    for port in ("windows", "late"):
        pa_, pb = _parquet(a / port), _parquet(b / port)
        assert pa_.equals(pb), port
        rows += pa_.num_rows
    return rows


def _all_rows(dsn: str, name: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return c.execute(f"SELECT * FROM {name}").fetchall()


def compare_stateless(a: Path, b: Path, dsn_a: str, dsn_b: str) -> int:
    """The ``pass`` flow's outputs: equal, row for row and epoch for epoch, in every sink."""
    da, db = (_sorted(DeltaTable(str(p / "delta")).to_pyarrow_table()) for p in (a, b))
    assert da.equals(db) and da.num_rows > 0
    ta, tb = sorted(_all_rows(dsn_a, "departed_append")), sorted(_all_rows(dsn_b, "departed_append"))
    assert ta == tb and len(ta) == da.num_rows
    pa_, pb = _sorted(_parquet(a / "departed")), _sorted(_parquet(b / "departed"))
    assert pa_.equals(pb) and pa_.num_rows == da.num_rows
    return da.num_rows + len(ta) + pa_.num_rows


def _fault_run(tmp_path: Path, pg: PostgresServer, kills: int, seed: int, limit: int | None,
               mode: tuple[str, ...] = ()) -> dict:
    prepare_flights(tmp_path / "in", rows_per_file=2_500, limit=limit)
    glob = str(tmp_path / "in" / "*.parquet")
    ref, crashed = tmp_path / "ref", tmp_path / "crashed"
    dsn_ref, dsn_crash = _dsn(pg, f"ref{seed}"), _dsn(pg, f"crash{seed}")
    run_with_kills(glob, ref, dsn_ref, kills=0, seed=seed, mode=mode)
    stats = run_with_kills(glob, crashed, dsn_crash, kills=kills, seed=seed, mode=mode)
    stats["rows_compared"] = (compare_stateless if mode else compare)(ref, crashed, dsn_ref, dsn_crash)
    stats["epochs"] = _committed(crashed)
    rec = sorted(stats["recovery_s"])
    if rec:
        stats["recovery_p50_s"], stats["recovery_max_s"] = rec[len(rec) // 2], rec[-1]
    print(f"fault injection: {stats}")
    return stats


def test_kill_dash_nine_bounded(tmp_path, pg):
    # 45,000 flights: 19 epochs, more than three lives of at most ~4 epochs each use up
    stats = _fault_run(tmp_path, pg, kills=3, seed=7, limit=45_000)
    assert stats["kills"] == 3


def test_kill_dash_nine_stateless(tmp_path, pg):
    """A filter and a projection: the source's tasks stage every sink's rows (sink fusion);
    kills mid-epoch leave staged files and rows that the restarted run must not publish twice."""
    stats = _fault_run(tmp_path, pg, kills=3, seed=11, limit=45_000, mode=("pass",))
    assert stats["kills"] == 3


@pytest.mark.slow
def test_kill_dash_nine_many(tmp_path, pg):
    # all 336,776 flights (135 epochs), so that the flow is still running at the 24th
    # kill: each life commits about five epochs between Spark's start-up and its kill
    stats = _fault_run(tmp_path, pg, kills=24, seed=2026, limit=None)
    assert stats["kills"] == 24
