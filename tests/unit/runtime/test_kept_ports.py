"""Which side ports are kept under the checkpoint when no sink reads them (SPEC §3)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import wire
from wire.errors import PlanError
from wire.plan.graph import sinks, unsunk_ports
from wire.runtime.kept_ports import keep_unsunk_ports
from wire.sinks.file_sinks import ParquetSink

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])


def flow_with_window(tmp_path, *, throttle: bool = False):
    flow = wire.Flow("kept")
    src = flow.source(wire.sources.files(str(tmp_path / "*.csv"), format="csv", schema=SCHEMA),
                      event_time="t", key="k", name="events")
    if throttle:
        src = src.throttle(10, mode="overflow", name="limit")
    hourly = src.window(wire.Tumbling("1h")).aggregate(n=wire.count(), name="hourly")
    hourly.sink(wire.sinks.parquet(tmp_path / "out"), name="out")
    return flow, src, hourly


def ports(refs):
    return sorted(r.port_id() for r in refs)


def test_every_unsunk_side_port_is_kept_under_the_checkpoint(tmp_path):
    flow, _, _ = flow_with_window(tmp_path, throttle=True)
    plan, kept = keep_unsunk_ports(flow.plan(), tmp_path / "ck")
    assert kept == {
        "events.dead_letter": str(tmp_path / "ck" / "kept" / "events.dead_letter"),
        "limit.overflow": str(tmp_path / "ck" / "kept" / "limit.overflow"),
        "hourly.late": str(tmp_path / "ck" / "kept" / "hourly.late"),
    }
    added = {n.step: n for n in sinks(plan)}
    assert set(added) == {"out", "kept-events-dead_letter", "kept-limit-overflow", "kept-hourly-late"}
    late = added["kept-hourly-late"]
    assert late.source.port_id() == "hourly.late"
    assert isinstance(late.sink, ParquetSink) and late.sink.path == kept["hourly.late"]


def test_sunk_or_dropped_ports_are_not_kept(tmp_path):
    flow, src, hourly = flow_with_window(tmp_path, throttle=True)
    hourly.late().sink(wire.sinks.parquet(tmp_path / "late"))
    src.overflow().drop()
    src_dlq_before = ports(unsunk_ports(flow.plan()))
    assert src_dlq_before == ["events.dead_letter"]
    flow.dead_letters().drop()
    assert unsunk_ports(flow.plan()) == []
    plan, kept = keep_unsunk_ports(flow.plan(), tmp_path / "ck")
    assert kept == {} and plan == flow.plan()


def test_a_step_dead_letter_sink_covers_that_step_only(tmp_path):
    flow = wire.Flow("two")
    a = flow.source(wire.sources.files(str(tmp_path / "a*.csv"), format="csv", schema=SCHEMA),
                    event_time="t", name="a")
    b = flow.source(wire.sources.files(str(tmp_path / "b*.csv"), format="csv", schema=SCHEMA),
                    event_time="t", name="b")
    a.union(b).sink(wire.sinks.parquet(tmp_path / "out"))
    a.dead_letters().sink(wire.sinks.parquet(tmp_path / "dlq_a"))
    assert ports(unsunk_ports(flow.plan())) == ["b.dead_letter"]


def test_drop_refuses_a_data_stream(tmp_path):
    _, _, hourly = flow_with_window(tmp_path)
    with pytest.raises(PlanError, match="only side ports"):
        hourly.drop()


def test_a_step_named_like_a_kept_sink_is_refused(tmp_path):
    flow, _, hourly = flow_with_window(tmp_path)
    hourly.sink(wire.sinks.parquet(tmp_path / "x"), name="kept-hourly-late")
    with pytest.raises(PlanError, match="reserved"):
        keep_unsunk_ports(flow.plan(), tmp_path / "ck")
