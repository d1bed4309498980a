"""The README's first example runs as written (paths moved to a temporary directory).

Input: a few hand-made flights. Oracles: pandas for the hourly windows; by hand for the
burst alert (JFK has three departures more than 2 h late within 30 min, LGA two).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "README.md"
HOUR = 3_600_000


def example() -> str:
    return re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)


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


def test_the_readme_example_runs_and_its_outputs_are_right(spark, tmp_path):
    base = tmp_path / "flights"
    (base / "input").mkdir(parents=True)
    df = flights()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), base / "input" / "part-0.parquet")
    code = example().replace('"out/flights', f'"{base}')
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})

    hourly = read(base / "windows")
    epoch = pd.Timestamp(0, tz="UTC")
    starts = (pd.to_datetime(hourly["window_start"], utc=True) - epoch) // pd.Timedelta("1ms")
    got = sorted(zip(hourly["origin"], starts, hourly["departures"], strict=True))
    known = df[df.dep_delay.notna()]
    want = known.assign(ws=known.sched_dep_ms // HOUR * HOUR).groupby(["origin", "ws"]).size()
    assert [(o, int(ws), int(n)) for o, ws, n in got] == [(o, int(ws), int(n)) for (o, ws), n in want.items()]

    bursts = read(base / "delay_bursts")
    assert bursts[["origin", "event_time", "first_event_time"]].values.tolist() == [["JFK", 20 * 60_000, 0]]
