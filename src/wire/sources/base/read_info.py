"""A Python data source stream's read function, pickled in the driver's own process.

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
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import CaseInsensitiveDict, DataSource
from pyspark.sql.types import StructType

READ_INFO_CLASS = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo"
STREAMING_RELATION = "StreamingRelationV2"


def plan_reads_here(spark: SparkSession, stream: DataFrame, data_source: type[DataSource],
                    options: Mapping[str, str]) -> bool:
    """Give the source of ``stream`` its read function, pickled here; True if Spark took it.

    ``stream`` is what ``spark.readStream.format(data_source.name())`` with ``options``
    loaded: its analyzed plan is the source's relation, which every DataFrame built on
    ``stream`` shares, so a query started from any of them reads with the function given here.
    The data source is built as Spark's creation worker builds it (``data_source(options=...)``, options
    case-insensitive) and its reader as Spark's read-planning worker does, with the output
    schema the relation has and the session's ``arrowMaxRecordsPerBatch`` and
    ``pysparkBinaryAsBytes``, read from the JVM's SQL configuration as that worker's runner
    reads them. Returns False, changing nothing, when any of it fails (another PySpark
    version, a plan of another shape).
    """
    try:
        from pyspark.sql.datasource_internal import _streamReader
        from pyspark.sql.worker.plan_data_source_read import write_read_func_and_partitions

        relation = stream._jdf.queryExecution().analyzed()
        if relation.getClass().getSimpleName() != STREAMING_RELATION:
            return False
        provider = relation.source().get()
        schema = StructType.fromJson(json.loads(relation.table().schema().json()))
        conf = spark._jsparkSession.sessionState().conf()
        source: Any = data_source(options=CaseInsensitiveDict(dict(options)))
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
