"""Build the class-data-sharing archive of a local session's JVM (:mod:`wire.runtime.class_archive`).

Run: ``python -m wire.cli.class_archive`` (``make`` does it after installing Wire). The
archive holds the classes a small Wire flow loads: a CSV file source with a malformed
line (dead letters), a filter, a tumbling window (``transformWithStateInPandas``, the
RocksDB state store) and Parquet sinks, run to its end. Sessions started later map it
instead of loading those classes one by one. Prints the archive's path, or why none
was built. ``--locked PATH`` is the form the background builder is started with.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from wire.runtime.class_archive import BUILD_TIMEOUT_S, archive_path, build
from wire.runtime.session import local_spark_home


def sample_flow(spark: Any) -> None:
    """Run a small bounded flow (two CSV files, 2,000 events and one malformed line) on ``spark``."""
    import pyarrow as pa

    import wire

    with tempfile.TemporaryDirectory(prefix="wire-class-archive-") as tmp:
        data = Path(tmp, "in")
        data.mkdir()
        for f in range(2):
            lines = ["ts,key,value"] + [f"{(f * 1000 + i) * 1000},k{i % 7},{i * 0.5}" for i in range(1000)]
            if f == 1:
                lines.append("not-a-number,k1,1.0")
            Path(data, f"part-{f}.csv").write_text("\n".join(lines) + "\n")
        schema = pa.schema([("ts", pa.int64()), ("key", pa.string()), ("value", pa.float64())])
        flow = wire.Flow("class-archive")
        events = flow.source(wire.sources.files(str(data / "*.csv"), format="csv", schema=schema),
                             event_time="ts", key="key", watermark=wire.BoundedOutOfOrderness(5_000),
                             max_events_per_epoch=1_000, name="events")
        windows = (events.filter("value >= 0").window(wire.Tumbling("1m"))
                   .aggregate(n=wire.count(), mean=wire.mean("value"), name="win"))
        windows.sink(wire.sinks.parquet(str(Path(tmp, "out"))))
        windows.late().sink(wire.sinks.parquet(str(Path(tmp, "late"))))
        flow.dead_letters().sink(wire.sinks.parquet(str(Path(tmp, "dead"))))
        flow.run(checkpoint=str(Path(tmp, "checkpoint")), spark=spark, progress=False)


def main(argv: list[str] | None = None) -> int:
    """Build the archive (unless it exists); 0 and its path printed, or 1 and why not."""
    parser = argparse.ArgumentParser(prog="python -m wire.cli.class_archive", description=__doc__)
    parser.add_argument("--locked", type=Path, default=None,
                        help="build this archive; the caller holds its lock (the background builder)")
    parser.add_argument("--force", action="store_true", help="build again even if the archive exists")
    a = parser.parse_args(argv)
    if a.locked is not None:  # the background builder: it must not hang on, holding the lock
        signal.alarm(int(BUILD_TIMEOUT_S))
        return 0 if build(a.locked, sample_flow, locked=True) else 1
    home = os.environ.get("SPARK_HOME") or local_spark_home()
    path = archive_path(home) if home else None
    if path is None:
        print("no class-data-sharing archive: no pip-installed Spark or no java found", file=sys.stderr)
        return 1
    if path.is_file() and not a.force:
        print(path)
        return 0
    if not build(path, sample_flow):
        print(f"no class-data-sharing archive was written (another build holds {path}.building?)",
              file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
