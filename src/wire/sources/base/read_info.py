"""A Python data source stream's data source and read function, made in the driver's own process.

Before the first epoch of a query over a Python data source reads anything, Spark asks
Python for the function its source tasks run: the JVM starts a Python daemon
(``pyspark.daemon``, keyed to the worker module ``pyspark.sql.worker.plan_data_source_read``),
forks a worker that imports PySpark and the connector, unpickles the data source, builds its
stream reader, and pickles a function that calls the reader's ``read`` (PySpark's
``write_read_func_and_partitions``). That worker did nothing else for the run, and it sat on
the critical path of the first epoch: about 0.7 CPU s on the 2-core development machine,
while the epoch's tasks waited for it (Java Flight Recorder's ``jdk.ProcessStart`` events).

The driver has all of it already loaded. :func:`plan_reads_here` runs the same PySpark
function in this process, on a data source built from the same options, and hands the bytes
to the JVM's own parser for them (``PythonDataSourceReadInfo.receive``), which Spark then
keeps on the source (``PythonDataSourceV2.setReadInfo``) as if its worker had answered. A
failure anywhere leaves the source as it was: Spark then starts the worker, as before.

The data source itself is created here too (:func:`create_here`). Without it, ``load()``
starts one more process while Spark analyses the DataFrame: a ``pyspark.daemon`` for
``pyspark.sql.worker.create_data_source``, whose worker instantiates the data source with
the options, asks it for its schema and pickles the instance (0.6-0.9 CPU s, and 1.4-1.8 s
of the driver's compilation before ``start()``, on the 2-core machine). :func:`create_here`
does the same in the driver: the stream is loaded with that schema (a Python data source
accepts a given schema, so the analysis needs no Python), and the pickled instance is set
on the source (``PythonDataSourceV2.dataSourceInPython``, a private field PySpark 4.3 has no
setter for) before anything asks for it: the planner process Spark starts with the query
unpickles it, as it would have unpickled the worker's.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import CaseInsensitiveDict, DataSource
from pyspark.sql.types import StructType

PYTHON_V2 = "org.apache.spark.sql.execution.datasources.v2.python."
READ_INFO_CLASS = PYTHON_V2 + "PythonDataSourceReadInfo"
CREATION_CLASS = PYTHON_V2 + "PythonDataSourceCreationResult"
CREATION_FIELD = "dataSourceInPython"
"""The private field of ``PythonDataSourceV2`` holding the created data source (PySpark 4.3.0)."""
STREAMING_RELATION = "StreamingRelationV2"


@dataclass(frozen=True)
class Created:
    """A data source created in the driver as Spark's creation worker creates it (:func:`create_here`)."""

    source: DataSource
    schema: StructType
    """The data source's ``schema()``: what the stream is loaded with."""
    pickled: bytes
    """The instance as the creation worker returns it to the JVM (PySpark's ``CPickleSerializer``)."""


def create_here(data_source: type[DataSource], options: Mapping[str, str]) -> Created | None:
    """Create ``data_source`` with ``options`` here, as Spark's ``create_data_source`` worker does.

    The instance is ``data_source(options=...)`` with the options case-insensitive, its
    schema is its ``schema()`` (a ``StructType``; a DDL string is parsed by PySpark), and
    it is pickled with the worker's serializer. Returns None, for Spark to create it as
    before, when any of it fails (the failure then surfaces from Spark's own creation, as
    it always did).
    """
    try:
        from pyspark.sql.types import _parse_datatype_string
        from pyspark.worker_util import pickleSer

        source: Any = data_source(options=CaseInsensitiveDict(dict(options)))
        schema = source.schema()
        if isinstance(schema, str):
            schema = _parse_datatype_string(schema)
        if not isinstance(schema, StructType):
            return None
        return Created(source, schema, pickleSer.dumps(source))  # type: ignore[no-untyped-call]
    except Exception:
        return None


def give_creation(spark: SparkSession, stream: DataFrame, created: Created) -> bool:
    """Set ``created`` on the source of ``stream`` (loaded with ``created.schema``); True if it took.

    Spark would otherwise start its creation worker when the query's planner needs the
    instance. False, changing nothing, when the plan or the class has another shape.
    """
    try:
        provider = _provider(stream)
        if provider is None:
            return False
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jschema = provider_schema(stream)
        result = getattr(jvm, CREATION_CLASS)(bytearray(created.pickled), jschema)
        field = provider.getClass().getDeclaredField(CREATION_FIELD)
        field.setAccessible(True)
        if field.get(provider) is not None:
            return False
        field.set(provider, result)
        return True
    except Exception:
        return False


def _provider(stream: DataFrame) -> Any:
    """The ``PythonDataSourceV2`` of a loaded stream (its analyzed plan's relation), else None."""
    relation = stream._jdf.queryExecution().analyzed()
    if relation.getClass().getSimpleName() != STREAMING_RELATION:
        return None
    return relation.source().get()


def provider_schema(stream: DataFrame) -> Any:
    """The JVM schema of the loaded stream's table."""
    return stream._jdf.queryExecution().analyzed().table().schema()


def plan_reads_here(spark: SparkSession, stream: DataFrame, data_source: type[DataSource],
                    options: Mapping[str, str], source: DataSource | None = None) -> bool:
    """Give the source of ``stream`` its read function, pickled here; True if Spark took it.

    ``stream`` is what ``spark.readStream.format(data_source.name())`` with ``options``
    loaded: its analyzed plan is the source's relation, which every DataFrame built on
    ``stream`` shares, so a query started from any of them reads with the function given here.
    The data source is built as Spark's creation worker builds it (``data_source(options=...)``, options
    case-insensitive) and its reader as Spark's read-planning worker does, with the output
    schema the relation has and the session's ``arrowMaxRecordsPerBatch`` and
    ``pysparkBinaryAsBytes``, read from the JVM's SQL configuration as that worker's runner
    reads them. Returns False, changing nothing, when any of it fails (another PySpark
    version, a plan of another shape). ``source``: the instance :func:`create_here` made,
    used instead of a new one.
    """
    try:
        from pyspark.sql.datasource_internal import _streamReader
        from pyspark.sql.worker.plan_data_source_read import write_read_func_and_partitions

        provider = _provider(stream)
        if provider is None:
            return False
        schema = StructType.fromJson(json.loads(provider_schema(stream).json()))
        conf = spark._jsparkSession.sessionState().conf()
        if source is None:
            source = data_source(options=CaseInsensitiveDict(dict(options)))
        out = io.BytesIO()
        write_read_func_and_partitions(
            out, reader=_streamReader(source, schema), data_source=source, schema=schema,
            max_arrow_batch_size=int(conf.arrowMaxRecordsPerBatch()),
            binary_as_bytes=bool(conf.pysparkBinaryAsBytes()),
        )
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        received = jvm.java.io.DataInputStream(jvm.java.io.ByteArrayInputStream(bytearray(out.getvalue())))
        provider.setReadInfo(getattr(jvm, READ_INFO_CLASS).receive(received))
        return True
    except Exception:
        return False
