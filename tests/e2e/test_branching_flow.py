"""Branching flows: one source feeding a sink, a filter and a window, compiled into one query.

The oracle is DuckDB over the same CSV lines (the well-formed ones); dead letters and the
source's event count must come out once, not once per branch. A source that can replay an
epoch (files) is scanned once per branch; one that cannot (here: the file source without
its ``"replay"`` capability, as HTTP ingest and Redis Streams) is scanned once per epoch
although four branches read it. Events are in event-time order,
so no window result is late and each window's result is the plain GROUP BY.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, fields
from typing import ClassVar

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.compiler.plan_compiler import compile_plan
from wire.plan.graph import chain_of, outputs_of
from wire.runtime.checkpoint import list_epochs, source_count
from wire.sources.base.source import ALL_CAPABILITIES, Capability
from wire.sources.file_source.source import FileSource

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("ts", pa.int64()), ("user", pa.string()), ("amount", pa.int64())])
BAD = ["oops,a,3", "17,b,2,extra"]


def write_input(tmp_path, n: int = 600, seed: int = 5) -> tuple[str, pd.DataFrame]:
    rng = random.Random(seed)
    rows = [(i * 97, rng.choice("abcd"), rng.randrange(100)) for i in range(n)]
    lines = [f"{t},{u},{a}" for t, u, a in rows]
    lines.insert(100, BAD[0])
    lines.insert(400, BAD[1])
    d = tmp_path / "in"
    d.mkdir()
    (d / "events.csv").write_text("ts,user,amount\n" + "\n".join(lines) + "\n")
    return str(d / "*.csv"), pd.DataFrame(rows, columns=["ts", "user", "amount"])


def parquet(path) -> pd.DataFrame:
    files = sorted(path.glob("*/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas() if files else pd.DataFrame()


def ms(col: pd.Series) -> pd.Series:
    return (pd.to_datetime(col, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)


@dataclass(frozen=True)
class FilesReadOnce(FileSource):
    """The file source as a source that cannot replay an epoch (no ``"replay"`` capability)."""

    capabilities: ClassVar[frozenset[Capability]] = ALL_CAPABILITIES


def build(glob: str, out, *, replay: bool = True) -> wire.Flow:
    flow = wire.Flow("branches")
    files = wire.sources.files(glob, format="csv", schema=SCHEMA)
    if not replay:
        files = FilesReadOnce(**{f.name: getattr(files, f.name) for f in fields(files)})
    events = flow.source(files, event_time="ts",
                         key="user", watermark=wire.BoundedOutOfOrderness(0), max_events_per_epoch=150,
                         name="events")
    events.sink(wire.sinks.parquet(out / "raw"), name="raw")
    big = events.filter("amount >= 50", name="big")
    big.sink(wire.sinks.parquet(out / "big"), name="big_sink")
    (big.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="big_windows")
     .sink(wire.sinks.parquet(out / "big_windows"), name="big_windows_sink"))
    (events.window(wire.Tumbling("10s")).aggregate(n=wire.count(), total=wire.sum("amount"), name="windows")
     .sink(wire.sinks.parquet(out / "windows"), name="windows_sink"))
    flow.dead_letters().sink(wire.sinks.jsonl(out / "dlq"), name="dlq")
    return flow


def test_outputs_of_names_the_branches(tmp_path):
    flow = build("unused/*.csv", tmp_path)
    main, others = outputs_of(flow.plan(), chain_of(flow.plan()))
    assert main == "big_windows"
    assert others == [("events", True), ("big", True), ("windows", True)]


@pytest.mark.parametrize("replay", [True, False])
def test_the_source_is_told_how_many_scans_read_it(spark, tmp_path, monkeypatch, replay):
    """Four branches: four scans of a source that can replay (each splits its ranges over fewer
    tasks, ``PartitionedReader._pieces``), one shared scan of one that cannot."""
    glob, _ = write_input(tmp_path)
    requests = []
    real = FileSource.read_stream
    monkeypatch.setattr(FileSource, "read_stream", lambda self, spark, request: (
        requests.append(request), real(self, spark, request))[1])
    compile_plan(build(glob, tmp_path / "out", replay=replay).plan(), spark, 2)
    assert {r.scans for r in requests} == {4 if replay else 1}


@pytest.mark.parametrize("replay", [True, False])
def test_branching_flow_equals_duckdb(spark, tmp_path, replay):
    glob, df = write_input(tmp_path)
    out = tmp_path / "out"
    summary = build(glob, out, replay=replay).run(str(tmp_path / "ck"), spark=spark)
    check_outputs(out, df)
    assert summary.input_events == len(df)
    assert summary.total("malformed") == len(BAD)
    # window results are counted in every branch, not only the main one
    assert summary.emitted["final"] == len(parquet(out / "windows")) + len(parquet(out / "big_windows"))
    assert summary.source_scans == (4 if replay else 1)  # four branches: a scan each, or one shared


def test_each_epoch_reads_the_source_once(spark, tmp_path):
    """Spark's own count of the rows an epoch read from its sources equals one read of the source.

    A line is one row, plus the source's watermark and metric rows of each epoch. Were the
    source scanned once per branch (4), Spark would count at least 4x the lines.
    """
    glob, df = write_input(tmp_path)
    flow = build(glob, tmp_path / "out", replay=False)
    running = flow.start(str(tmp_path / "ck"), spark=spark)
    running.query.awaitTermination()
    progress = [p for p in running.query.recentProgress if p["numInputRows"]]
    running.stop()
    assert progress
    observed = [p["observedMetrics"]["wire_read_events"]["rows"] for p in progress]
    assert [p["numInputRows"] for p in progress] == observed  # the shared shuffle saw every row once
    lines = len(df) + len(BAD)
    assert lines <= sum(observed) < 2 * lines  # 4 scans would count at least 4 * lines


def test_a_branched_flow_resumes_from_its_checkpoint(spark, tmp_path):
    """Stopped after 2 of 5 epochs and resumed: the outputs equal DuckDB's, as uninterrupted.

    Spark records the source's offset once per path from an output (4 here: the raw
    sink, the big filter's sink, and the two windows), one line each in the offset log,
    though it scans it once; the checkpoint's check counts them so (``source_count``)."""
    glob, df = write_input(tmp_path)
    out, ck = tmp_path / "out", str(tmp_path / "ck")
    flow = build(glob, out)
    first = flow.run(ck, spark=spark, max_epochs=2)
    assert first.epochs == 2
    build(glob, out).run(ck, spark=spark)
    check_outputs(out, df)
    assert source_count(flow.plan()) == 4
    assert all(len(e.offsets) == 4 for e in list_epochs(ck))


