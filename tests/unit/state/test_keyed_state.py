"""Vectorized per-key state and timers of ``Stream.process`` (wire.state.keyed_state), by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest

from wire.state import keyed_state as K


def stored(spec: K.StateSpec, key_type: pa.DataType | None = None) -> K.StoredTable:
    return K.StoredTable(spec.schema("k", key_type or pa.string()), lambda: None)


def test_value_state_last_write_wins_and_null_is_a_key():
    v = K.ValueState(stored(K.value_state(pa.int64())), "k")
    v.update(pa.array(["a", "b", "a", None]), pa.array([1, 2, 3, 4]))
    assert v.get(pa.array(["a", "b", "c", None, "a"])).to_pylist() == [3, 2, None, 4, 3]
    v.clear(pa.array(["a", None]))
    assert v.get(pa.array(["a", "b", None])).to_pylist() == [None, 2, None]
    assert v.table().to_pylist() == [{"k": "b", "value": 2}]


def test_list_state_appends_in_order_and_updates_whole_lists():
    s = K.ListState(stored(K.list_state(pa.int64()), pa.int64()), "k")
    s.append(pa.array([1, 2, 1]), pa.array([10, 20, 11]))
    s.append(pa.array([1]), pa.array([12]))
    assert s.get(pa.array([2, 1, 3, 1])).to_pylist() == [[20], [10, 11, 12], [], [10, 11, 12]]
    s.update(pa.array([2, 3, 2]), pa.array([[1], [7, 8], [5, 6]], pa.list_(pa.int64())))
    assert s.get(pa.array([1, 2, 3])).to_pylist() == [[10, 11, 12], [5, 6], [7, 8]]
    s.clear(pa.array([1]))
    assert s.get(pa.array([1])).to_pylist() == [[]]


def test_map_state_put_get_remove_entries():
    m = K.MapState(stored(K.map_state(pa.string(), pa.float64())), "k")
    m.put(pa.array(["a", "a", "b", "a"]), pa.array(["x", "y", "x", "x"]), pa.array([1.0, 2.0, 3.0, 4.0]))
    assert m.get(pa.array(["a", "a", "b", "b"]), pa.array(["x", "y", "x", "y"])).to_pylist() == [
        4.0, 2.0, 3.0, None]
    m.remove(pa.array(["a"]), pa.array(["x"]))
    assert sorted(m.entries(pa.array(["a"])).to_pylist(), key=str) == [
        {"k": "a", "map_key": "y", "value": 2.0}]
    m.clear(pa.array(["a", "b"]))
    assert m.table().num_rows == 0


def test_timers_are_identified_by_key_domain_and_tag():
    t = K.Timers(K.StoredTable(K.timer_schema("k", pa.string()), lambda: None), "k", output_floor=5)
    t.set_event_time(pa.array(["a", "b"]), [10, 20], tag="x")
    t.set_event_time(pa.array(["a"]), 30, tag="x")               # moves a's timer x
    t.set_event_time(pa.array(["a"]), 15, tag="y", output_times=7)
    t.set_processing_time(pa.array(["a"]), 1_000, tag="x")         # another domain: a new timer
    rows = sorted(tuple(r.values()) for r in t.pending().to_pylist())
    assert rows == [("a", "event_time", "x", 30, 30), ("a", "event_time", "y", 15, 7),
                    ("a", "processing_time", "x", 1_000, 5), ("b", "event_time", "x", 20, 20)]
    t.delete(pa.array(["a", "b"]), tag="x")
    rows = sorted((r["k"], r["domain"], r["tag"]) for r in t.pending().to_pylist())
    assert rows == [("a", "event_time", "y"), ("a", "processing_time", "x")]
    with pytest.raises(K.TimerError, match="must be <= its time"):
        t.set_event_time(pa.array(["a"]), 10, output_times=11)
    with pytest.raises(K.TimerError, match="2 non-null int64 ms values expected, got 1"):
        t.set_event_time(pa.array(["a", "b"]), [10])
