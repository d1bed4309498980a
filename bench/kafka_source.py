"""Kafka source throughput: Wire's Kafka source vs a plain confluent-kafka consumer, same topic, same run.

Two modes.

``--mode window`` (issue 25, item 6): one topic of ``--events`` JSON records (``{"ts", "key",
"value"}``, 1,000 keys, 10 events per ms of event time with up to 499 ms of disorder, each
key on partition ``key mod --partitions``), then one end record per partition (key ``end``,
an event time past the last window's end plus the delay) so that every window closes; then

* **plain**: a confluent-kafka ``Consumer`` assigned every partition from offset 0, in one
  Python thread: ``consume(10000)``, ``json.loads`` of every value and a dict count per
  (key, 10 s window), from its first record to its N-th; its counts are checked against
  pandas';
* **Wire**: ``wire.sources.kafka`` -> ``window(wire.Tumbling("10s")).aggregate(n=wire.count())``
  -> ``wire.sinks.parquet``, watermark delay 1 s (no event is late), ``max_events_per_epoch
  = --per-epoch``, the source's ``commit_interval = --commit-interval``. Reported: events/s
  steady, (N - the first epoch's events) / (time the count of admitted events reached N -
  time the first epoch committed), and with start-up, N / (time from ``flow.start`` to the
  count reaching N), the count sampled every 50 ms; the epochs' durations (time between
  epoch commits) and Spark's own per-epoch durations (``latestOffset`` is the planning,
  ``addBatch`` the epoch's job); the load average. The windows written are checked against
  pandas' count per (key, 10 s window) of the produced events.

``--mode passthrough`` (the first measurement): for each of ``--partitions`` (1,4,16) a topic
of ``--events`` records (64 keys, spread over the partitions round-robin), Wire's source
straight into ``wire.sinks.parquet`` (no operator; rate from the first epoch's end), and a
plain consumer loop (``consume(1000)``, ``json.loads``).

The broker is a throw-away noida-db (or ``--bootstrap``); ``--topic`` reuses a topic this
script produced earlier on that broker (window mode; nothing is produced then).

Run: ``.venv/bin/python bench/kafka_source.py --mode window [--events 2000000] [--per-epoch 300000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from inspect import signature
from pathlib import Path
from typing import Any

import numpy as np

import wire
from wire.sources.kafka_source import kafka
from wire.testing.kafka import KafkaBroker

SCHEMA_FIELDS = [("ts", "int64"), ("key", "string"), ("value", "float64")]
BASE_MS = 1_700_000_000_000
KEYS = 1_000
WINDOW_MS = 10_000
PER_MS = 10
"""Events per ms of event time (window mode): 2,000,000 events span 200 s, 20 windows per key."""
DISORDER_MS = 500
CLIENT_CONFIG = {"receive.message.max.bytes": 2_147_483_647}
"""Window mode, every consumer (Wire's and the plain one): noida-db 0.2.3 ignores ``fetch.max.bytes``
and ``max.partition.fetch.bytes`` and answers a fetch with everything after the fetch offset
(128 MB for 2,000,000 events), above librdkafka's default response limit (100 MB)."""


def end_ms(n: int) -> int:
    """The end records' event time: past the last window's end plus the delay (every window closes)."""
    return BASE_MS + n // PER_MS + WINDOW_MS + 2_000


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def tree_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) of process ``pid`` and its descendants (Linux /proc); None if unknown."""
    if pid is None:
        return None
    total, todo, tick = 0.0, [pid], os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return total


def wait_idle(pid: int | None, *, quiet_s: float = 3.0, timeout_s: float = 120.0) -> None:
    """Wait until the broker used under 5 % of a CPU for ``quiet_s`` (noida-db writes its whole data
    file some seconds after a change: produced records, committed group offsets)."""
    if pid is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = tree_cpu_s(pid) or 0.0
        time.sleep(quiet_s)
        if (tree_cpu_s(pid) or 0.0) - before < 0.05 * quiet_s:
            return


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, replication_factor=1)]).values():
        f.result(timeout=30)


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        value = json.dumps({"ts": 1_700_000_000_000 + i, "key": f"k{i % 64}", "value": i * 0.5})
        producer.produce(topic, value=value.encode(), key=f"k{i % 64}".encode(), partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("records not delivered within 120 s")


# -- window mode -------------------------------------------------------------------------


def window_events(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The events of the window mode: key index (0..999) and event time (ms) of event ``i``."""
    i = np.arange(n, dtype=np.int64)
    keys = (i * 7) % KEYS
    ts = BASE_MS + i // PER_MS - (i * 7919) % DISORDER_MS
    return keys, ts


