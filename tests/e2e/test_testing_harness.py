"""wire.testing.TestStream: scripted epochs on the real engine, transcripts derived by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


def rows(out, *cols):
    return [tuple(r[c] for c in cols) for r in out]


def ms(ts) -> int:
    return int(ts.timestamp() * 1000)


def test_tumbling_transcript(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events([{"t": 1, "k": "a", "v": 1}, {"t": 12, "k": "a", "v": 2},
                   {"t": 5, "k": "b", "v": 3}])                          # epoch 0
    ts.advance_watermark(10)                                              # epoch 1
    ts.add_events([{"t": 3, "k": "a", "v": 4}])                           # epoch 2: late, within
    ts.advance_watermark(25)                                              # epoch 3
    ts.add_events([{"t": 7, "k": "b", "v": 5}, {"t": 14, "k": "b", "v": 6}])  # epoch 4
    ts.advance_watermark_to_infinity()                                    # epoch 5
    out = ts.run(lambda s: s.window(wire.Tumbling(10), allowed_lateness=10)
                 .aggregate(n=wire.count(), total=wire.sum("v")), spark=spark)
    main = [(r["k"], ms(r["window_start"]), ms(r["window_end"]), r["n"], r["total"], r["emit"],
             r["epoch"]) for r in out["main"]]
    assert main == [
        # epoch 1: watermark 10 closes [0,10) for a and b
        ("a", 0, 10, 1, 1, "final", 1),
        ("b", 0, 10, 1, 3, "final", 1),
        # epoch 2: t=3 is late (< 10) but [0,10) is kept until 10 + 10 = 20: update
        ("a", 0, 10, 2, 5, "update", 2),
        # epoch 3: watermark 25 closes [10,20) for a; [0,10) purged (20 <= 25)
        ("a", 10, 20, 1, 2, "final", 3),
        # epoch 4: t=14 for b: [10,20) end 20 + 10 > 25 -> accepted, first emission is late
        ("b", 10, 20, 1, 6, "update", 4),
    ]
    # epoch 4: t=7 for b: [0,10) ended at 10, 10 + 10 <= 25: late port
    assert rows(out["late"], "t", "k", "event_time", "watermark", "epoch") == [(7, "b", 7, 25, 4)]
    assert out["dead_letter"] == []
    # the memory sinks are driver sinks: exactly their rows reached the driver, per epoch
    assert out.summary.driver_rows == [0, 2, 1, 1, 2, 0]


def test_stateless_operators(spark):
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t", key="k")
    ts.add_events([{"t": 1, "k": "a", "v": 1}, {"t": 2, "k": "b", "v": None},
                   {"t": 3, "k": "c", "v": 5}])
    out = ts.run(lambda s: s.filter("v > 0").map(w="v * 10").select("k", "w"), spark=spark)
    assert rows(out["main"], "k", "w", "epoch") == [("a", 10, 0), ("c", 50, 0)]


def test_watermark_must_not_go_back():
    ts = wire.testing.TestStream(schema=SCHEMA, event_time="t")
    ts.advance_watermark(10)
    with pytest.raises(wire.ConfigError, match="watermark"):
        ts.advance_watermark(5)
