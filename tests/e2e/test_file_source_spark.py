"""The file source inside a real Spark query: epochs, dead letters, watermarks, restarts."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy
from wire.sources.base.source import ReadRequest
from wire.sources.file_source.source import files

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])

CSV = """ts,user,amount
1000,a,1.5
2000,b,2.0
oops,a,3.0
9000,a,4.0
12000,a,1.0
3000,b,5.0
1500,a,2.5,extra
"""


def run_available_now(spark, source, request, checkpoint):
    """Run the source until it has nothing more; return [(epoch id, arrow table)]."""
    epochs = []
    query = (
        source.read_stream(spark, request)
        .writeStream.foreachBatch(lambda df, epoch: epochs.append((epoch, df.toArrow())))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return epochs


def split(table):
    rows = table.to_pylist()
    data = [r for r in rows if r["__kind"] == envelope.KIND_DATA]
    marks = sorted((r["__kg"], r["__wm"]) for r in rows if r["__kind"] == envelope.KIND_WATERMARK)
    sides: dict[str, list[dict]] = {}
    for r in rows:
        if r["__kind"] == envelope.KIND_SIDE:
            sides.setdefault(r["__port"], []).extend(envelope.decode_table(r["__blob"]).to_pylist())
    return data, marks, sides


def offset_log(checkpoint, epoch):
    lines = (checkpoint / "offsets" / str(epoch)).read_text().splitlines()
    return json.loads(lines[-1])


def test_csv_stream_epochs_dead_letters_and_watermarks(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.csv").write_text(CSV)
    source = files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA)
    request = ReadRequest("events", SCHEMA, "ts", key_groups=2, watermark=WatermarkPolicy(1000),
                          max_events_per_epoch=3)
    epochs = run_available_now(spark, source, request, tmp_path / "ck")

    assert [e for e, _ in epochs] == [0, 1, 2]
    parts = [split(t) for _, t in epochs]
    # availableNow honours ReadMaxRows(3): 3 + 3 + 1 records; the last epoch ends the input
    assert [[r["ts"] for r in data] for data, _, _ in parts] == [[1000, 2000], [9000, 12000, 3000], []]
    assert [r["__wm"] for r in parts[1][0]] == [1000] * 3  # the start watermark of epoch 1
    max_wm = envelope.MAX_WATERMARK
    assert [marks for _, marks, _ in parts] == [
        [(0, 1000), (1, 1000)],
        [(0, 11000), (1, 11000)],
        [(0, max_wm), (1, max_wm)],
    ]
    csv_path = str(tmp_path / "in" / "events.csv")
    dead = [parts[0][2]["events.dead_letter"], parts[2][2]["events.dead_letter"]]
    assert dead == [
        [
            {
                "step": "events",
                "location": f"{csv_path}:4",
                "reason": "csv: column ts: cannot parse 'oops' as int64",
                "record": "oops,a,3.0",
            }
        ],
        [
            {
                "step": "events",
                "location": f"{csv_path}:8",
                "reason": "csv: expected 3 columns, got 4",
                "record": "1500,a,2.5,extra",
            }
        ],
    ]
    metric_rows = [sides.get(envelope.METRICS_PORT, []) for _, _, sides in parts]
    counts = [
        {m["name"]: m["value"] for m in rows if not m["name"].startswith("gauge:")} for rows in metric_rows
    ]
    assert counts == [
        {"records": 3, "events": 2, "malformed": 1},
        {"records": 3, "events": 3, "malformed": 0},
        {"records": 1, "events": 0, "malformed": 1},
    ]
    # every epoch's watermark is written ahead with its offsets
    logged = [offset_log(tmp_path / "ck", e) for e in range(3)]
    assert [o["watermark"] for o in logged] == [1000, 11000, max_wm]
    assert [o["ended"] for o in logged] == [False, False, True]


def test_restart_resumes_from_the_offset_log_with_its_watermark(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("ts,user,amount\n5000,a,1\n4000,b,1\n")
    source = files(str(folder), format="csv", schema=SCHEMA, bounded=False)
    request = ReadRequest("events", SCHEMA, "ts", key_groups=1, watermark=WatermarkPolicy(500),
                          max_events_per_epoch=10)
    first = run_available_now(spark, source, request, tmp_path / "ck")
    assert [(e, split(t)[1]) for e, t in first] == [(0, [(0, 4500)])]

    (folder / "b.csv").write_text("ts,user,amount\n4200,a,1\n7000,b,1\n")
    second = run_available_now(spark, source, request, tmp_path / "ck")
    assert [e for e, _ in second] == [1]
    data, marks, _ = split(second[0][1])
    assert [(r["ts"], r["__wm"]) for r in data] == [(4200, 4500), (7000, 4500)]
    assert marks == [(0, 6500)]
    assert offset_log(tmp_path / "ck", 1)["partitions"]["all"]["next"]["file"].endswith("b.csv")
    assert [r["__seq"] for r in data] == [2, 3]


def rows_key(row):
    return (row["__kind"], row["__seq"] or -1, row["__kg"] or -1, row["__port"] or "")


def test_partitioned_directories_watermark_is_the_minimum_and_replays_from_the_log(spark, tmp_path):
    base = tmp_path / "in"
    (base / "p0").mkdir(parents=True)
    (base / "p1").mkdir()
    # p0 runs ahead in event time (10 s steps), p1 lags (1 s steps)
    (base / "p0" / "a.csv").write_text("ts,user,amount\n10000,a,1\n20000,a,1\n30000,a,1\n40000,a,1\n")
    (base / "p1" / "b.csv").write_text("ts,user,amount\n1000,b,1\n2000,b,1\n3000,b,1\n4000,b,1\n")
    source = files(str(base), format="csv", schema=SCHEMA, bounded=False, partition_by="directory")
    request = ReadRequest("events", SCHEMA, "ts", key_groups=2, watermark=WatermarkPolicy(0),
                          max_events_per_epoch=4)
    ck = tmp_path / "ck"
    first = run_available_now(spark, source, request, ck)
    assert [e for e, _ in first] == [0, 1]
    logged = [offset_log(ck, e) for e in range(2)]
    per_partition = [{n: p["watermark"] for n, p in o["partitions"].items()} for o in logged]
    assert per_partition == [{"p0": 20000, "p1": 2000}, {"p0": 40000, "p1": 4000}]
    assert [o["watermark"] for o in logged] == [min(p.values()) for p in per_partition] == [2000, 4000]
    parts = [split(t) for _, t in first]
    assert [sorted(r["ts"] for r in data) for data, _, _ in parts] == [
        [1000, 2000, 10000, 20000],
        [3000, 4000, 30000, 40000],
    ]
    assert {r["__wm"] for r in parts[1][0]} == {2000}  # the start watermark, in both tasks
    assert all(r["ts"] >= r["__wm"] for data, _, _ in parts for r in data)  # nothing late
    assert [marks for _, marks, _ in parts] == [[(0, 2000), (1, 2000)], [(0, 4000), (1, 4000)]]
    gauges: dict[str, int] = {}
    for m in parts[1][2][envelope.METRICS_PORT]:  # counters add up over the epoch's two tasks
        gauges[m["name"]] = m["value"] + (0 if m["name"].startswith("gauge:") else gauges.get(m["name"], 0))
    assert gauges == {
        "records": 4,
        "events": 4,
        "malformed": 0,
        "gauge:watermark": 4000,
        "gauge:watermark:p0": 40000,
        "gauge:watermark:p1": 4000,
        "gauge:max_event_time": 40000,
    }
    assert sorted(r["__seq"] for r in parts[1][0]) == [4, 5, 6, 7]

    # epoch 1 did not commit: the restart replays it from offsets/1 without re-planning it
    for name in ("1", ".1.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    offsets_1 = (ck / "offsets" / "1").read_text()
    # a new partition: had epoch 1 been planned again, p2 would take a share of its budget
    (base / "p2").mkdir()
    (base / "p2" / "c.csv").write_text("ts,user,amount\n5000,c,1\n")
    second = run_available_now(spark, source, request, ck)
    assert [e for e, _ in second] == [1, 2]
    assert (ck / "offsets" / "1").read_text() == offsets_1
    assert sorted(second[0][1].to_pylist(), key=rows_key) == sorted(first[1][1].to_pylist(), key=rows_key)
    assert [r["ts"] for r in split(second[1][1])[0]] == [5000]
    last = offset_log(ck, 2)
    assert {n: p["watermark"] for n, p in last["partitions"].items()} == {"p0": 40000, "p1": 4000, "p2": 5000}
    assert last["watermark"] == 4000