def key_name(k: int) -> str:
    return f"k{k:03d}"


def produce_window_topic(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    """Produce the window mode's events and one end record per partition; return the seconds taken."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, partitions)
    keys, ts = window_events(n)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    t0 = time.perf_counter()
    names = [key_name(k).encode() for k in range(KEYS)]
    for j, (k, t) in enumerate(zip(keys.tolist(), ts.tolist(), strict=True)):
        value = b'{"ts": %d, "key": "%s", "value": %d.5}' % (t, names[k], j % 1000)
        while True:
            try:
                producer.produce(topic, value=value, key=names[k], partition=k % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if j % 20_000 == 0:
            producer.poll(0)
    for p in range(partitions):
        producer.produce(topic, value=b'{"ts": %d, "key": "end", "value": 0}' % end_ms(n), key=b"end",
                         partition=p)
    if producer.flush(300):
        raise SystemExit("records not delivered within 300 s")
    return time.perf_counter() - t0


def oracle(n: int) -> dict[tuple[str, int], int]:
    """pandas' count per (key, window start ms) of the produced events (not the end records)."""
    import pandas as pd

    keys, ts = window_events(n)
    df = pd.DataFrame({"key": keys, "start": ts // WINDOW_MS * WINDOW_MS})
    counts = df.groupby(["key", "start"]).size()
    return {(key_name(int(k)), int(s)): int(c) for (k, s), c in counts.items()}


def wire_windows(out: Path) -> dict[tuple[str, int], int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(out.glob("**/*.parquet"))
    if not files:
        return {}
    t = pa.concat_tables([pq.read_table(f, columns=["key", "window_start", "n"]) for f in files])
    starts = t.column("window_start").cast(pa.timestamp("ms", "UTC")).cast(pa.int64()).to_pylist()
    got: dict[tuple[str, int], int] = {}
    for k, s, c in zip(t.column("key").to_pylist(), starts, t.column("n").to_pylist(), strict=True):
        if (k, s) in got:
            raise SystemExit(f"window ({k}, {s}) written twice")
        got[(k, s)] = c
    return got


def plain_window(bootstrap: str, topic: str, partitions: int, n: int) -> dict[str, Any]:
    """A plain consumer loop: decode each JSON value and count per (key, 10 s window)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{topic}-{os.getpid()}",
                  "enable.auto.commit": False, **CLIENT_CONFIG})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    counts: Counter[tuple[str, int]] = Counter()
    got, t0 = 0, None
    loads = json.loads
    deadline = time.monotonic() + 600
    while got < n and time.monotonic() < deadline:
        for msg in c.consume(10_000, 1.0):
            if msg.error():
                continue
            if t0 is None:
                t0 = time.perf_counter()
            obj = loads(msg.value())
            if obj["key"] != "end":
                counts[(obj["key"], obj["ts"] // WINDOW_MS * WINDOW_MS)] += 1
                got += 1
    t1 = time.perf_counter()
    c.close()
    if got < n or t0 is None:
        raise SystemExit(f"plain consumer read {got} of {n}")
    return {"rate": (n - 1) / (t1 - t0), "seconds": t1 - t0, "counts": counts}


def run_wire_window(
    spark: Any, bootstrap: str, topic: str, n: int, partitions: int, per_epoch: int, work: Path,
    expected: dict[tuple[str, int], int], target_epoch: str | None, commit_interval: str,
) -> dict[str, Any]:
    import pyarrow as pa

    schema = pa.schema([(name, getattr(pa, t)()) for name, t in SCHEMA_FIELDS])
    tag = f"{topic}-{os.getpid()}-{int(time.time())}"
    out = work / f"windows-{tag}"
    flow = wire.Flow(f"kafka-window-{tag}")
    extra = {} if target_epoch is None else {"target_epoch_duration": target_epoch}
    # a Wire before commit_interval (commits after every epoch) runs this bench too: before/after figures
    known = "commit_interval" in signature(kafka).parameters
    interval = {"commit_interval": commit_interval} if known else {}
    src = kafka(bootstrap, topic, group=f"wire-{tag}", schema=schema, config=CLIENT_CONFIG, **interval)
    events = flow.source(src, event_time="ts",
                         key="key", watermark=wire.BoundedOutOfOrderness("1s"),
                         max_events_per_epoch=per_epoch, name="events", **extra)
    (events.window(wire.Tumbling("10s")).aggregate(n=wire.count(), name="counts")
     .sink(wire.sinks.parquet(out)))
    t_start = time.perf_counter()
    running = flow.start(str(work / f"ck-{tag}"), spark=spark)
    first: tuple[float, int] | None = None
    commits: list[tuple[float, int]] = []
    deadline = checked = time.monotonic() + 900
    checked -= 900
    total = sum(expected.values())
    done_at = None
    try:
        while True:
            got = running.summary.input_events
            now = time.perf_counter()
            if got and (not commits or commits[-1][1] != got):
                commits.append((now, got))
            if first is None and got > 0:
                first = (now, got)
            if got >= n + partitions and done_at is None:  # the data events and the end records
                done_at = now
            if done_at is not None:
                if sum(running.summary.rows_written.values()) and sum(wire_windows(out).values()) >= total:
                    break
                if now - done_at > 120:
                    break
            if time.monotonic() > checked + 1:  # a call into the JVM: once a second
                checked = time.monotonic()
                if checked > deadline or not running.is_active():
                    raise SystemExit(f"wire read {got} of {n}: {running.last_error}")
            time.sleep(0.05 if done_at is None else 0.5)
    finally:
        progress = [json.loads(p.json) for p in running.query.recentProgress]
        summary = running.stop()
    assert first is not None and done_at is not None
    t1, n1 = first
    walls = summary.epoch_wall_seconds
    got_windows = wire_windows(out)
    return {
        "steady": (n - n1) / (done_at - t1),
        "with_startup": n / (done_at - t_start),
        "first_epoch_s": t1 - t_start,
        "to_n_s": done_at - t_start,
        "epochs": len(walls),
        "epoch_s": walls,
        "first_events": n1,
        "equal": got_windows == expected,
        "windows": len(got_windows),
        "expected_windows": len(expected),
        "late": summary.total("late"),
        "malformed": summary.total("malformed"),
        "progress": progress,
    }


def window_mode(args: argparse.Namespace, bootstrap: str, work: Path, broker_pid: int | None) -> None:
    n, parts = args.events, int(args.partitions.split(",")[0])
    topic = args.topic
    print(f"cpus {os.cpu_count()}; load average (1, 5, 15 min) at start: {load()}", flush=True)
    if topic is None:
        topic = f"win-{parts}-{os.getpid()}"
        secs = produce_window_topic(bootstrap, topic, parts, n)
        print(f"produced {n:,} events (+{parts} end records) to {topic!r} ({parts} partitions) "
              f"in {secs:.1f} s; load {load()}", flush=True)
    expected = oracle(n)
    wait_idle(broker_pid)
    if not args.skip_plain:
        print(f"plain consumer: load at start {load()}", flush=True)
        plain = plain_window(bootstrap, topic, parts, n)
        ok = dict(plain["counts"]) == expected
        print(f"plain consumer: {plain['rate']:,.0f} ev/s ({plain['seconds']:.1f} s), counts equal "
              f"pandas: {ok}; load at end {load()}", flush=True)
    conf = dict(kv.split("=", 1) for kv in args.spark_conf)
    spark = wire.spark(args.master, conf, log_file=work / "spark.log")
    for run in range(args.repeat):
        print(f"wire run {run + 1}: {n:,} events, max_events_per_epoch={args.per_epoch:,}, "
              f"commit_interval={args.commit_interval}, Spark {args.master} {conf or ''}; "
              f"load at start {load()}", flush=True)
        wait_idle(broker_pid)
        cpu0 = tree_cpu_s(broker_pid)
        r = run_wire_window(spark, bootstrap, topic, n, parts, args.per_epoch, work, expected,
                            args.target_epoch, args.commit_interval)
        cpu1 = tree_cpu_s(broker_pid)
        if cpu0 is not None and cpu1 is not None:
            print(f"  broker CPU during the run (start to the last window written): {cpu1 - cpu0:.1f} s",
                  flush=True)
        steady = r["epoch_s"][1:] or r["epoch_s"]
        print(f"wire run {run + 1}: steady {r['steady']:,.0f} ev/s, "
              f"with start-up {r['with_startup']:,.0f} ev/s "
              f"(first epoch committed after {r['first_epoch_s']:.1f} s with {r['first_events']:,} events; "
              f"N reached after {r['to_n_s']:.1f} s); {r['epochs']} epochs; epoch s after the first: "
              f"median {statistics.median(steady):.2f}, max {max(steady):.2f}; "
              f"windows {r['windows']:,} of {r['expected_windows']:,}, equal pandas: {r['equal']}; "
              f"late {r['late']}, malformed {r['malformed']}; load at end {load()}", flush=True)
        print("  epoch durations (s): " + " ".join(f"{s:.2f}" for s in r["epoch_s"]), flush=True)
        print("  Spark's progress per epoch (ms): batch rows trigger = latestOffset + addBatch + walCommit "
              "+ commitOffsets + other", flush=True)
        for p in r["progress"]:
            d = p.get("durationMs", {})
            ms = [d.get(k, 0) for k in ("latestOffset", "addBatch", "walCommit", "commitOffsets")]
            total = d.get("triggerExecution", 0)
            print(f"    {p['batchId']:>3} {p.get('numInputRows', 0):>8} {total:>6} = "
                  + " + ".join(f"{x:>5}" for x in ms) + f" + {total - sum(ms):>5}", flush=True)
        if not r["equal"]:
            raise SystemExit("Wire's windows differ from pandas'")


# -- passthrough mode ----------------------------------------------------------------------


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


def run_wire(spark: Any, bootstrap: str, topic: str, n: int, per_epoch: int, work: Path) -> tuple[float, int]:
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


def passthrough_mode(args: argparse.Namespace, bootstrap: str, work: Path) -> None:
    spark = wire.spark(args.master, log_file=work / "spark.log")
    print(f"load average at start (1, 5, 15 min): {load()}; cpus {os.cpu_count()}", flush=True)
    print(f"{args.events:,} events per topic, {args.per_epoch:,} per Wire epoch, Spark {args.master}")
    print(f"{'partitions':>10} {'wire ev/s':>11} {'plain ev/s':>11} {'wire/plain':>10} {'wire epochs':>11}")
    for parts in (int(x) for x in args.partitions.split(",")):
        topic = f"bench-{parts}-{os.getpid()}"
        produce(bootstrap, topic, parts, args.events)
        plain = run_plain(bootstrap, topic, parts, args.events)
        w, epochs = run_wire(spark, bootstrap, topic, args.events, args.per_epoch, work)
        print(f"{parts:>10} {w:>11,.0f} {plain:>11,.0f} {w / plain:>10.3f} {epochs:>11}", flush=True)
    print(f"load average at end (1, 5, 15 min): {load()}")


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--mode", choices=("window", "passthrough"), default="passthrough")
    p.add_argument("--events", type=int, default=None,
                   help="events per topic (default: 2,000,000 in window mode, 100,000 in passthrough)")
    p.add_argument("--per-epoch", type=int, default=None,
                   help="max_events_per_epoch (default: 300,000 in window mode, 10,000 in passthrough)")
    p.add_argument("--partitions", default=None, help="partitions (default: 4 in window mode, 1,4,16 else)")
    p.add_argument("--target-epoch", default=None, help="window mode: target_epoch_duration (default: off)")
    p.add_argument("--commit-interval", default="5s", help="window mode: the source's commit_interval")
    p.add_argument("--topic", default=None, help="window mode: a topic produced earlier (with --bootstrap)")
    p.add_argument("--skip-plain", action="store_true", help="window mode: no plain consumer run")
    p.add_argument("--repeat", type=int, default=1, help="window mode: Wire runs on the topic")
    p.add_argument("--bootstrap", default=None, help="a broker to use instead of a throw-away noida-db")
    p.add_argument("--broker-pid", type=int, default=None,
                   help="with --bootstrap: the broker's process id (its CPU is reported, idle waited for)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="window mode: a Spark setting over Wire's defaults (repeatable)")
    args = p.parse_args()
    window = args.mode == "window"
    args.events = args.events or (2_000_000 if window else 100_000)
    args.per_epoch = args.per_epoch or (300_000 if window else 10_000)
    args.partitions = args.partitions or ("4" if window else "1,4,16")
    work = Path(tempfile.mkdtemp(prefix="wire-kafka-bench-"))
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = KafkaBroker().start()
        bootstrap = broker.bootstrap
    try:
        if window:
            window_mode(args, bootstrap, work, args.broker_pid if broker is None else broker.pid)
        else:
            passthrough_mode(args, bootstrap, work)
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
