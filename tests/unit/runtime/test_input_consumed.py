"""When a bounded flow's input is consumed (the run ends) and why a pause is not that (issue 26 item 1)."""

from __future__ import annotations

import json
from pathlib import Path

from wire.runtime.runner import input_consumed


def write_batch(spark: Path, batch: int, offsets: list[object], *, committed: bool) -> None:
    """Spark's logs as Spark writes them: a version line, a metadata object, one offset per source."""
    (spark / "offsets").mkdir(parents=True, exist_ok=True)
    (spark / "commits").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})]
    lines += ["-" if o is None else json.dumps(o) for o in offsets]
    (spark / "offsets" / str(batch)).write_text("\n".join(lines))
    if committed:
        (spark / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_not_consumed_before_any_epoch_completed(tmp_path):
    assert not input_consumed(tmp_path / "spark")
    write_batch(tmp_path / "spark", 0, [{"next": 10, "ended": True}], committed=False)
    assert not input_consumed(tmp_path / "spark")  # planned, not completed


def test_consumed_once_the_epoch_that_ended_every_source_completed(tmp_path):
    spark = tmp_path / "spark"
    write_batch(spark, 0, [{"next": 10, "ended": False}, {"step": 1}], committed=True)
    assert not input_consumed(spark)
    write_batch(spark, 1, [{"next": 20, "ended": True}, {"step": 1}], committed=True)
    assert not input_consumed(spark)  # the second source has input left (paused or not)
    write_batch(spark, 2, [{"next": 20, "ended": True}, {"step": 2, "ended": True}], committed=False)
    assert not input_consumed(spark)  # the final epoch is in flight: its watermark not committed
    (spark / "commits" / "2").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert input_consumed(spark)


def test_a_source_without_an_offset_or_a_non_object_offset_has_not_ended(tmp_path):
    spark = tmp_path / "spark"
    write_batch(spark, 0, [{"ended": True}, None], committed=True)
    assert not input_consumed(spark)
    write_batch(spark, 1, [{"ended": True}, 5], committed=True)
    assert not input_consumed(spark)
    write_batch(spark, 2, [{"ended": "yes"}], committed=True)
    assert not input_consumed(spark)


def test_a_damaged_offset_file_is_not_an_end(tmp_path):
    spark = tmp_path / "spark"
    write_batch(spark, 0, [{"ended": True}], committed=True)
    (spark / "offsets" / "0").write_text("garbage")
    assert not input_consumed(spark)
