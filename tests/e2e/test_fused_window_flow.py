"""Windows fused with their file source (``wire.compiler.fusion``) against unfused runs and pandas.

For random events (keys, values with nulls, disorder), a malformed record, random epoch
splits (``max_events_per_epoch``), watermark delays, window kinds and filters, the same
flow runs twice: fused, and with ``spark.wire.fusion.enabled=false`` (every window as two
Spark stages). Results, late events and dead letters must be equal, row for row. When the
delay covers the input's disorder nothing can be late, and tumbling and sliding results
must also equal pandas' group-by over the filtered events (an oracle that knows nothing of
epochs).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire
from wire.runtime.query_conf import FUSION
from wire.testing import MemorySink

pytestmark = pytest.mark.spark

FILTERS = {  # the flow's filter, and the same rule for pandas
    "v > 0": lambda d: d[d.v > 0],
    "v IS NOT NULL AND k != 'b'": lambda d: d[d.v.notna() & (d.k != "b")],
    "k IN ('a', 'c') OR v < 0.5": lambda d: d[d.k.isin(["a", "c"]) | (d.v < 0.5)],
}
WINDOWS = {"tumbling": wire.Tumbling(20), "sliding": wire.Sliding(30, 10), "session": wire.Session(15)}

event = st.tuples(st.integers(0, 300), st.sampled_from("abc"), st.none() | st.floats(-2, 2, allow_nan=False))


@contextlib.contextmanager
def fusion(spark, enabled: bool):
    spark.conf.set(FUSION, str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.unset(FUSION)


def ms(ts) -> int:
    return round(ts.timestamp() * 1000)


def run(spark, path, files, *, window, predicate, delay, epoch):
    data = path / "in"
    data.mkdir(parents=True)
    for i, text in enumerate(files):
        (data / f"part-{i:02d}.csv").write_text(text)
    flow = wire.Flow("fused")
    schema = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64())])
    events = flow.source(wire.sources.files(str(data / "*.csv"), format="csv", schema=schema), event_time="t",
                         key="k", watermark=wire.BoundedOutOfOrderness(delay), max_events_per_epoch=epoch,
                         name="events")
    win = events.filter(predicate).window(WINDOWS[window]).aggregate(
        name="win", c=wire.count(), s=wire.sum("v"), m=wire.max("v"))
    out, late, dead = MemorySink(), MemorySink(), MemorySink()
    win.sink(out, name="out")
    win.late().sink(late, name="late")
    flow.dead_letters().sink(dead, name="dead")
    summary = flow.run(checkpoint=str(path / "ck"), spark=spark, key_groups=3, progress=False)
    rows = sorted(((r["k"], ms(r["window_start"]), ms(r["window_end"]), r["c"], r["s"], r["m"], r["emit"])
                   for r in out.rows()), key=repr)  # repr: sums and maxima of null values are None
    late_rows = sorted(((r["t"], r["k"], r["v"]) for r in late.rows()), key=repr)
    dead_rows = sorted(str(r["record"]) for r in dead.rows())
    return rows, late_rows, dead_rows, summary.input_events


def oracle(events: list[tuple], window: str, predicate: str) -> list[tuple]:
    d = FILTERS[predicate](pd.DataFrame(events, columns=["t", "k", "v"]))
    size, slide = (20, 20) if window == "tumbling" else (30, 10)
    rows = []
    for _, e in d.iterrows():
        start = e.t - e.t % slide
        while start > e.t - size:
            rows.append((e.k, start, start + size, e.v))
            start -= slide
    g = pd.DataFrame(rows, columns=["k", "start", "end", "v"]).groupby(["k", "start", "end"])["v"]
    agg = g.agg(["size", "sum", "max", "count"]).reset_index()
    def nullable(r, column):
        return None if r["count"] == 0 else float(r[column])  # every value null: null, as SQL's SUM

    return sorted(((r["k"], int(r["start"]), int(r["end"]), int(r["size"]), nullable(r, "sum"),
                    nullable(r, "max"), "final") for _, r in agg.iterrows()), key=repr)


def same_value(p, q) -> bool:
    return (p is None and q is None) or (p is not None and q is not None and math.isclose(p, q, abs_tol=1e-9))


def close(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        x[:4] == y[:4] and x[6] == y[6] and same_value(x[4], y[4]) and same_value(x[5], y[5])
        for x, y in zip(a, b, strict=True))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, min_size=1, max_size=30), cuts=st.lists(st.integers(1, 29), max_size=3),
       window=st.sampled_from(sorted(WINDOWS)), predicate=st.sampled_from(sorted(FILTERS)),
       delay=st.sampled_from([0, 40, 400]), epoch=st.integers(2, 12), bad_file=st.integers(0, 3))
def test_fused_equals_unfused_and_pandas(spark, tmp_path_factory, events, cuts, window, predicate, delay,
                                         epoch, bad_file):
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    files = ["t,k,v\n" + "".join(f"{t},{k},{'' if v is None else repr(v)}\n" for t, k, v in events[lo:hi])
             for lo, hi in itertools.pairwise(bounds)]
    files[bad_file % len(files)] += "oops,a,1\n"  # a malformed record: a dead letter, and the flow goes on
    path = tmp_path_factory.mktemp("fused")
    settings_ = {"window": window, "predicate": predicate, "delay": delay, "epoch": epoch}
    with fusion(spark, True):
        fused = run(spark, path / "fused", files, **settings_)
    with fusion(spark, False):
        plain = run(spark, path / "plain", files, **settings_)
    assert fused == plain
    rows, late, dead, input_events = fused
    assert dead == ["oops,a,1"] and input_events == len(events)
    if delay == 400:  # delay > the input's disorder: nothing is late, whatever the epochs
        assert late == []
        if window != "session":
            assert close(rows, oracle(events, window, predicate))


MAPPED = {"n2": "n * 2 - 1", "n3": "CASE WHEN n = 1 THEN 10 ELSE n END"}
"""The computed keys (``map n2`` / ``map n3``), each computed in the source's task when fused."""


