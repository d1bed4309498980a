"""Kafka source throughput: Wire's Kafka source vs a plain confluent-kafka consumer, same topic, same run.

For 1, 4 and 16 partitions: a topic of ``--events`` JSON records (``{"ts", "key",
"value"}``, keys spread over the partitions) on a throw-away noida-db broker (or at
``--bootstrap``), then

* **Wire**: ``wire.sources.kafka`` -> ``wire.sinks.parquet`` (the flow of
  ``bench/source_cost.py``, no operator), ``max_events_per_epoch=--per-epoch``. Events/s
  over the data epochs: the driver's count of admitted events is sampled every 20 ms; the
  rate is (N - events of the first epoch) / (time the count reached N - time the first
  epoch finished), so the query's start and first epoch are left out.
* **plain**: a confluent-kafka ``Consumer`` assigned every partition from offset 0, in one
  Python thread, ``consume(1000)`` and ``json.loads`` of every value, from its first
  record to its N-th.

Run: ``.venv/bin/python bench/kafka_source.py [--events 100000] [--per-epoch 10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import wire
from wire.sources.kafka_source import kafka
from wire.testing.kafka import KafkaBroker

SCHEMA_FIELDS = [("ts", "int64"), ("key", "string"), ("value", "float64")]


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, replication_factor=1)]).values():
        f.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        value = json.dumps({"ts": 1_700_000_000_000 + i, "key": f"k{i % 64}", "value": i * 0.5})
        producer.produce(topic, value=value.encode(), key=f"k{i % 64}".encode(), partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("records not delivered within 120 s")


def run_plain(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, t0 = 0, None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for msg in c.consume(1000, 1.0):
            if msg.error():
                continue
            if t0 is None:
                t0 = time.perf_counter()
            json.loads(msg.value())
            got += 1
    t1 = time.perf_counter()
    c.close()
    if got < n or t0 is None:
        raise SystemExit(f"plain consumer read {got} of {n}")
    return (n - 1) / (t1 - t0)


def run_wire(spark, bootstrap: str, topic: str, n: int, per_epoch: int, work: Path) -> tuple[float, int]:
    import pyarrow as pa

    schema = pa.schema([(name, getattr(pa, t)()) for name, t in SCHEMA_FIELDS])
    flow = wire.Flow(f"kafka-bench-{topic}")
    events = flow.source(kafka(bootstrap, topic, group=f"wire-{topic}", schema=schema), event_time="ts",
                         key="key", max_events_per_epoch=per_epoch, name="events")
    events.sink(wire.sinks.parquet(work / f"out-{topic}"))
    running = flow.start(str(work / f"ck-{topic}"), spark=spark)
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + 600
    try:
        while True:
            got = running.summary.input_events
            now = time.perf_counter()
            if first is None and got > 0:
                first = (now, got)
            if got >= n:
                break
            if time.monotonic() > deadline or not running.is_active():
                raise SystemExit(f"wire read {got} of {n}: {running.last_error}")
            time.sleep(0.02)
    finally:
        running.stop()
    assert first is not None
    t1, n1 = first
    return (n - n1) / (now - t1), len(running.summary.epoch_wall_seconds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--per-epoch", type=int, default=10_000)
    p.add_argument("--partitions", default="1,4,16")
    p.add_argument("--bootstrap", default=None, help="a broker to use instead of a throw-away noida-db")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wire-kafka-bench-"))
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = KafkaBroker().start()
        bootstrap = broker.bootstrap
    spark = wire.spark(args.master, log_file=work / "spark.log")
    print(f"load average at start (1, 5, 15 min): {os.getloadavg()}; cpus {os.cpu_count()}", flush=True)
    print(f"{args.events:,} events per topic, {args.per_epoch:,} per Wire epoch, Spark {args.master}")
    print(f"{'partitions':>10} {'wire ev/s':>11} {'plain ev/s':>11} {'wire/plain':>10} {'wire epochs':>11}")
    try:
        for parts in (int(x) for x in args.partitions.split(",")):
            topic = f"bench-{parts}-{os.getpid()}"
            produce(bootstrap, topic, parts, args.events)
            plain = run_plain(bootstrap, topic, parts, args.events)
            w, epochs = run_wire(spark, bootstrap, topic, args.events, args.per_epoch, work)
            print(f"{parts:>10} {w:>11,.0f} {plain:>11,.0f} {w / plain:>10.3f} {epochs:>11}", flush=True)
    finally:
        if broker is not None:
            broker.stop()
    print(f"load average at end (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
