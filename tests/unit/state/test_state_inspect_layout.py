"""Rebuilding a step's window and states from its checkpoint record (``wire.state.inspect_layout``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from wire.core.windowing import Session, Sliding, Tumbling
from wire.errors import CheckpointError
from wire.plan.fingerprint import readable
from wire.state import aggregations as A
from wire.state.inspect_layout import aggregator_of, process_layout_of, window_of, window_spec_of
from wire.state.keyed_state import list_state, map_state, value_state
from wire.state.top import max_by, min_by, top_k
from wire.state.user import aggregate

BUILT_INS = [A.count(), A.count("x"), A.sum("x"), A.min("x"), A.max("x"), A.mean("x"), A.first("x"),
             A.last("x"), A.collect("x"), top_k("x", 3, columns=["a", "b"], ties="all", largest=False),
             max_by("x"), min_by("x", columns=("a",))]


@pytest.mark.parametrize("agg", BUILT_INS, ids=lambda a: readable(a))
def test_every_built_in_aggregator_comes_back_from_its_record(agg):
    assert aggregator_of(readable(agg), "w") == agg


@pytest.mark.parametrize("window", [Tumbling("1h"), Sliding(10_000, 2_500), Session("30s")], ids=str)
def test_windows_come_back_from_their_record(window):
    assert window_of(readable(window), "w") == window


def test_a_user_aggregator_or_anything_else_is_refused_naming_the_way_out():
    user = aggregate(create=list, add=lambda a, x: a, merge=lambda a, b: a, result=len, column="x",
                     result_type=pa.int64())
    for text in (readable(user), "__import__('os').system('true')", "Count(column=x)", "Count(1)", "Sum(("):
        with pytest.raises(CheckpointError, match=r"step 'w'.*read_state\(\.\.\., flow=flow\)"):
            aggregator_of(text, "w")
    with pytest.raises(CheckpointError, match="unknown window"):
        window_of("Hopping(size=1 ms)", "w")


def test_a_window_spec_from_a_fingerprint():
    fp = {"kind": "window", "key": "k", "window": "Tumbling(size=10000 ms)", "allowed_lateness_ms": 5,
          "emit": "update", "aggregations": {"n": readable(A.count()), "m": readable(A.mean("x"))},
          "before_update": None, "after_update": "mod.cb"}
    spec = window_spec_of(fp, "k", "w")
    got = (spec.assigner, spec.allowed_lateness_ms, spec.key, spec.emit)
    assert got == (Tumbling(10_000), 5, "k", "update")
    assert spec.aggregations == (("n", A.count()), ("m", A.mean("x")))
    assert spec.needs_events  # a window with callbacks keeps its state whole, with its own fired flag


def test_a_process_layout_from_a_fingerprint_lists_states_in_bucket_order():
    states = {"z": value_state(pa.int64()), "a": list_state(pa.string()),
              "m": map_state(pa.string(), pa.float64())}
    fp = {"kind": "process", "state": {n: repr(s) for n, s in states.items()}}
    layout = process_layout_of(fp, "user", "p")
    assert layout.key == "user"
    assert [(n, s.kind) for n, s in layout.states] == [("a", "list"), ("m", "map"), ("z", "value")]
    assert dict(layout.states)["m"].map_key_type == pa.string()
    assert dict(layout.states)["m"].value_type == pa.float64()
    with pytest.raises(CheckpointError, match="not a value, list or map state"):
        process_layout_of({"state": {"x": "queue_state(int64)"}}, "user", "p")
