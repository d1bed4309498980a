"""One replica of a flow writing per-minute windows to self-correcting PostgreSQL and Delta tables.

Usage: python self_correcting_driver.py INPUT_GLOB CHECKPOINT PG_DSN DELTA_PATH [--read-only]
       [--unbounded --plane-file FILE --token TOKEN] [--events-per-epoch N] [--repair-interval-ms MS]

Started (and SIGKILLed, and restarted on its checkpoint) by
tests/e2e/test_self_correcting_replicas.py; several replicas run at once, each with
its own checkpoint, all writing the same two tables. Bounded: prints ``DONE`` at the
end of the input. ``--unbounded`` keeps watching the input directory and serves the
REST control plane (its URL written to ``--plane-file``) until killed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import wire

EVENTS_PER_EPOCH = 500


def build(glob: str, dsn: str, delta: str, *, read_only: bool, bounded: bool,
          events_per_epoch: int = EVENTS_PER_EPOCH,
          repair_interval: int | str | None = "default") -> wire.Flow:
    """The flow: events (k, t ms, v) -> 1-minute windows per k (emit='update') -> two tables.

    ``events_per_epoch``: the source's ``max_events_per_epoch`` (where epochs cut the input);
    ``repair_interval``: the sinks' (ms, None: off; ``"default"``: the sinks' default).
    """
    tuning = {} if repair_interval == "default" else {"repair_interval": repair_interval}
    flow = wire.Flow("sc")
    events = flow.source(
        wire.sources.files(glob, format="parquet", bounded=bounded), event_time="t", key="k",
        watermark=wire.BoundedOutOfOrderness("10s"), max_events_per_epoch=events_per_epoch, name="events")
    minutes = events.window(wire.Tumbling("1m"), emit="update").aggregate(
        n=wire.count(), total=wire.sum("v"), name="per_minute")
    key = ("k", "window_start")
    minutes.sink(wire.sinks.self_correcting(dsn, table="per_minute", key=key, read_only=read_only, **tuning),
                 name="sc_pg")
    minutes.sink(wire.sinks.self_correcting(delta, key=key, read_only=read_only, **tuning), name="sc_delta")
    return flow


def widen(seconds: float, stall_every: int = 0, stall_s: float = 0.0) -> None:
    """Make every driver-side read of the self-correcting sinks' tables (the upper and the
    fingerprint, before the parts are computed and committed) return ``seconds`` later,
    and every ``stall_every``-th read ``stall_s`` later."""
    from wire.sinks.self_correcting_sink import tables as sc

    reads = [0]
    for cls in (sc._PgTable, sc._DeltaTable):
        def slow(self, _read=cls.read_meta):
            snap = _read(self)
            reads[0] += 1
            stall = stall_every and reads[0] % stall_every == 0
            time.sleep(stall_s if stall else seconds)
            return snap

        cls.read_meta = slow


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("glob")
    p.add_argument("checkpoint")
    p.add_argument("dsn")
    p.add_argument("delta")
    p.add_argument("--read-only", action="store_true")
    p.add_argument("--unbounded", action="store_true")
    p.add_argument("--plane-file")
    p.add_argument("--token")
    p.add_argument("--widen-race-ms", type=float, default=0.0,
                   help="sleep this long between a sink's read of the table and its append, so that "
                        "replicas' appends collide more often (a fault-injection knob)")
    p.add_argument("--stall-every", type=int, default=0,
                   help="every N-th read of a table, stall --stall-ms between the read and the append "
                        "(a writer paused by GC or the network: the other replica appends meanwhile)")
    p.add_argument("--stall-ms", type=float, default=0.0)
    p.add_argument("--events-per-epoch", type=int, default=EVENTS_PER_EPOCH,
                   help="the source's max_events_per_epoch: replicas with other values cut the input "
                        "elsewhere")
    p.add_argument("--repair-interval-ms", type=int, default=None,
                   help="the sinks' repair_interval (0: off; default: the sinks' default)")
    a = p.parse_args()
    if a.widen_race_ms or a.stall_every:
        widen(a.widen_race_ms / 1000.0, a.stall_every, a.stall_ms / 1000.0)
    flow = build(a.glob, a.dsn, a.delta, read_only=a.read_only, bounded=not a.unbounded,
                 events_per_epoch=a.events_per_epoch,
                 repair_interval="default" if a.repair_interval_ms is None
                 else (a.repair_interval_ms or None))
    spark = wire.spark("local[2]", log_file=Path(a.checkpoint).with_suffix(".spark.log"))
    if not a.unbounded:
        summary = flow.run(a.checkpoint, spark=spark, key_groups=2)
        conflicts = sum(v for (_, n), v in summary.metrics.items() if n == "sc_cas_conflicts")
        print(f"DONE epochs={summary.epochs} conflicts={conflicts}", flush=True)
        return
    from wire.control import ControlPlane

    running = flow.start(a.checkpoint, spark=spark, key_groups=2)
    plane = ControlPlane({"sc": running}, token=a.token)
    url = plane.start()
    if a.plane_file:
        Path(a.plane_file).write_text(url)
    while running.is_active():
        time.sleep(0.2)


if __name__ == "__main__":
    main()
