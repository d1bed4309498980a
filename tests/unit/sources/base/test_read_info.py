"""The stream's read function is pickled in the driver (``wire.sources.base.read_info``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.sources.base import ReadRequest
from wire.sources.base.read_info import plan_reads_here

pytestmark = pytest.mark.spark

PROVIDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2"


def _read_info(stream):
    """The private ``readInfo`` field of the stream's ``PythonDataSourceV2`` (None while unset)."""
    relation = stream._jdf.queryExecution().analyzed()
    provider = relation.source().get()
    jvm = stream.sparkSession.sparkContext._jvm
    field = jvm.java.lang.Class.forName(PROVIDER).getDeclaredField("readInfo")
    field.setAccessible(True)
    return field.get(provider)


def _file_stream(spark, tmp_path, rows):
    pq.write_table(rows, tmp_path / "part-0.parquet")
    source = wire.sources.files(str(tmp_path / "*.parquet"), format="parquet")
    request = ReadRequest(step="events", schema=source.resolve_schema(), event_time="ts", key_groups=2,
                          watermark=wire.BoundedOutOfOrderness("1s"), max_events_per_epoch=100,
                          control_file=None, columns=None, target_epoch_ms=None, resume=None)
    return source.read_stream(spark, request)


def test_a_loaded_stream_has_its_read_function_before_the_query_starts(spark, tmp_path):
    stream = _file_stream(spark, tmp_path, pa.table({"ts": [1, 2, 3], "k": ["a", "b", "c"]}))
    info = _read_info(stream)
    assert info is not None and len(info.func()) > 0  # pickled here, so Spark will not ask a worker
    assert info.partitions().isEmpty()  # a stream's partitions are planned per epoch


def test_the_function_reads_what_spark_would_read(spark, tmp_path):
    """Through the injected function the source tasks read every row, in a real query."""
    rows = pa.table({"ts": list(range(50)), "k": [f"k{i % 7}" for i in range(50)]})
    stream = _file_stream(spark, tmp_path, rows)
    got = []
    query = (stream.writeStream.foreachBatch(lambda batch, _: got.extend(batch.where("__kind = 0").collect()))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    expected = zip(rows["ts"].to_pylist(), rows["k"].to_pylist(), strict=True)
    assert sorted((r["ts"], r["k"]) for r in got) == sorted(expected)


def test_anything_but_a_loaded_stream_is_left_as_it_was(spark):
    data_source = wire.sources.files("/nowhere/*.csv", format="csv").data_source()
    assert plan_reads_here(spark, spark.range(3), data_source, {}) is False
