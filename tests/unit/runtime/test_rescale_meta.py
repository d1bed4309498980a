"""Rescaling's parts that need no Spark: wire.json generations, offsets, operator ids, resuming readers."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.datasource import DataSourceStreamReader

import wire
from wire.errors import CheckpointError
from wire.runtime.checkpoint import epoch_base, list_epochs, open_checkpoint, spark_checkpoint
from wire.runtime.rescale import _resume, parse_operator_ids
from wire.sources.base import resumable
from wire.sources.test_stream import TestStreamSource


def spark_logs(d: Path, offsets: dict[int, list[str]], commits: list[int]) -> None:
    (d / "offsets").mkdir(parents=True)
    (d / "commits").mkdir()
    for n, lines in offsets.items():
        (d / "offsets" / str(n)).write_text("\n".join(["v1", "{}", *lines]) + "\n")
    for n in commits:
        (d / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_a_rescale_callback_replaces_wire_json_and_a_failing_one_changes_nothing(tmp_path):
    open_checkpoint(tmp_path, flow_id="f", key_groups=4)
    spark_logs(tmp_path / "spark", {0: ['{"a": 1}']}, [0])
    before = (tmp_path / "wire.json").read_text()

    def crash(root, doc, groups):
        (root / "spark-g1.seeds.tmp").mkdir()
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        open_checkpoint(tmp_path, flow_id="f", key_groups=16, rescale=crash)
    assert (tmp_path / "wire.json").read_text() == before
    with pytest.raises(CheckpointError, match="was created with key_groups=4"):
        open_checkpoint(tmp_path, flow_id="f", key_groups=16)  # no rescale: the old refusal

    def rescale(root, doc, groups):
        return {**doc, "key_groups": groups, "spark_dir": "spark-g1", "generation": 1, "epoch_base": 1,
                "seeds": {"w": "spark-g1.seeds/0.parquet"}, "previous_spark_dir": "spark",
                "resume": {"src": {"start": {"a": 1}, "end": None}}}

    meta = open_checkpoint(tmp_path, flow_id="f", key_groups=16, rescale=rescale)
    assert (meta.key_groups, meta.spark_dir, meta.epoch_base) == (16, "spark-g1", 1)
    assert meta.seeds == {"w": str(tmp_path / "spark-g1.seeds/0.parquet")}
    assert meta.resume == {"src": {"start": {"a": 1}, "end": None}}
    assert spark_checkpoint(tmp_path) == str(tmp_path / "spark-g1") and epoch_base(tmp_path) == 1
    assert open_checkpoint(tmp_path, flow_id="f", key_groups=None).key_groups == 16
    assert (tmp_path / "spark").is_dir()  # kept until the new Spark checkpoint commits
    spark_logs(tmp_path / "spark-g1", {0: ['{"a": 2}']}, [0])
    assert [e.epoch for e in list_epochs(tmp_path)] == [1]  # epoch ids continue
    open_checkpoint(tmp_path, flow_id="f", key_groups=16)
    assert not (tmp_path / "spark").exists()
    assert "previous_spark_dir" not in json.loads((tmp_path / "wire.json").read_text())


def one_source_plan() -> wire.Flow:
    flow = wire.Flow("f")
    source = TestStreamSource(pa.schema([("t", pa.int64()), ("k", pa.string())]), ((None, 10),))
    flow.source(source, event_time="t", key="k", name="src").sink(wire.testing.MemorySink())
    return flow


def test_resume_offsets_of_one_source_read_twice(tmp_path):
    spark_logs(tmp_path, {3: ['{"n": 3}', '{"n": 3}'], 4: ['{"n": 4}', '{"n": 4}']}, [3])
    plan = one_source_plan().plan()
    assert _resume(plan, tmp_path, 3, 4, "ck") == {"src": {"start": {"n": 3}, "end": {"n": 4}}}
    assert _resume(plan, tmp_path, 3, 3, "ck") == {"src": {"start": {"n": 3}, "end": None}}


def test_resume_refuses_reads_with_different_offsets(tmp_path):
    spark_logs(tmp_path, {3: ['{"n": 3}', '{"n": 2}']}, [3])
    with pytest.raises(CheckpointError, match="reads of one source step with equal offsets"):
        _resume(one_source_plan().plan(), tmp_path, 3, 3, "ck")


EXPLAINED = """\
*(8) Union
:- *(8) Project [k#21]
:  +- !TransformWithStateInPySpark transformWithStateUDF(__kind#13)#20, [__kg#16], Append, NoTime, \
state info [ checkpoint = <unknown>, runId = 0a39, opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds
:     :- *(3) Sort [__kg#16 ASC NULLS FIRST], false, 0
:     :  +- Exchange hashpartitioning(__kg#16, 2), REQUIRED_BY_STATEFUL_OPERATOR, [plan_id=100]
:     :        +- MapInArrow wire_keyed_77(t#0L, k#1)#12, [__kind#13], false
:     :           +- !TransformWithStateInPySpark transformWithStateUDF(__kind#3)#4, [__kg#5], Append, \
NoTime, state info [ checkpoint = <unknown>, runId = 0a39, opId = 1, ver = 0, numPartitions = 2]
:     :              +- MapInArrow wire_keyed_73657373(t#0L, k#1)#12, [__kind#13], false
+- MapInArrow PackPort(k#46)#60, [k#61], false
"""


def test_operator_ids_are_read_from_the_explained_plan():
    assert parse_operator_ids(EXPLAINED) == {"w": 0, "sess": 1}


class _Reader(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self, start: dict, limit: object) -> dict:
        return {"n": start["n"] + 1}

    def read(self, partition: object):
        return iter(())


def test_a_resumed_reader_starts_at_the_old_offset_and_replays_the_epoch_in_flight():
    plain = _Reader()
    assert resumable(plain, None) is plain and plain.initialOffset() == {"n": 0}
    r = resumable(_Reader(), json.dumps({"start": {"n": 5}, "end": {"n": 9}}))
    assert isinstance(r, _Reader)
    assert r.initialOffset() == {"n": 5}
    assert r.latestOffset({"n": 5}, None) == {"n": 9}  # the old epoch in flight, exactly
    assert r.latestOffset({"n": 9}, None) == {"n": 10}  # then the source's own planning
    r = resumable(_Reader(), {"start": {"n": 5}, "end": None})
    assert r.latestOffset({"n": 5}, None) == {"n": 6}