@pytest.mark.parametrize("key", [None, "n", "key_by n", "map n2", "map n3"])
def test_unkeyed_and_integer_keyed_windows_fused(spark, tmp_path, key):
    """The key groups of an integer key (Spark's hashInt/hashLong in numpy) and of an unkeyed
    stream (the constant key 0) put every key's windows in one state: fused equals unfused,
    and both equal pandas; also when the key comes from a ``key_by`` after the filter."""
    key_by = key is not None and key.startswith(("key_by ", "map "))
    mapped = key is not None and key.startswith("map ")  # a computed key (MAPPED), in the source's task
    key = key.split(" ")[-1] if key else None
    text = "t,n,v\n" + "".join(f"{t},{n},{v}\n" for t, n, v in [
        (5, 1, 1.0), (12, 2, 2.0), (7, 1, 3.0), (31, 3, 4.0), (25, 2, 0.5), (44, 1, 1.5), (18, 3, 2.5)])
    schema = pa.schema([("t", pa.int64()), ("n", pa.int64()), ("v", pa.float64())])

    def run_once(path):
        (path / "in").mkdir(parents=True)
        (path / "in" / "a.csv").write_text(text + "x,1,1\n")
        flow = wire.Flow("fused-keys")
        events = flow.source(wire.sources.files(str(path / "in" / "*.csv"), format="csv", schema=schema),
                             event_time="t", key=None if key_by else key,
                             watermark=wire.BoundedOutOfOrderness(400), max_events_per_epoch=3, name="events")
        out = MemorySink()
        kept = events.filter("v > 0.7")
        kept = kept.map(**{key: MAPPED[key]}) if mapped and key else kept
        win = (kept.key_by(key) if key_by else kept).window(wire.Tumbling(20))
        win.aggregate(name="win", c=wire.count(), s=wire.sum("v")).sink(out, name="out")
        flow.run(checkpoint=str(path / "ck"), spark=spark, key_groups=4, progress=False)
        return sorted((r.get(key or "n"), ms(r["window_start"]), r["c"], r["s"]) for r in out.rows())

    with fusion(spark, True):
        fused = run_once(tmp_path / "fused")
    with fusion(spark, False):
        plain = run_once(tmp_path / "plain")
    assert fused == plain
    d = pd.read_csv(io.StringIO(text))
    d = d[d.v > 0.7].assign(start=lambda x: x.t - x.t % 20, n2=lambda x: x.n * 2 - 1,
                            n3=lambda x: x.n.where(x.n != 1, 10))
    by = [key, "start"] if key else ["start"]
    want = sorted((int(r[key]) if key else None, int(r["start"]), int(r["c"]), float(r["s"]))
                  for _, r in d.groupby(by).v.agg(c="size", s="sum").reset_index().iterrows())
    assert fused == want
