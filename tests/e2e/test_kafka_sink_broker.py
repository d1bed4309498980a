"""Kafka sink against a real broker (noida-db), without Spark: transactions, replay skipped, fencing."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from wire.sinks.kafka_sink import kafka

ck = pytest.importorskip("confluent_kafka")


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[dict]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": isolation,
                     "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            msgs = c.consume(1000, timeout=0.2)
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        return out
                    continue
                out.append(json.loads(m.value()) | {"_epoch": int(dict(m.headers())["wire-epoch"])})
    finally:
        c.close()


def rows(epoch: int, n: int = 3) -> pa.Table:
    return pa.table({"k": [f"k{i}" for i in range(n)], "epoch_row": [epoch * 10 + i for i in range(n)]})


def test_one_transaction_per_epoch_and_a_replayed_epoch_is_skipped(kafka_broker):
    b = kafka_broker
    b.create_topic("sink_out", partitions=1)
    sink = kafka(b.bootstrap, "sink_out", key="k")
    sink.open(flow_id="f", sink_id="s", checkpoint_id="c1")
    sink.write_epoch(0, rows(0))
    sink.write_epoch(1, rows(1))
    sink.close()
    # a crash after epoch 1 was published but before Spark marked it complete: the restart replays it
    again = kafka(b.bootstrap, "sink_out", key="k")
    again.open(flow_id="f", sink_id="s", checkpoint_id="c1")
    again.write_epoch(1, rows(1))
    again.write_epoch(2, rows(2))
    # a zombie: a transaction left open by a producer that died
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "wire.f.s"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("sink_out", value=b'{"k": "zombie"}', headers=[("wire-epoch", b"3")])
    producer.flush(10)
    third = kafka(b.bootstrap, "sink_out", key="k")
    third.open(flow_id="f", sink_id="s", checkpoint_id="c1")  # fences the zombie, aborting its transaction
    third.write_epoch(3, rows(3))
    seen = read_all(b.bootstrap, "sink_out")
    assert sorted(r["epoch_row"] for r in seen) == [e * 10 + i for e in range(4) for i in range(3)]
    assert {r["_epoch"] for r in seen if r["epoch_row"] // 10 == 2} == {2}
    # a new checkpoint of the same flow starts its epochs again; its markers are its own
    fresh = kafka(b.bootstrap, "sink_out", key="k")
    fresh.open(flow_id="f", sink_id="s", checkpoint_id="c2")
    fresh.write_epoch(0, rows(9, 1))
    assert len(read_all(b.bootstrap, "sink_out")) == 13


def test_at_least_once_sink_writes_a_replay_again(kafka_broker):
    b = kafka_broker
    b.create_topic("plain_out", partitions=1)
    sink = kafka(b.bootstrap, "plain_out", transactional=False)
    assert sink.guarantee == "at_least_once"
    sink.open(flow_id="f", sink_id="p", checkpoint_id="c")
    sink.write_epoch(0, rows(0, 2))
    sink.write_epoch(0, rows(0, 2))
    sink.close()
    assert len(read_all(b.bootstrap, "plain_out", "read_uncommitted")) == 4
