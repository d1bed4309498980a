"""Rescaling's parts that need no Spark: wire.json generations, offsets, operator ids, resuming readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.datasource import DataSourceStreamReader

from wire.errors import CheckpointError
from wire.runtime.checkpoint import epoch_base, list_epochs, open_checkpoint, spark_checkpoint
from wire.runtime.rescale import _resume, parse_operator_ids, parse_source_order
from wire.sources.base.source import resumable


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


def test_resume_offsets_of_sources_read_once_or_twice(tmp_path):
    spark_logs(tmp_path, {3: ['{"n": 3}', '{"m": 1}', '{"n": 3}'], 4: ['{"n": 4}', '{"m": 1}', '{"n": 4}']},
               [3])
    order = ["a", "b", "a"]
    assert _resume(order, tmp_path, 3, 4, "ck") == {"a": {"start": {"n": 3}, "end": {"n": 4}},
                                                    "b": {"start": {"m": 1}, "end": {"m": 1}}}
    assert _resume(order, tmp_path, 3, 3, "ck")["a"] == {"start": {"n": 3}, "end": None}


def test_resume_refuses_reads_with_different_offsets_or_another_source_count(tmp_path):
    spark_logs(tmp_path, {3: ['{"n": 3}', '{"n": 2}']}, [3])
    with pytest.raises(CheckpointError, match=r"read 2 times .* different offsets"):
        _resume(["a", "a"], tmp_path, 3, 3, "ck")
    with pytest.raises(CheckpointError, match="records 2 sources, the flow's plan reads 1"):
        _resume(["a"], tmp_path, 3, 3, "ck")


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
   +- *(1) Project [t#0L, CASE WHEN (__kind#3 = 0) THEN cast(pmod(xxhash64(k#1, 42), 4) as int) ELSE \
coalesce(__kg#6, 0) END AS __kg#11, CASE WHEN (__kind#3 = 1) THEN orders ELSE __port#7 END AS __port#10]
      +- StreamingRelation wire_files, [t#0L, k#1, v#2L, __kind#3, __et#4L, __wm#5L, __kg#6, __port#7]
   +- *(4) Project [k#1, CASE WHEN (__kind#3 = 1) THEN pay ments ELSE __port#7 END AS __port#10]
      +- *(4) Filter NOT (__kind#3 = 2)
         +- StreamingRelation wire_kafka, [t#0L, k#1, v#2L, __kind#3, __et#4L, __wm#5L, __kg#6]
"""


def test_operator_ids_and_source_order_are_read_from_the_explained_plan():
    assert parse_operator_ids(EXPLAINED) == {"w": 0, "sess": 1}
    assert parse_source_order(EXPLAINED) == ["orders", "pay ments"]


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
