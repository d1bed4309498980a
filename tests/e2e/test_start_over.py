"""Starting a changed flow over (issue 26 item 2) on Parquet, Delta and PostgreSQL sinks.

A keyed tumbling-window flow (count and sum of ``x`` per key) runs over a JSON Lines
file to its end with 10 s windows. Changed to 7 s windows it cannot resume its
checkpoint (its window state was built under 10 s), nor run on a new checkpoint
directory (the sinks hold the old checkpoint's epochs). Started over by the documented
path (``flow.run(..., fresh=True)``, ``wire run --fresh``), each sink then holds
exactly the 7 s windows of the whole input, computed here by DuckDB; a later run that
merely resumes the finished checkpoint writes nothing more.
"""

from __future__ import annotations

import datetime as dt
import json
import sys

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

import wire
from wire.errors import CheckpointError

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # ~1.5 min and ~40 s on a busy machine

KEYS = ("a", "b", "c")
EVENTS = [{"t": t * 700, "k": KEYS[(t * 5) % 3], "x": t % 11} for t in range(90)]  # 0 .. 62.3 s, in order


def oracle(size_ms: int) -> list[tuple]:
    """(key, window start ms, window end ms, count, sum of x) of every window, by DuckDB."""
    events = pa.Table.from_pylist(EVENTS)  # noqa: F841 (read by DuckDB)
    return sorted(duckdb.sql(
        f"SELECT k, t - t % {size_ms} AS s, t - t % {size_ms} + {size_ms} AS e, count(*), sum(x) "
        "FROM events GROUP BY ALL").fetchall())


def ms(value: object) -> int:
    if isinstance(value, dt.datetime):
        return round(value.timestamp() * 1000)
    return int(value)  # type: ignore[call-overload]


def rows(table: pa.Table) -> list[tuple]:
    return sorted((r["k"], ms(r["window_start"]), ms(r["window_end"]), r["n"], r["total"])
                  for r in table.to_pylist())


def build(tmp, dsn: str, size: str) -> wire.Flow:
    flow = wire.Flow("access-log")
    events = flow.source(wire.sources.files(str(tmp / "in"), format="jsonl"), event_time="t", key="k",
                         max_events_per_epoch=30, name="events")
    windows = events.window(wire.Tumbling(size)).aggregate(n=wire.count(), total=wire.sum("x"),
                                                           name="sessions")
    windows.sink(wire.sinks.parquet(str(tmp / "parquet")), name="to_parquet")
    windows.sink(wire.sinks.delta(str(tmp / "delta")), name="to_delta")
    windows.sink(wire.sinks.postgres(dsn, table="sessions"), name="to_postgres")
    return flow


def outputs(tmp, dsn: str) -> dict[str, list[tuple]]:
    files = sorted((tmp / "parquet").glob("epoch-*/*.parquet"))
    parquet = pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})
    with psycopg.connect(dsn) as conn:
        cur = conn.execute("SELECT k, window_start, window_end, n, total FROM sessions")
        pg_rows = sorted((k, ms(s), ms(e), n, total) for k, s, e, n, total in cur.fetchall())
    delta = DeltaTable(str(tmp / "delta")).to_pyarrow_table()
    return {"parquet": rows(parquet) if files else [], "delta": rows(delta), "postgres": pg_rows}


