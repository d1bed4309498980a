"""Sources told to produce a subset of their columns (column pruning), driven without Spark."""

from __future__ import annotations

import json
import socket

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

import wire.sources.file_source.formats as file_readers
from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError
from wire.examples.nexmark_source import SCHEMA, NexmarkStreamReader, _Config, generate, nexmark
from wire.sources.base.source import ReadRequest, check_columns, select_columns
from wire.sources.file_source.formats import ParseSpec, parse_file
from wire.sources.file_source.source import (
    FileSource,
    SourceBinding,
    WireFileDataSource,
    WireFileStreamReader,
    files,
)
from wire.sources.http_source.config import IngestBinding
from wire.sources.http_source.reader import HttpIngestReader
from wire.sources.http_source.source import HttpIngestSource, http_ingest
from wire.sources.redis_source.source import RedisBinding, RedisStreamSource, redis_stream
from wire.testing.test_stream import TestStreamReader, TestStreamSource, _Script

PAYLOAD = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.float64()),
                     ("code", pa.int64())])
CSV = """ts,user,amount,code
1000,a,1.5,1
2000,b,2.0,two
3000,a,x,3
oops,b,1.0,4
5000,a,2.5,5,extra
6000,b,3.5,6
"""


def rows_of(batches: list[pa.RecordBatch]) -> tuple[pa.Table, dict[str, list[dict]]]:
    table = pa.Table.from_batches(batches)
    data = table.filter(pa.compute.equal(table[envelope.KIND], envelope.KIND_DATA))
    sides = {}
    for port, blob in zip(table[envelope.PORT].to_pylist(), table[envelope.BLOB].to_pylist(), strict=True):
        if blob is not None:
            sides[port] = envelope.decode_table(blob).to_pylist()
    return data, sides


# ------------------------------------------------------------------------------------ base


def test_check_and_select_columns():
    assert check_columns("s", PAYLOAD, None) is None
    assert check_columns("s", PAYLOAD, ["amount", "ts"]) == ("amount", "ts")
    assert select_columns(PAYLOAD, ("amount", "ts")).names == ["ts", "amount"]  # schema order
    assert select_columns(PAYLOAD, None) is PAYLOAD
    for bad in ("ts", ("ts", "nope"), ("ts", "ts"), (1,)):
        with pytest.raises(ConfigError, match="columns"):
            check_columns("s", PAYLOAD, bad)


# --------------------------------------------------------------------------------- nexmark


def test_generate_only_requested_columns_with_the_same_values():
    full = generate(1000, 6000, seed=3, first_event_rate=500, out_of_order_ms=200)
    for columns in [("price",), ("url", "kind"), ("reserve", "expires", "item_name", "email", "bidder"),
                    tuple(SCHEMA.names)]:
        part = generate(1000, 6000, seed=3, first_event_rate=500, out_of_order_ms=200, columns=columns)
        assert part.column_names == [n for n in SCHEMA.names if n in columns]
        assert part.equals(full.select(part.column_names))
    assert generate(0, 10, columns=()).num_columns == 0
    with pytest.raises(ConfigError, match="columns"):
        generate(0, 10, columns=("nope",))


def test_nexmark_reader_produces_requested_columns():
    src = nexmark(events=500, first_event_rate=100, out_of_order_ms=300)

    def read(columns):
        cfg = src.to_json(step="src", event_time="date_time", key_groups=2, max_delay_ms=1000,
                          max_events_per_epoch=400, control_file=None, columns=columns)
        r = NexmarkStreamReader(_Config(cfg))
        o0 = r.initialOffset()
        o1 = r.latestOffset(o0, ReadMaxRows(400))
        return [b for p in r.partitions(o0, o1) for b in r.read(p)]

    full, pruned = read(None), read(["price", "kind"])  # the event time is generated for __et only
    assert pruned[0].schema.names == ["kind", "price", *envelope.ENVELOPE_COLUMNS]
    full_data, full_sides = rows_of(full)
    data, sides = rows_of(pruned)
    assert data.equals(full_data.select(data.column_names))
    assert sides == full_sides


