"""The file source inside a real Spark query: epochs, dead letters, watermarks, restarts."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from wire.connectors.files import SourceBinding, files, read_stream
from wire.runtime import envelope

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


def run_available_now(spark, binding, checkpoint):
    """Run the source until it has nothing more; return [(epoch id, arrow table)]."""
    epochs = []
    query = (
        read_stream(spark, binding)
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
    sides = {
        r["__port"]: envelope.decode_table(r["__blob"]).to_pylist()
        for r in rows
        if r["__kind"] == envelope.KIND_SIDE
    }
    return data, marks, sides


def offset_log(checkpoint, epoch):
    lines = (checkpoint / "offsets" / str(epoch)).read_text().splitlines()
    return json.loads(lines[-1])


def test_csv_stream_epochs_dead_letters_and_watermarks(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.csv").write_text(CSV)
    source = files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA)
    binding = SourceBinding("events", source, SCHEMA, "ts", 1000, 3, 2)
    epochs = run_available_now(spark, binding, tmp_path / "ck")

    assert [e for e, _ in epochs] == [0, 1, 2, 3]
    parts = [split(t) for _, t in epochs]
    # availableNow honours ReadMaxRows(3): 3 + 3 + 1 records, then the final epoch
    assert [[r["ts"] for r in data] for data, _, _ in parts] == [[1000, 2000], [9000, 12000, 3000], [], []]
    assert [r["__wm"] for r in parts[1][0]] == [1000] * 3  # the start watermark of epoch 1
    max_wm = envelope.MAX_WATERMARK
    assert [marks for _, marks, _ in parts] == [
        [(0, 1000), (1, 1000)],
        [(0, 11000), (1, 11000)],
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
    counts = [{m["name"]: m["value"] for m in sides.get(envelope.METRICS_PORT, [])} for _, _, sides in parts]
    assert counts == [
        {"records": 3, "events": 2, "malformed": 1},
        {"records": 3, "events": 3, "malformed": 0},
        {"records": 1, "events": 0, "malformed": 1},
        {},
    ]
    # every epoch's watermark is written ahead with its offsets
    logged = [offset_log(tmp_path / "ck", e)["watermark"] for e in range(4)]
    assert logged == [1000, 11000, 11000, max_wm]


def test_restart_resumes_from_the_offset_log_with_its_watermark(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("ts,user,amount\n5000,a,1\n4000,b,1\n")
    source = files(str(folder), format="csv", schema=SCHEMA, bounded=False)
    binding = SourceBinding("events", source, SCHEMA, "ts", 500, 10, 1)
    first = run_available_now(spark, binding, tmp_path / "ck")
    assert [(e, split(t)[1]) for e, t in first] == [(0, [(0, 4500)])]

    (folder / "b.csv").write_text("ts,user,amount\n4200,a,1\n7000,b,1\n")
    second = run_available_now(spark, binding, tmp_path / "ck")
    assert [e for e, _ in second] == [1]
    data, marks, _ = split(second[0][1])
    assert [(r["ts"], r["__wm"]) for r in data] == [(4200, 4500), (7000, 4500)]
    assert marks == [(0, 6500)]
    assert offset_log(tmp_path / "ck", 1)["file"].endswith("b.csv")
