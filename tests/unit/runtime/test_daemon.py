"""The worker daemon: what it imports before forking, and where pyspark is imported from."""

from __future__ import annotations

import os
import zipfile

from wire.errors import EXTRAS
from wire.runtime.daemon import drop_class_jars, drop_spark_zips

EXTRA_MODULES = sorted({m for modules in EXTRAS.values() for m in modules})
WATCHED = [*EXTRA_MODULES, "starlette", "wire.sources.file_source.source", "wire.sinks.file_sinks",
           "wire.sinks.postgres_sink.sink", "wire.sinks.delta_sink.sink", "wire.sources.http_source.source",
           "wire.sources.http_source.server", "wire.sources.redis_source.source", "wire.sinks.redis_sink",
           "wire.control",
           "wire.sources.kafka_source.source", "wire.runtime.dataplane", "wire.compiler.window_stage",
           "pyspark.sql.streaming.proto.StateMessage_pb2", "pyspark.sql.worker.plan_data_source_read",
           "wire.runtime.runner", "wire.api.flow"]
CORE = ["wire.sources.file_source.source", "wire.sinks.file_sinks", "wire.runtime.dataplane",
        "wire.compiler.window_stage",
        # imported by PySpark inside functions, so by each forked worker unless preloaded
        "pyspark.sql.streaming.proto.StateMessage_pb2", "pyspark.sql.worker.plan_data_source_read"]


def preloaded(run_python, missing: tuple[str, ...] = ()) -> list[str]:
    return run_python(f"""
        from wire.runtime.daemon import preload
        preload()
        print(json.dumps([m for m in {WATCHED!r} if sys.modules.get(m) is not None]))
    """, missing=missing)


def test_preload_loads_the_stages_and_file_connectors_but_no_extra_and_no_driver_module(run_python):
    loaded = preloaded(run_python)
    for module in CORE:
        assert module in loaded
    for module in [*EXTRA_MODULES, "starlette", "wire.control", "wire.sources.http_source.server",
                   "wire.sinks.postgres_sink.sink", "wire.sinks.delta_sink.sink",
                   "wire.sources.redis_source.source",
                   "wire.sources.kafka_source.source", "wire.runtime.runner", "wire.api.flow"]:
        assert module not in loaded


def test_preload_succeeds_without_any_extra(run_python):
    loaded = preloaded(run_python, tuple(EXTRA_MODULES))
    for module in CORE:
        assert module in loaded


def test_spark_zips_inside_an_installed_pyspark_are_dropped(tmp_path):
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    for package in ("pyspark", "py4j"):
        (site / package).mkdir(exist_ok=True)
        (site / package / "__init__.py").write_text("")
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    other = str(tmp_path / "elsewhere.zip")
    assert drop_spark_zips([*zips, other, str(site)]) == [other, str(site)]


def test_spark_zips_stay_when_pyspark_is_not_installed_beside_them(tmp_path):
    """A Spark distribution's zips (a cluster's SPARK_HOME) keep their place."""
    home = tmp_path / "spark" / "python" / "lib"
    home.mkdir(parents=True)
    zips = [str(home / "pyspark.zip"), str(home / "py4j-0.10.9.9-src.zip")]
    site = tmp_path / "site-packages"
    site.mkdir()
    assert drop_spark_zips([*zips, str(site)]) == [*zips, str(site)]
    # pip-installed layout but py4j missing from the site directory: only pyspark.zip goes
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    inside = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    assert drop_spark_zips([*inside, str(site)]) == [inside[1], str(site)]
    assert os.path.isdir(site)


def test_jars_without_python_modules_are_dropped(tmp_path):
    """Spark's class jars leave the path; a jar holding Python, a broken jar and other entries stay."""
    classes = tmp_path / "spark-core_2.13-4.3.0.jar"
    with zipfile.ZipFile(classes, "w") as jar:
        jar.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe")
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    with_python = tmp_path / "tools.jar"
    with zipfile.ZipFile(with_python, "w") as jar:
        jar.writestr("tool/__init__.py", "")
    broken = tmp_path / "broken.jar"
    broken.write_bytes(b"not a zip")
    missing = str(tmp_path / "missing.jar")
    path = [str(classes), str(with_python), str(broken), missing, str(tmp_path)]
    assert drop_class_jars(path) == [str(with_python), str(broken), missing, str(tmp_path)]
