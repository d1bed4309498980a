"""The stream's data source and read function are made in the driver (``wire.sources.base.read_info``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire
from wire.sources.base import ReadRequest
from wire.sources.base.read_info import create_here, give_creation, plan_reads_here

pytestmark = pytest.mark.spark

PROVIDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2"


def _private(stream, name):
    """The private field ``name`` of the stream's ``PythonDataSourceV2`` (None while unset)."""
    relation = stream._jdf.queryExecution().analyzed()
    provider = relation.source().get()
    jvm = stream.sparkSession.sparkContext._jvm
    field = jvm.java.lang.Class.forName(PROVIDER).getDeclaredField(name)
    field.setAccessible(True)
    return field.get(provider)


def _read_info(stream):
    return _private(stream, "readInfo")


def _file_source(tmp_path, rows):
    pq.write_table(rows, tmp_path / "part-0.parquet")
    return wire.sources.files(str(tmp_path / "*.parquet"), format="parquet")


def _request(source):
    return ReadRequest(step="events", schema=source.resolve_schema(), event_time="ts", key_groups=2,
                       watermark=wire.BoundedOutOfOrderness("1s"), max_events_per_epoch=100,
                       control_file=None, columns=None, target_epoch_ms=None, resume=None)


def _file_stream(spark, tmp_path, rows):
    source = _file_source(tmp_path, rows)
    return source.read_stream(spark, _request(source))


def test_loading_a_stream_starts_no_creation_process(spark, tmp_path, jvm_children):
    """Spark's creation worker (``create_data_source``) stays a daemon once started: none may exist."""
    creation = "pyspark.sql.worker.create_data_source"
    if jvm_children(spark, creation):
        pytest.skip("an earlier test of this session made Spark create a data source itself")
    stream = _file_stream(spark, tmp_path, pa.table({"ts": [1, 2, 3], "k": ["a", "b", "c"]}))
    assert _private(stream, "dataSourceInPython") is not None
    assert jvm_children(spark, creation) == []


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


def test_a_loaded_stream_has_the_data_source_created_here(spark, tmp_path):
    """Loaded with the schema made here, the analysis creates nothing; the instance set here is used.

    The creation field is still empty after ``load()`` (Spark's creation worker would have
    filled it), takes the instance made here, and a real query reads every row through the
    planner that unpickles it.
    """
    rows = pa.table({"ts": list(range(20)), "k": [f"k{i % 3}" for i in range(20)]})
    source = _file_source(tmp_path, rows)
    data_source = source.data_source()
    options = {"binding": data_source.binding_class.of(source, _request(source)).to_json()}
    created = create_here(data_source, options)
    assert created is not None and "__kind" in created.schema.fieldNames()
    spark.dataSource.register(data_source)
    reader = spark.readStream.format(data_source.name()).schema(created.schema)
    stream = reader.option("binding", options["binding"]).load()
    assert _private(stream, "dataSourceInPython") is None  # the analysis ran no creation worker
    assert give_creation(spark, stream, created) is True
    assert bytes(_private(stream, "dataSourceInPython").dataSource()) == created.pickled
    assert give_creation(spark, stream, created) is False  # set once, never replaced
    got = []
    query = (stream.writeStream.foreachBatch(lambda batch, _: got.extend(batch.where("__kind = 0").collect()))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    expected = zip(range(20), rows["k"].to_pylist(), strict=True)
    assert sorted((r["ts"], r["k"]) for r in got) == sorted(expected)


def test_a_data_source_that_cannot_be_made_here_is_left_to_spark():
    class Broken(wire.sources.files("/nowhere/*.csv", format="csv").data_source()):
        def schema(self):
            raise ValueError("no schema here")

    assert create_here(Broken, {}) is None
