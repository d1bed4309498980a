"""The self-correcting sink end to end (SPEC §8): drift repair, replicas under SIGKILL, standby takeover.

The flow (``faults/self_correcting_driver.py``): events ``(k, t, v)`` -> 1-minute
tumbling windows per ``k`` with ``emit="update"`` (count, sum) -> a self-correcting
PostgreSQL table and a self-correcting Delta table keyed by ``(k, window_start)``.
The input is in event-time order up to 5 s of jitter under a 10 s watermark delay,
so no event is late and the expected tables are a plain DuckDB ``GROUP BY`` over the
input files (the oracle), independent of Wire.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from wire.runtime.checkpoint import list_epochs

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).parent / "faults" / "self_correcting_driver.py"
KEYS = 20


def _driver_module():
    spec = importlib.util.spec_from_file_location("self_correcting_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_input(directory: Path, *, files: int, per_file: int, seed: int = 1, start: int = 0) -> None:
    """``files`` Parquet files of events in near event-time order (jitter < 5 s), 4 per second.

    Each is written under a hidden name and renamed: a running flow's file source reports a
    file that changes after it was listed (a half-written file) as a dead letter."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        i = np.arange(start + f * per_file, start + (f + 1) * per_file)
        t = i * 250 + rng.integers(0, 5000, len(i))
        keys = [f"k{x % KEYS:02d}" for x in rng.integers(0, KEYS, len(i))]
        values = rng.integers(0, 100, len(i))
        table = pa.table({"k": keys, "t": pa.array(t, pa.int64()), "v": pa.array(values, pa.int64())})
        final = directory / f"part-{start // per_file + f:04d}.parquet"
        tmp = directory / f".{final.name}.tmp"  # complete before it is visible: a running flow lists it
        pq.write_table(table, tmp)
        os.replace(tmp, final)


def oracle(directory: Path) -> set[tuple]:
    """(k, window_start, window_end, n, total) per key and minute, by DuckDB over the input files."""
    return set(duckdb.sql(
        f"SELECT k, t // 60000 * 60000 AS ws, t // 60000 * 60000 + 60000, count(*), sum(v)::BIGINT "
        f"FROM read_parquet('{directory}/*.parquet') GROUP BY ALL").fetchall())


COLUMNS = ["k", "window_start", "window_end", "n", "total"]


def _ms(row: tuple) -> tuple:
    """Window bounds (timestamps) as ms since the epoch, as the oracle has them."""
    k, ws, we, n, total = row
    return k, round(ws.timestamp() * 1000), round(we.timestamp() * 1000), n, total


def pg_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as c:
        return [_ms(r) for r in c.execute(f"SELECT {', '.join(COLUMNS)} FROM per_minute").fetchall()]


def delta_rows(path: Path) -> list[tuple]:
    t = DeltaTable(str(path)).to_pyarrow_table(columns=COLUMNS)
    return [_ms(tuple(r.values())) for r in t.to_pylist()]


def assert_equal_to_oracle(rows: list[tuple], want: set[tuple], what: str) -> None:
    keys = [(r[0], r[1]) for r in rows]
    assert len(keys) == len(set(keys)), f"{what}: duplicate keys"
    got = set(rows)
    assert got == want, f"{what}: {len(got - want)} rows not in the oracle, {len(want - got)} missing"


def new_db(pg_server, name: str) -> str:
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return pg_server.dsn.replace("dbname=postgres", f"dbname={name}")


