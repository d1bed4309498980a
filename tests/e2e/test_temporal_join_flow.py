"""The temporal join on Spark: orders enriched with exchange rates, against DuckDB's ASOF join.

Two file sources (orders, and rate updates with deletes), each read a few rows per
epoch with its own bounded-out-of-orderness watermark, so the inputs run ahead of each
other and no row is late. The oracle is DuckDB's ``ASOF LEFT JOIN`` over the same files
(a delete marker met means no rate). A second run crashes in the middle of an epoch
(its sink raises after the join's state was updated) and is restarted on the same
checkpoint: its exactly-once output must still equal the oracle.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.runtime.checkpoint import list_epochs

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).parent / "faults" / "temporal_join_driver.py"
CURRENCIES = ["EUR", "GBP", "JPY", "CHF"]
DISORDER = 15


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _shuffled(rows: list[dict], rng: random.Random) -> list[dict]:
    """``rows`` sorted by ``t`` with a bounded disorder (< ``DISORDER`` ms)."""
    return sorted(rows, key=lambda r: r["t"] + rng.uniform(0, DISORDER - 1))


def inputs(tmp: Path, seed: int = 7) -> tuple[str, str]:
    rng = random.Random(seed)
    rates = [{"t": rng.randrange(0, 1000), "cur": rng.choice(CURRENCIES),
              "rate": round(rng.uniform(0.5, 2.0), 4), "retracted": rng.random() < 0.15}
             for _ in range(60)]
    seen, unique = set(), []
    for r in rates:  # one version per (currency, time): the oracle's ASOF has no tie rule
        if (r["cur"], r["t"]) not in seen:
            seen.add((r["cur"], r["t"]))
            unique.append(r)
    orders = [{"t": rng.randrange(0, 1100), "id": i, "cur": rng.choice([*CURRENCIES, "USD"]),
               "amount": rng.randrange(1, 500)} for i in range(150)]
    _write(tmp / "rates" / "rates.jsonl", _shuffled(unique, rng))
    _write(tmp / "orders" / "orders.jsonl", _shuffled(orders, rng))
    return str(tmp / "orders"), str(tmp / "rates")


def oracle(orders: str, rates: str) -> list[tuple]:
    rows = duckdb.sql(f"""
        SELECT o.id, o.cur, o.t, o.amount,
               CASE WHEN r.retracted THEN NULL ELSE r.rate END AS rate,
               CASE WHEN r.retracted THEN NULL ELSE r.t END AS version_time
        FROM read_json_auto('{orders}/*.jsonl') o
        ASOF LEFT JOIN read_json_auto('{rates}/*.jsonl') r ON o.cur = r.cur AND o.t >= r.t
    """).fetchall()
    return sorted(rows)


def build(orders: str, rates: str, sink: wire.sinks.Sink, *, orders_per_epoch: int = 40,
          rates_per_epoch: int = 15) -> wire.Flow:
    flow = wire.Flow("temporal-join-e2e")
    watermark = wire.BoundedOutOfOrderness(DISORDER)
    o = flow.source(wire.sources.files(orders, format="jsonl"), event_time="t", name="orders",
                    watermark=watermark, max_events_per_epoch=orders_per_epoch)
    r = flow.source(wire.sources.files(rates, format="jsonl"), event_time="t", name="rates",
                    watermark=watermark, max_events_per_epoch=rates_per_epoch)
    table = r.select("cur", "rate", "retracted").as_table(key="cur", delete="retracted")
    joined = o.temporal_join(table, on="cur", how="left", name="priced")
    joined.sink(sink, name="out")
    joined.late().sink(wire.sinks.parquet(str(Path(orders).parent / "late")), name="late")
    return flow


def result(out: Path) -> list[tuple]:
    t = pa.concat_tables([pq.read_table(f) for f in sorted(out.glob("*/*.parquet"))])
    return sorted(zip(*(t.column(c).to_pylist() for c in
                        ("id", "cur", "t", "amount", "rate", "version_time")), strict=True))


def test_temporal_join_over_files_equals_duckdb_asof_join(spark, tmp_path):
    orders, rates = inputs(tmp_path)
    expected = oracle(orders, rates)
    assert any(r[4] is None for r in expected) and any(r[4] is not None for r in expected)
    summary = build(orders, rates, wire.sinks.parquet(str(tmp_path / "out"))).run(
        str(tmp_path / "ck"), spark=spark, key_groups=2)
    assert summary.epochs > 3
    assert result(tmp_path / "out") == expected
    assert not list((tmp_path / "late").glob("*/*.parquet"))  # nothing was late


@dataclass(frozen=True, eq=False)
class CrashingSink(wire.sinks.Sink):
    """Fails in the middle of epoch ``fail_epoch`` once: the query dies and restarts on its checkpoint."""

    guarantee = "exactly_once"
    inner: wire.sinks.Sink = None  # type: ignore[assignment]
    fail_epoch: int = 3
    seen: list = field(default_factory=list)

    def open(self, **kw):
        self.inner.open(**kw)

    def write_epoch(self, epoch, table):
        if epoch == self.fail_epoch and not self.seen:
            self.seen.append(epoch)
            raise RuntimeError(f"killed during epoch {epoch}")
        self.inner.write_epoch(epoch, table)

    def close(self):
        self.inner.close()


@pytest.mark.slow
def test_restart_on_the_same_checkpoint_gives_the_oracle_output(spark, tmp_path):
    orders, rates = inputs(tmp_path, seed=11)
    sink = CrashingSink(inner=wire.sinks.parquet(str(tmp_path / "out")))
    summary = build(orders, rates, sink).run(str(tmp_path / "ck"), spark=spark, key_groups=2,
                                             max_restarts=1, restart_backoff_s=0.1)
    assert summary.restarts == 1 and "killed during epoch 3" in summary.failures[0]
    assert result(tmp_path / "out") == oracle(orders, rates)


def test_late_order_and_late_rate_reach_the_late_port_on_spark():
    """Hand-derived: after the watermark reaches 200, an order at 50 and a rate at 60 are late."""
    ts = wire.testing.TestStream(
        schema=[("t", pa.int64()), ("kind", pa.string()), ("cur", pa.string()), ("x", pa.float64())],
        event_time="t")
    ts = (ts.add_events([{"t": 0, "kind": "rate", "cur": "EUR", "x": 1.5},
                         {"t": 100, "kind": "order", "cur": "EUR", "x": 10.0}])
            .advance_watermark(200)
            .add_events([{"t": 50, "kind": "order", "cur": "EUR", "x": 20.0},
                         {"t": 60, "kind": "rate", "cur": "EUR", "x": 9.9}]))

    def build(events):
        rates = events.filter("kind = 'rate'").select("cur", ("rate", "x")).as_table(key="cur")
        orders = events.filter("kind = 'order'").select("t", "cur", ("amount", "x"))
        return orders.temporal_join(rates, on="cur")

    out = ts.run(build)
    assert [(r["t"], r["amount"], r["rate"], r["version_time"]) for r in out["main"]] == [(100, 10.0, 1.5, 0)]
    late = sorted((r["side"], r["event_time"], r["watermark"], r["amount"], r["rate"], r["reason"])
                  for r in out["late"])
    assert late == [
        ("stream", 50, 200, 20.0, None, "temporal join: event_time < stream watermark"),
        ("table", 60, 200, None, 9.9, "temporal join: version time < table watermark"),
    ]


@pytest.mark.parametrize(("change", "message"), [
    (dict(key="currency"), "step 'priced': invalid key='currency'; accepted: a column of the table's stream"),
    (dict(on="currency"), "step 'priced': invalid on='currency'; accepted: a column of the stream"),
    pytest.param(dict(delete="rate"), "step 'priced': invalid delete='rate'; accepted: a bool column of the "
                 "table input"),
    pytest.param(dict(on="id"), "step 'priced': invalid on='id'; accepted: a stream column of the "
                 "table key's type"),
    pytest.param(dict(rate_column="amount"), "step 'priced': invalid table=['amount']; accepted: a "
                 "table whose columns do not clash"),
])
def test_bad_columns_fail_when_the_flow_is_built_naming_the_parameter(spark, tmp_path, change, message):
    orders, rates = inputs(tmp_path)
    flow = wire.Flow("bad")
    o = flow.source(wire.sources.files(orders, format="jsonl"), event_time="t", name="orders")
    r = flow.source(wire.sources.files(rates, format="jsonl"), event_time="t", name="rates")
    r = r.select("cur", (change.get("rate_column", "rate"), "rate"), "retracted")
    table = r.as_table(key=change.get("key", "cur"), delete=change.get("delete", "retracted"))
    o.temporal_join(table, on=change.get("on", "cur"), name="priced").sink(
        wire.sinks.parquet(str(tmp_path / "out")), name="out")
    with pytest.raises(wire.ConfigError) as e:
        flow.run(str(tmp_path / "ck"), spark=spark)
    assert str(e.value).startswith(message)
    assert not (tmp_path / "out").exists()


def _committed(checkpoint: Path) -> int:
    try:
        return sum(1 for e in list_epochs(checkpoint) if e.committed)
    except Exception:
        return 0


@pytest.mark.slow
def test_sigkill_and_restart_on_the_same_checkpoint_gives_the_oracle_output(tmp_path):
    """SIGKILL the driver twice, each time once two more epochs committed; restart it until done."""
    orders, rates = inputs(tmp_path, seed=5)
    out = tmp_path / "run"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    kills = 0
    while True:
        proc = subprocess.Popen([sys.executable, str(DRIVER), orders, rates, str(out)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        if kills < 2:
            before = _committed(out / "_checkpoint")
            deadline = time.monotonic() + 300
            while proc.poll() is None and _committed(out / "_checkpoint") < before + 2:
                assert time.monotonic() < deadline, "no progress within 300 s"
                time.sleep(0.05)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kills += 1
                continue
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output[-3000:]
        assert "DONE" in output
        break
    assert kills == 2
    assert result(out / "out") == oracle(orders, rates)


@pytest.mark.slow
def test_rescale_mid_run_gives_the_oracle_output(spark, tmp_path):
    """Three epochs on 2 key groups, then the rest on 5: versions and waiting events are re-keyed."""
    orders, rates = inputs(tmp_path, seed=3)
    sink = wire.sinks.parquet(str(tmp_path / "out"))
    ck = str(tmp_path / "ck")
    assert build(orders, rates, sink).run(ck, spark=spark, key_groups=2, max_epochs=3,
                                          progress=False).epochs == 3
    build(orders, rates, sink).run(ck, spark=spark, key_groups=5, progress=False)
    assert json.loads((tmp_path / "ck" / "wire.json").read_text())["key_groups"] == 5
    assert result(tmp_path / "out") == oracle(orders, rates)


def test_read_state_shows_the_waiting_orders_and_the_versions_after_each_epoch(spark, tmp_path):
    """``wire.read_state`` of the join step, epoch by epoch, against the inputs and the sink's epochs.

    Every pending row is an order (same payload) not emitted up to that epoch and emitted in
    a later one, at or after its key group's table watermark; every version is a rate row
    of the input (a retraction: ``deleted``); the end of input leaves no state.
    """
    orders, rates = inputs(tmp_path)
    build(orders, rates, wire.sinks.parquet(str(tmp_path / "out"))).run(
        str(tmp_path / "ck"), spark=spark, key_groups=2)
    def lines(path: Path) -> list[dict]:
        return [json.loads(x) for x in path.read_text().splitlines()]

    by_id = {r["id"]: r for r in lines(Path(orders, "orders.jsonl"))}
    rate_rows = {(r["cur"], r["t"]): r for r in lines(Path(rates, "rates.jsonl"))}
    emitted_in = {}
    for d in sorted((tmp_path / "out").glob("epoch-*")):
        for f in d.glob("*.parquet"):
            for i in pq.read_table(f).column("id").to_pylist():
                emitted_in[i] = int(d.name.split("-")[1])
    epochs = [e.epoch for e in list_epochs(str(tmp_path / "ck")) if e.committed]
    seen_pending = 0
    for epoch in epochs:
        state = wire.read_state(str(tmp_path / "ck"), "priced", epoch, spark=spark)
        if epoch == epochs[-1]:
            assert state.num_rows == 0  # the end of input empties the state
            break
        if not state.num_rows:
            continue
        groups = wire.read_key_groups(str(tmp_path / "ck"), "priced", epoch, spark=spark)
        table_wm = {g["key_group"]: dict(g["channels"])["__table"] for g in groups.to_pylist()}
        for row in state.to_pylist():
            if row["kind"] == "pending":
                seen_pending += 1
                order = by_id[row["event"]["id"]]
                assert (row["cur"], row["event_time"], row["event"]["amount"]) == (
                    order["cur"], order["t"], order["amount"])
                assert row["event_time"] >= table_wm[row["key_group"]]
                assert emitted_in[order["id"]] > epoch  # waiting: emitted by a later epoch only
            else:
                rate = rate_rows[(row["cur"], row["event_time"])]
                assert (row["version"]["rate"], row["deleted"]) == (rate["rate"], rate["retracted"])
    assert seen_pending > 0  # some orders did wait for the rates' watermark
