"""Key groups computed in Python, equal to Spark's ``pmod(xxhash64(key), key_groups)``.

Keyed state is partitioned by key group (:func:`wire.compiler.keyed.with_key_group`, in
Spark). When a source runs a window's pre-stage in its own Python task
(:mod:`wire.compiler.fusion`), the events never reach the JVM, so the task must compute
the same key group Spark would: any other value would put a key's state in two groups.

Spark's ``xxhash64`` (``XxHash64Function``, seed 42) is XXH64 over the value's bytes:

* ``tinyint``, ``smallint``, ``int`` and ``boolean`` (1 / 0): the 4-byte form
  (``hashInt``), vectorized here in numpy;
* ``bigint``: the 8-byte form (``hashLong``), vectorized here in numpy;
* ``string``: XXH64 of its UTF-8 bytes (``hashUnsafeBytes``), by the ``xxhash`` library,
  once per distinct value of a batch;
* null: the seed itself, 42.

Other key types (floating point, decimal, timestamp, binary, nested) are not supported
(:func:`supported`); the compiler then leaves the key group to Spark.
``tests/unit/core/test_key_groups.py`` checks every supported type against Spark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

SEED = 42
"""Spark's seed for ``xxhash64``."""

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def supported(typ: pa.DataType) -> bool:
    """True when :func:`key_groups_of` computes Spark's key group for a column of ``typ``."""
    return bool(
        pa.types.is_int8(typ) or pa.types.is_int16(typ) or pa.types.is_int32(typ) or pa.types.is_int64(typ)
        or pa.types.is_boolean(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)
    )


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _avalanche(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def _hash_int(values: np.ndarray) -> np.ndarray:
    """XXH64 of 4-byte values (int64 array holding ints), seed 42: Spark's ``hashInt``."""
    with np.errstate(over="ignore"):
        h = np.full(len(values), np.uint64(SEED) + _P5 + np.uint64(4), np.uint64)
        h ^= (values.astype(np.uint64) & np.uint64(0xFFFFFFFF)) * _P1
        h = _rotl(h, 23) * _P2 + _P3
        return _avalanche(h)


def _hash_long(values: np.ndarray) -> np.ndarray:
    """XXH64 of 8-byte values, seed 42: Spark's ``hashLong``."""
    with np.errstate(over="ignore"):
        h = np.full(len(values), np.uint64(SEED) + _P5 + np.uint64(8), np.uint64)
        h ^= _rotl(values.astype(np.int64).view(np.uint64) * _P2, 31) * _P1
        h = _rotl(h, 27) * _P1 + _P4
        return _avalanche(h)


def _hash_strings(values: pa.Array) -> np.ndarray:
    """XXH64 of each string's UTF-8 bytes, seed 42, computed once per distinct value."""
    encoded = pc.dictionary_encode(values)
    digests = np.array([xxhash.xxh64_intdigest(s.encode("utf-8"), SEED) if s is not None else SEED
                        for s in encoded.dictionary.to_pylist()], np.uint64)
    if not len(digests):
        return np.full(len(values), SEED, np.uint64)
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    hashed: np.ndarray = digests[indices]
    return hashed


def xxhash64(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Spark's ``xxhash64(values)`` (seed 42) as int64 (module docstring).

    Raises
    ------
    TypeError
        For a type :func:`supported` refuses.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    typ = values.type
    if not supported(typ):
        raise TypeError(f"no Spark xxhash64 in Python for {typ}")
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        h = _hash_strings(values)
    else:
        ints = (values.cast(pa.int8()) if pa.types.is_boolean(typ) else values).fill_null(0)
        raw = ints.to_numpy(zero_copy_only=False).astype(np.int64)
        h = _hash_long(raw) if pa.types.is_int64(typ) else _hash_int(raw)
    if values.null_count:
        h[values.is_null().to_numpy(zero_copy_only=False)] = np.uint64(SEED)
    return h.view(np.int64)


def key_groups_of(values: pa.Array | pa.ChunkedArray, key_groups: int) -> pa.Array:
    """Each value's key group, ``pmod(xxhash64(value), key_groups)`` as Spark computes it (int32).

    Raises
    ------
    TypeError
        For a type :func:`supported` refuses.
    """
    return pa.array(np.mod(xxhash64(values), key_groups).astype(np.int32), pa.int32())
