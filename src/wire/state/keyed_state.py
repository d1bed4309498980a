"""Per-key state and timers of ``Stream.process``, vectorized over Arrow arrays (no Spark).

A process function is called once per key group per epoch with many keys at once, so
every state and timer operation here takes **arrays of keys** (the stream's key column
values, any Arrow type; null is a key like any other) and does one vectorized pass,
never a Python loop per key.

State kinds (declared when the flow is built, :func:`value_state`, :func:`list_state`,
:func:`map_state`), each kept as one Arrow table per key group in long format:

=========  ===================================  =====================================
kind       stored rows                          operations
=========  ===================================  =====================================
value      ``(key, value)``                     get, update, clear, table
list       ``(key, __pos, value)`` one per      get (a list per key), append, update,
           element, ``__pos`` increasing        clear, table
map        ``(key, map_key, value)``            get, put, remove, entries, clear,
                                                table
=========  ===================================  =====================================

Timers are rows ``(key, domain, tag, time, output_time)`` identified by ``(key,
domain, tag)``: setting a timer again moves it (Beam's timer ids), deleting removes
it. Times are int64 ms: ``time`` is when it fires (event-time timers: once the
operator's input watermark reaches it; processing-time timers: once the wall clock
does), ``output_time`` the event time of what it emits and where it holds the
operator's output watermark until it fires (Beam's ``withOutputTimestamp``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError, TimerError

StateKind = Literal["value", "list", "map"]
TimeDomain = Literal["event_time", "processing_time"]
TIME_DOMAINS: tuple[TimeDomain, ...] = ("event_time", "processing_time")

Keys: TypeAlias = pa.Array | pa.ChunkedArray
"""Key column values, one per row of an operation."""
Times: TypeAlias = pa.Array | pa.ChunkedArray | np.ndarray | Sequence[int] | int
"""int64 ms, one per key (an int: the same for every key)."""

POS = "__pos"
VALUE, MAP_KEY = "value", "map_key"
DOMAIN, TAG, TIME, OUTPUT_TIME = "domain", "tag", "time", "output_time"


@dataclass(frozen=True)
class StateSpec:
    """One declared state of a process function: its kind and Arrow types."""

    kind: StateKind
    value_type: pa.DataType
    map_key_type: pa.DataType | None = None

    def schema(self, key: str, key_type: pa.DataType) -> pa.Schema:
        """The stored table's schema (see the module docstring)."""
        if self.kind == "value":
            return pa.schema([pa.field(key, key_type), pa.field(VALUE, self.value_type)])
        if self.kind == "list":
            return pa.schema([pa.field(key, key_type), pa.field(POS, pa.int64()),
                              pa.field(VALUE, self.value_type)])
        assert self.map_key_type is not None
        return pa.schema([pa.field(key, key_type), pa.field(MAP_KEY, self.map_key_type),
                          pa.field(VALUE, self.value_type)])

    def __repr__(self) -> str:
        if self.kind == "map":
            return f"map_state({self.map_key_type}, {self.value_type})"
        return f"{self.kind}_state({self.value_type})"


def _type(value: object, parameter: str) -> pa.DataType:
    if not isinstance(value, pa.DataType):
        raise ConfigError(parameter, value, "a pyarrow DataType, e.g. pa.int64()")
    return value


def value_state(value_type: pa.DataType) -> StateSpec:
    """One value per key (``ctx.value_state(name)``); absent keys read as null.

    Raises
    ------
    ConfigError
        If ``value_type`` is not a ``pyarrow.DataType``.
    """
    return StateSpec("value", _type(value_type, "value_type"))


def list_state(value_type: pa.DataType) -> StateSpec:
    """A list of values per key, in append order (``ctx.list_state(name)``); absent: ``[]``.

    Raises
    ------
    ConfigError
        If ``value_type`` is not a ``pyarrow.DataType``.
    """
    return StateSpec("list", _type(value_type, "value_type"))


def map_state(key_type: pa.DataType, value_type: pa.DataType) -> StateSpec:
    """A map ``map_key -> value`` per key (``ctx.map_state(name)``).

    Raises
    ------
    ConfigError
        If a type is not a ``pyarrow.DataType``.
    """
    return StateSpec("map", _type(value_type, "value_type"), _type(key_type, "key_type"))


# -- vectorized matching ---------------------------------------------------------------
def _array(values: Keys, type_: pa.DataType | None = None) -> pa.Array:
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if not isinstance(arr, pa.Array):
        arr = pa.array(arr, type_)
    return arr if type_ is None or arr.type == type_ else arr.cast(type_)


