"""Window assigners: validation and vectorized assignment (tumbling, sliding, sessions)."""

from __future__ import annotations

import numpy as np
import pytest

from wire.errors import ConfigError
from wire.state.assigners import Session, Sliding, Tumbling


def windows(t, assigner):
    rows, start, end = assigner.assign(np.asarray(t, np.int64))
    return [(int(r), int(s), int(e)) for r, s, e in zip(rows, start, end, strict=True)]


def test_tumbling_floor_aligned_to_epoch():
    assert windows([-1, 0, 9, 10], Tumbling(10)) == [
        (0, -10, 0),
        (1, 0, 10),
        (2, 0, 10),
        (3, 10, 20),
    ]


def test_sliding_every_window_containing_the_event():
    # size 10, slide 5: two windows per event
    assert windows([7, -1, 10], Sliding(10, 5)) == [
        (0, 0, 10),
        (0, 5, 15),
        (1, -10, 0),
        (1, -5, 5),
        (2, 5, 15),
        (2, 10, 20),
    ]
    # size 10, slide 4 (not a divisor): starts k*4 with start <= t < start + 10
    assert windows([9, 1, 2], Sliding(10, 4)) == [
        (0, 0, 10),
        (0, 4, 14),
        (0, 8, 18),
        (1, -8, 2),
        (1, -4, 6),
        (1, 0, 10),
        (2, -4, 6),
        (2, 0, 10),
    ]
    # slide == size is tumbling
    assert windows([3, 17], Sliding(10, 10)) == windows([3, 17], Tumbling(10))


def test_sliding_against_brute_force():
    rng = np.random.default_rng(0)
    t = rng.integers(-1000, 1000, 300)
    for size, slide in [(10, 3), (7, 7), (60, 15), (5, 1)]:
        got = windows(t, Sliding(size, slide))
        want = [
            (i, s, s + size)
            for i, ti in enumerate(t)
            for s in range((int(ti) - size) // slide * slide - slide, int(ti) + 1, slide)
            if s <= ti < s + size
        ]
        assert got == want


def test_sessions_give_proto_sessions_and_extremes_saturate():
    assert windows([5, -3], Session(10)) == [(0, 5, 15), (1, -3, 7)]
    big = 2**63 - 5
    assert windows([big], Session(10)) == [(0, big, 2**63 - 1)]
    assert windows([big], Tumbling(10))[0][2] == 2**63 - 1
    # sliding near the int64 minimum: windows that would start below it are dropped
    low = -(2**63) + 7  # -2**63 = 2 (mod 5): the latest window starts at -2**63 + 3
    assert windows([low], Sliding(10, 5)) == [(0, -(2**63) + 3, -(2**63) + 13)]


@pytest.mark.parametrize(
    ("factory", "parameter"),
    [
        (lambda: Tumbling(0), "size"),
        (lambda: Tumbling(True), "size"),
        (lambda: Tumbling("soon"), "size"),
        (lambda: Sliding(10, 0), "slide"),
        (lambda: Sliding(10, 11), "slide"),
        (lambda: Sliding(-1, 1), "size"),
        (lambda: Session(0), "gap"),
        (lambda: Session(-5), "gap"),
    ],
)
def test_validation(factory, parameter):
    """The kernels assign the API's window classes: their checks name the API's parameters."""
    with pytest.raises(ConfigError, match=f"invalid {parameter}="):
        factory()
