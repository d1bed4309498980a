"""Stateless flows whose source's tasks write the sinks (``wire.compiler.sink_fusion``).

For random events (values with nulls, a timestamp column), a malformed record, random file
and epoch splits (``max_events_per_epoch``), filters, maps (integer and floating point
arithmetic) and projections, the same flow runs
twice: fused, and with ``spark.wire.fusion.enabled=false`` (the source's rows go through the
JVM to the epoch's ``mapInArrow`` writer). The Parquet sink's files (rows, Arrow schema,
``epoch`` column), a driver sink's rows and the dead letters must be equal; the rows must also
equal pandas' filter and projection of the events (an oracle that knows nothing of epochs).
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.e2e.test_fused_window_flow import fusion

import wire
from wire.delivery.sink import EpochStager, ExecutorSink, StagedPart
from wire.testing import MemorySink

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.float64()), ("n", pa.int32()),
                    ("at", pa.timestamp("us", tz="UTC"))])
FILTERS = {  # the flow's filter, and the same rule for pandas
    "v > 0": lambda d: d[d.v > 0],
    "v IS NOT NULL AND k != 'b'": lambda d: d[d.v.notna() & (d.k != "b")],
    "k IN ('a', 'c') OR n < 2": lambda d: d[d.k.isin(["a", "c"]) | (d.n < 2)],
    "t % 3 = 1 AND n * 2 > 1": lambda d: d[(d.t % 3 == 1) & (d.n * 2 > 1)],  # t >= 0: % as Java's
}
PROJECTIONS = [None, ("k", "v"), ("at", "n", "k", "t")]
MAPS = {  # a map after the filter, and the same for pandas (t >= 0: div truncates as floor)
    "s = n * 3 - t, q = t div 7": lambda d: d.assign(s=d.n * 3 - d.t, q=d.t // 7),
    "n = -n, w = v * 2": lambda d: d.assign(n=-d.n, w=d.v * 2),
    # a null v is not > 0: the ELSE (pandas: NaN > 0 is False)
    "c = CASE WHEN v > 0 THEN n ELSE t END": lambda d: d.assign(c=d.n.where(d.v > 0, d.t)),
}
EPOCH0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

event = st.tuples(st.integers(0, 300), st.sampled_from("abc"), st.none() | st.floats(-2, 2, allow_nan=False),
                  st.integers(0, 3))


def csv_files(events: list[tuple], cuts: list[int]) -> list[str]:
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    return ["t,k,v,n,at\n" + "".join(
        f"{t},{k},{'' if v is None else repr(v)},{n},{(EPOCH0 + dt.timedelta(milliseconds=t)).isoformat()}\n"
        for t, k, v, n in events[lo:hi]) for lo, hi in itertools.pairwise(bounds)]


def run(spark, path: Path, files: list[str], *, predicate: str | None, mapping: str | None, projection,
        epoch: int):
    data = path / "in"
    data.mkdir(parents=True)
    for i, text in enumerate(files):
        (data / f"part-{i:02d}.csv").write_text(text)
    flow = wire.Flow("sink-fused")
    stream = flow.source(wire.sources.files(str(data / "*.csv"), format="csv", schema=SCHEMA), event_time="t",
                         key="k", watermark=wire.BoundedOutOfOrderness(40), max_events_per_epoch=epoch,
                         name="events")
    if predicate is not None:
        stream = stream.filter(predicate, name="kept")
    if mapping is not None:
        stream = stream.map(**dict(part.split(" = ") for part in mapping.split(", ")), name="mapped")
    if projection is not None:
        stream = stream.select(*projection, name="projected")
    memory = MemorySink()
    stream.sink(wire.sinks.parquet(str(path / "out")), name="parquet")
    stream.sink(memory, name="memory")
    flow.dead_letters().sink(wire.sinks.parquet(str(path / "dead")), name="dead")
    running = flow.start(checkpoint=str(path / "ck"), spark=spark, progress=False)
    summary = running.await_termination()
    return {
        "task_writer": running._dispatcher.task_writer,
        "parquet": read_parquet(path / "out"),
        "memory": sorted((tuple(r.items()) for r in memory.rows()), key=repr),
        "dead": read_parquet(path / "dead"),
        "input_events": summary.input_events,
    }


def read_parquet(directory: Path) -> tuple[pa.Schema | None, list[tuple]]:
    files = sorted(directory.glob("epoch-*/*.parquet"))
    if not files:
        return None, []
    tables = [pq.read_table(f) for f in files]
    return tables[0].schema, sorted((tuple(r.items()) for t in tables for r in t.to_pylist()), key=repr)


def oracle(events: list[tuple], predicate: str | None, mapping: str | None, projection) -> list[tuple]:
    d = pd.DataFrame(events, columns=["t", "k", "v", "n"])
    d["at"] = [EPOCH0 + dt.timedelta(milliseconds=int(t)) for t in d.t]
    if predicate is not None:
        d = FILTERS[predicate](d)
    if mapping is not None:
        d = MAPS[mapping](d)
    d = d[list(projection or d.columns)]
    rows = []
    for r in d.itertuples(index=False):
        row = []
        for name, value in zip(d.columns, r, strict=True):
            if name in ("v", "w"):
                value = None if pd.isna(value) else float(value)
            elif name in ("t", "n", "s", "q"):
                value = int(value)
            elif name == "at":
                value = pd.Timestamp(value).to_pydatetime()
            row.append((name, value))
        rows.append(tuple(row))
    return sorted(rows, key=repr)


def same_dead_letters(a: tuple, b: tuple) -> bool:
    """Equal but for the input directory in ``location`` (each run has its own copy of the files)."""
    def local(rows: list[tuple]) -> list[tuple]:
        return [tuple((k, Path(v).name if k == "location" else v) for k, v in r) for r in rows]

    return a[0] == b[0] and local(a[1]) == local(b[1])


def without_epoch(rows: list[tuple]) -> list[tuple]:
    return sorted((tuple(kv for kv in r if kv[0] != "epoch") for r in rows), key=repr)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, min_size=1, max_size=30), cuts=st.lists(st.integers(1, 29), max_size=3),
       predicate=st.none() | st.sampled_from(sorted(FILTERS)),
       mapping=st.none() | st.sampled_from(sorted(MAPS)), projection=st.sampled_from(PROJECTIONS),
       epoch=st.integers(2, 12), bad_file=st.integers(0, 3))
def test_sink_fused_equals_unfused_and_pandas(spark, tmp_path_factory, events, cuts, predicate, mapping,
                                              projection, epoch, bad_file):
    files = csv_files(events, cuts)
    files[bad_file % len(files)] += "oops,a,1,0,x\n"  # a malformed record: a dead letter, the flow goes on
    path = tmp_path_factory.mktemp("sink_fused")
    with fusion(spark, True):
        fused = run(spark, path / "fused", files, predicate=predicate, mapping=mapping, projection=projection,
                    epoch=epoch)
    with fusion(spark, False):
        plain = run(spark, path / "plain", files, predicate=predicate, mapping=mapping, projection=projection,
                    epoch=epoch)
    assert (fused["task_writer"], plain["task_writer"]) == (True, False)
    assert fused["parquet"] == plain["parquet"]  # Arrow schema, rows and their epochs
    assert fused["memory"] == plain["memory"]
    assert same_dead_letters(fused["dead"], plain["dead"])
    assert fused["input_events"] == plain["input_events"] == len(events)
    assert [dict(r)["record"] for r in fused["dead"][1]] == ["oops,a,1,0,x"]
    want = oracle(events, predicate, mapping, projection)
    assert without_epoch(fused["parquet"][1]) == want
    assert without_epoch(fused["memory"]) == want


def failing_sink():
    """An executor sink whose stager raises in the task; local classes travel by value (cloudpickle)."""

    class Refused(EpochStager):
        def stage(self, partition: int, table: pa.Table) -> StagedPart:
            raise ValueError(f"refused {table.num_rows} rows")

    class RefusingSink(ExecutorSink):
        guarantee = "exactly_once"

        def __init__(self) -> None:
            self.committed: list[int] = []

        def prepare_epoch(self, epoch: int) -> EpochStager:
            return Refused()

        def commit_epoch(self, epoch: int, parts: list[StagedPart]) -> None:
            self.committed.append(epoch)

    return RefusingSink()


def test_a_failed_staging_fails_the_epoch_with_the_sinks_reason(spark, tmp_path):
    """A stager that raises in a fused source task fails the run with the sink's own message
    (``StagingFailed``, as in the unfused writer), and the epoch is not committed."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("t,k,v,n,at\n1,a,1.0,1,2026-01-01T00:00:00Z\n")
    flow = wire.Flow("sink-fused-fails")
    events = flow.source(wire.sources.files(str(tmp_path / "in" / "*.csv"), format="csv", schema=SCHEMA),
                         event_time="t", watermark=wire.BoundedOutOfOrderness(0), name="events")
    sink = failing_sink()
    events.filter("v > 0").sink(sink, name="refusing")
    with fusion(spark, True):
        running = flow.start(checkpoint=str(tmp_path / "ck"), spark=spark, progress=False)
        assert running._dispatcher.task_writer
        with pytest.raises(Exception, match="refused 1 rows"):
            running.await_termination()
    assert running._dispatcher.last_error == (
        "epoch 0: sink 'refusing': staging epoch 0, partition 0 failed: ValueError('refused 1 rows')")
    assert sink.committed == []
