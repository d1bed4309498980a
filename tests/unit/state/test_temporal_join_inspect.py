"""Decoding a temporal join's stored state for ``wire.read_state`` / ``wire state``.

The state is the one the kernel (:func:`wire.state.temporal_join.on_epoch`) leaves after an
epoch whose result is derived by hand below; the reader's decoder for a ``temporal_join``
step must give it back row by row.
"""

from __future__ import annotations

import pyarrow as pa

from wire.core.envelope import encode_table
from wire.plan.fingerprint import TEMPORAL_JOIN
from wire.runtime import state_layout as L
from wire.runtime import state_reader as R
from wire.state import inspect as I
from wire.state import temporal_join as TJ
from wire.state import temporal_join_spec as TJS
from wire.state.packed_chunks import PackedChunks
from wire.state.rekey import GroupState
from wire.state.segments import MemoryChunkStore

STREAM = pa.schema([("k", pa.string()), ("id", pa.int64())])
TABLE = pa.schema([("k", pa.string()), ("val", pa.int64()), ("del", pa.bool_())])
NO_WM = -(2**63)


def _decoded() -> I.Decoded:
    spec = TJS.TemporalJoinSpec("k", "k", ("id",), ("val",), delete="del", how="left")
    events = pa.table({"k": ["a", "b", "a"], "id": [1, 2, 3], "__et": [5, 15, 25]})
    table = pa.table({"k": ["a", "b", "a"], "val": [7, 0, 9], "del": [False, True, False],
                      "__et": [0, 12, 20], "__seq": [0, 1, 2]})
    raw = MemoryChunkStore()
    packed = PackedChunks(raw)  # as the processor stores chunks: small ones in one pack entry
    r = TJ.on_epoch(packed, None, None, None, [events], [table], stream_wm=NO_WM, new_stream_wm=30,
                    table_wm=NO_WM, new_table_wm=10, wm_out=NO_WM, spec=spec, stream_payload=STREAM,
                    table_payload=TABLE, bucket_ms=10)
    packed.flush()
    # t=5 met version a@0 and left; b@15 and a@25 wait for the table watermark (10)
    assert [(x["id"], x["val"]) for x in r.joined.to_pylist()] == [(1, 7)]
    group = I.Decoded(3, GroupState(30, r.wm_out, {}, {"versions": r.versions, "holds": r.holds,
                                                       "__segments": r.index}, {}))
    for (bucket, chunk), table in raw.chunks.items():  # as the reader gets them: Arrow IPC bytes
        I.add_entry(group, bucket, chunk, encode_table(table))
    return group


def test_pending_events_and_versions_per_key_as_derived_by_hand() -> None:
    rows = I.temporal_join_rows([_decoded()], "k").to_pylist()
    # purge (stream watermark 30): a keeps its newest version at or before its pending 25 (a@20),
    # b its delete marker of 12 (at or after the table watermark 10, it still hides older versions)
    assert rows == [
        {"key_group": 3, "kind": "pending", "k": "a", "event_time": 25, "arrival": None, "deleted": None,
         "event": {"id": 3}, "version": None},
        {"key_group": 3, "kind": "pending", "k": "b", "event_time": 15, "arrival": None, "deleted": None,
         "event": {"id": 2}, "version": None},
        {"key_group": 3, "kind": "version", "k": "a", "event_time": 20, "arrival": 2, "deleted": False,
         "event": None, "version": {"val": 9}},
        {"key_group": 3, "kind": "version", "k": "b", "event_time": 12, "arrival": 1, "deleted": True,
         "event": None, "version": {"val": 0}},
    ]


def test_the_state_reader_decodes_a_temporal_join_step() -> None:
    assert TEMPORAL_JOIN in L.KINDS
    layout = L.StepLayout("enrich", TEMPORAL_JOIN, 0, "k", "string", {"kind": TEMPORAL_JOIN})
    table = R.decoder(layout)([_decoded()])
    assert table.equals(I.temporal_join_rows([_decoded()], "k"))
    assert R._oldest(TEMPORAL_JOIN, table) == 15  # the earliest pending event, not a version


def test_an_empty_temporal_join_state_decodes_to_an_empty_table() -> None:
    table = I.temporal_join_rows([I.Decoded(0, GroupState())], "k")
    assert table.num_rows == 0 and table.column_names == ["key_group"]


def test_events_the_table_watermark_released_are_not_shown_as_pending() -> None:
    """The bucket a table watermark cuts keeps its emitted events stored; the reader skips them."""
    spec = TJS.TemporalJoinSpec("k", "k", ("id",), ("val",), delete="del", how="left")
    store = MemoryChunkStore()
    events = pa.table({"k": ["b", "a"], "id": [2, 3], "__et": [15, 25]})
    common = dict(spec=spec, stream_payload=STREAM, table_payload=TABLE, bucket_ms=10)
    r = TJ.on_epoch(store, None, None, None, [events], [], stream_wm=NO_WM, new_stream_wm=30,
                    table_wm=NO_WM, new_table_wm=10, wm_out=NO_WM, **common)  # type: ignore[arg-type]
    r = TJ.on_epoch(store, r.index, r.versions, r.holds, [], [], stream_wm=30, new_stream_wm=30,
                    table_wm=10, new_table_wm=17, wm_out=r.wm_out, **common)  # type: ignore[arg-type]
    assert r.joined.column("id").to_pylist() == [2]  # b@15 < 17 left, still stored in bucket [10, 20)
    assert sum(t.num_rows for t in store.chunks.values()) == 2 and r.stats["gauge:pending"] == 1
    group = I.Decoded(0, GroupState(17, r.wm_out, {"__table": 17, "__stream": 30},
                                    {"versions": r.versions, "holds": r.holds, "__segments": r.index},
                                    dict(store.chunks)))
    rows = I.temporal_join_rows([group], "k").to_pylist()
    assert [(x["kind"], x["k"], x["event_time"]) for x in rows] == [("pending", "a", 25)]