def test_a_changed_flow_starts_over_on_parquet_delta_and_postgres(spark, tmp_path, pg_server):
    dsn = pg_server.dsn
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    ck = tmp_path / "ck"
    build(tmp_path, dsn, "10s").run(str(ck), spark=spark, key_groups=2)
    before = {name: oracle(10_000) for name in ("parquet", "delta", "postgres")}
    assert outputs(tmp_path, dsn) == before

    with pytest.raises(CheckpointError) as changed:  # the window's state was built under 10 s
        build(tmp_path, dsn, "7s").run(str(ck), spark=spark, key_groups=2)
    assert "step 'sessions' changed" in str(changed.value)
    assert "flow.run(checkpoint, fresh=True)" in str(changed.value)
    assert "wire run --fresh" in str(changed.value)

    with pytest.raises(CheckpointError) as elsewhere:  # a new checkpoint: the sinks refuse it
        build(tmp_path, dsn, "7s").run(str(tmp_path / "ck2"), spark=spark, key_groups=2)
    assert "run it with fresh=True (`wire run --fresh`)" in str(elsewhere.value)
    assert outputs(tmp_path, dsn) == before  # nothing written

    old_id = json.loads((ck / "wire.json").read_text())["checkpoint_id"]
    summary = build(tmp_path, dsn, "7s").run(str(ck), spark=spark, key_groups=2, fresh=True)
    assert summary.epochs >= 3  # 90 events, 30 per epoch
    after = {name: oracle(7_000) for name in ("parquet", "delta", "postgres")}
    assert outputs(tmp_path, dsn) == after
    assert not (tmp_path / "ck.superseded").exists()  # deleted once the sinks took the new checkpoint
    assert json.loads((ck / "wire.json").read_text())["checkpoint_id"] != old_id
    aside = tmp_path / "parquet" / "_superseded" / old_id  # the old epochs, never read as output
    kept = pa.concat_tables([pq.read_table(f) for f in sorted(aside.glob("*/*.parquet"))])
    assert rows(kept) == oracle(10_000)

    # a run that merely resumes the finished checkpoint writes nothing twice
    build(tmp_path, dsn, "7s").run(str(ck), spark=spark, key_groups=2)
    assert outputs(tmp_path, dsn) == after


def test_wire_run_fresh_starts_a_changed_flow_over(spark, tmp_path, monkeypatch):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    for module, size in (("start_over_10s", "10s"), ("start_over_7s", "7s")):
        (tmp_path / f"{module}.py").write_text(
            "import wire\n"
            "flow = wire.Flow('access-log')\n"
            f"events = flow.source(wire.sources.files({str(tmp_path / 'in')!r}, format='jsonl'), "
            "event_time='t', key='k', max_events_per_epoch=30, name='events')\n"
            f"(events.window(wire.Tumbling({size!r})).aggregate(n=wire.count(), total=wire.sum('x'), "
            "name='sessions')\n"
            f" .sink(wire.sinks.parquet({str(tmp_path / 'parquet')!r}), name='to_parquet'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ck = str(tmp_path / "ck")
    cli = ["--checkpoint", ck, "--no-dashboard", "--no-progress", "--max-restarts", "0"]

    def parquet() -> list[tuple]:
        files = sorted((tmp_path / "parquet").glob("epoch-*/*.parquet"))
        return rows(pa.concat_tables([pq.read_table(f) for f in files]))

    out = CliRunner().invoke(wire_cli(), ["run", "start_over_10s:flow", *cli])
    assert out.exit_code == 0, out.output
    assert parquet() == oracle(10_000)
    out = CliRunner().invoke(wire_cli(), ["run", "start_over_7s:flow", *cli])
    assert out.exit_code == 1
    assert "wire run --fresh" in " ".join(out.output.split())
    out = CliRunner().invoke(wire_cli(), ["run", "start_over_7s:flow", *cli, "--fresh"])
    assert out.exit_code == 0, out.output
    assert parquet() == oracle(7_000)
    for module in ("start_over_10s", "start_over_7s"):
        sys.modules.pop(module, None)


def wire_cli():
    from wire.cli.main import app

    return app


def test_a_start_over_that_cannot_start_keeps_the_old_checkpoint(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))

    def flow(size: str, predicate: str = "x >= 0") -> wire.Flow:
        f = wire.Flow("access-log")
        events = f.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t",
                          key="k", max_events_per_epoch=30, name="events")
        (events.filter(predicate, name="keep").window(wire.Tumbling(size))
         .aggregate(n=wire.count(), total=wire.sum("x"), name="sessions")
         .sink(wire.sinks.parquet(str(tmp_path / "parquet")), name="to_parquet"))
        return f

    def parquet() -> list[tuple]:
        files = sorted((tmp_path / "parquet").glob("epoch-*/*.parquet"))
        return rows(pa.concat_tables([pq.read_table(f) for f in files]))

    ck = tmp_path / "ck"
    flow("10s").run(str(ck), spark=spark, key_groups=2)
    before = sorted(str(p.relative_to(ck)) for p in ck.rglob("*") if p.name != "spark.log")
    old_id = json.loads((ck / "wire.json").read_text())["checkpoint_id"]

    with pytest.raises(Exception, match="no_such_column"):  # the changed flow does not compile
        flow("7s", predicate="no_such_column > 0").run(str(ck), spark=spark, key_groups=2, fresh=True)
    # nothing was deleted: the old checkpoint is back as it was, the sink untouched
    assert json.loads((ck / "wire.json").read_text())["checkpoint_id"] == old_id
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*") if p.name != "spark.log") == before
    assert not (tmp_path / "ck.superseded").exists()
    assert parquet() == oracle(10_000) and not (tmp_path / "parquet" / "_superseded").exists()

    flow("7s").run(str(ck), spark=spark, key_groups=2, fresh=True)
    assert parquet() == oracle(7_000)


