"""The lookup join's mapInArrow function on envelope batches, without Spark."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from tests.unit.tables.test_lookup import RecordingTable

from wire.compiler import lookup_join_stage as LJ
from wire.core.envelope import (
    BLOB,
    KIND,
    KIND_DATA,
    KIND_SIDE,
    KIND_WATERMARK,
    METRICS_PORT,
    PORT,
    WM,
    decode_table,
    envelope_batch,
    watermark_batch,
    with_envelope,
)

PAYLOAD = pa.schema([("t", pa.int64()), ("customer", pa.int64())])
TABLE = pa.schema([("id", pa.int64()), ("name", pa.string())])


def stage(table, how="left", ttl=60_000, size=100):
    out = with_envelope(pa.schema([*PAYLOAD, pa.field("name", pa.string())]))
    return LJ.LookupStage("enrich", table, TABLE, "customer", how, ttl, size, out)


def events(customers):
    schema = with_envelope(PAYLOAD)
    n = len(customers)
    return envelope_batch(schema, {
        "t": pa.array(range(n), pa.int64()), "customer": pa.array(customers, pa.int64()),
        KIND: pa.array([KIND_DATA] * n, pa.int32()), WM: pa.array([0] * n, pa.int64())}, n)


@pytest.fixture(autouse=True)
def fresh_readers():
    LJ._READERS.clear()
    yield
    LJ._READERS.clear()


def run(st, batches):
    out = pa.Table.from_batches(list(st(iter(batches))))
    data = out.filter(pc.equal(out.column(KIND), KIND_DATA))
    side = out.filter(pc.equal(out.column(KIND), KIND_SIDE))
    metrics = [decode_table(b) for p, b in zip(side.column(PORT).to_pylist(), side.column(BLOB).to_pylist(),
                                               strict=True) if p == METRICS_PORT]
    marks = out.filter(pc.equal(out.column(KIND), KIND_WATERMARK))
    return data, metrics, marks


def test_a_task_reads_its_keys_in_one_query_across_its_batches_and_passes_watermarks_through():
    table = RecordingTable({1: "a", 2: "b"})
    st = stage(table)
    data, metrics, marks = run(st, [events([1, 3]), watermark_batch(with_envelope(PAYLOAD), 42, [0, 1]),
                                    events([2, 1, 3])])
    assert table.queries == [[1, 2, 3]]
    assert sorted(zip(data.column("customer").to_pylist(), data.column("name").to_pylist(),
                      strict=True)) == [(1, "a"), (1, "a"), (2, "b"), (3, None), (3, None)]
    assert marks.column(WM).to_pylist() == [42, 42]
    counters = {r["name"]: r["value"] for r in metrics[0].to_pylist()}
    assert counters == {"events": 5, "unmatched": 2, "lookup_queries": 1, "lookup_keys": 3,
                        "lookup_cache_hits": 0}
    # the next epoch's task in the same worker: keys cached, none read again
    table.rows[1] = "changed"
    data, metrics, _ = run(st, [events([1, 2])])
    assert table.queries == [[1, 2, 3]]
    assert data.column("name").to_pylist() == ["a", "b"]  # within cache_ttl: the cached rows


def test_inner_drops_events_without_a_row_and_no_cache_reads_every_epoch():
    table = RecordingTable({1: "a"})
    st = stage(table, how="inner", ttl=0)
    for _ in range(2):
        data, _, _ = run(st, [events([1, 2, 1])])
        assert data.column("customer").to_pylist() == [1, 1]
    assert table.queries == [[1, 2], [1, 2]]


def test_a_task_without_events_reads_nothing():
    table = RecordingTable({1: "a"})
    data, metrics, marks = run(stage(table), [watermark_batch(with_envelope(PAYLOAD), 7, [0])])
    assert (data.num_rows, metrics, marks.num_rows, table.queries) == (0, [], 1, [])


def test_a_task_with_more_events_than_the_buffer_asks_once_per_buffer(monkeypatch):
    monkeypatch.setattr(LJ, "BUFFER_ROWS", 4)
    table = RecordingTable({1: "a", 2: "b"})
    data, metrics, _ = run(stage(table, ttl=0), [events([1, 2, 3]), events([1, 2]), events([3])])
    assert table.queries == [[1, 2, 3], [3]]  # 5 events gathered, then the last one
    assert data.num_rows == 6
    counters = {r["name"]: r["value"] for r in metrics[0].to_pylist()}
    assert (counters["events"], counters["unmatched"], counters["lookup_queries"]) == (6, 2, 2)


def test_a_snapshot_tables_udf_returns_the_joined_columns_as_a_struct_checking_the_version_once():
    from tests.unit.tables.test_lookup import VersionedTable

    table = VersionedTable()
    table.state["rows"] = {1: "a", 3: "c"}
    produced = list(stage(table).joined_columns(iter([pa.array([1, 2, None], pa.int64()),
                                                       pa.array([3, 1], pa.int64())])))
    assert [p.to_pylist() for p in produced] == [[{"name": "a"}, None, None], [{"name": "c"}, {"name": "a"}]]
    assert (table.state["checks"], table.state["loads"]) == (1, 1)


def test_a_worker_keeps_a_bounded_number_of_readers(monkeypatch):
    monkeypatch.setattr(LJ, "MAX_READERS", 2)
    for step in ("a", "b", "c"):
        LJ.LookupStage(step, RecordingTable({}), TABLE, "customer", "left", 0, 0, PAYLOAD).reader()
    assert [k[0] for k in LJ._READERS] == ["b", "c"]


def test_a_nanosecond_timestamp_column_of_a_snapshot_table_comes_back_in_microseconds():
    from tests.unit.tables.test_lookup import VersionedTable

    ns = pa.schema([("id", pa.int64()), ("since", pa.timestamp("ns"))])

    class Stamped(VersionedTable):
        def load(self, version):
            return pa.table({"id": [1], "since": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns"))})

    out = with_envelope(pa.schema([*PAYLOAD, pa.field("since", pa.timestamp("us", tz="UTC"))]))
    st = LJ.LookupStage("enrich", Stamped(), ns, "customer", "left", 0, 0, out)
    (got,) = list(st.joined_columns(iter([pa.array([1], pa.int64())])))
    assert got.field("since").to_pylist()[0].isoformat() == "2023-11-14T22:13:20.123456+00:00"
