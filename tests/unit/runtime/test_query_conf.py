"""The settings a flow's query starts with (``wire.runtime.runner.apply_query_conf``)."""

from __future__ import annotations

import pytest

from wire.runtime.runner import (
    ARROW_BATCH_BYTES,
    QUERY_CONF,
    QUERY_DEFAULTS,
    SPARK_DEFAULTS,
    apply_query_conf,
)


class Conf:
    """A session's ``spark.conf``: the values set, else Spark's default rendering."""

    def __init__(self, **values: str) -> None:
        self.values = {k.replace("_", "."): v for k, v in values.items()}

    def get(self, key: str) -> str | None:
        return self.values.get(key, SPARK_DEFAULTS.get(key))

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


def test_spark_defaults_become_wires_and_forced_settings_are_set():
    conf = Conf()
    apply_query_conf(conf)
    assert conf.values[ARROW_BATCH_BYTES] == "2147483647"  # Spark's per-row size check off
    for key, value in QUERY_CONF.items():
        assert conf.values[key] == value


def test_a_sessions_own_arrow_batch_limit_is_kept():
    conf = Conf()
    conf.set(ARROW_BATCH_BYTES, "64MB")  # the user's own, even if equal in bytes to Spark's default
    apply_query_conf(conf)
    assert conf.values[ARROW_BATCH_BYTES] == "64MB"


@pytest.mark.usefixtures("spark")
def test_sparks_rendering_of_the_default_is_the_one_expected(spark):
    """If Spark rendered its default differently, Wire's value would silently never apply."""
    for key in QUERY_DEFAULTS:
        spark.conf.unset(key)
        assert spark.conf.get(key) == SPARK_DEFAULTS[key]
    apply_query_conf(spark.conf)
    assert spark.conf.get(ARROW_BATCH_BYTES) == "2147483647"
