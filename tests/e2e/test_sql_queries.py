"""wire.sql queries against pandas oracles: UNION ALL into a window TVF, HOP, HAVING, MAX_BY, JSON keys.

Hand-built TestStream input with no late event (each epoch's events are after the
watermark plus the window size), so every window's one ``final`` row must equal the
oracle's group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import wire
from wire.testing import TestStream

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


def events() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    n = 160
    t = np.sort(rng.integers(0, 60_000, n))
    return pd.DataFrame({"t": t, "k": rng.choice(["a", "b", "c"], n),
                         "v": rng.permutation(np.arange(1, n + 1))})  # distinct values: no MAX_BY ties


def run(query: str, spark, frame: pd.DataFrame) -> pd.DataFrame:
    ts = TestStream(schema=SCHEMA, event_time="t")
    first, second = frame[frame.t < 30_000], frame[frame.t >= 30_000]
    ts.add_events(first.to_dict("records"))
    ts.advance_watermark(20_000)  # < 30,000 - 10,000: no event of the second epoch is late
    ts.add_events(second.to_dict("records"))
    ts.advance_watermark_to_infinity()
    out = ts.run(lambda s: wire.sql(s.flow, query, events=s), spark=spark)
    assert out["late"] == []
    rows = pd.DataFrame(out["main"])
    for c in ("window_start", "window_end"):
        if c in rows:
            rows[c] = rows[c].map(lambda x: int(pd.Timestamp(x).timestamp() * 1000))
    return rows.drop(columns=["epoch"])


def hop(frame: pd.DataFrame, size: int, slide: int) -> pd.DataFrame:
    """One row per (event, sliding window containing it): window_start, window_end."""
    parts = []
    for back in range(0, size, slide):
        ws = frame.t // slide * slide - back
        parts.append(frame.assign(window_start=ws, window_end=ws + size))
    return pd.concat(parts)


def test_union_all_into_hop_with_having_and_max_by(spark):
    frame = events()
    query = """
        SELECT k, COUNT(*) AS n, SUM(v) AS total, MAX_BY(t, v) AS t_of_max, MIN(v) AS least,
               window_start, window_end
        FROM TABLE(HOP(TABLE (
                SELECT k, v, t FROM events WHERE v > 40
                UNION ALL
                SELECT k, v * 1000 AS v, t FROM events WHERE v <= 40),
             DESCRIPTOR(t), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
        GROUP BY k, window_start, window_end
        HAVING COUNT(*) >= 3"""
    got = run(query, spark, frame)
    union = pd.concat([frame[frame.v > 40], frame[frame.v <= 40].assign(v=lambda f: f.v * 1000)])
    w = hop(union, 10_000, 5_000)
    g = w.sort_values("v").groupby(["k", "window_start", "window_end"])
    oracle = pd.DataFrame({"n": g.size(), "total": g.v.sum(), "t_of_max": g.t.last(), "least": g.v.min()})
    oracle = oracle[oracle.n >= 3].reset_index()
    cols = ["k", "window_start", "window_end", "n", "total", "t_of_max", "least"]
    assert len(oracle) > 10
    assert (got[cols].sort_values(cols).values.tolist() == oracle[cols].sort_values(cols).values.tolist())
    assert list(got.columns) == ["k", "n", "total", "t_of_max", "least", "window_start", "window_end"]


def test_group_by_two_columns_and_a_computed_one(spark):
    frame = events()
    query = """
        SELECT k, parity, COUNT(*) AS n, AVG(v) AS mean_v, window_start
        FROM TABLE(TUMBLE(TABLE (SELECT k, v % 2 AS parity, v, t FROM events),
                          DESCRIPTOR(t), INTERVAL '20' SECOND))
        GROUP BY k, parity, window_start, window_end"""
    got = run(query, spark, frame)
    f = frame.assign(parity=frame.v % 2, window_start=frame.t // 20_000 * 20_000)
    g = f.groupby(["k", "parity", "window_start"])
    oracle = pd.DataFrame({"n": g.size(), "mean_v": g.v.mean()}).reset_index()
    cols = ["k", "parity", "window_start", "n"]
    merged = got.merge(oracle, on=cols, how="outer", suffixes=("", "_oracle"), indicator=True)
    assert (merged._merge == "both").all(), merged[merged._merge != "both"]
    assert np.allclose(merged.mean_v, merged.mean_v_oracle)
    assert len(got) == len(oracle) > 6


def test_with_and_select_distinct_over_a_window(spark):
    """CTEs (one with a column list, one reading the other), DISTINCT over a tumbling window."""
    frame = events().assign(v=lambda f: f.v % 7)  # few values: many duplicates per window
    query = """
        WITH small(key, value, ts) AS (SELECT k, v, t FROM events WHERE v < 5),
             per_window AS (
                SELECT DISTINCT key, value, window_start, window_end
                FROM TABLE(TUMBLE(TABLE small, DESCRIPTOR(ts), INTERVAL '10' SECOND)))
        SELECT key, value, window_start, window_end FROM per_window WHERE value > 0"""
    got = run(query, spark, frame)
    f = frame[(frame.v < 5) & (frame.v > 0)].assign(window_start=lambda x: x.t // 10_000 * 10_000)
    oracle = f[["k", "v", "window_start"]].drop_duplicates()
    oracle = oracle.assign(window_end=oracle.window_start + 10_000)
    oracle.columns = ["key", "value", "window_start", "window_end"]
    cols = list(oracle.columns)
    assert list(got.columns) == cols
    assert len(oracle) > 20 and len(oracle) < len(f)  # duplicates were removed
    assert sorted(got[cols].values.tolist()) == sorted(oracle[cols].values.tolist())
