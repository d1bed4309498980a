"""The worker side of a lookup join, without Spark: cache, batched reads, join kernel, retries."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import TableUnavailable
from wire.tables.base import LookupTable, SnapshotTable, hold_and_retry
from wire.tables.lookup import DatabaseLookup, KeyCache, SnapshotLookup, enrich, last_row_per_key

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> float:
        return self.ms / 1000


# --- the cache ------------------------------------------------------------------------


def test_an_entry_is_served_until_its_ttl_then_read_again():
    clock = Clock()
    cache = KeyCache(ttl_ms=1_000, size=10, clock=clock)
    cache.put(1, (1, "a"))
    cache.put(2, None)  # the table has no row 2: the miss is cached too
    clock.ms = 999
    assert cache.get(1) == (True, (1, "a"))
    assert cache.get(2) == (True, None)
    clock.ms = 1_001
    assert cache.get(1) == (False, None)
    assert cache.get(2) == (False, None)


def test_the_least_recently_used_key_leaves_first_when_full():
    cache = KeyCache(ttl_ms=60_000, size=2, clock=Clock())
    cache.put("a", ("a",))
    cache.put("b", ("b",))
    assert cache.get("a")[0]  # "a" used: "b" is now the least recently used
    cache.put("c", ("c",))
    assert [cache.get(k)[0] for k in "abc"] == [True, False, True]
    assert len(cache) == 2


@pytest.mark.parametrize(("ttl_ms", "size"), [(0, 10), (1_000, 0)])
def test_a_zero_ttl_or_size_caches_nothing(ttl_ms, size):
    cache = KeyCache(ttl_ms=ttl_ms, size=size, clock=Clock())
    cache.put(1, (1,))
    assert cache.get(1) == (False, None)
    assert len(cache) == 0


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 6)),
    st.tuples(st.just("get"), st.integers(0, 6)),
    st.tuples(st.just("wait"), st.integers(0, 40)),
), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=ops, ttl=st.integers(1, 50), size=st.integers(1, 5))
def test_the_cache_behaves_as_an_lru_with_a_ttl_per_entry(ops, ttl, size):
    """Against a reference model: LRU order over live entries, each live for ttl after its put."""
    clock = Clock()
    cache = KeyCache(ttl_ms=ttl * 2 + 1, size=size, clock=clock)  # odd ttl: no get lands on a deadline
    model: OrderedDict[int, tuple[tuple[int, int], int]] = OrderedDict()  # key -> (row, expires_ms)
    now = 0
    for i, (op, arg) in enumerate(ops):
        if op == "wait":
            now += arg * 2  # even steps
            clock.ms = now
            continue
        for k in [k for k, (_, exp) in model.items() if exp <= now]:
            del model[k]
        if op == "put":
            if arg not in model and len(model) >= size:
                model.popitem(last=False)
            model.pop(arg, None)
            model[arg] = ((arg, i), now + ttl * 2 + 1)
            cache.put(arg, (arg, i))
        else:
            expected = (True, model[arg][0]) if arg in model else (False, None)
            if arg in model:
                model.move_to_end(arg)
            assert cache.get(arg) == expected
        assert len(cache) <= size


# --- batched reads --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RecordingTable(LookupTable):
    """A database table in memory that records every fetch (one entry per query)."""

    rows: dict[int, str] = field(repr=False)  # repr: how a worker tells tables apart (no mutable state)
    key: str = "id"
    columns: tuple[str, ...] | None = None
    unavailable_timeout_ms: int = 1_000
    queries: list[list[int]] = field(default_factory=list, repr=False)

    def resolve_schema(self) -> pa.Schema:
        return SCHEMA

    def describe(self) -> str:
        return "recording table"

    def fetch(self, keys):
        self.queries.append(sorted(keys))
        hits = [k for k in keys if k in self.rows]
        return pa.table({"id": hits, "name": [self.rows[k] for k in hits]}, schema=SCHEMA)


def test_one_query_per_epoch_with_the_distinct_keys_the_cache_lacks():
    clock = Clock()
    table = RecordingTable({1: "a", 2: "b", 3: "c"})
    lookup = DatabaseLookup(table, SCHEMA, "enrich", KeyCache(10_000, 100, clock))
    lookup.begin_epoch()
    rows = lookup.rows(pa.array([1, 2, 1, 9, None, 2, 1], pa.int64()))
    assert table.queries == [[1, 2, 9]]
    assert sorted(rows.to_pylist(), key=str) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert lookup.stats.as_metrics() == {"lookup_queries": 1, "lookup_keys": 3, "lookup_cache_hits": 0}
    table.rows[3] = "changed"
    lookup.begin_epoch()
    lookup.rows(pa.array([3, 1, 9, 3], pa.int64()))  # 1 and 9 (a miss) come from the cache
    assert table.queries == [[1, 2, 9], [3]]
    assert lookup.stats.cache_hits == 2
    lookup.begin_epoch()
    lookup.rows(pa.array([1, 9], pa.int64()))  # everything cached: no query at all
    assert len(table.queries) == 2
    clock.ms = 10_001  # every entry expired
    lookup.begin_epoch()
    lookup.rows(pa.array([1, 9], pa.int64()))
    assert table.queries[2:] == [[1, 9]]


@settings(max_examples=50, deadline=None)
@given(epochs=st.lists(st.lists(st.integers(0, 12), max_size=30), min_size=1, max_size=5),
       how=st.sampled_from(["inner", "left"]))
def test_without_a_cache_each_epoch_reads_each_distinct_key_once_and_joins_like_pandas(epochs, how):
    table = RecordingTable({k: f"n{k}" for k in range(0, 12, 2)})
    lookup = DatabaseLookup(table, SCHEMA, "enrich", KeyCache(0, 0))
    for keys in epochs:
        before = len(table.queries)
        lookup.begin_epoch()
        events = pa.table({"seq": list(range(len(keys))), "id_": pa.array(keys, pa.int64())})
        joined, unmatched = enrich(events, "id_", lookup.rows(events.column("id_")), how=how)
        assert table.queries[before:] == ([sorted(set(keys))] if keys else [])
        right = pd.DataFrame({"id_": list(table.rows), "name": list(table.rows.values())})
        expected = events.to_pandas().merge(right, on="id_", how=how).sort_values("seq")
        assert joined.to_pylist() == expected.astype(object).where(expected.notna(), None).to_dict("records")
        assert unmatched == sum(1 for k in keys if k not in table.rows)


def test_enrich_casts_the_table_key_to_the_event_key_type_and_keeps_event_order():
    rows = pa.table({"id": pa.array([7, 3], pa.int32()), "tier": ["x", "y"]})
    events = pa.table({"c": pa.array([3, 5, 7, 3], pa.int64())})
    joined, unmatched = enrich(events, "c", rows, how="inner")
    assert joined.to_pylist() == [{"c": 3, "tier": "y"}, {"c": 7, "tier": "x"}, {"c": 3, "tier": "y"}]
    assert unmatched == 1


def test_a_snapshot_keeps_the_last_row_of_a_key():
    t = pa.table({"id": [1, 2, 1, None, 3, 2], "v": ["a", "b", "c", "n", "d", "e"]})
    assert last_row_per_key(t).to_pylist() == [
        {"id": 1, "v": "c"}, {"id": 3, "v": "d"}, {"id": 2, "v": "e"}]


@dataclass(frozen=True, eq=False)
class VersionedTable(SnapshotTable):
    """A snapshot table in memory whose version and loads are counted."""

    state: dict = field(default_factory=lambda: {"version": 0, "rows": {1: "a"}, "loads": 0, "checks": 0})
    key: str = "id"
    columns: tuple[str, ...] | None = None
    unavailable_timeout_ms: int = 1_000

    def resolve_schema(self):
        return SCHEMA

    def describe(self):
        return "versioned table"

    def version(self):
        self.state["checks"] += 1
        return self.state["version"]

    def load(self, version):
        self.state["loads"] += 1
        rows = self.state["rows"]
        return pa.table({"id": list(rows), "name": list(rows.values())}, schema=SCHEMA)


def test_a_snapshot_is_loaded_again_only_when_its_version_changed_checked_once_per_epoch():
    table = VersionedTable()
    lookup = SnapshotLookup(table, SCHEMA, "enrich")
    for _ in range(3):
        lookup.begin_epoch()
        assert lookup.rows(pa.array([1])).to_pylist() == [{"id": 1, "name": "a"}]
    assert (table.state["checks"], table.state["loads"]) == (3, 1)
    table.state.update(version=1, rows={1: "b", 2: "c"})
    lookup.begin_epoch()
    assert lookup.rows(pa.array([1])).to_pylist() == [{"id": 1, "name": "b"}, {"id": 2, "name": "c"}]
    assert (table.state["checks"], table.state["loads"], lookup.stats.loads) == (4, 2, 1)


# --- hold and retry -------------------------------------------------------------------


def test_a_transient_failure_is_retried_with_growing_waits_until_it_passes():
    clock, waits = Clock(), []

    def sleep(s):
        waits.append(s)
        clock.ms += int(s * 1000)

    attempts = iter([ConnectionRefusedError("refused")] * 4 + [None])

    def read():
        e = next(attempts)
        if e is not None:
            raise e
        return "rows"

    table = RecordingTable({}, unavailable_timeout_ms=60_000)
    assert hold_and_retry(table, read, step="enrich", sleep=sleep, clock=clock) == "rows"
    assert waits == [0.2, 0.4, 0.8, 1.6]


def test_a_table_unavailable_past_its_timeout_fails_naming_the_step_and_table():
    clock = Clock()

    def sleep(s):
        clock.ms += int(s * 1000)

    def read():
        raise ConnectionRefusedError("connection refused")

    table = RecordingTable({}, unavailable_timeout_ms=3_000)
    with pytest.raises(TableUnavailable, match=r"lookup join 'enrich': recording table unavailable for "
                                               r"3000 ms .*ConnectionRefusedError: connection refused"):
        hold_and_retry(table, read, step="enrich", sleep=sleep, clock=clock)
    assert clock.ms == 3_000  # it held for the whole timeout, no longer


def test_an_error_that_is_not_transient_is_raised_at_once():
    calls = []

    def read():
        calls.append(1)
        raise ValueError("bad query")

    with pytest.raises(ValueError, match="bad query"):
        hold_and_retry(RecordingTable({}), read, step="enrich", sleep=lambda s: None)
    assert calls == [1]