def hand_edit(dsn: str, delta: Path, rows: list[tuple]) -> tuple[tuple, tuple, tuple]:
    """In both tables: delete the row of ``rows[0]``, add 100 to ``n`` of ``rows[1]``, insert a bogus row.

    PostgreSQL: three statements; Delta: one hand-made commit (overwrite). Returns
    ``(gone, altered, bogus)``.
    """
    gone, altered = rows[0], rows[1]
    bogus = ("zz", 0, 60_000, 7, 7)
    at = "to_timestamp(%s / 1000.0)"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DELETE FROM per_minute WHERE k = %s AND window_start = {at}", gone[:2])
        c.execute(f"UPDATE per_minute SET n = n + 100 WHERE k = %s AND window_start = {at}", altered[:2])
        c.execute(f"INSERT INTO per_minute ({', '.join(COLUMNS)}) VALUES (%s, {at}, {at}, %s, %s)", bogus)
    table = DeltaTable(str(delta)).to_pyarrow_table()
    kept = []
    for r in table.to_pylist():
        key = _ms(tuple(r[c] for c in COLUMNS))[:2]
        if key == gone[:2]:
            continue
        if key == altered[:2]:
            r["n"] += 100
        kept.append(r)
    epoch0 = table.schema.field("window_start").type
    kept.append({**dict(zip(COLUMNS, bogus, strict=True)),
                 "window_start": pa.scalar(0, pa.int64()).cast(epoch0).as_py(),
                 "window_end": pa.scalar(60_000_000, pa.int64()).cast(epoch0).as_py()})
    write_deltalake(str(delta), pa.Table.from_pylist(kept, schema=table.schema), mode="overwrite")
    return gone, altered, bogus


# --- drift repair (in-process, the shared SparkSession) -----------------------------------


def test_drift_repair_after_hand_edits(spark, tmp_path, pg_server):
    dsn = new_db(pg_server, "sc_drift")
    make_input(tmp_path / "in", files=3, per_file=1000)
    want = oracle(tmp_path / "in")
    glob, delta, ck = str(tmp_path / "in" / "*.parquet"), tmp_path / "delta", str(tmp_path / "ck")
    build = _driver_module().build
    first = build(glob, dsn, str(delta), read_only=False, bounded=True).run(ck, spark=spark, key_groups=2,
                                                                             max_epochs=3)
    assert first.epochs == 3
    # windows of the first three minutes are closed (watermark past them): no later epoch touches them
    old = sorted(r for r in want if r[1] < 120_000)
    gone, altered, bogus = hand_edit(dsn, delta, old)
    # the next epoch repairs all three, in both tables
    nxt = build(glob, dsn, str(delta), read_only=False, bounded=True).run(ck, spark=spark, key_groups=2,
                                                                           max_epochs=1)
    for rows, what in ((pg_rows(dsn), "postgres"), (delta_rows(delta), "delta")):
        by_key = {(r[0], r[1]): r for r in rows}
        assert by_key.get(gone[:2]) == gone and by_key.get(altered[:2]) == altered, what
        assert bogus[:2] not in by_key, what
    assert nxt.metrics[("sc_pg", "sc_drift_rows")] == 3
    assert nxt.metrics[("sc_delta", "sc_drift_rows")] == 3
    rest = build(glob, dsn, str(delta), read_only=False, bounded=True).run(ck, spark=spark, key_groups=2)
    assert rest.epochs > 0
    assert_equal_to_oracle(pg_rows(dsn), want, "postgres")
    assert_equal_to_oracle(delta_rows(delta), want, "delta")


# --- replicas in separate processes ------------------------------------------------------------


