"""The window pre-stage (``PreStage``): whatever the batch split, its partials and late rows
equal a pandas oracle over the events (tumbling and sliding windows, late events by the
watermark each batch carries)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.compiler import window_stage as WS
from wire.core.envelope import (
    BLOB,
    ENVELOPE_ARROW,
    ET,
    KG,
    KIND,
    KIND_DATA,
    PORT,
    SEQ,
    WM,
    decode_table,
)
from wire.state import aggregations as agg
from wire.state import windows as W
from wire.state.assigners import Sliding, Tumbling
from wire.state.spec import WindowSpec

HOUR = 3_600_000
KEYS = ["a", "b", "c", "d", "e"]
KEY_GROUPS = 3
PAYLOAD = pa.schema([pa.field("k", pa.string()), pa.field("v", pa.float64())])
AGGS = (("n", agg.count()), ("total", agg.sum("v")), ("top", agg.max("v")))


def stage_for(assigner: Tumbling | Sliding, lateness: int) -> WS.WindowStage:
    spec = WindowSpec(assigner, lateness, "k", AGGS)
    with_times = pa.schema([*PAYLOAD, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])
    return WS.WindowStage(
        step="win", spec=spec, payload=PAYLOAD, out=ENVELOPE_ARROW, channels=("events",),
        key_groups=KEY_GROUPS, preaggregate=True, partial=W.partial_schema(spec, with_times),
        inputs=with_times,
    )


def batch_of(frame: pd.DataFrame, watermark: int | None) -> pa.RecordBatch:
    """Envelope rows of the events in ``frame`` (columns k, v, et, seq), as a source sends them."""
    n = len(frame)
    kg = [KEYS.index(k) % KEY_GROUPS for k in frame["k"]]
    cols = {
        "k": pa.array(frame["k"], pa.string()), "v": pa.array(frame["v"], pa.float64()),
        KIND: pa.array([KIND_DATA] * n, pa.int32()), ET: pa.array(frame["et"], pa.int64()),
        WM: pa.array([watermark] * n, pa.int64()), KG: pa.array(kg, pa.int32()),
        PORT: pa.nulls(n, pa.string()), BLOB: pa.nulls(n, pa.binary()),
        SEQ: pa.array(frame["seq"], pa.int64()),
    }
    schema = pa.schema([*PAYLOAD, *ENVELOPE_ARROW])
    return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


def windows_of(et: int, size: int, slide: int) -> list[int]:
    """Window starts containing ``et`` (hand rule: start = k·slide, start <= et < start + size)."""
    last = et - et % slide
    return [s for s in range(last - size + slide, last + 1, slide) if s <= et < s + size]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 300),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    sliding=st.booleans(),
    lateness=st.sampled_from([0, HOUR]),
    seed=st.integers(0, 2**31),
    threshold=st.sampled_from([1, 50, 1 << 20]),
)
def test_partials_and_late_rows_match_pandas(n, cuts, sliding, lateness, seed, threshold):
    """For any batch split and pre-aggregation threshold: every on-time (event, window) pair
    lands in exactly one partial of its key's key group, and the merged partials equal
    pandas' count/sum/max per (key, window); an event all of whose windows had closed under
    its batch's watermark (window end + allowed lateness <= watermark) is a late row."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WS, "PREAGGREGATE_ROWS", threshold)
        check_split(n, cuts, sliding, lateness, seed)


def check_split(n: int, cuts: list[int], sliding: bool, lateness: int, seed: int) -> None:
    size, slide = (2 * HOUR, HOUR) if sliding else (HOUR, HOUR)
    assigner = Sliding(size, slide) if sliding else Tumbling(size)
    rng = np.random.default_rng(seed)
    events = pd.DataFrame({
        "k": rng.choice(KEYS, n), "v": rng.integers(0, 100, n).astype(float),
        "et": rng.integers(0, 12 * HOUR, n), "seq": np.arange(n),
    })
    bounds = sorted({0, n, *[c for c in cuts if c < n]})
    marks = sorted(rng.integers(-1, 8 * HOUR, len(bounds) - 1).tolist())
    batches, truth = [], []
    for (lo, hi), wm in zip(itertools.pairwise(bounds), marks, strict=True):
        watermark = None if wm < 0 else wm
        batches.append(batch_of(events.iloc[lo:hi], watermark))
        for row in events.iloc[lo:hi].itertuples():
            starts = windows_of(row.et, size, slide)
            live = [s for s in starts if watermark is None or s + size + lateness > watermark]
            truth.append((row, live))

    out = list(WS.PreStage(stage_for(assigner, lateness))(iter(batches)))
    rows = pa.Table.from_batches(out)
    data = rows.filter(pc.equal(rows.column(KIND), KIND_DATA))
    partials, late = [], []
    for port, kg, blob in zip(data.column(PORT).to_pylist(), data.column(KG).to_pylist(),
                              data.column(BLOB).to_pylist(), strict=True):
        table = decode_table(blob)
        if port == WS.PARTIALS:
            assert {KEYS.index(k) % KEY_GROUPS for k in table.column("k").to_pylist()} <= {kg}
            partials.append(table)
    side = rows.filter(pc.equal(rows.column(PORT), "win.late"))
    late = [decode_table(b) for b in side.column(BLOB).to_pylist()]

    expected = pd.DataFrame(
        [(row.k, s, row.v) for row, live in truth for s in live], columns=["k", "ws", "v"])
    agg_expected = (expected.groupby(["k", "ws"]).agg(n=("v", "size"), total=("v", "sum"),
                                                      top=("v", "max")).reset_index())
    if partials:
        merged = W.compact(partials, stage_for(assigner, lateness).spec).to_pandas()
        got = pd.DataFrame({
            "k": merged["k"], "ws": merged["__ws"],
            "n": merged["n__count"], "total": merged["total__sum"], "top": merged["top__max"],
        })
    else:
        got = pd.DataFrame(columns=["k", "ws", "n", "total", "top"])
    key = ["k", "ws"]
    got = got.sort_values(key).reset_index(drop=True)
    agg_expected = agg_expected.sort_values(key).reset_index(drop=True)
    assert got[key].values.tolist() == agg_expected[key].values.tolist()
    assert got["n"].tolist() == agg_expected["n"].tolist()
    assert got["total"].tolist() == pytest.approx(agg_expected["total"].tolist())
    assert got["top"].tolist() == agg_expected["top"].tolist()
    late_rows = sorted((r["k"], r["event_time"], r["v"]) for t in late for r in t.to_pylist())
    assert late_rows == sorted((row.k, row.et, row.v) for row, live in truth if not live)