def codes(left: list[pa.Array], right: list[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of the rows of two column lists: equal tuples get equal codes.

    Nulls are values like any other (a null key matches a null key).
    """
    n = len(left[0]) if left else 0
    lc = np.zeros(n, np.int64)
    rc = np.zeros(len(right[0]) if right else 0, np.int64)
    for a, b in zip(left, right, strict=True):
        both = pa.concat_arrays([a, b.cast(a.type)]) if len(b) else a
        enc = pc.dictionary_encode(both, null_encoding="encode").combine_chunks() \
            if isinstance(both, pa.ChunkedArray) else pc.dictionary_encode(both, null_encoding="encode")
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        size = max(len(enc.dictionary), 1)
        lc = lc * size + idx[:n]
        rc = rc * size + idx[n:]
    return lc, rc


def last_per_code(c: np.ndarray) -> np.ndarray:
    """Indices of the last row of each distinct code, in row order."""
    if not len(c):
        return np.zeros(0, np.int64)
    rev = c[::-1]
    _, first = np.unique(rev, return_index=True)
    return np.sort(len(c) - 1 - first)


def lookup(wanted: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """Per wanted code, the index of the stored row with that code, or -1 (stored unique)."""
    if not len(stored):
        return np.full(len(wanted), -1, np.int64)
    order = np.argsort(stored, kind="stable")
    pos = np.searchsorted(stored[order], wanted)
    pos = np.minimum(pos, len(stored) - 1)
    hit = stored[order][pos] == wanted
    return np.where(hit, order[pos], -1)


def _take(values: pa.ChunkedArray, idx: np.ndarray) -> pa.Array:
    """``values[idx[i]]``, null where ``idx[i] < 0``."""
    arr = values.combine_chunks()
    if not len(arr):
        return pa.nulls(len(idx), arr.type)
    return arr.take(pa.array(np.maximum(idx, 0), pa.int64(), mask=idx < 0))


class StoredTable:
    """One state table of a key group, loaded on first use, written back when changed."""

    def __init__(self, schema: pa.Schema, load: Callable[[], pa.Table | None]) -> None:
        self.schema = schema
        self._load = load
        self._table: pa.Table | None = None
        self.dirty = False

    @property
    def table(self) -> pa.Table:
        """The stored rows (loads them on first access)."""
        if self._table is None:
            t = self._load()
            self._table = self.schema.empty_table() if t is None else t.select(self.schema.names).cast(
                self.schema)
        return self._table

    def set(self, table: pa.Table) -> None:
        """Replace the stored rows."""
        self._table = table.select(self.schema.names).cast(self.schema)
        self.dirty = True

    def remove(self, columns: list[pa.Array]) -> None:
        """Drop the rows whose leading columns equal one of the given tuples."""
        t = self.table
        if not t.num_rows or not len(columns[0]):
            return
        given, stored = codes(columns, [t.column(i).combine_chunks() for i in range(len(columns))])
        keep = ~np.isin(stored, given)
        if not keep.all():
            self.set(t.filter(pa.array(keep)))

    def upsert(self, rows: pa.Table, width: int) -> None:
        """Insert ``rows``, replacing stored rows with equal first ``width`` columns (last wins)."""
        if not rows.num_rows:
            return
        rows = rows.select(self.schema.names).cast(self.schema)
        cols = [rows.column(i).combine_chunks() for i in range(width)]
        new, _ = codes(cols, cols)
        rows = rows.take(pa.array(last_per_code(new)))
        self.remove([rows.column(i).combine_chunks() for i in range(width)])
        self.set(pa.concat_tables([self.table, rows]).combine_chunks())


@dataclass
class ValueState:
    """A value per key. Every method takes an array of keys (one per row)."""

    stored: StoredTable
    key: str

    def get(self, keys: Keys) -> pa.Array:
        """The value of each key (null where none is stored)."""
        t = self.stored.table
        k = _array(keys, t.schema.field(self.key).type)
        wanted, have = codes([k], [t.column(self.key).combine_chunks()])
        return _take(t.column(VALUE), lookup(wanted, have))

    def update(self, keys: Keys, values: pa.Array | pa.ChunkedArray | Sequence[object]) -> None:
        """Set each key's value (a key given twice: the last value wins)."""
        t = self.stored.table
        k = _array(keys, t.schema.field(self.key).type)
        v = _array(values, t.schema.field(VALUE).type)
        self.stored.upsert(pa.Table.from_arrays([k, v], schema=t.schema), 1)

    def clear(self, keys: Keys) -> None:
        """Remove the keys' values."""
        self.stored.remove([_array(keys, self.stored.schema.field(self.key).type)])

    def table(self) -> pa.Table:
        """Every stored ``(key, value)`` of the key group."""
        return self.stored.table


@dataclass
class ListState:
    """A list of values per key, in append order. Methods take arrays of keys."""

    stored: StoredTable
    key: str

    def get(self, keys: Keys) -> pa.ListArray:
        """Each key's list (empty where none is stored), one list per given key."""
        t = self.stored.table
        k = _array(keys, t.schema.field(self.key).type)
        vtype = t.schema.field(VALUE).type
        if not t.num_rows or not len(k):
            return pa.array([[] for _ in range(len(k))], pa.list_(vtype))
        wanted, have = codes([k], [t.column(self.key).combine_chunks()])
        uniq, inverse = np.unique(wanted, return_inverse=True)
        slot = lookup(have, uniq)  # per stored row: which distinct wanted key (-1: none)
        rows = np.flatnonzero(slot >= 0)
        pos = t.column(POS).to_numpy()[rows]
        order = rows[np.lexsort((pos, slot[rows]))]
        counts = np.bincount(slot[order], minlength=len(uniq))
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        lists = pa.ListArray.from_arrays(pa.array(offsets), t.column(VALUE).combine_chunks().take(
            pa.array(order, pa.int64())))
        return lists.take(pa.array(inverse.reshape(-1), pa.int64()))

    def append(self, keys: Keys, values: pa.Array | pa.ChunkedArray | Sequence[object]) -> None:
        """Append ``values[i]`` to the list of ``keys[i]``, in row order."""
        t = self.stored.table
        k = _array(keys, t.schema.field(self.key).type)
        if not len(k):
            return
        v = _array(values, t.schema.field(VALUE).type)
        start = (pc.max(t.column(POS)).as_py() + 1) if t.num_rows else 0
        pos = pa.array(np.arange(start, start + len(k), dtype=np.int64))
        self.stored.set(pa.concat_tables([t, pa.Table.from_arrays([k, pos, v], schema=t.schema)]))

    def update(self, keys: Keys, lists: pa.ListArray | pa.ChunkedArray | Sequence[Sequence[object]]) -> None:
        """Replace each key's list with ``lists[i]`` (a key given twice: the last wins)."""
        t = self.stored.table
        k = _array(keys, t.schema.field(self.key).type)
        arr = _array(lists, pa.list_(t.schema.field(VALUE).type))
        c, _ = codes([k], [k])
        last = last_per_code(c)
        k, arr = k.take(pa.array(last)), arr.take(pa.array(last))
        self.clear(k)
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy()
        self.append(k.take(pa.array(np.repeat(np.arange(len(k)), lengths))), pc.list_flatten(arr))

    def clear(self, keys: Keys) -> None:
        """Empty the keys' lists."""
        self.stored.remove([_array(keys, self.stored.schema.field(self.key).type)])

    def table(self) -> pa.Table:
        """Every stored element ``(key, __pos, value)`` of the key group, in append order."""
        return self.stored.table.sort_by(POS)


@dataclass
class MapState:
    """A map ``map_key -> value`` per key. Methods take arrays of keys (and map keys)."""

    stored: StoredTable
    key: str

    def _km(self, keys: Keys, map_keys: Keys) -> tuple[pa.Array, pa.Array]:
        s = self.stored.schema
        return _array(keys, s.field(self.key).type), _array(map_keys, s.field(MAP_KEY).type)

    def get(self, keys: Keys, map_keys: Keys) -> pa.Array:
        """The value at ``(keys[i], map_keys[i])`` (null where absent)."""
        t = self.stored.table
        k, m = self._km(keys, map_keys)
        stored = [t.column(self.key).combine_chunks(), t.column(MAP_KEY).combine_chunks()]
        wanted, have = codes([k, m], stored)
        return _take(t.column(VALUE), lookup(wanted, have))

    def put(self, keys: Keys, map_keys: Keys, values: pa.Array | pa.ChunkedArray | Sequence[object]) -> None:
        """Set ``(keys[i], map_keys[i]) -> values[i]`` (a pair given twice: the last wins)."""
        t = self.stored.table
        k, m = self._km(keys, map_keys)
        v = _array(values, t.schema.field(VALUE).type)
        self.stored.upsert(pa.Table.from_arrays([k, m, v], schema=t.schema), 2)

    def remove(self, keys: Keys, map_keys: Keys) -> None:
        """Remove the entries ``(keys[i], map_keys[i])``."""
        self.stored.remove(list(self._km(keys, map_keys)))

    def entries(self, keys: Keys) -> pa.Table:
        """The entries ``(key, map_key, value)`` of the given keys."""
        t = self.stored.table
        k = _array(keys, t.schema.field(self.key).type)
        if not t.num_rows:
            return t
        given, have = codes([k], [t.column(self.key).combine_chunks()])
        return t.filter(pa.array(np.isin(have, given)))

    def clear(self, keys: Keys) -> None:
        """Remove every entry of the keys."""
        self.stored.remove([_array(keys, self.stored.schema.field(self.key).type)])

    def table(self) -> pa.Table:
        """Every stored entry of the key group."""
        return self.stored.table


def timer_schema(key: str, key_type: pa.DataType) -> pa.Schema:
    """Stored timers, and the ``fired`` table of ``on_timer``: key, domain, tag, time, output_time."""
    return pa.schema([
        pa.field(key, key_type), pa.field(DOMAIN, pa.string()), pa.field(TAG, pa.string()),
        pa.field(TIME, pa.int64()), pa.field(OUTPUT_TIME, pa.int64()),
    ])


@dataclass
class Timers:
    """The key group's timers (``ctx.timers``). Times are int64 ms.

    ``output_floor`` is the operator's output watermark in force during the epoch: a
    timer's ``output_time`` may not be below it (its output would be late downstream).
    """

    stored: StoredTable
    key: str
    output_floor: int
    enabled: bool = True

    def _times(self, values: Times, n: int, what: str) -> np.ndarray:
        if isinstance(values, int | np.integer):
            return np.full(n, int(values), np.int64)
        arr = _array(values if isinstance(values, pa.Array | pa.ChunkedArray)
                     else pa.array(np.asarray(values, np.int64)), pa.int64())
        if arr.null_count or len(arr) != n:
            raise TimerError(f"{what}: {n} non-null int64 ms values expected, got {len(arr)} "
                             f"({arr.null_count} null)")
        times: np.ndarray = arr.to_numpy()
        return times

    def _set(self, domain: TimeDomain, keys: Keys, times: Times, tag: str,
             output_times: Times | None) -> None:
        if not self.enabled:
            raise TimerError("timers need an on_timer callback: pass on_timer= to Stream.process")
        k = _array(keys, self.stored.schema.field(self.key).type)
        n = len(k)
        t = self._times(times, n, "times")
        if output_times is None:
            out = t if domain == "event_time" else np.full(n, self.output_floor, np.int64)
            out = np.maximum(out, self.output_floor) if domain == "event_time" else out
        else:
            out = self._times(output_times, n, "output_times")
        if n and (out < self.output_floor).any():
            bad = int(out[out < self.output_floor][0])
            raise TimerError(f"{domain} timer output_time {bad} ms is below the operator's output "
                             f"watermark {self.output_floor} ms: its output would be late downstream")
        if domain == "event_time" and output_times is not None and n and (out > t).any():
            raise TimerError("event_time timer output_time must be <= its time (Beam's rule)")
        rows = pa.Table.from_arrays(
            [k, pa.array([domain] * n, pa.string()), pa.array([tag] * n, pa.string()),
             pa.array(t, pa.int64()), pa.array(out, pa.int64())], schema=self.stored.schema)
        self.stored.upsert(rows, 3)

    def set_event_time(self, keys: Keys, times: Times, *, tag: str = "",
                       output_times: Times | None = None) -> None:
        """Fire ``on_timer`` for ``keys[i]`` once the input watermark reaches ``times[i]``.

        ``output_times`` (default: the time itself, raised to the output watermark if
        below it): the event time of the timer's output; it holds the operator's output
        watermark until the timer fires; ``<= times[i]``. Setting ``(key, tag)`` again
        moves the timer.
        """
        self._set("event_time", keys, times, tag, output_times)

    def set_processing_time(self, keys: Keys, times: Times, *, tag: str = "",
                            output_times: Times | None = None) -> None:
        """Fire ``on_timer`` for ``keys[i]`` in the first epoch run at or after wall clock ``times[i]``.

        ``output_times`` (default: the operator's output watermark now) holds the output
        watermark until the timer fires. Processing time depends on the machine: a
        replayed epoch may fire other processing-time timers (SPEC §1).
        """
        self._set("processing_time", keys, times, tag, output_times)

    def delete(self, keys: Keys, *, tag: str = "", domain: TimeDomain = "event_time") -> None:
        """Delete the keys' timers of ``(tag, domain)`` (absent: nothing happens)."""
        k = _array(keys, self.stored.schema.field(self.key).type)
        n = len(k)
        self.stored.remove([k, pa.array([domain] * n, pa.string()), pa.array([tag] * n, pa.string())])

    def pending(self) -> pa.Table:
        """Every timer of the key group not fired yet (:func:`timer_schema`)."""
        return self.stored.table
