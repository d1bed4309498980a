"""The pure re-key of keyed state (:mod:`wire.state.rekey`), without Spark."""

from __future__ import annotations

import zlib
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.core.time import NO_WATERMARK
from wire.state.rekey import INDEX_TABLE, GroupState, merge_channels, rekey
from wire.state.segments import INDEX_SCHEMA, MemoryChunkStore, Segments


def group_of(key: str | None, groups: int) -> int:
    return zlib.crc32(str(key).encode()) % groups


def assign_for(groups: int):
    return lambda arr: np.array([group_of(k, groups) for k in arr.to_pylist()], np.int64)


def rows_of(state: GroupState) -> list[tuple]:
    return [tuple(r.values()) for t in state.chunks.values() for r in t.to_pylist()]


def partition(rows: list[tuple[str, int, int]], groups: int, chunk_rows: int) -> dict[int, GroupState]:
    """Rows ``(key, bucket, value)`` laid out as ``groups`` key groups of chunked segments."""
    out = {}
    for g in range(groups):
        mine = [r for r in rows if group_of(r[0], groups) == g]
        store = MemoryChunkStore()
        seg = Segments(None, store, pa.concat_tables)
        for bucket in sorted({b for _, b, _ in mine}):
            part = [r for r in mine if r[1] == bucket]
            for i in range(0, len(part), chunk_rows):
                seg.append(bucket, pa.table({"k": [r[0] for r in part[i:i + chunk_rows]],
                                             "v": [r[2] for r in part[i:i + chunk_rows]]}))
        out[g] = GroupState(10 * g, g, {"src": 100 + g}, {INDEX_TABLE: seg.index()}, dict(store.chunks))
    return out


rows_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]), st.integers(0, 3), st.integers(0, 99)),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, old=st.integers(1, 6), new=st.integers(1, 17), chunk_rows=st.integers(1, 5))
def test_every_row_moves_to_its_keys_new_group_in_order(rows, old, new, chunk_rows):
    before = partition(rows, old, chunk_rows)
    after = rekey(before, key="k", new_groups=new, assign=assign_for(new))
    assert sorted(after) == list(range(new))
    seen: Counter = Counter()
    for g, s in after.items():
        seg = Segments(s.tables[INDEX_TABLE], MemoryChunkStore(dict(s.chunks)), pa.concat_tables)
        assert s.tables[INDEX_TABLE].schema == INDEX_SCHEMA and seg.rows() == sum(
            t.num_rows for t in s.chunks.values())
        for bucket in seg.buckets():
            for t in seg.read(bucket):
                for k, v in zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True):
                    assert group_of(k, new) == g
                    seen[(k, bucket, v)] += 1
        # a key's rows keep their order within a bucket
        for bucket in seg.buckets():
            order = [(k, v) for t in seg.read(bucket)
                     for k, v in zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True)]
            for key in {k for k, _ in order}:
                expected = [r[2] for r in rows if r[0] == key and r[1] == bucket]
                assert [v for k, v in order if k == key] == expected
    assert seen == Counter(rows)


@settings(max_examples=40, deadline=None)
@given(rows=rows_strategy, old=st.integers(1, 6), mid=st.integers(1, 17), new=st.integers(1, 9))
def test_rescaling_twice_is_rescaling_once(rows, old, mid, new):
    before = partition(rows, old, 3)
    once = rekey(before, key="k", new_groups=new, assign=assign_for(new))
    twice = rekey(rekey(before, key="k", new_groups=mid, assign=assign_for(mid)),
                  key="k", new_groups=new, assign=assign_for(new))
    for g in range(new):
        assert sorted(rows_of(once[g])) == sorted(rows_of(twice[g]))
        assert (once[g].wm_in, once[g].wm_out, once[g].channels) == (
            twice[g].wm_in, twice[g].wm_out, twice[g].channels)


def test_watermarks_are_the_minimum_over_the_old_groups():
    before = partition([("a", 0, 1), ("b", 0, 2)], 3, 2)
    after = rekey(before, key="k", new_groups=5, assign=assign_for(5))
    for s in after.values():
        assert (s.wm_in, s.wm_out, s.channels) == (0, 0, {"src": 100})


def test_no_old_state_gives_empty_groups():
    after = rekey({}, key="k", new_groups=2, assign=assign_for(2))
    assert [(s.wm_in, s.wm_out, s.chunks) for s in after.values()] == [(NO_WATERMARK, NO_WATERMARK, {})] * 2


def test_per_group_channels_fold_and_spread():
    merged = merge_channels([{"src": 5, "up/0": 7, "up/1": 3}, {"src": 4, "up/0": 9, "up/1": 8}],
                            per_group={"up"}, new_groups=3)
    assert merged == {"src": 4, "up/0": 3, "up/1": 3, "up/2": 3}
    assert merge_channels([{"a": 1}, {}], per_group=(), new_groups=2) == {"a": NO_WATERMARK}


def test_missing_key_column_and_bad_assign_are_errors():
    before = {0: GroupState(chunks={(0, 0): pa.table({"x": [1]})})}
    with pytest.raises(KeyError, match="key column 'k'"):
        rekey(before, key="k", new_groups=2, assign=assign_for(2))
    before = {0: GroupState(chunks={(0, 0): pa.table({"k": ["a"]})})}
    with pytest.raises(ValueError, match="outside"):
        rekey(before, key="k", new_groups=2, assign=lambda arr: np.array([5]))
    with pytest.raises(ValueError, match="new_groups"):
        rekey(before, key="k", new_groups=0, assign=assign_for(1))
