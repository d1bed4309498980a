"""``RunningFlow.last_error``: the dispatcher's error first, else the stopped query's (no Spark:
the query and the dispatcher are stand-ins with the attributes the property reads)."""

from __future__ import annotations

from types import SimpleNamespace

from wire.runtime.runner import ERROR_CHARS, RunningFlow


class Query:
    def __init__(self, active: bool, failure: object | None) -> None:
        self.isActive, self._failure = active, failure
        self.asked = 0

    def exception(self) -> object | None:
        self.asked += 1
        return self._failure


def flow(query: Query, dispatcher_error: str | None = None) -> RunningFlow:
    running = object.__new__(RunningFlow)
    running.query = query  # type: ignore[assignment]
    running._dispatcher = SimpleNamespace(last_error=dispatcher_error)  # type: ignore[assignment]
    return running


def test_a_query_that_died_while_planning_reports_sparks_message():
    failure = SimpleNamespace(desc="Python worker failed to connect back")
    assert flow(Query(False, failure)).last_error == "Python worker failed to connect back"


def test_a_sinks_error_wins_and_a_running_or_cleanly_stopped_query_has_none():
    failure = SimpleNamespace(desc="later")
    assert flow(Query(False, failure), "epoch 3: sink 'out' raised OSError()").last_error == (
        "epoch 3: sink 'out' raised OSError()")
    running = Query(True, None)
    assert flow(running).last_error is None and running.asked == 0  # not asked while it runs
    assert flow(Query(False, None)).last_error is None


def test_a_long_message_is_cut():
    text = "x" * (ERROR_CHARS + 10)
    got = flow(Query(False, RuntimeError(text))).last_error
    assert got == "x" * ERROR_CHARS + " ..."
