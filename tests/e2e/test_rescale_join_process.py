"""Rescaling an interval join of two sources and a keyed process function, with a crash
during the rescale.

3 key groups, stop; restart with 7, whose rescale fails half-way (after one operator's state
was re-keyed): the checkpoint is unchanged and still says 3; restart with 7 again and stop
before the first epoch runs (as if killed right after the rescale), restart (the first epoch
replays with the seeded state), restart once more (an ordinary restart), then run to the
end with 2. The outputs equal an uninterrupted run's, and the join's a pandas
oracle's (every event is on time by construction, so every pair within the bounds joins).
The ``even`` source is read twice (two branches), ``odd`` once: Spark's offset log has three
sources, which the rescale maps back to their steps.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
import wire.runtime.rescale as rescale_module
from wire.examples.process_examples import Dedupe

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
DELAY, BOUND = 20, 15


def events() -> list[dict]:
    """On-time events (never behind the watermark: t >= max earlier t - DELAY), repeated keys."""
    rng = random.Random(7)
    return [{"t": i * 6 + rng.randint(-DELAY, 0), "k": f"k{rng.randint(0, 5)}", "v": rng.randint(0, 3)}
            for i in range(90)]


def build(src: Path, out: Path) -> wire.Flow:
    """Two sources: even ``v`` (read twice: the dedupe and the join) and odd ``v``."""
    flow = wire.Flow("rescale-join")

    def source(name: str) -> wire.api.flow.Stream:
        return flow.source(wire.sources.files(str(src / name), format="jsonl", schema=SCHEMA),
                           event_time="t", key="k", watermark=wire.BoundedOutOfOrderness(DELAY),
                           max_events_per_epoch=8, name=name)

    even, odd = source("even"), source("odd")
    dedupe = Dedupe(within_ms=25)
    unique = even.process(dedupe.on_events, on_timer=dedupe.on_timer, state=dedupe.state,
                          schema=dedupe.schema(SCHEMA), name="dedupe")
    unique.sink(wire.sinks.parquet(str(out / "unique")), name="unique_out")
    joined = even.interval_join(odd, lower=-BOUND, upper=BOUND, name="pairs")
    joined.sink(wire.sinks.parquet(str(out / "pairs")), name="pairs_out")
    return flow


def read(d: Path) -> pd.DataFrame:
    files = sorted(d.glob("**/*.parquet"))
    if not files:
        return pd.DataFrame()
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def rows(df: pd.DataFrame) -> list[tuple]:
    return sorted(df.drop(columns=[c for c in ("watermark",) if c in df]).itertuples(index=False, name=None))


@pytest.mark.slow  # seven runs of the flow: 79 s at load average 2.5
def test_rescale_join_and_process_with_a_crash_during_the_rescale(spark, tmp_path, monkeypatch):
    src = tmp_path / "in"
    for name, parity in (("even", 0), ("odd", 1)):
        (src / name).mkdir(parents=True)
        (src / name / "e.jsonl").write_text(
            "".join(json.dumps(e) + "\n" for e in events() if e["v"] % 2 == parity))
    build(src, tmp_path / "ref").run(str(tmp_path / "ck_ref"), spark=spark, key_groups=3, progress=False)

    ck, out = tmp_path / "ck", tmp_path / "out"
    assert build(src, out).run(str(ck), spark=spark, key_groups=3, max_epochs=2, progress=False).epochs == 2
    before = (ck / "wire.json").read_text()

    real, calls = rescale_module.rekey_operator, []

    def crash_on_second_operator(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the first operator's seed is written, the second's half-way
            (kwargs["path"]).write_bytes(b"partial")
            raise RuntimeError("killed during the rescale")
        return real(*args, **kwargs)

    monkeypatch.setattr(rescale_module, "rekey_operator", crash_on_second_operator)
    with pytest.raises(RuntimeError, match="killed during the rescale"):
        build(src, out).run(str(ck), spark=spark, key_groups=7, max_epochs=2, progress=False)
    assert (ck / "wire.json").read_text() == before and (ck / "spark-g1.seeds.tmp").is_dir()
    monkeypatch.setattr(rescale_module, "rekey_operator", real)

    # rescaled, then stopped before its first epoch ran (as if killed right after the rescale)
    assert build(src, out).run(str(ck), spark=spark, key_groups=7, max_epochs=0, progress=False).epochs == 0
    assert not (ck / "spark-g1.seeds.tmp").exists() and (ck / "spark").is_dir()
    assert build(src, out).run(str(ck), spark=spark, key_groups=7, max_epochs=1, progress=False).epochs == 1
    # an ordinary restart of the rescaled checkpoint (its first epoch committed)
    assert build(src, out).run(str(ck), spark=spark, max_epochs=1, progress=False).epochs == 1
    assert not (ck / "spark").exists()
    build(src, out).run(str(ck), spark=spark, key_groups=2, progress=False)
    assert json.loads((ck / "wire.json").read_text())["key_groups"] == 2

    for port in ("unique", "pairs"):
        assert rows(read(out / port)) == rows(read(tmp_path / "ref" / port)), port

    ev = pd.DataFrame(events())
    pairs = ev[ev.v % 2 == 0].merge(ev[ev.v % 2 == 1], on="k", suffixes=("", "_r"))
    pairs = pairs[(pairs.t_r >= pairs.t - BOUND) & (pairs.t_r <= pairs.t + BOUND)]
    got = read(out / "pairs")
    assert sorted(zip(got.k, got.t, got.v, got.right_t, got.right_v, strict=True)) == sorted(
        zip(pairs.k, pairs.t, pairs.v, pairs.t_r, pairs.v_r, strict=True))
    assert len(pairs) > 10
