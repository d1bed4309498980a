"""RecentEpochs: a run summary's per-epoch series stay bounded (issue 26 item 15)."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.control.status import counters_of
from wire.runtime.recent import RecentEpochs
from wire.runtime.runner import RunSummary


@given(values=st.lists(st.integers(-1000, 1000), max_size=60), keep=st.integers(1, 20),
       cut=st.integers(0, 60))
def test_keeps_the_newest_values_counts_the_rest_and_sums_all(values, keep, cut):
    """Whether the values come one by one, in one extend, or in two += (as RunSummary.merge
    folds a restart's summary in): the list is the newest ``keep``, ``dropped`` the others,
    ``total`` the sum of all, and ``since`` the kept part of any range of epochs."""
    one = RecentEpochs(keep=keep)
    for v in values:
        one.append(v)
    whole = RecentEpochs(values, keep=keep)
    two = RecentEpochs(values[:cut], keep=keep)
    two += values[cut:]
    for s in (one, whole, two):
        assert s == values[-keep:] if values else s == []
        assert s.dropped == max(0, len(values) - keep)
        assert s.total == sum(values)
        lo, hi = sorted((cut % (len(values) + 1), (cut * 7) % (len(values) + 1)))
        assert s.since(lo, hi) == [values[i] for i in range(lo, hi) if i >= len(values) - keep]
        for back in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
            assert back == s and (back.dropped, back.total, back.keep) == (s.dropped, s.total, s.keep)


def test_keep_must_be_positive():
    with pytest.raises(ValueError, match="keep must be at least 1"):
        RecentEpochs(keep=0)


def test_a_summary_of_many_epochs_stays_bounded_and_its_counters_are_totals():
    summary = RunSummary("f")
    for series in (summary.driver_rows, summary.driver_bytes, summary.epoch_seconds):
        series.keep = 100
    for i in range(1, 1001):
        summary.epochs += 1
        summary.driver_rows.append(i % 3)
        summary.driver_bytes.append(10 * i)
        summary.epoch_seconds.append(0.5)
    assert len(summary.driver_rows) == len(summary.driver_bytes) == 100
    c = counters_of(summary)
    assert (c.driver_rows_last, c.driver_rows_total) == (1000 % 3, sum(i % 3 for i in range(1, 1001)))
    assert (c.driver_bytes_last, c.driver_bytes_total) == (10_000, 10 * 1000 * 1001 // 2)
    later = RunSummary("f")
    later.driver_rows.extend([5, 5])
    summary.merge(later)
    assert summary.driver_rows.total == c.driver_rows_total + 10 and summary.driver_rows[-2:] == [5, 5]
