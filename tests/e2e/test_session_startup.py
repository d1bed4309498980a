"""The session Wire creates: pyspark from the installed package, no Python data source lookup."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.spark


def test_workers_import_pyspark_from_the_site_directory_not_a_zip(spark):
    """A Python worker's pyspark is the installed package's (bytecode cached), not Spark's zip."""
    import pyspark

    def where(_):
        import pyspark as worker_pyspark

        yield os.path.abspath(worker_pyspark.__file__)

    paths = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert paths == [os.path.abspath(pyspark.__file__)]
    assert ".zip" not in paths[0]


def test_the_lookup_of_installed_python_data_sources_is_skipped(spark):
    jvm = spark.sparkContext._jvm
    manager = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.execution.datasources.DataSourceManager$").getField("MODULE$").get(None)
    builders = manager.dataSourceBuilders()
    assert builders.isDefined() and builders.get().isEmpty()
