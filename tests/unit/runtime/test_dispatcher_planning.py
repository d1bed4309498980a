"""The epoch's job runs with adaptive query execution off in the query's own session, set before
the job starts (``wire.runtime.dispatcher``): with it on, two scans of one Python data source are
planned by two threads at once and the query hangs. No Spark: the epoch's DataFrame is a
stand-in that records what is done to it, in order."""

from __future__ import annotations

from types import SimpleNamespace

from wire.runtime.dataplane import RESULT_SCHEMA
from wire.runtime.dispatcher import SERIAL_PLANNING, EpochDispatcher
from wire.runtime.summary import RunSummary


class Batch:
    """An epoch's DataFrame: its session's conf and the one job run over it."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.sparkSession = SimpleNamespace(conf=SimpleNamespace(set=lambda k, v: log.append(("conf", k, v))))

    def mapInArrow(self, writer, schema):
        self.log.append(("job", writer.epoch))
        return SimpleNamespace(toArrow=lambda: RESULT_SCHEMA.empty_table())


def test_adaptive_execution_is_off_in_the_querys_session_before_each_epochs_job():
    log: list = []
    dispatcher = EpochDispatcher(SimpleNamespace(terminal_step="out"), [], RunSummary("flow"),
                                 max_epochs=None, progress=None)
    dispatcher(Batch(log), 0)
    dispatcher(Batch(log), 1)
    assert SERIAL_PLANNING == {"spark.sql.adaptive.enabled": "false"}
    assert log == [("conf", "spark.sql.adaptive.enabled", "false"), ("job", 0),
                   ("conf", "spark.sql.adaptive.enabled", "false"), ("job", 1)]