def test_nexmark_read_stream_rejects_unknown_columns():
    with pytest.raises(ConfigError, match="columns"):
        request = ReadRequest("s", SCHEMA, "date_time", key_groups=1, watermark=WatermarkPolicy(0),
                              max_events_per_epoch=10,
                              columns=("nope",))
        nexmark(events=10).read_stream(None, request)


# ----------------------------------------------------------------------------- file parsing


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_formats_validate_every_column_and_keep_the_requested_ones(tmp_path, fmt):
    path = tmp_path / f"events.{fmt}"
    if fmt == "csv":
        path.write_text(CSV)
    else:
        lines = [{"ts": 1000, "user": "a", "amount": 1.5, "code": 1},
                 {"ts": 2000, "user": "b", "amount": 2.0, "code": "two"},
                 {"ts": 3000, "user": "a", "amount": "x", "code": 3},
                 {"ts": "oops", "user": "b", "amount": 1.0, "code": 4}]
        path.write_text("\n".join(json.dumps(o) for o in lines) + "\n{broken\n")
    full = parse_file(str(path), ParseSpec(fmt, PAYLOAD, "ts"))
    part = parse_file(str(path), ParseSpec(fmt, PAYLOAD, "ts", columns=("ts", "amount")))
    assert part.table.column_names == ["ts", "amount"]
    assert part.table.equals(full.table.select(["ts", "amount"]))
    assert part.records == full.records
    assert part.valid.tolist() == full.valid.tolist()
    assert part.event_times.tolist() == full.event_times.tolist()
    assert part.malformed == full.malformed
    # a bad value in a column the flow does not read still makes the record malformed
    reasons = [m.reason for m in part.malformed]
    assert any("code" in r and "two" in r for r in reasons), reasons


def test_parquet_reads_only_columns_that_can_matter(tmp_path, monkeypatch):
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({
        "ts": pa.array([1000, 2000, None, 4000], pa.int64()),
        "user": ["a", "b", "a", "b"],
        "amount": [1.5, 2.0, 3.0, 4.0],
        "code": ["1", "two", "3", "4"],  # stored as strings: converting to int64 may fail
    }), path)
    read: list[list[str]] = []
    real = file_readers.pq.ParquetFile.read

    def spy(self, columns=None, **kwargs):
        read.append(list(columns))
        return real(self, columns=columns, **kwargs)

    monkeypatch.setattr(file_readers.pq.ParquetFile, "read", spy)
    full = parse_file(str(path), ParseSpec("parquet", PAYLOAD, "ts"))
    read.clear()
    part = parse_file(str(path), ParseSpec("parquet", PAYLOAD, "ts", columns=("ts", "amount")))
    assert read[0] == ["ts", "amount", "code"]  # not user (stored as string = the schema's type)
    assert read[1:] == [["ts", "user", "amount", "code"]]  # the raw text of malformed rows
    assert part.table.equals(full.table.select(["ts", "amount"]))
    assert part.valid.tolist() == full.valid.tolist() == [0, 3]
    assert part.malformed == full.malformed
    assert [m.reason for m in part.malformed] == [
        "parquet: column code: cannot convert 'two' to int64", "event time missing"]
    assert '"user": "b"' in part.malformed[0].raw


def test_parquet_file_without_a_schema_column_stays_malformed(tmp_path):
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"ts": [1, 2], "user": ["a", "b"], "amount": [1.0, 2.0]}), path)
    full = parse_file(str(path), ParseSpec("parquet", PAYLOAD, "ts"))
    part = parse_file(str(path), ParseSpec("parquet", PAYLOAD, "ts", columns=("ts",)))
    assert part.records == full.records == 2
    assert part.malformed == full.malformed
    assert "no column(s) ['code']" in part.malformed[0].reason


# ------------------------------------------------------------------------------ file source