def _start(glob: str, ck: Path, dsn: str, delta: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, str(DRIVER), glob, str(ck), dsn, str(delta), *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _counter(ck: Path, name: str) -> int:
    """A sink counter summed over the sinks and every run of a checkpoint, from its epoch log."""
    path = ck / "epochs.jsonl"
    if not path.exists():
        return 0
    last: dict[int, int] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        last[rec["run"]] = sum(v for _, n, v in rec["metrics"] if n == name)
    return sum(last.values())


def _committed(ck: Path) -> int:
    """Epochs committed: the last committed epoch id + 1 (Spark trims its old log files)."""
    try:
        return max((e.epoch + 1 for e in list_epochs(ck) if e.committed), default=0)
    except Exception:
        return 0


def _in_flight(ck: Path) -> bool:
    try:
        epochs = list_epochs(ck)
    except Exception:
        return False
    return bool(epochs) and not epochs[-1].committed


def run_replicas(tmp_path: Path, pg_server, *, kills: int, seed: int, files: int) -> dict:
    """Two replicas of the flow, each its own checkpoint, same tables; SIGKILL them at random.

    The replica ahead (more committed epochs) is killed, only after it committed an
    epoch since its (re)start, at a random moment 0-4 s later (so kills land between and
    inside epochs, not during Spark's start-up), so the replicas keep overtaking each other.
    """
    rng = random.Random(seed)
    dsn = new_db(pg_server, f"sc_replicas_{seed}")
    make_input(tmp_path / "in", files=files, per_file=1000)
    glob, delta = str(tmp_path / "in" / "*.parquet"), tmp_path / "delta"
    cks = [tmp_path / "ck_a", tmp_path / "ck_b"]
    # each replica now and then stalls 20 s between its read and its append (a writer paused by
    # GC or the network), so the other, if not far behind, appends meanwhile: a conflict
    stall = ("--widen-race-ms", "150", "--stall-every", "9", "--stall-ms", "20000")
    race = [stall, stall]
    procs = [_start(glob, ck, dsn, delta, *race[i]) for i, ck in enumerate(cks)]
    base = [0, 0]  # committed epochs at each replica's (re)start
    done = [False, False]
    stats = {"kills": 0, "mid_epoch": 0, "runs": 2}
    target = 0
    kill_at: float | None = None
    deadline = time.monotonic() + 3000
    while not all(done):
        assert time.monotonic() < deadline, "replicas did not finish"
        time.sleep(0.2)
        for i, proc in enumerate(procs):
            if done[i] or proc.poll() is None:
                continue
            output = proc.stdout.read()
            assert "DONE" in output, output[-3000:]
            done[i] = True
        if stats["kills"] >= kills:
            continue
        running = [i for i in range(2) if not done[i]]
        if not running:
            continue
        leader = max(running, key=lambda i: _committed(cks[i]))
        if target != leader:
            target, kill_at = leader, None
        if kill_at is None and _committed(cks[target]) > base[target]:
            kill_at = time.monotonic() + rng.uniform(0.0, 4.0)
        if kill_at is not None and time.monotonic() >= kill_at and procs[target].poll() is None:
            stats["mid_epoch"] += int(_in_flight(cks[target]))
            _kill(procs[target])
            stats["kills"] += 1
            base[target] = _committed(cks[target])
            procs[target] = _start(glob, cks[target], dsn, delta, *race[target])
            stats["runs"] += 1
            kill_at = None
    stats["conflicts"] = sum(_counter(ck, "sc_cas_conflicts") for ck in cks)
    stats["epochs_behind"] = sum(_counter(ck, "sc_epochs_behind") for ck in cks)
    stats["epochs"] = [_committed(ck) for ck in cks]
    want = oracle(tmp_path / "in")
    assert_equal_to_oracle(pg_rows(dsn), want, "postgres")
    assert_equal_to_oracle(delta_rows(delta), want, "delta")
    stats["rows"] = len(want)
    print(f"self-correcting replicas: {stats}")
    return stats


@pytest.mark.slow
def test_two_replicas_two_kills(tmp_path, pg_server):
    # ~3 min on a loaded 2-core machine; the default suite's fast variant is the in-process
    # pair of replicas in tests/unit/sinks/test_self_correcting_sink.py
    stats = run_replicas(tmp_path, pg_server, kills=2, seed=3, files=16)
    assert stats["kills"] == 2


@pytest.mark.slow
def test_two_replicas_many_kills(tmp_path, pg_server):
    stats = run_replicas(tmp_path, pg_server, kills=12, seed=2026, files=40)
    assert stats["kills"] >= 10
    assert stats["conflicts"] >= 1


@pytest.mark.slow
def test_standby_takeover_over_rest(tmp_path, pg_server):
    import httpx

    dsn = new_db(pg_server, "sc_standby")
    make_input(tmp_path / "in", files=12, per_file=1000)
    glob, delta = str(tmp_path / "in" / "*.parquet"), tmp_path / "delta"
    token = "standby-token"
    plane_file = tmp_path / "plane.url"
    standby = _start(glob, tmp_path / "ck_b", dsn, delta, "--read-only", "--unbounded",
                     "--plane-file", str(plane_file), "--token", token)
    writer = _start(glob, tmp_path / "ck_a", dsn, delta, "--unbounded", "--plane-file",
                    str(tmp_path / "plane_a.url"), "--token", token)
    try:
        deadline = time.monotonic() + 240
        while not plane_file.exists():
            assert time.monotonic() < deadline and standby.poll() is None, "standby did not start"
            time.sleep(0.2)
        url = plane_file.read_text()
        sink = f"{url}/v1/flows/sc/sinks/sc_pg"
        # A writes; B reads the table each epoch and reports its distance
        while True:
            assert time.monotonic() < deadline and writer.poll() is None, "writer did not progress"
            status = httpx.get(sink).json()
            if status["gauges"].get("sc_table_upper", 0) > 5:
                break
            time.sleep(0.5)
        assert status["mode"] == "read_only" and status["counters"].get("sc_corrections", 0) == 0
        _kill(writer)
        written_by_a = len(pg_rows(dsn))
        # more input arrives; B still only watches
        make_input(tmp_path / "in", files=2, per_file=1000, seed=9, start=12_000)
        headers = {"Authorization": f"Bearer {token}"}
        for name in ("sc_pg", "sc_delta"):
            r = httpx.patch(f"{url}/v1/flows/sc/sinks/{name}", json={"mode": "write"}, headers=headers)
            assert r.status_code == 200 and r.json()["mode"] == "write"
        make_input(tmp_path / "in", files=1, per_file=1000, seed=10, start=14_000)
        want = oracle(tmp_path / "in")
        while True:  # B takes over: converges to the oracle over all input, with no gap
            assert time.monotonic() < deadline + 240 and standby.poll() is None, "standby did not converge"
            if set(pg_rows(dsn)) == want and set(delta_rows(delta)) == want:
                break
            time.sleep(1)
        status = httpx.get(sink).json()
        print(f"standby takeover: A wrote {written_by_a} rows; B after the switch: {status}")
        assert status["counters"]["sc_corrections"] > 0
        assert_equal_to_oracle(pg_rows(dsn), want, "postgres")
        assert_equal_to_oracle(delta_rows(delta), want, "delta")
    finally:
        for proc in (standby, writer):
            if proc.poll() is None:
                _kill(proc)


def _until(what: str, done, procs: list[subprocess.Popen], seconds: float) -> None:
    """Poll ``done()`` every second until it holds; fail naming ``what`` after ``seconds`` or
    when one of ``procs`` exits."""
    deadline = time.monotonic() + seconds
    while not done():
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"{what}: replica exited: {proc.stdout.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s"
        time.sleep(1)


def _tables_equal(dsn: str, delta: Path, want: set[tuple]) -> bool:
    """Both tables hold exactly ``want`` (False while a table does not exist yet)."""
    try:
        return set(pg_rows(dsn)) == want and set(delta_rows(delta)) == want
    except (psycopg.errors.UndefinedTable, TableNotFoundError):
        return False


@pytest.mark.slow
def test_replicas_with_other_cuts_repair_and_take_over(tmp_path, pg_server):
    """Issue 26 item 13: two replicas whose epochs cut the same input at other places
    (``max_events_per_epoch`` 400 and 2,600), files arriving over time, hand edits.

    A writes the tables alone; files arrive; the tables are edited by hand while A's
    input is quiet. B starts later and catches up in its own, fewer, epochs: once it
    has read what the tables reflect it repairs the edits (with epoch ids as the
    frontier it stayed behind A's many epochs and wrote nothing). A is killed, more
    files arrive: B takes over. The tables equal the DuckDB oracle over the input at
    every step."""
    dsn = new_db(pg_server, "sc_other_cuts")
    indir = tmp_path / "in"
    make_input(indir, files=4, per_file=1000)
    glob, delta = str(indir / "*.parquet"), tmp_path / "delta"
    ck_a, ck_b = tmp_path / "ck_a", tmp_path / "ck_b"
    # no repair between epochs (item 14): the repair of the hand edits below must be B's
    a = _start(glob, ck_a, dsn, delta, "--unbounded", "--events-per-epoch", "400",
               "--repair-interval-ms", "0")
    procs = [a]
    try:
        _until("A writes the first files", lambda: _tables_equal(dsn, delta, oracle(indir)), procs, 300)
        make_input(indir, files=2, per_file=1000, seed=5, start=4000)  # files arrive over time
        want = oracle(indir)
        _until("A writes the files that arrived", lambda: _tables_equal(dsn, delta, want), procs, 300)
        # A's input is quiet; the tables are edited by hand
        old = sorted(r for r in want if r[1] < 120_000)
        hand_edit(dsn, delta, old)
        assert not _tables_equal(dsn, delta, want)
        b = _start(glob, ck_b, dsn, delta, "--unbounded", "--events-per-epoch", "2600",
                   "--repair-interval-ms", "0")
        procs.append(b)
        _until("B catches up in its own cuts and repairs the hand edits",
               lambda: _tables_equal(dsn, delta, want), procs, 300)
        assert _counter(ck_b, "sc_corrections") > 0, "the repair was not B's"
        assert _committed(ck_b) < _committed(ck_a), "B's epochs should be fewer than A's"
        _kill(a)
        procs.remove(a)
        make_input(indir, files=2, per_file=1000, seed=6, start=6000)  # B takes over
        want = oracle(indir)
        _until("B takes over after A's kill", lambda: _tables_equal(dsn, delta, want), procs, 300)
        hand_edit(dsn, delta, sorted(r for r in want if r[1] < 120_000)[2:])
        make_input(indir, files=1, per_file=1000, seed=7, start=8000)
        want = oracle(indir)
        _until("B repairs and writes the last file", lambda: _tables_equal(dsn, delta, want), procs, 300)
        assert_equal_to_oracle(pg_rows(dsn), want, "postgres")
        assert_equal_to_oracle(delta_rows(delta), want, "delta")
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill(proc)


@pytest.mark.slow
def test_quiet_flow_repairs_hand_edits_within_the_interval(spark, tmp_path, pg_server):
    """Issue 26 item 14: an unbounded flow whose input is quiet (no epoch comes) still repairs
    hand edits, within ``repair_interval`` (1 s here), in both tables, twice."""
    dsn = new_db(pg_server, "sc_quiet")
    indir = tmp_path / "in"
    make_input(indir, files=2, per_file=1000)
    want = oracle(indir)
    glob, delta = str(indir / "*.parquet"), tmp_path / "delta"
    flow = _driver_module().build(glob, dsn, str(delta), read_only=False, bounded=False, repair_interval=1000)
    running = flow.start(str(tmp_path / "ck"), spark=spark, key_groups=2)
    try:
        deadline = time.monotonic() + 240
        while not _tables_equal(dsn, delta, want):
            assert time.monotonic() < deadline and running.is_active(), "the flow did not write its input"
            time.sleep(1)
        epochs = running.summary.epochs
        for rows in (sorted(want)[:2], sorted(want)[5:7]):
            hand_edit(dsn, delta, rows)
            assert not _tables_equal(dsn, delta, want)
            deadline = time.monotonic() + 120
            while not _tables_equal(dsn, delta, want):
                assert time.monotonic() < deadline and running.is_active(), "hand edits not repaired"
                time.sleep(0.5)
        assert running.summary.epochs == epochs, "an epoch ran: the input was not quiet"
        assert_equal_to_oracle(pg_rows(dsn), want, "postgres")
        assert_equal_to_oracle(delta_rows(delta), want, "delta")
    finally:
        running.stop(graceful=False)