def test_a_start_over_stopped_while_handing_over_the_sinks_is_finished_by_the_next_run(
        spark, tmp_path, pg_server):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    table = "handover"
    unreachable = "host=127.0.0.1 port=1 dbname=postgres user=wire connect_timeout=2"

    def flow(size: str, dsn: str) -> wire.Flow:
        # its own flow id: the module's PostgreSQL marker table keeps the other tests' epochs
        # of flow "access-log" sink "to_postgres", which this flow's first run would refuse
        f = wire.Flow("access-log-handover")
        windows = (f.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t",
                            key="k", max_events_per_epoch=30, name="events")
                   .window(wire.Tumbling(size)).aggregate(n=wire.count(), total=wire.sum("x"),
                                                          name="sessions"))
        windows.sink(wire.sinks.parquet(str(tmp_path / "parquet")), name="to_parquet")
        windows.sink(wire.sinks.postgres(dsn, table=table), name="to_postgres")
        return f

    def outputs() -> tuple[list[tuple], list[tuple]]:
        files = sorted((tmp_path / "parquet").glob("epoch-*/*.parquet"))
        parquet = rows(pa.concat_tables([pq.read_table(f) for f in files])) if files else []
        with psycopg.connect(pg_server.dsn) as conn:
            cur = conn.execute(f"SELECT k, window_start, window_end, n, total FROM {table}")
            return parquet, sorted((k, ms(s), ms(e), n, t) for k, s, e, n, t in cur.fetchall())

    ck = tmp_path / "ck"
    flow("10s", pg_server.dsn).run(str(ck), spark=spark, key_groups=2)
    assert outputs() == (oracle(10_000), oracle(10_000))

    with pytest.raises(wire.WireError, match="cannot start over"):  # the database is out of reach
        flow("7s", unreachable).run(str(ck), spark=spark, key_groups=2, fresh=True)
    assert json.loads((ck / "wire.json").read_text())["start_over"] is True  # the hand-over is pending
    assert (tmp_path / "ck.superseded" / "wire.json").exists()  # the old checkpoint is kept meanwhile
    assert outputs() == ([], oracle(10_000))  # parquet handed over (old epochs aside), PostgreSQL not

    flow("7s", pg_server.dsn).run(str(ck), spark=spark, key_groups=2)  # no fresh: it finishes the hand-over
    assert outputs() == (oracle(7_000), oracle(7_000))
    assert not (tmp_path / "ck.superseded").exists()
    assert "start_over" not in json.loads((ck / "wire.json").read_text())
