"""Fault-injection driver: the temporal join of ``tests/e2e/test_temporal_join_flow.py`` into Parquet.

Usage: python temporal_join_driver.py ORDERS_DIR RATES_DIR OUT_DIR
Killed with SIGKILL while it runs and restarted by that test; each start resumes from
OUT_DIR/_checkpoint. Prints ``DONE`` when the bounded inputs are through.
"""

from __future__ import annotations

import sys
from pathlib import Path

import wire

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_temporal_join_flow import build  # the test module's flow: one definition


def main() -> None:
    orders, rates, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    flow = build(orders, rates, wire.sinks.parquet(str(out / "out")), orders_per_epoch=10, rates_per_epoch=4)
    spark = wire.spark("local[2]", log_file=out / "spark.log")
    summary = flow.run(str(out / "_checkpoint"), spark=spark, key_groups=2)
    print(f"DONE epochs={summary.epochs}", flush=True)


if __name__ == "__main__":
    main()
