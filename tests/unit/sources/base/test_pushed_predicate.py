"""A read's rows under a pushed-down predicate (``Decoded.where``, ``wire.sources.base.rows``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from wire.sources.base.rows import KEEP_ALL_ABOVE, Decoded


def decoded(kinds: list[str]) -> Decoded:
    n = len(kinds)
    return Decoded(pa.table({"kind": kinds, "t": list(range(n))}), np.arange(100, 100 + n, dtype=np.int64),
                   np.arange(n, dtype=np.int64), [("f:9", "bad", "oops")])


def test_rows_the_predicate_is_not_true_on_are_dropped_with_their_times_and_positions():
    d = decoded(["bid", "person", "bid", None, "auction"])
    got = d.where(["in", ["col", "kind"], ["person", "auction"]])
    assert got.table.column("kind").to_pylist() == ["person", "auction"]
    assert got.event_times.tolist() == [101, 104] and got.positions.tolist() == [1, 4]
    assert got.dead == d.dead  # dead letters are never filtered


def test_a_predicate_that_keeps_nearly_everything_drops_nothing():
    kinds = ["bid"] * 19 + ["person"]  # keeps 95 %: Spark's filter drops the one row
    assert KEEP_ALL_ABOVE <= 19 / 20
    d = decoded(kinds)
    assert d.where(["cmp", "=", ["col", "kind"], ["lit", "bid"]]) is d
    assert d.where(["cmp", "=", ["col", "kind"], ["lit", "person"]]).table.num_rows == 1


def test_a_predicate_the_rows_cannot_answer_keeps_them_all():
    d = decoded(["bid", "person"])
    assert d.where(["cmp", "=", ["col", "price"], ["lit", 3]]) is d  # no such column here
