"""The peers benchmark's inputs and jobs (standard library only: every engine's venv imports it).

Inputs live in ``DATA/<input>/`` (written by ``bench/peers.py``): ``csv/part-NNNNN.csv``
(header line; file order = arrival order), ``spark/`` (the same files plus ``zz-end.csv``, an
end-marker row for plain Spark), ``flink/all.csv`` (every row, no header, one file) and
``meta.json``. An engine script writes ``OUT/result.json`` (:func:`finish`) describing its
output; window jobs emit ``key, start, end, n[, mean, max]`` (ms), pass jobs the projected
columns, under whatever names the ``output["rename"]`` mapping undoes.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

HOUR, MINUTE = 3_600_000, 60_000
JOBS = ("tumbling", "sliding", "session", "pass")
WINDOWS = {"tumbling": (HOUR, HOUR), "sliding": (HOUR, 10 * MINUTE)}  # (size, slide) ms
GAP = 30 * MINUTE  # session gap
END_KEY = "__END__"

INPUTS = {
    "flights": {
        "columns": {"ts": "int64", "origin": "string", "dep_delay": "float64",
                    "carrier": "string", "flight": "int64", "dest": "string"},
        "key": "origin", "session_key": "origin", "value": "dep_delay",
        "delay_ms": 24 * HOUR,
        "window_filter": "dep_delay IS NOT NULL",  # cancelled flights have no dep_delay
        "pass_filter": "dep_delay > 0",
        "pass_columns": ["ts", "origin", "dep_delay", "carrier", "flight"],
    },
    "synth": {
        "columns": {"ts": "int64", "key": "string", "skey": "string", "value": "float64"},
        "key": "key", "session_key": "skey", "value": "value",
        "delay_ms": 2 * MINUTE,
        "window_filter": None,
        "pass_filter": "`value` < 0.5",  # backquoted: VALUE is reserved in Flink SQL
        "pass_columns": ["ts", "key", "value"],
    },
}


def spec(input_dir: str | Path) -> dict:
    """The spec of an input directory (``flights`` or ``synth-<N>``) plus its meta.json."""
    name = Path(input_dir).name.split("-")[0]
    meta = json.loads((Path(input_dir) / "meta.json").read_text())
    return {"name": name, **INPUTS[name], **meta}


def key_of(s: dict, job: str) -> str:
    return s["session_key"] if job == "session" else s["key"]


def aggregates(job: str) -> list[str]:
    """Result columns after key, start, end."""
    return ["n", "mean", "max"] if job == "tumbling" else ["n"]


def keep_window_row(s: dict, row: dict) -> bool:
    """The window filter as Python (rows as dicts with None for nulls)."""
    return s["window_filter"] is None or row[s["value"]] is not None


def keep_pass_row(s: dict, row: dict) -> bool:
    if s["name"] == "flights":
        return row["dep_delay"] is not None and row["dep_delay"] > 0
    return row["value"] < 0.5


def args() -> argparse.Namespace:
    """The command line every engine script takes: --data DIR --job JOB --out DIR."""
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, required=True, help="DATA/<input>")
    p.add_argument("--job", choices=JOBS, required=True)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    return a


def finish(out: Path, t_ready: float, output: dict, **info) -> None:
    """Stamp t_done and write OUT/result.json. ``output``: path (a glob), format
    (parquet | csv), and optionally rename (engine column -> normalised name)."""
    t_done = time.time()
    (out / "result.json").write_text(json.dumps(
        {"t_ready": t_ready, "t_done": t_done, "output": output, "info": info},
        indent=1, default=str) + "\n")


def write_csv(path: Path, names: list[str], rows) -> None:
    """Rows (lists) as CSV with a header; floats as repr (exact), None as empty."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        w.writerows([["" if v is None else repr(v) if isinstance(v, float) else v for v in r] for r in rows])


def kafka_args() -> argparse.Namespace:
    """The command line of the kafka_*.py scripts (bench/peers.py kafka passes it)."""
    p = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic"):
        p.add_argument(name, required=True)
    for name in ("--events", "--keys", "--end-ts", "--window-ms", "--delay-ms"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--epoch-events", type=int, default=None, help="Wire's max_events_per_epoch")
    p.add_argument("--target-epoch-ms", type=int, default=None,
                   help="Wire's target_epoch_duration (ms; epochs sized up to max_events_per_epoch)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    return a
