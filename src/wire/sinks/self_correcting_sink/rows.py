"""Rows, keys, shards and corrections of the self-correcting sink (SPEC §8).

The value-level layer under :mod:`wire.sinks.self_correcting_sink.writer`: :func:`norm` puts
values in the form both sides of a comparison share, :func:`key_of` makes a row's
key tuple, :func:`shard_of` assigns a row to a partition of the keys, and
:func:`correction` computes desired − persisted over a set of keys (a
:class:`Correction`). Pure Python, no Spark and no database.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

Key = tuple[Any, ...]
Row = dict[str, Any]

__all__ = [
    "Correction",
    "Key",
    "Row",
    "correction",
    "key_of",
    "norm",
    "shard_columns",
    "shard_of",
]


def norm(value: Any) -> Any:
    """A value in the form both sides of a comparison share (hashable).

    NaN equals NaN; Decimals that are whole compare equal to ints; lists / dicts
    become tuples. (Aware datetimes already compare and hash by instant.)
    """
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list | tuple):
        return tuple(norm(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, norm(v)) for k, v in value.items()))
    return value


def key_of(row: Mapping[str, Any], key: Sequence[str]) -> Key:
    """The normalized key tuple of ``row``."""
    return tuple(norm(row[k]) for k in key)


def _same(a: Mapping[str, Any], b: Mapping[str, Any], columns: Sequence[str]) -> bool:
    return all(norm(a.get(c)) == norm(b.get(c)) for c in columns)


# --- corrections -----------------------------------------------------------------------


@dataclass(frozen=True)
class Correction:
    """desired − persisted over some keys: delete every persisted row of ``deletes``, insert ``inserts``.

    ``differing`` counts the keys whose persisted rows differ from the desired row
    (missing, extra, altered or duplicated); ``keys`` the keys compared.
    """

    deletes: frozenset[Key]
    inserts: tuple[Row, ...]
    differing: frozenset[Key]
    keys: int

    @property
    def size(self) -> int:
        """Rows this correction writes: keys deleted plus rows inserted."""
        return len(self.deletes) + len(self.inserts)

    @property
    def empty(self) -> bool:
        """True when the persisted rows already equal the desired ones."""
        return not self.deletes and not self.inserts


def correction(desired: Mapping[Key, Row], persisted: Iterable[Row], key: Sequence[str],
               columns: Sequence[str], keys: Collection[Key] | None = None) -> Correction:
    """The correction that makes the persisted rows of ``keys`` equal the desired ones.

    ``keys`` None compares every key of ``desired`` and ``persisted`` (a full check);
    otherwise persisted rows of other keys are ignored. A key whose persisted rows
    are exactly one row equal (on ``columns``, :func:`norm`) to the desired row is
    left alone; otherwise its persisted rows are deleted (if any) and the desired
    row inserted (if any).
    """
    by_key: dict[Key, list[Row]] = {}
    for row in persisted:
        k = key_of(row, key)
        if keys is None or k in keys:
            by_key.setdefault(k, []).append(row)
    compare = set(desired) | set(by_key) if keys is None else set(keys)
    deletes: set[Key] = set()
    inserts: list[Row] = []
    differing: set[Key] = set()
    for k in compare:
        want = desired.get(k)
        have = by_key.get(k, [])
        if want is not None and len(have) == 1 and _same(have[0], want, columns):
            continue
        if want is None and not have:
            continue
        differing.add(k)
        if have:
            deletes.add(k)
        if want is not None:
            inserts.append(want)
    return Correction(frozenset(deletes), tuple(inserts), frozenset(differing), len(compare))



# --- shards ------------------------------------------------------------------------------


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def _canon(value: Any) -> Any:
    """A key value in a form equal on both sides (Arrow rows, database rows), for hashing."""
    v = norm(value)
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            return ("t", (v - _EPOCH_UTC) // timedelta(microseconds=1))
        return ("n", v.isoformat())
    if isinstance(v, date):
        return ("d", v.toordinal())
    if isinstance(v, bool):
        return ("b", int(v))
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, str):
        return ("s", v)
    return ("r", repr(v))


def shard_columns(key: Sequence[str], covers: tuple[str, str] | None) -> tuple[str, ...]:
    """The key columns a row's shard is computed from: ``key`` without the ``covers`` columns.

    So a merged session and the sessions it covers share a shard.
    """
    return tuple(k for k in key if covers is None or k not in covers)


def shard_of(row: Mapping[str, Any], columns: Sequence[str], shards: int) -> int:
    """The shard (``0 .. shards - 1``) of ``row``: CRC-32 of its canonical shard-key values.

    Stable across processes and runs, and equal for a row read back from the table
    (aware timestamps hash by instant, whole Decimals as ints).
    """
    if shards == 1:
        return 0
    text = repr(tuple(_canon(row[c]) for c in columns)).encode()
    return zlib.crc32(text) % shards

