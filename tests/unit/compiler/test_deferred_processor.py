"""``wire.compiler.deferred_processor``: Spark's driver-side set-up of a keyed operator declares
the same state variables as the operator, without importing pandas or Wire's kernels; the
operator itself is unpickled at its first rows and bound to those state variables."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pyspark import cloudpickle

from wire.compiler.deferred_processor import DeferredProcessor, StateDeclaration, declare
from wire.compiler.join_stage import JoinProcessor
from wire.compiler.keyed import OPERATOR_STATE, SEGMENT_KEY, SEGMENT_VALUE, KeyedProcessor
from wire.compiler.window_stage import WindowProcessor


class Handle:
    """A StatefulProcessorHandle that records the declarations."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def getValueState(self, name: str, schema: object) -> tuple[str, str]:
        self.calls.append(("value", name, schema))
        return ("value", name)

    def getMapState(self, name: str, key: object, value: object) -> tuple[str, str]:
        self.calls.append(("map", name, key, value))
        return ("map", name)


class Recorder:
    """A stand-in operator: what it was bound to, and the rows it saw."""

    STATES = (StateDeclaration("value", "a", OPERATOR_STATE),
              StateDeclaration("map", "b", SEGMENT_VALUE, SEGMENT_KEY))

    def __init__(self) -> None:
        self.bound: dict[str, Any] | None = None
        self.seen: list[Any] = []

    def bind(self, states: dict[str, Any]) -> None:
        self.bound = states

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
        self.seen.append((key, list(rows)))
        yield {"key": key, "bound": sorted(self.bound or {})}

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        self.seen.append(("initial", key))

    def close(self) -> None:
        self.seen.append("closed")


def test_keyed_processors_declare_what_the_operator_state_layout_reads():
    """The names and schemas are the checkpoint's: a change would orphan existing state."""
    handle = Handle()
    declare(handle, KeyedProcessor.STATES)
    assert handle.calls == [("value", "operator", OPERATOR_STATE),
                            ("map", "segments", SEGMENT_KEY, SEGMENT_VALUE)]
    joined = Handle()
    declare(joined, JoinProcessor.STATES)
    assert [c[1] for c in joined.calls] == ["operator", "segments", "keyindex"]


def test_rows_reach_the_operator_bound_to_the_declared_states():
    deferred = cloudpickle.loads(cloudpickle.dumps(DeferredProcessor(Recorder())))
    deferred.init(Handle())
    assert deferred._real is None  # init alone (the driver's set-up) never unpickles the operator
    out = list(deferred.handleInputRows((3,), iter([1, 2]), None))
    assert out == [{"key": (3,), "bound": ["a", "b"]}]
    real = deferred.real()
    assert real.bound == {"a": ("value", "a"), "b": ("map", "b")} and real.seen == [((3,), [1, 2])]
    deferred.handleInitialState((4,), None, None)
    deferred.init(Handle())  # a reused worker's next task: the same operator, bound again
    deferred.close()
    assert real.seen[1:] == [("initial", (4,)), "closed"]
    again = cloudpickle.loads(cloudpickle.dumps(deferred))  # pickled without the unpickled operator
    assert again._real is None


def test_an_unknown_kind_is_refused_with_the_accepted_ones():
    with pytest.raises(ValueError, match="accepted: 'value', 'map'"):
        declare(Handle(), [StateDeclaration("list", "x", OPERATOR_STATE)])


def test_the_drivers_set_up_imports_neither_pandas_nor_the_operators_module():
    """What Spark's ``transform_with_state_driver_worker`` does: unpickle the processor, call
    ``init`` and ``close``, in a fresh Python."""
    deferred = DeferredProcessor(WindowProcessor.__new__(WindowProcessor))
    script = (
        "import sys\n"
        "from pyspark import cloudpickle\n"
        "p = cloudpickle.loads(sys.stdin.buffer.read())\n"
        "class H:\n"
        "    def getValueState(self, *a): return a\n"
        "    def getMapState(self, *a): return a\n"
        "p.init(H()); p.close()\n"
        "heavy = [m for m in ('pandas', 'pyarrow', 'numpy', 'wire.compiler.window_stage', 'wire.state')\n"
        "         if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], input=cloudpickle.dumps(deferred),
                          capture_output=True, check=True)
    assert done.stdout.decode().strip() == ""
