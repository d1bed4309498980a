"""Rescaling key groups on restart (issue 12): 4 key groups, stop, 16, stop, 8, to the end.

The outputs (window results, the window's late port, session results, dead letters) must
equal an uninterrupted run's (same epochs, same epoch ids: exactly-once Parquet sinks skip
an epoch id they already published, so a collision would lose rows) and a DuckDB oracle.
The result rows' ``watermark`` column (the key group's output watermark in force) depends on
how keys are grouped and is left out of the comparison with the uninterrupted run.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
import wire.runtime.rescale as rescale_module
from wire.runtime.checkpoint import epoch_base, list_epochs, open_checkpoint

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
SIZE, LATENESS, DELAY, GAP, PER_EPOCH = 100, 200, 20, 30, 12


def events() -> list[dict]:
    """~85 events of 12 keys in file order: on time, late within the allowed lateness, and
    definitely late (a window closed long ago whatever the epoch split, far from any session).
    Events of other keys are never behind the watermark: the sessions read only those."""
    rng = random.Random(12)
    rows: list[dict] = []
    for i in range(75):
        t = i * 9 + rng.randint(-DELAY, 0)
        rows.append({"t": t, "k": f"k{rng.randint(0, 11)}", "v": rng.randint(1, 9)})
        # The watermark in force when row i arrives is between i*9 - 175 (an epoch of 12
        # rows back, minus the delay and the jitter) and i*9 - 29.
        end = (i * 9 - 175) // SIZE * SIZE
        if i % 5 == 4 and end > i * 9 - 29 - LATENESS:  # into a fired window, never a purged one
            rows.append({"t": end - 1, "k": f"k{rng.randint(0, 11)}", "v": 100})
        if i % 31 == 30:  # long after its window was purged, and far from any live session
            rows.append({"t": i * 9 - 600, "k": "late", "v": 1000})
    return rows


def write_input(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in events()]
    lines.insert(40, '{"t": "not a time", "k": "k1", "v": 1}')  # a dead letter
    (d / "e.jsonl").write_text("\n".join(lines) + "\n")
    return d


def build(src: Path, out: Path) -> wire.Flow:
    flow = wire.Flow("rescale")
    s = flow.source(wire.sources.files(str(src), format="jsonl", schema=SCHEMA), event_time="t", key="k",
                    watermark=wire.BoundedOutOfOrderness(DELAY), max_events_per_epoch=PER_EPOCH)
    w = s.window(wire.Tumbling(SIZE), allowed_lateness=LATENESS).aggregate(
        n=wire.count(), total=wire.sum("v"), name="w")
    w.sink(wire.sinks.parquet(str(out / "w")), name="w_out")
    w.late().sink(wire.sinks.parquet(str(out / "late")), name="late_out")
    sessions = s.filter("v < 100").window(wire.Session(GAP)).aggregate(
        n=wire.count(), total=wire.sum("v"), name="sess")
    sessions.sink(wire.sinks.parquet(str(out / "sess")), name="sess_out")
    flow.dead_letters().sink(wire.sinks.parquet(str(out / "dead")), name="dead_out")
    return flow


def read(d: Path, drop: tuple[str, ...] = ()) -> list[tuple]:
    files = sorted(d.glob("**/*.parquet"))
    if not files:
        return []
    t = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    t = t.drop_columns([c for c in drop if c in t.column_names])
    return sorted(tuple(r.values()) for r in t.to_pylist())


def outputs(out: Path) -> dict[str, list[tuple]]:
    return {"w": read(out / "w", ("watermark",)), "sess": read(out / "sess", ("watermark",)),
            "late": read(out / "late"), "dead": read(out / "dead")}


def test_rescale_4_16_8_equals_uninterrupted_run_and_oracle(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(rescale_module, "GROUPS_PER_READ", 3)  # several bounded reads per operator
    src = write_input(tmp_path / "in")
    build(src, tmp_path / "ref").run(str(tmp_path / "ck_ref"), spark=spark, key_groups=4, progress=False)

    ck, out = tmp_path / "ck", tmp_path / "out"
    first = build(src, out).run(str(ck), spark=spark, key_groups=4, max_epochs=3, progress=False)
    assert first.stopped_early and first.epochs == 3
    second = build(src, out).run(str(ck), spark=spark, key_groups=16, max_epochs=3, progress=False)
    assert second.stopped_early and second.epochs == 3
    meta = json.loads((ck / "wire.json").read_text())
    assert meta["key_groups"] == 16 and meta["spark_dir"] == "spark-g1" and epoch_base(ck) == 3
    build(src, out).run(str(ck), spark=spark, key_groups=8, progress=False)
    meta = json.loads((ck / "wire.json").read_text())
    assert meta["key_groups"] == 8 and meta["spark_dir"] == "spark-g2" and epoch_base(ck) == 6
    assert not (ck / "spark").exists() and not (ck / "spark.seeds").exists()
    assert (ck / "spark-g1").exists()  # kept until the next open sees spark-g2 committed
    open_checkpoint(ck, flow_id="rescale", key_groups=8)
    assert not (ck / "spark-g1").exists() and not (ck / "spark-g1.seeds").exists()
    assert list_epochs(ck)[0].epoch == 6

    got, ref = outputs(out), outputs(tmp_path / "ref")
    for port in ("w", "sess", "late", "dead"):
        assert got[port] == ref[port], port
    assert len(got["dead"]) == 1 and got["late"]

    # the oracle: the last emission of each window / session = the batch aggregate of the
    # events not sent to the late port; the late port = the definitely-late events
    rows = pa.Table.from_pylist(events())
    late = pa.concat_tables([pq.read_table(f) for f in sorted((out / "late").glob("**/*.parquet"))])
    assert sorted(late.column("k").to_pylist()) == ["late"] * rows.filter(
        pa.compute.equal(rows.column("k"), "late")).num_rows
    con = duckdb.connect()
    con.register("ev", rows.filter(pa.compute.not_equal(rows.column("k"), "late")))
    windows = con.sql(f"""SELECT k, CAST(floor(t / {SIZE}) AS BIGINT) * {SIZE} AS ws, count(*) AS n,
                                 sum(v) AS total FROM ev GROUP BY ALL ORDER BY ALL""").fetchall()
    w = pa.concat_tables([pq.read_table(f) for f in sorted((out / "w").glob("**/*.parquet"))])
    last: dict[tuple, tuple] = {}
    for r in sorted(w.to_pylist(), key=lambda r: (r["epoch"], r["emit"] != "final")):
        last[(r["k"], round(r["window_start"].timestamp() * 1000))] = (r["n"], r["total"])
    assert sorted((k, ws, n, t) for (k, ws), (n, t) in last.items()) == windows
    assert "update" in w.column("emit").to_pylist()  # late events within the allowed lateness
    sessions = con.sql(f"""WITH x AS (SELECT k, t, v, CASE WHEN t - lag(t) OVER (PARTITION BY k ORDER BY t)
                                      < {GAP} THEN 0 ELSE 1 END AS new FROM ev WHERE v < 100),
                           y AS (SELECT *, sum(new) OVER (PARTITION BY k ORDER BY t) AS sid FROM x)
                           SELECT k, min(t), max(t) + {GAP}, count(*), sum(v) FROM y
                           GROUP BY k, sid ORDER BY ALL""").fetchall()
    s = pa.concat_tables([pq.read_table(f) for f in sorted((out / "sess").glob("**/*.parquet"))])
    got_sessions = sorted((r["k"], round(r["window_start"].timestamp() * 1000),
                           round(r["window_end"].timestamp() * 1000), r["n"], r["total"])
                          for r in s.to_pylist())
    assert got_sessions == sessions
