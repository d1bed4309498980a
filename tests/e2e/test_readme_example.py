"""The README's example and the main job's flow (docs/operating.md) run as written; outputs checked.

README: the clicks of docs/data/clicks.csv, with a 10 s watermark delay and epochs of four
records; the windows, the late click and the dead letter are derived by hand (below).
Main job's flow: a few hand-made flights (paths moved to a temporary directory). Oracles:
pandas for the hourly windows; by hand for the burst alert (JFK has three departures more
than 2 h late within 30 min, LGA two).
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
OPERATING = ROOT / "docs" / "operating.md"
HOUR = 3_600_000


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M)


def example() -> str:
    """The main job's flow in docs/operating.md (the README's first example until issue 27)."""
    return next(b for b in python_blocks(OPERATING) if 'wire.Flow("flight-delays")' in b)


def at(hh_mm_ss: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hh_mm_ss}+00:00")


def test_the_readme_example_runs_and_its_outputs_are_right(spark, tmp_path):
    # absolute paths: the test session's JVM resolves relative ones against its own directory
    code = python_blocks(README)[0]
    code = code.replace('"docs/data/', f'"{ROOT}/docs/data/')
    code = code.replace('"out/clicks', f'"{tmp_path}/out/clicks')
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})

    windows = read(tmp_path / "out/clicks/per_minute")
    got = sorted((r.user, r.window_start.to_pydatetime(), r.clicks, r.emit) for r in windows.itertuples())
    # by hand from docs/data/clicks.csv: bob's 10:00:40 is late, the line with three fields malformed
    assert got == [("ann", at("10:00:00"), 2, "final"), ("ann", at("10:01:00"), 1, "final"),
                   ("ann", at("10:02:00"), 1, "final"), ("bob", at("10:00:00"), 1, "final"),
                   ("bob", at("10:01:00"), 1, "final")]
    assert set(windows.loc[windows.window_start == pd.Timestamp(at("10:00:00")), "epoch"]) == {0}

    late = read(tmp_path / "out/clicks/late")
    assert late[["user", "event_time", "epoch"]].values.tolist() == [
        ["bob", int(at("10:00:40").timestamp() * 1000), 1]]
    # the first epoch read up to 10:01:15: its watermark is 10:01:05
    assert late["watermark"].tolist() == [int(at("10:01:05").timestamp() * 1000)]

    dead = read(tmp_path / "out/clicks/dead_letters")
    assert [(r.step, os.path.basename(r.location), r.record) for r in dead.itertuples()] == [
        ("source_1", "clicks.csv:8", "2026-01-01T10:01:20Z,ann,oops")]


def flights() -> pd.DataFrame:
    rows = [  # (scheduled departure ms, origin, departure delay in minutes)
        (0, "JFK", 130.0), (10 * 60_000, "JFK", 150.0), (20 * 60_000, "JFK", 125.0),  # a burst
        (5 * 60_000, "LGA", 200.0), (50 * 60_000, "LGA", 180.0),  # two: no burst
        (30 * 60_000, "EWR", 3.0), (70 * 60_000, "EWR", None), (2 * HOUR, "JFK", 10.0),
        (3 * HOUR, "EWR", 1.0), (10 * HOUR, "LGA", 0.0),  # moves the watermark past every window
    ]
    return pd.DataFrame(rows, columns=["sched_dep_ms", "origin", "dep_delay"])


def read(path: Path) -> pd.DataFrame:
    files = sorted(path.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas() if files else pd.DataFrame()


def test_the_main_jobs_flow_runs_and_its_outputs_are_right(spark, tmp_path):
    base = tmp_path / "flights"
    (base / "input").mkdir(parents=True)
    df = flights()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), base / "input" / "part-0.parquet")
    code = example().replace('"out/flights', f'"{base}')
    exec(compile(code, "docs/operating.md", "exec"), {"__name__": "main_job_example"})

    hourly = read(base / "windows")
    epoch = pd.Timestamp(0, tz="UTC")
    starts = (pd.to_datetime(hourly["window_start"], utc=True) - epoch) // pd.Timedelta("1ms")
    got = sorted(zip(hourly["origin"], starts, hourly["departures"], strict=True))
    known = df[df.dep_delay.notna()]
    want = known.assign(ws=known.sched_dep_ms // HOUR * HOUR).groupby(["origin", "ws"]).size()
    assert [(o, int(ws), int(n)) for o, ws, n in got] == [(o, int(ws), int(n)) for (o, ws), n in want.items()]

    bursts = read(base / "delay_bursts")
    assert bursts[["origin", "event_time", "first_event_time"]].values.tolist() == [["JFK", 20 * 60_000, 0]]
