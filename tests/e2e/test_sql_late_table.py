"""A SQL query's late table holds exactly the events a pandas oracle finds late.

Hand-built scripts (wire.testing.TestStream: which events arrive in which epoch, and the
watermark in force while they do) with late events for a window and for a join. The
oracle applies the documented rules (SPEC §3) to the script in pandas:

* tumbling window of size S, allowed lateness L: an event is late iff
  ``floor(t / S) * S + S + L <= watermark``;
* interval join, allowed lateness L: an event is late iff ``t + L < watermark`` (each side).
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from tests.e2e.scripted import scripted

import wire
from wire.testing import MemorySink, TestStream

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
SIZE, LATENESS = 10_000, 5_000

# (events of the epoch, watermark after it); the watermark in force is the previous one
SCRIPT: list[tuple[list[dict], int | None]] = [
    ([{"t": 1_000, "k": "a", "v": 1}, {"t": 2_000, "k": "b", "v": 2}, {"t": 12_000, "k": "a", "v": 3}], None),
    ([], 15_000),
    ([{"t": 3_000, "k": "a", "v": 4}, {"t": 11_000, "k": "b", "v": 5}, {"t": 9_999, "k": "b", "v": 6},
      {"t": 10_000, "k": "a", "v": 7}], None),
    ([], 26_000),
    ([{"t": 19_000, "k": "a", "v": 8}, {"t": 21_000, "k": "a", "v": 9}, {"t": 20_000, "k": "b", "v": 10},
      {"t": 25_999, "k": "b", "v": 11}], None),
    ([], 40_000),
    ([{"t": 39_000, "k": "a", "v": 12}, {"t": 34_999, "k": "b", "v": 13}, {"t": 38_500, "k": "a", "v": 14}],
     None),
]


def script() -> tuple[TestStream, pd.DataFrame]:
    """The TestStream and the events with the watermark in force when each arrived (None: no watermark)."""
    return scripted(SCHEMA, SCRIPT)


WINDOW_SQL = """
SELECT k, COUNT(*) AS n, SUM(v) AS total, window_start, window_end, emit
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(t), INTERVAL '10' SECOND))
GROUP BY k, window_start, window_end"""


def test_window_late_table_equals_pandas_oracle(spark):
    ts, events = script()
    late_sink = MemorySink()

    def build(stream: wire.Stream) -> wire.Stream:
        result = wire.sql(stream.flow, WINDOW_SQL, allowed_lateness="5s", events=stream)
        result.late().sink(late_sink, name="sql_late")
        return result

    out = ts.run(build, spark=spark)
    # oracle: late iff the event's window closed (end + allowed lateness <= watermark in force)
    end = events.t // SIZE * SIZE + SIZE
    is_late = events.wm.notna() & (end + LATENESS <= events.wm.fillna(0))
    expected = events[is_late]
    assert 3 <= len(expected) < len(events)  # the script has late and on-time events
    got = pd.DataFrame(late_sink.rows())
    assert sorted(zip(got.k, got.v, got.event_time, got.watermark, strict=True)) == sorted(
        zip(expected.k, expected.v, expected.t, expected.wm.astype("int64"), strict=True))
    assert set(got.reason) == {"window closed: window_end + allowed_lateness <= watermark"}
    assert set(got.columns) >= {"t", "k", "v", "event_time", "watermark", "reason"}
    # the same rows as the Python API's late port (TestStream sinks every window's late port)
    assert sorted(map(str, (dict(r, epoch=None) for r in out["late"]))) == sorted(
        map(str, (dict(r, epoch=None) for r in late_sink.rows())))
    # and the windows: the last row per (k, window) aggregates exactly the accepted events
    accepted = events[~is_late].assign(ws=lambda f: f.t // SIZE * SIZE)
    oracle = accepted.groupby(["k", "ws"]).agg(n=("v", "size"), total=("v", "sum")).reset_index()
    main = pd.DataFrame(out["main"])
    main["ws"] = main.window_start.map(lambda ts_: int(pd.Timestamp(ts_).timestamp() * 1000))
    last = main.groupby(["k", "ws"]).tail(1).sort_values(["k", "ws"])
    assert list(zip(last.k, last.ws, last.n, last.total, strict=True)) == list(
        zip(oracle.k, oracle.ws, oracle.n, oracle.total, strict=True))
    assert "update" in set(main.emit)  # a late event within the allowed lateness updated its window


JOIN_SQL = """
SELECT a.k, a.v, b.v AS w, a.t
FROM events AS a JOIN events AS b
  ON a.k = b.k AND b.t BETWEEN a.t - INTERVAL '2' SECOND AND a.t + INTERVAL '2' SECOND
WHERE a.v < b.v"""


def test_join_late_table_equals_pandas_oracle(spark):
    ts, events = script()
    late_sink = MemorySink()

    def build(stream: wire.Stream) -> wire.Stream:
        result = wire.sql(stream.flow, JOIN_SQL, allowed_lateness="5s", events=stream)
        result.late().sink(late_sink, name="sql_late")
        return result

    out = ts.run(build, spark=spark)
    is_late = events.wm.notna() & (events.t + LATENESS < events.wm.fillna(0))
    expected = events[is_late]
    got = pd.DataFrame(late_sink.rows())
    # each late event is late on both sides of the self-join
    want = sorted((side, k, v, t, int(wm)) for side in ("left", "right")
                  for k, v, t, wm in zip(expected.k, expected.v, expected.t, expected.wm, strict=True))
    assert len(want) >= 6 and len(expected) < len(events)
    # as the Python API's join late port: a right event's columns are prefixed right_
    value = got.v.where(got.side == "left", got.right_v).astype("int64")
    assert sorted(zip(got.side, got.k, value, got.event_time, got.watermark, strict=True)) == want
    assert set(got.reason) == {"interval join: event_time + allowed_lateness < watermark"}
    # the joined rows: pairs of accepted events of one key within 2 s, a.v < b.v
    ok = events[~is_late]
    pairs = ok.merge(ok, on="k", suffixes=("_a", "_b"))
    pairs = pairs[(pairs.t_b - pairs.t_a).abs().le(2_000) & (pairs.v_a < pairs.v_b)]
    expected_rows = sorted(zip(pairs.k, pairs.v_a, pairs.v_b, pairs.t_a, strict=True))
    assert len(expected_rows) >= 2
    assert sorted((r["k"], r["v"], r["w"], r["t"]) for r in out["main"]) == expected_rows
