"""Decode once, locally (``wire.sources.kafka_source.handoff``): with a local master the planner
hands each admitted range's decoded records to the executors, who then never touch the broker,
and read exactly what they read by fetching and decoding the range themselves.

The expectation of every test is the reader's other path on the same input: a reader without
hand-over (not local) reading the same epochs from the same fake broker (``fake_broker``), and
the input itself (which records are malformed, which are future-dated).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadMaxRows

pytest.importorskip("confluent_kafka")
from tests.unit.sources.kafka_source.fake_broker import (
    Broker,
    fresh_cache,
    make_reader,
    topics,
)

import wire.sources.base.handoff as handoff_mod
from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy
from wire.sources.kafka_source import handoff
from wire.sources.kafka_source.read_ahead import Ahead
from wire.sources.kafka_source.reader import KafkaStreamReader

__all__ = ["fresh_cache"]  # the autouse fixture


@pytest.fixture(autouse=True)
def handoff_under_tmp_path(tmp_path, monkeypatch):
    """Hand-over directories go under the test's own directory."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(handoff_mod.tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv(handoff_mod.ROOT_ENV, str(tmp_path / "tmp"))


def no_broker(*_args, **_kwargs):
    raise AssertionError("an executor with the planner's hand-over fetched from the broker")


def task_output(reader: KafkaStreamReader, task) -> list[dict]:
    """A task's rows as the executor yields them (data, dead letters, metrics, watermarks)."""
    return [row for batch in reader.read(task) for row in pa.Table.from_batches([batch]).to_pylist()]


def data_of(rows: list[dict]) -> list[tuple]:
    return [(row["t"], row["k"]) for row in rows if row["__kind"] == envelope.KIND_DATA]


def dead_letters_of(rows: list[dict]) -> list[dict]:
    sides = [row for row in rows
             if row["__kind"] == envelope.KIND_SIDE and row["__port"] != envelope.METRICS_PORT]
    return [d for row in sides for d in envelope.decode_table(row["__blob"]).to_pylist()]


def epochs(r: KafkaStreamReader, budgets: list[int], total: int):
    """Plan epochs until every record is admitted; yield (start, end); commits each."""
    offset, i = r.initialOffset(), 0
    while offset["admitted"] < total:
        end = r.latestOffset(offset, ReadMaxRows(budgets[i % len(budgets)]))
        i += 1
        assert i < 200
        if end == offset:
            continue
        yield offset, end
        r.commit(end)
        offset = end


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topics(), st.lists(st.integers(3, 30), min_size=1, max_size=6),
       st.sampled_from([None, ("t",), ("k", "kafka_offset", "kafka_timestamp")]))
def test_an_executor_reads_the_handed_over_ranges_as_it_reads_them_from_the_broker(
        monkeypatch, data, budgets, columns):
    """Every epoch's every task: an executor's reader of a local planner's tasks (another reader
    of the same binding: an executor process's) yields the very rows, dead letters and counters
    that a reader without hand-over yields by fetching and decoding the same ranges, and never
    asks the broker."""
    broker, truth = data
    planner = make_reader(broker, monkeypatch, local=True, columns=columns)
    executor = make_reader(broker, monkeypatch, local=True, columns=columns)
    fetching = make_reader(broker, monkeypatch, columns=columns)
    monkeypatch.setattr(executor, "fetch_range", no_broker)
    for start, end in epochs(planner, budgets, len(truth)):
        for task in planner.partitions(start, end):
            assert task_output(executor, task) == task_output(fetching, task)
    planner.stop()


def test_a_missing_hand_over_means_the_executor_fetches(monkeypatch):
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(6)]
    recs[2] = (2, b"k", b"{broken", None)
    broker = Broker({0: recs}, {0: 6})
    planner = make_reader(broker, monkeypatch, local=True)
    start = planner.initialOffset()
    end = planner.latestOffset(start, ReadMaxRows(100))
    (task,) = planner.partitions(start, end)
    directory = planner.handoff()
    assert directory is not None and len(os.listdir(directory)) == 1
    expected = task_output(make_reader(broker, monkeypatch), task)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    executor = make_reader(broker, monkeypatch, local=True)
    assert task_output(executor, task) == expected
    assert [d["location"] for d in dead_letters_of(expected)] == ["t:0:2"]


