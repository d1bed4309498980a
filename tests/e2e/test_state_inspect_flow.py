"""Reading a flow's state (issue 29) on Spark, against pandas oracles of the admitted input.

A scripted source (one epoch per step: events, or a watermark advance) feeds a tumbling
window, an interval join of two branches and a dedupe process function. After each
committed epoch the state :func:`wire.read_state` returns must equal what pandas computes
from the documented rules for the input admitted up to that epoch: the windows' partials
and results and whether they fired, the buffered join events, the dedupe's ``last_seen``
values and expiry timers. The same after the checkpoint is rescaled to another number of
key groups, while the flow runs (``RunningFlow.state``), and after readers are killed
mid-read (nothing in the checkpoint changes: same files, same bytes).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import wire
from wire.core.envelope import encode_table
from wire.core.time import NO_WATERMARK
from wire.errors import CheckpointError, ConfigError
from wire.examples.process_examples import Dedupe
from wire.runtime.checkpoint import list_epochs
from wire.testing import MemorySink
from wire.testing.test_stream import TestStreamSource

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("x", pa.int64()), ("side", pa.string())])
SIZE, LATENESS = 10_000, 5_000
LOWER, UPPER, JOIN_LATENESS = -3_000, 4_000, 2_000
WITHIN = 15_000


def script(seed: int, steps: int = 10) -> list[tuple[list[dict] | None, int]]:
    """Steps ``(events or None, watermark after)``: events (a few late), then watermark advances."""
    rnd = random.Random(seed)
    out: list[tuple[list[dict] | None, int]] = []
    wm, base, i = NO_WATERMARK, 100_000, 0
    for s in range(steps):
        if s % 2 == 0:
            lo = base if wm == NO_WATERMARK else wm - 8_000  # some events are behind the watermark
            events = [{"t": rnd.randrange(lo, lo + 40_000), "k": rnd.choice("abcd"), "x": (i := i + 1),
                       "side": rnd.choice("LR")} for _ in range(rnd.randrange(8, 16))]
            out.append((events, wm))
        else:
            wm = (base if wm == NO_WATERMARK else wm) + rnd.randrange(6_000, 14_000)
            out.append((None, wm))
    return out


def build(flow: wire.Flow, steps: list[tuple[list[dict] | None, int]]) -> None:
    source = TestStreamSource(SCHEMA, tuple(
        (None if ev is None else encode_table(pa.Table.from_pylist(ev, schema=SCHEMA)), wm)
        for ev, wm in steps))
    src = flow.source(source, event_time="t", key="k", name="input")
    (src.window(wire.Tumbling(SIZE), allowed_lateness=LATENESS)
     .aggregate(n=wire.count(), s=wire.sum("x"), m=wire.mean("x"), name="win")
     .sink(MemorySink(), name="win_out"))
    left = src.filter("side = 'L'").select("t", "k", "x")
    right = src.filter("side = 'R'").select("t", "k", "x")
    (left.interval_join(right, lower=LOWER, upper=UPPER, allowed_lateness=JOIN_LATENESS, name="j")
     .sink(MemorySink(), name="j_out"))
    fn = Dedupe(within_ms=WITHIN)
    (src.process(fn.on_events, on_timer=fn.on_timer, state=fn.state, schema=fn.schema(SCHEMA), name="dedupe")
     .sink(MemorySink(), name="dedupe_out"))


def make_flow(steps) -> wire.Flow:
    flow = wire.Flow("state-inspect")
    build(flow, steps)
    return flow


# -- oracles: the state after the first ``n`` steps -------------------------------------------
def admitted(steps, n):
    """Per step done: (events as a DataFrame, watermark before, watermark after)."""
    before = NO_WATERMARK
    for ev, after in steps[:n]:
        yield pd.DataFrame(ev or [], columns=SCHEMA.names), before, after
        before = after


def window_oracle(steps, n) -> list[tuple]:
    parts, wm = [], NO_WATERMARK
    for ev, before, after in admitted(steps, n):
        end = (ev["t"] // SIZE) * SIZE + SIZE
        parts.append(ev[~(end + LATENESS <= before)])
        wm = after
    ev = pd.concat(parts)
    ev = ev.assign(start=(ev["t"] // SIZE) * SIZE)
    ev = ev[ev["start"] + SIZE + LATENESS > wm]
    g = ev.groupby(["k", "start"])["x"].agg(["size", "sum", "mean"]).reset_index()
    return sorted((r.k, r.start, r.start + SIZE, r.size, r.sum, round(r.mean, 9), r.start + SIZE <= wm)
                  for r in g.itertuples())


def join_oracle(steps, n) -> list[tuple]:
    width, out, wm = max(1_000, UPPER - LOWER), [], NO_WATERMARK
    rows = []
    for ev, before, after in admitted(steps, n):
        rows += [(r.side, r.k, r.t, r.x) for r in ev.itertuples() if r.t + JOIN_LATENESS >= before]
        wm = after
    for side, k, t, x in rows:
        last = (t // width + 1) * width - 1
        reach = last + (UPPER if side == "L" else -LOWER) + JOIN_LATENESS
        if reach >= wm:
            out.append(("left" if side == "L" else "right", k, t, x))
    return sorted(out)


def dedupe_oracle(steps, n) -> list[tuple]:
    state: dict[str, int] = {}
    timers: dict[str, int] = {}
    for ev, before, after in admitted(steps, n):
        for r in ev.sort_values("t", kind="stable").itertuples():
            if r.t >= before:
                state[r.k] = max(state.get(r.k, r.t), r.t)
                timers[r.k] = state[r.k] + WITHIN
        for k in [k for k, when in timers.items() if when <= after]:
            del timers[k]
            state.pop(k, None)
    return sorted((k, v, timers[k]) for k, v in state.items())


def window_state(table: pa.Table) -> list[tuple]:
    return sorted((r["k"], r["window_start"], r["window_end"], r["n"], r["s"], round(r["m"], 9), r["fired"])
                  for r in table.to_pylist())


def join_state(table: pa.Table) -> list[tuple]:
    return sorted((r["side"], r["k"], r["event_time"], (r["left"] or r["right"])["x"])
                  for r in table.to_pylist())


def dedupe_state(table: pa.Table) -> list[tuple]:
    out = []
    for r in table.to_pylist():
        assert [(t["domain"], t["tag"]) for t in r["timers"]] == [("event_time", "expire")]
        out.append((r["k"], r["last_seen"], r["timers"][0]["time"]))
    return sorted(out)


def steps_done(checkpoint: str) -> dict[int, int]:
    """Per committed epoch id, the script steps done after it (the source's offset)."""
    return {e.epoch: int(e.offsets[0]["step"]) for e in list_epochs(checkpoint) if e.committed}


def check_epoch(spark, checkpoint: str, steps, epoch: int, n: int, key_groups: int) -> None:
    win = wire.read_state(checkpoint, "win", epoch, spark=spark)
    assert window_state(win) == window_oracle(steps, n), (epoch, n)
    join = wire.read_state(checkpoint, "j", epoch, spark=spark)
    assert join_state(join) == join_oracle(steps, n), (epoch, n)
    dd = wire.read_state(checkpoint, "dedupe", epoch, spark=spark)
    assert dedupe_state(dd) == dedupe_oracle(steps, n), (epoch, n)
    meta = win.schema.metadata
    assert meta[b"wire.epoch"] == str(epoch).encode() and meta[b"wire.key_groups"] == str(key_groups).encode()
    for table in (win, dd):  # every row sits in its key's key group: pmod(xxhash64(key), key_groups)
        groups = table.column("key_group").to_pylist() if table.num_rows else []
        assert key_groups_of(spark, table.column("k").to_pylist() if groups else [], key_groups) == groups


def key_groups_of(spark, keys: list[str], key_groups: int) -> list[int]:
    """Each key's key group as Spark computes it for a string key: ``pmod(xxhash64(key), key_groups)``."""
    if not keys:
        return []
    table = spark.createDataFrame(pa.table({"k": pa.array(keys, pa.string())})).select(
        F.pmod(F.xxhash64("k"), F.lit(key_groups)).cast("int").alias("g")).toArrow()
    return table.column("g").to_pylist()


def tree(root: str) -> dict[str, str]:
    """Every file under ``root``: its sha256 (what a read must leave as it is)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def half_run(spark, tmp_path_factory):
    """The script's first 6 epochs run on 3 key groups; the checkpoint as they left it."""
    steps = script(7)
    ck = str(tmp_path_factory.mktemp("state") / "ck")
    make_flow(steps).run(ck, spark=spark, key_groups=3, max_epochs=6, progress=False)
    return steps, ck


def test_state_after_each_epoch_equals_the_oracle_of_the_input_admitted_so_far(spark, half_run):
    steps, ck = half_run
    done = steps_done(ck)
    assert len(done) >= 4, done
    for epoch, n in sorted(done.items()):
        check_epoch(spark, ck, steps, epoch, n, key_groups=3)
    last = max(done)
    # the default epoch is the last committed one; one key reads its key group only
    win = wire.read_state(ck, "win", spark=spark)
    assert window_state(win) == window_oracle(steps, done[last])
    only_a = wire.read_state(ck, "win", key="a", spark=spark)
    assert window_state(only_a) == [w for w in window_oracle(steps, done[last]) if w[0] == "a"]
    # the Spark DataFrame variant: the same rows, decoded on the executors
    for step, shape in (("win", window_state), ("j", join_state), ("dedupe", dedupe_state)):
        df = wire.read_state_spark(ck, step, spark=spark)
        assert shape(df.toArrow()) == shape(wire.read_state(ck, step, spark=spark)), step
    groups = wire.read_key_groups(ck, "win", spark=spark)
    assert groups.column("key_group").to_pylist() == [0, 1, 2]
    wm = steps[done[last] - 1][1]
    assert set(groups.column("input_watermark").to_pylist()) == {wm}
    assert int(win.schema.metadata[b"wire.input_watermark"]) == wm
    with pytest.raises(ConfigError, match="a keyed"):
        wire.read_state(ck, "input", spark=spark)
    with pytest.raises(CheckpointError, match="not a committed epoch"):
        wire.read_state(ck, "win", last + 5, spark=spark)


@pytest.mark.slow  # five reader processes, each starting its own Spark
def test_readers_killed_mid_read_change_nothing_and_the_cli_prints_the_state(spark, half_run, tmp_path):
    steps, ck0 = half_run
    ck = str(tmp_path / "ck")  # a copy no running JVM knows (this session's state maintenance stays out)
    subprocess.run(["cp", "-a", ck0, ck], check=True)
    before = tree(ck)
    env = {**os.environ, "COLUMNS": "250", "PYTHONPATH": os.pathsep.join(
        [str(Path(wire.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "wire.cli.main", "state", ck]
    killed = 0
    for delay in (3.0, 6.0, 9.0, 12.0):  # Spark starting, reading, decoding: killed somewhere in it
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # its own process group: the JVM dies with it
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait(timeout=30)
    assert killed >= 2
    assert tree(ck) == before
    # an uninterrupted read: the listing, then one step as CSV, equal to the oracle
    done = steps_done(ck)
    epoch = max(done)
    listing = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0, listing.stderr
    assert f"at epoch {epoch}" in listing.stdout
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in listing.stdout.splitlines() if line.count("│") > 5}
    win, join, dedupe = (f(steps, done[epoch]) for f in (window_oracle, join_oracle, dedupe_oracle))
    # kind, key groups, keys, open windows, entries
    keys, open_windows = len({w[0] for w in win}), sum(not w[-1] for w in win)
    used = len(set(key_groups_of(spark, sorted({w[0] for w in win}), 3)))
    assert lines["win"][:5] == ["window", str(used), str(keys), str(open_windows), str(len(win))]
    assert lines["j"][0] == "interval_join" and lines["j"][4] == str(len(join))
    assert lines["dedupe"][0] == "process" and lines["dedupe"][4] == str(len(dedupe))
    out = subprocess.run([*command, "win", "--key", "b", "--format", "csv"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    got = sorted((r["k"], int(r["window_start"]), int(r["window_end"]), int(r["n"]), int(r["s"]),
                  round(float(r["m"]), 9), r["fired"] == "True") for r in rows)
    assert got == [w for w in window_oracle(steps, done[epoch]) if w[0] == "b"]
    assert tree(ck) == before


@pytest.mark.slow
def test_state_after_a_rescale_equals_the_oracle(spark, half_run, tmp_path):
    steps, ck0 = half_run
    ck = str(tmp_path / "ck")
    subprocess.run(["cp", "-a", ck0, ck], check=True)
    first = steps_done(ck)
    make_flow(steps).run(ck, spark=spark, key_groups=5, progress=False)  # rescales 3 -> 5, runs to the end
    done = steps_done(ck)
    assert min(done) > max(first)  # the new generation's epochs continue the old ones' ids
    for epoch, n in sorted(done.items()):
        check_epoch(spark, ck, steps, epoch, n, key_groups=5)
    with pytest.raises(CheckpointError, match="before the rescale"):
        wire.read_state(ck, "win", max(first), spark=spark)


@pytest.mark.slow
def test_running_flow_state_by_key_while_it_runs(spark, tmp_path):
    steps = script(11, steps=16)
    ck = str(tmp_path / "ck")
    running = make_flow(steps).start(ck, spark=spark, key_groups=4, progress=False)
    seen = []
    try:
        while running.is_active():
            try:
                table = running.state("dedupe", "b")
            except CheckpointError:  # nothing committed yet
                time.sleep(0.2)
                continue
            seen.append((int(table.schema.metadata[b"wire.epoch"]), dedupe_state(table)))
    finally:
        running.await_termination()
    assert seen, "no read happened while the flow ran"
    done = steps_done(ck)
    for epoch, state in seen:
        assert state == [d for d in dedupe_oracle(steps, done[epoch]) if d[0] == "b"], epoch
    check_epoch(spark, ck, steps, max(done), done[max(done)], key_groups=4)
