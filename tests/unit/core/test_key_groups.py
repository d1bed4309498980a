"""Key groups computed in Python against Spark's own ``pmod(xxhash64(key), n)``.

The oracle is Spark: the same values in a Spark DataFrame, hashed by Spark's
``xxhash64`` and reduced by ``pmod``. A key group that differed would put a key's window
state in two groups when a window is fused with its source (``wire.compiler.fusion``).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from wire.core.key_groups import key_groups_of, supported, xxhash64

pytestmark = pytest.mark.spark

INT_TYPES = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}


def spark_hashes(spark, array: pa.Array, groups: int) -> tuple[list[int], list[int]]:
    df = spark.createDataFrame(pa.table({"k": array}))
    rows = df.select(F.xxhash64("k").alias("h"), F.pmod(F.xxhash64("k"), F.lit(groups)).alias("g")).collect()
    return [r["h"] for r in rows], [r["g"] for r in rows]


def values_of(typ: pa.DataType) -> st.SearchStrategy[list]:
    if typ in INT_TYPES:
        bits = INT_TYPES[typ]
        item = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    elif typ == pa.bool_():
        item = st.booleans()
    else:
        item = st.text(max_size=40)  # any code point (1- to 4-byte UTF-8), across XXH64's 32-byte stripes
    return st.lists(st.none() | item, min_size=1, max_size=60)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), groups=st.integers(1, 300))
def test_every_supported_type_hashes_as_spark_does(spark, data, groups):
    typ = data.draw(st.sampled_from([*INT_TYPES, pa.bool_(), pa.string()]))
    array = pa.array(data.draw(values_of(typ)), typ)
    hashes, key_groups = spark_hashes(spark, array, groups)
    assert xxhash64(array).tolist() == hashes
    assert key_groups_of(array, groups).to_pylist() == key_groups


def test_chunked_large_string_and_null_keys(spark):
    chunked = pa.chunked_array([["JFK", None, ""], ["LGA", "x" * 100]], pa.large_string())
    hashes, groups = spark_hashes(spark, pa.array(chunked.to_pylist(), pa.string()), 7)
    assert xxhash64(chunked).tolist() == hashes
    assert key_groups_of(chunked, 7).to_pylist() == groups
    assert hashes[1] == 42  # Spark hashes a null to its seed


def test_unsupported_types_are_refused():
    for typ in (pa.float64(), pa.timestamp("us", "UTC"), pa.decimal128(10, 2), pa.binary(), pa.date32()):
        assert not supported(typ)
        with pytest.raises(TypeError, match="xxhash64"):
            xxhash64(pa.array([None], typ))