def test_hand_over_files_go_once_their_epoch_committed_and_all_at_stop(monkeypatch):
    recs = [(o, b"k", json.dumps({"t": 10 * o, "k": "a"}).encode(), None) for o in range(9)]
    broker = Broker({0: recs}, {0: 9})
    planner = make_reader(broker, monkeypatch, local=True)
    start = planner.initialOffset()
    first = planner.latestOffset(start, ReadMaxRows(4))
    directory = planner.handoff()
    assert directory is not None
    files = set(os.listdir(directory))
    assert files == {handoff.handoff_name("t:0", 0, 4, 4)}
    second = planner.latestOffset(first, ReadMaxRows(4))  # plans after the first epoch committed
    assert set(os.listdir(directory)) == {handoff.handoff_name("t:0", 4, 8, 4)}
    planner.latestOffset(second, ReadMaxRows(4))
    assert set(os.listdir(directory)) == {handoff.handoff_name("t:0", 8, 9, 1)}
    planner.stop()
    assert not os.path.exists(directory) and planner.handoff() is None


def test_future_dated_records_read_from_a_hand_over_are_dead_letters_with_their_text(monkeypatch):
    """Records more than max_future_ms ahead of the epoch's processing time (the fake clock,
    1,000,000 ms): dead letters whose text is the record's value, as when fetched."""
    values = [json.dumps({"t": t, "k": "a"}).encode() for t in (10, 5_000_000, 20, 9_000_000)]
    broker = Broker({0: [(o, b"k", v, None) for o, v in enumerate(values)]}, {0: 4})
    policy = WatermarkPolicy(10, max_future_ms=1_000)
    planner = make_reader(broker, monkeypatch, local=True, watermark=policy)
    fetching = make_reader(broker, monkeypatch, watermark=policy)
    executor = make_reader(broker, monkeypatch, local=True, watermark=policy)
    monkeypatch.setattr(executor, "fetch_range", no_broker)
    start = planner.initialOffset()
    end = planner.latestOffset(start, ReadMaxRows(100))
    (task,) = planner.partitions(start, end)
    got = task_output(executor, task)
    assert got == task_output(fetching, task)
    assert data_of(got) == [(10, "a"), (20, "a")]
    assert [(d["location"], d["record"]) for d in dead_letters_of(got)] == [("t:0:1", values[1].decode()),
                                                                ("t:0:3", values[3].decode())]


def test_round_trip_of_a_range_with_malformed_records():
    """encode/decode by hand: 4 records, offsets 7, 8, 10, 11; the second and fourth malformed."""
    rows = pa.table({"t": pa.array([1, 3], pa.int64()), "k": pa.array(["a", "b"])})
    ahead = Ahead(np.array([7, 8, 10, 11]), np.array([1, 0, 3, 0]), np.array([True, False, True, False]),
                  rows, [b'{"t":1,"k":"a"}', b"{bad", b'{"t":3,"k":"b"}', b"\xff"],
                  {8: "invalid JSON", 11: "not UTF-8", 99: "another range's"})
    table = handoff.encode("t:0", 7, 12, ahead)
    read = handoff.decode(table, "t:0", 7, 12, 4)
    assert read is not None
    assert read.decoded.table.equals(rows)
    assert read.decoded.event_times.tolist() == [1, 3] and read.decoded.positions.tolist() == [0, 2]
    assert read.decoded.dead == [("t:0:8", "invalid JSON", "{bad"), ("t:0:11", "not UTF-8", "base64:/w==")]
    assert read.count == 4 and read.next == 12
    assert read.records([2]) == [("t:0:10", '{"t":3,"k":"b"}')]
    # not this range: the executor fetches
    assert handoff.decode(table, "t:0", 7, 13, 4) is None
    assert handoff.decode(table, "t:1", 7, 12, 4) is None
    assert handoff.decode(None, "t:0", 7, 12, 4) is None
