"""An operator's input and output watermarks (Beam's rule, SPEC §2): transcripts and properties."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from wire.core.time import INT64_MAX, NO_WATERMARK
from wire.state.operator_watermarks import fold_marks, input_watermark, output_watermark

A, B = "a", "b/0"
TWO = (A, B)


def epochs(transcript, expected=TWO, wm_in=NO_WATERMARK):
    """Run epochs of marks through the rule; the channels and input watermark after each."""
    channels: dict[str, int] = {}
    seen = []
    for marks in transcript:
        channels = fold_marks(channels, marks, expected)
        wm_in = input_watermark(wm_in, channels, expected)
        seen.append((dict(channels), wm_in))
    return seen


def test_two_channels_by_hand():
    # epoch 1: only a speaks; b is not heard yet and holds the operator back
    # epoch 2: b at 5 -> min(10, 5) = 5
    # epoch 3: b jumps to 20, a moves to 30 -> min(30, 20) = 20
    # epoch 4: a late watermark row (3) of a: a channel never goes back -> still 20
    # epoch 5: nothing arrives -> unchanged
    # epoch 6: a mark without a channel belongs to the first expected one (a: 40 -> min(40, 20))
    assert epochs([[(A, 10)], [(B, 5)], [(B, 20), (A, 30)], [(A, 3)], [], [(None, 40)]]) == [
        ({A: 10}, NO_WATERMARK),
        ({A: 10, B: 5}, 5),
        ({A: 30, B: 20}, 20),
        ({A: 30, B: 20}, 20),
        ({A: 30, B: 20}, 20),
        ({A: 40, B: 20}, 20),
    ]


def test_several_rows_of_one_channel_in_an_epoch_take_the_highest():
    assert epochs([[(A, 7), (A, 12), (A, 9)]], expected=(A,)) == [({A: 12}, 12)]


def test_the_input_watermark_never_goes_below_the_one_in_force():
    # a rescale merges channels to their minimum; the operator's own input watermark stays
    assert input_watermark(50, {A: 40, B: 60}, TWO) == 50
    assert input_watermark(50, {A: 70, B: 60}, TWO) == 60


def test_a_channel_the_operator_does_not_expect_does_not_count():
    channels = fold_marks({}, [("other", 100), (A, 10)], (A,))
    assert channels == {"other": 100, A: 10}
    assert input_watermark(NO_WATERMARK, channels, (A,)) == 10


def test_fold_marks_leaves_its_input_alone():
    before = {A: 1}
    fold_marks(before, [(A, 5)], (A,))
    assert before == {A: 1}


def test_output_watermark_by_hand():
    # a window of 10 ms with an unfired window at 20 and input at 35: held at 20
    assert output_watermark(0, 35, 20) == 20
    # no hold: follows the input
    assert output_watermark(0, 35) == 35
    assert output_watermark(0, 35, None) == 35
    # the earliest of several holds
    assert output_watermark(0, 35, 30, 25, None) == 25
    # a hold behind the output already forwarded: the output never goes back
    assert output_watermark(28, 35, 20) == 28
    # a join's hold, in - allowed_lateness = 35 - 5
    assert output_watermark(0, 35, 35 - 5) == 30
    # end of input: nothing holds a window that cannot open any more
    assert output_watermark(30, INT64_MAX) == INT64_MAX


marks_strategy = st.lists(
    st.tuples(st.sampled_from([A, B, None]), st.integers(-(10**6), 10**6)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(marks=marks_strategy, seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 30), max_size=6))
def test_input_watermark_is_monotonic_bounded_and_independent_of_order(marks, seed, cuts):
    # oracle: per channel the highest mark heard; a channel never heard is NO_WATERMARK
    highest = {c: max([wm for ch, wm in marks if (ch or A) == c], default=NO_WATERMARK) for c in TWO}
    final = min(highest.values())

    shuffled = marks[:]
    random.Random(seed).shuffle(shuffled)
    bounds = sorted({0, len(shuffled), *(min(c, len(shuffled)) for c in cuts)})
    transcript = [shuffled[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    seen = epochs(transcript)
    ins = [NO_WATERMARK, *(wm for _, wm in seen)]
    assert all(x <= y for x, y in itertools.pairwise(ins))  # never decreases
    for channels, wm_in in seen:  # never past what every expected channel has declared
        assert wm_in <= min(channels.get(c, NO_WATERMARK) for c in TWO)
    # whatever the order of the rows and however they fall into epochs
    assert ins[-1] == final


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(-1000, 1000),
                                st.lists(st.one_of(st.none(), st.integers(-1000, 1000)), max_size=3)),
                      max_size=20))
def test_output_watermark_is_monotonic_and_never_past_the_holds(steps):
    out = wm_in = NO_WATERMARK
    for upstream, holds in steps:
        wm_in = max(wm_in, upstream)
        new_out = output_watermark(out, wm_in, *holds)
        assert new_out >= out
        assert new_out <= max(out, wm_in)  # never past the input
        for h in holds:
            if h is not None and out <= h:
                assert new_out <= h  # never past a hold it had not passed already
        assert new_out in (out, wm_in, *(h for h in holds if h is not None))
        out = new_out
