"""Synthetic input for the benchmarks."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def synth_files(d: Path, n_events: int, n_keys: int, per_file: int) -> str:
    """Events 10 ms apart in event time, out of order by up to 2 s, keys uniform."""
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    rng = np.random.default_rng(42)
    ts = np.arange(n_events, dtype=np.int64) * 10 + rng.integers(0, 2000, n_events)
    keys = np.char.add("k", rng.integers(0, n_keys, n_events).astype(str))
    values = rng.random(n_events)
    for i, start in enumerate(range(0, n_events, per_file)):
        sl = slice(start, start + per_file)
        pq.write_table(pa.table({"key": keys[sl], "ts": ts[sl], "value": values[sl]}),
                       d / f"part-{i:05d}.parquet")
    return str(d / "*.parquet")