def check_outputs(out, df: pd.DataFrame) -> None:
    con = duckdb.connect()
    con.register("ev", df)
    key = ["ts", "user", "amount"]
    raw = parquet(out / "raw")[key].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(raw, df.sort_values(key).reset_index(drop=True), check_dtype=False)
    big = parquet(out / "big")[key].sort_values(key).reset_index(drop=True)
    want_big = con.execute("SELECT * FROM ev WHERE amount >= 50 ORDER BY ts, user, amount").df()
    pd.testing.assert_frame_equal(big, want_big, check_dtype=False)
    w = parquet(out / "windows")
    got = pd.DataFrame({"user": w["user"], "ws": ms(w["window_start"]), "n": w["n"], "total": w["total"]})
    want = con.execute("SELECT user, ts // 10000 * 10000 AS ws, count(*) AS n, sum(amount) AS total "
                       "FROM ev GROUP BY ALL ORDER BY ws, user").df()
    pd.testing.assert_frame_equal(got.sort_values(["ws", "user"]).reset_index(drop=True), want,
                                  check_dtype=False)
    bw = parquet(out / "big_windows")
    got_b = pd.DataFrame({"user": bw["user"], "ws": ms(bw["window_start"]), "n": bw["n"]})
    want_b = con.execute("SELECT user, ts // 10000 * 10000 AS ws, count(*) AS n FROM ev "
                         "WHERE amount >= 50 GROUP BY ALL ORDER BY ws, user").df()
    pd.testing.assert_frame_equal(got_b.sort_values(["ws", "user"]).reset_index(drop=True), want_b,
                                  check_dtype=False)
    dlq = [json.loads(line) for f in sorted((out / "dlq").glob("*/*.jsonl"))
           for line in f.read_text().splitlines()]
    assert sorted(r["record"] for r in dlq) == sorted(BAD)  # once, not once per branch
