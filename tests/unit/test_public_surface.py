"""The typed public surface (issue 27, item 5): one exception tree, Literal modes, one list of names."""

from __future__ import annotations

import ast
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pytest

import wire
import wire.errors
from wire.api.stream import Stream
from wire.delivery.sink import Sink


def test_every_exception_of_wire_errors_is_a_wire_error():
    classes = [c for _, c in inspect.getmembers(wire.errors, inspect.isclass)
               if issubclass(c, BaseException) and c.__module__ == "wire.errors"]
    assert {c.__name__ for c in classes} >= {"ProcessFunctionError", "StagingFailed", "TimerError"}
    assert [c.__name__ for c in classes if not issubclass(c, wire.WireError)] == []


def test_the_moved_exceptions_keep_their_old_import_names():
    from wire.runtime.dataplane import StagingFailed
    from wire.state.keyed_state import TimerError
    from wire.state.process import ProcessFunctionError

    assert ProcessFunctionError is wire.errors.ProcessFunctionError is wire.ProcessFunctionError
    assert StagingFailed is wire.errors.StagingFailed
    assert TimerError is wire.errors.TimerError
    assert issubclass(TimerError, ValueError)  # what it was before: ``except ValueError`` still catches it
    assert issubclass(ProcessFunctionError, RuntimeError)


def test_a_misused_timer_raises_a_wire_error():
    from wire.state.keyed_state import StoredTable, Timers, timer_schema

    timers = Timers(StoredTable(timer_schema("k", pa.string()), lambda: None), "k", output_floor=10)
    with pytest.raises(wire.WireError, match="below the operator's output"):
        timers.set_event_time(pa.array(["a"]), 20, tag="t", output_times=5)


def _type_checking_names(init: Path) -> set[str]:
    """The names ``wire/__init__.py`` imports for type checkers (``if TYPE_CHECKING:``)."""
    tree = ast.parse(init.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    imported = {a.asname for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names if a.asname}
    assigned = {t.id for n in block.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    return imported | assigned


def test_all_is_built_from_the_one_table_and_agrees_with_the_static_imports():
    assert wire.__all__ == sorted(wire._LAZY)
    assert _type_checking_names(Path(wire.__file__)) == set(wire.__all__)
    for name in wire.__all__:
        assert getattr(wire, name) is not None
    assert set(dir(wire)) >= set(wire.__all__)


def test_throttle_mode_is_a_literal_checked_when_the_flow_is_built():
    hints = typing.get_type_hints(Stream.throttle)
    assert typing.get_args(hints["mode"]) == ("pause", "overflow")
    flow = wire.Flow("f")
    events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t")
    with pytest.raises(wire.ConfigError, match=r"invalid mode='drop'; accepted: 'pause' or 'overflow'"):
        events.throttle(10, mode="drop")  # type: ignore[arg-type]


def test_sink_guarantee_is_a_literal_checked_when_the_sink_is_added():
    hints = typing.get_type_hints(Sink, include_extras=True)
    assert typing.get_args(typing.get_args(hints["guarantee"])[0]) == (
        "exactly_once", "idempotent", "at_least_once")

    @dataclass(frozen=True)
    class Sloppy(Sink):
        guarantee: ClassVar[str] = "best_effort"  # type: ignore[assignment]

        def write_epoch(self, epoch: int, table: pa.Table) -> None:
            pass

    flow = wire.Flow("f")
    events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t")
    with pytest.raises(wire.ConfigError, match=r"step 'out': invalid guarantee='best_effort'; accepted: "
                                               r"'exactly_once' or 'idempotent' or 'at_least_once'"):
        events.sink(Sloppy(), name="out")
    assert [n.step for n in flow.plan().nodes] == ["source_1"]


def test_a_wrong_connector_is_refused_with_public_names_only():
    flow = wire.Flow("f")
    with pytest.raises(wire.ConfigError) as info:
        flow.source("in/*.csv", event_time="t")  # type: ignore[arg-type]
    message = str(info.value)
    assert "wire.sources.Source" not in message
    for name in ("files", "kafka", "redis_stream", "http_ingest"):
        assert f"{name}(...)" in message and name in wire.sources.__all__


def test_dead_letters_of_a_step_that_is_not_a_source_is_refused():
    flow = wire.Flow("f")
    events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t", name="events")
    assert events.dead_letters().ref.port == "dead_letter"
    for stream in (events.filter("t > 0"), flow.dead_letters()):
        with pytest.raises(wire.PlanError, match="is not a source; only sources reject records"):
            stream.dead_letters()
