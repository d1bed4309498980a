"""PySpark's call-site capture is off while Wire compiles a flow, and only then."""

from __future__ import annotations

import threading

import pytest
from pyspark.errors import utils
from pyspark.sql import functions as F

import wire
from wire.compiler.call_sites import without_call_sites
from wire.compiler.plan_compiler import compile_plan
from wire.examples.nexmark_source import nexmark
from wire.testing import MemorySink


@pytest.fixture
def capture_on(monkeypatch):
    monkeypatch.setattr(utils, "_enable_debugging_cache", True)


def test_off_inside_restored_after_also_when_nested_and_raising(capture_on):
    with without_call_sites():
        assert utils.is_debugging_enabled() is False
        with pytest.raises(RuntimeError), without_call_sites():
            raise RuntimeError("a failed compilation")
        assert utils.is_debugging_enabled() is False  # the outer one still runs
    assert utils.is_debugging_enabled() is True


def test_threads_overlapping_restore_the_setting_when_the_last_one_ends(capture_on):
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def first():
        with without_call_sites():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second():
        first_in.wait(5)
        with without_call_sites():
            second_in.set()
            first_out.wait(5)
            seen.append(utils.is_debugging_enabled())  # the first ended: still off for this one

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert utils.is_debugging_enabled() is True


@pytest.mark.spark
def test_compiling_captures_no_call_site_and_a_users_column_afterwards_does(spark, capture_on, monkeypatch):
    captured = []
    real = utils._capture_call_site
    monkeypatch.setattr(utils, "_capture_call_site", lambda depth: captured.append(depth) or real(depth))
    flow = wire.Flow("call-sites")
    events = flow.source(nexmark(events=100), event_time="date_time", name="events")
    (events.filter("kind = 'bid'").key_by("auction_id").window(wire.Tumbling("10s"))
     .aggregate(bids=wire.count(), name="counts").sink(MemorySink()))
    compile_plan(flow.plan(), spark, 2)
    assert captured == []
    F.col("price") + 1  # a user's own Column, after the compilation
    assert captured != []