def test_file_source_binding_and_rows_with_columns(tmp_path):
    (tmp_path / "events.csv").write_text(CSV)
    src = files(str(tmp_path / "*.csv"), format="csv", schema=PAYLOAD)
    full = SourceBinding("src", src, PAYLOAD, "ts", WatermarkPolicy(0), 100, 2)
    part = SourceBinding("src", src, PAYLOAD, "ts", WatermarkPolicy(0), 100, 2, columns=["user", "ts"])
    assert part.columns == ("user", "ts")
    assert SourceBinding.from_json(part.to_json(), FileSource) == part
    assert part.output_schema.names == ["ts", "user"]
    ds = WireFileDataSource(options={"binding": part.to_json()})
    assert ds.schema().names == ["ts", "user", *envelope.ENVELOPE_COLUMNS]
    with pytest.raises(ConfigError, match="columns"):
        SourceBinding("src", src, PAYLOAD, "ts", WatermarkPolicy(0), 100, 2, columns=("nope",))

    def read(binding):
        r = WireFileStreamReader(binding)
        o0 = r.initialOffset()
        o1 = r.latestOffset(o0, ReadMaxRows(100))
        return rows_of([b for p in r.partitions(o0, o1) for b in r.read(p)])

    full_data, full_sides = read(full)
    data, sides = read(part)
    assert data.column_names == ["ts", "user", *envelope.ENVELOPE_COLUMNS]
    assert data.equals(full_data.select(data.column_names))
    assert sides == full_sides
    dead = sides["src.dead_letter"]
    assert [d["location"].rsplit(":", 1)[1] for d in dead] == ["3", "4", "5", "6"]
    assert "column code: cannot parse 'two'" in dead[0]["reason"]


# ----------------------------------------------------------------------- other sources


def test_test_stream_produces_requested_columns():
    schema = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
    events = envelope.encode_table(pa.table({"t": [1, 2], "k": ["a", "b"], "v": [5, 6]}, schema=schema))
    source = TestStreamSource(schema, ((events, 10),))
    script = _Script(source.to_json(step="s", event_time="t", key_groups=1, columns=("v",)))
    batches = list(TestStreamReader(script).read(TestStreamReader(script).partitions({"step": 0},
                                                                                      {"step": 1})[0]))
    data, _ = rows_of(batches)
    assert data.column_names == ["v", *envelope.ENVELOPE_COLUMNS]
    assert data["v"].to_pylist() == [5, 6]
    assert data[envelope.ET].to_pylist() == [1, 2]


def test_redis_and_http_bindings_carry_columns(tmp_path):
    schema = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
    src = redis_stream("redis://127.0.0.1:1", "s", group="g", schema=schema)
    b = RedisBinding("r", src, schema, "t", WatermarkPolicy(0), 10, 1, columns=["v", "t"])
    assert RedisBinding.from_json(b.to_json(), RedisStreamSource) == b
    assert b.row_schema().names == ["t", "v", *envelope.ENVELOPE_COLUMNS]
    ingest = http_ingest(port=8999, wal_dir=str(tmp_path), schema=schema)
    i = IngestBinding("h", ingest, ingest.schema, "t", WatermarkPolicy(0), 10, 1, columns=("k",))
    assert IngestBinding.from_json(i.to_json(), HttpIngestSource) == i
    assert i.output_schema.names == ["k"]
    with pytest.raises(ConfigError, match="columns"):
        IngestBinding("h", ingest, ingest.schema, "t", WatermarkPolicy(0), 10, 1, columns=("x",))


def test_http_ingest_reads_requested_columns_and_still_dead_letters(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    schema = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64())])
    src = http_ingest(port=port, wal_dir=str(tmp_path / "wal"), schema=schema)
    reader = HttpIngestReader(IngestBinding("ingest", src, src.schema, "t", WatermarkPolicy(0), 100, 1,
                              columns=("t", "k")))
    try:
        start = reader.initialOffset()
        body = [{"t": 5, "k": "a", "v": 1}, {"t": 7, "k": "b", "v": "x"}, {"t": 9, "k": "c"}]
        assert httpx.post(f"http://127.0.0.1:{port}/events", json=body, timeout=10).status_code == 202
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        data, sides = rows_of([b for p in reader.partitions(start, end) for b in reader.read(p)])
    finally:
        reader.stop()
    assert data.column_names == ["t", "k", *envelope.ENVELOPE_COLUMNS]
    assert data["k"].to_pylist() == ["a", "c"]
    dead = sides["ingest.dead_letter"]
    assert len(dead) == 1 and "field v" in dead[0]["reason"]  # v is not produced, yet checked
