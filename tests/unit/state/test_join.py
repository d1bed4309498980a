"""Interval join: hand-derived transcripts, edge cases and a randomized oracle property."""

from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wire.core.envelope import MAX_WATERMARK
from wire.errors import ConfigError
from wire.state import join as join_module
from wire.state.join import (
    LATE_REASON,
    IntervalJoinSpec,
    join_epoch,
    late_schema,
    output_schema,
    state_schema,
)

NO_WM = -(2**63)
SPEC = IntervalJoinSpec("k", -5, 10, ("a",), ("b",))


def side(rows: list[tuple], payload: str, key_type: pa.DataType | None = None) -> pa.Table:
    """Rows of (key, payload, event time, seq) as a side's input table (string keys by default)."""
    key_type = key_type or pa.string()
    schema = pa.schema([("k", key_type), (payload, pa.int64()), ("__et", pa.int64()), ("__seq", pa.int64())])
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def pairs(joined: pa.Table, spec: IntervalJoinSpec = SPEC) -> list[tuple]:
    cols = ["k", "a", "right_b", "left_event_time", "right_event_time", "event_time"]
    return [tuple(r.values()) for r in joined.select(cols).to_pylist()]


def lates(late: pa.Table) -> list[tuple]:
    cols = ["k", "a", "right_b", "event_time", "watermark", "side"]
    assert set(late.column("reason").to_pylist()) <= {LATE_REASON}
    return [tuple(r.values()) for r in late.select(cols).to_pylist()]


def payload(state: pa.Table, column: str) -> list[int]:
    return state.column(column).to_pylist()


class Run:
    """Feeds epochs to join_epoch, carrying state and the watermark like the Spark layer."""

    def __init__(self, spec: IntervalJoinSpec) -> None:
        self.spec, self.ls, self.rs, self.wm = spec, None, None, NO_WM

    def epoch(self, left: pa.Table, right: pa.Table, wm_out: int) -> tuple[pa.Table, pa.Table]:
        self.ls, self.rs, joined, late = join_epoch(self.ls, self.rs, left, right, self.wm, wm_out, self.spec)
        self.wm = wm_out
        return joined, late


def test_transcript_within_bounds_outside_late_and_purge() -> None:
    # lower=-5, upper=10: r.t - l.t in [-5, 10]. Late: t < wm_in.
    # Buffers: left while l.t + 10 >= wm_out, right while r.t + 5 >= wm_out.
    run = Run(SPEC)
    left = side([("x", 1, 100, 1), ("x", 2, 120, 2), ("y", 3, 95, 3)], "a")
    right = side([("x", 10, 95, 1), ("x", 11, 131, 2), ("y", 12, 89, 3)], "b")
    joined, late = run.epoch(left, right, 100)
    # 95-100 = -5 joins; 131-120 = 11 and 89-95 = -6 are just outside.
    assert pairs(joined) == [("x", 1, 10, 100, 95, 100)]
    assert late.num_rows == 0
    assert payload(run.ls, "a") == [1, 2, 3]  # all l.t >= 90
    assert payload(run.rs, "b") == [10, 11]  # r.t >= 95: 89 purged

    left = side([("x", 4, 121, 4), ("y", 5, 99, 5)], "a")
    right = side([("x", 13, 110, 4), ("x", 14, 125, 5), ("y", 15, 100, 6), ("x", 16, 97, 7)], "b")
    joined, late = run.epoch(left, right, 125)
    assert pairs(joined) == [
        ("x", 1, 13, 100, 110, 110),  # buffered left x new right
        ("x", 2, 14, 120, 125, 125),
        ("x", 4, 14, 121, 125, 125),  # new x new
        ("x", 4, 11, 121, 131, 131),  # new left x buffered right
        ("y", 3, 15, 95, 100, 100),
    ]
    assert lates(late) == [("y", 5, None, 99, 100, "left"), ("x", None, 16, 97, 100, "right")]
    assert payload(run.ls, "a") == [2, 4]  # l.t >= 115
    assert payload(run.rs, "b") == [11, 14]  # r.t >= 120

    left = side([("x", 6, 125, 6)], "a")  # t == wm_in: on time
    right = side([("x", 17, 126, 8), ("x", 18, 124, 9)], "b")
    joined, late = run.epoch(left, right, 140)
    assert pairs(joined) == [
        ("x", 2, 17, 120, 126, 126),
        ("x", 4, 17, 121, 126, 126),
        ("x", 6, 14, 125, 125, 125),
        ("x", 6, 17, 125, 126, 126),
        ("x", 6, 11, 125, 131, 131),
    ]
    assert lates(late) == [("x", None, 18, 124, 125, "right")]
    assert run.ls.num_rows == run.rs.num_rows == 0  # left needs l.t >= 130, right r.t >= 135

    joined, late = run.epoch(side([("x", 7, 141, 10)], "a"), side([("x", 19, 139, 11)], "b"), MAX_WATERMARK)
    assert joined.num_rows == 0
    assert lates(late) == [("x", None, 19, 139, 140, "right")]
    assert run.ls.num_rows == run.rs.num_rows == 0  # end of stream purges everything


def test_transcript_negative_bounds_right_precedes_left() -> None:
    spec = IntervalJoinSpec("k", -10, -5, ("a",), ("b",))
    run = Run(spec)
    right = side([(1, 1, 92, 1), (1, 2, 89, 2)], "b", pa.int64())
    joined, late = run.epoch(side([(1, 1, 99, 3)], "a", pa.int64()), right, 100)
    assert pairs(joined, spec) == [(1, 1, 2, 99, 89, 99), (1, 1, 1, 99, 92, 99)]
    assert run.ls.num_rows == 0  # l.t - 5 < 100: any partner would be late
    assert payload(run.rs, "b") == [1]  # r.t + 10 >= 100

    # 100 is on time (not < wm_in) although 100 + upper <= wm_in: it still joins 92.
    left = side([(1, 2, 100, 4), (1, 3, 103, 5)], "a", pa.int64())
    joined, late = run.epoch(left, side([(1, 3, 98, 6)], "b", pa.int64()), 110)
    assert pairs(joined, spec) == [(1, 2, 1, 100, 92, 100)]
    assert lates(late) == [(1, None, 3, 98, 100, "right")]
    assert run.ls.num_rows == run.rs.num_rows == 0


def test_transcript_allowed_lateness() -> None:
    spec = IntervalJoinSpec("k", 0, 0, ("a",), ("b",), allowed_lateness_ms=5)
    run = Run(spec)
    joined, _ = run.epoch(side([("k", 1, 46, 1), ("k", 2, 44, 2)], "a"), side([], "b"), 50)
    assert joined.num_rows == 0
    assert payload(run.ls, "a") == [1]  # l.t + 0 + 5 >= 50
    left = side([("k", 3, 45, 3)], "a")  # 45 + 5 == wm_in: accepted
    joined, late = run.epoch(left, side([("k", 11, 46, 4), ("k", 12, 44, 5)], "b"), 60)
    assert pairs(joined, spec) == [("k", 1, 11, 46, 46, 46)]
    assert lates(late) == [("k", None, 12, 44, 50, "right")]
    assert run.ls.num_rows == run.rs.num_rows == 0


def test_purge_boundary_keeps_what_a_partner_at_the_watermark_needs() -> None:
    run = Run(SPEC)  # left kept while l.t + 10 >= wm_out, right while r.t + 5 >= wm_out
    run.epoch(
        side([("x", 1, 90, 1), ("x", 2, 89, 2)], "a"), side([("x", 11, 95, 3), ("x", 12, 94, 4)], "b"), 100
    )
    assert payload(run.ls, "a") == [1] and payload(run.rs, "b") == [11]
    # t == wm_in is on time: 100 needs left 90 (100 - 90 = upper) and right 95 (95 - 100 = lower).
    joined, late = run.epoch(side([("x", 3, 100, 5)], "a"), side([("x", 13, 100, 6)], "b"), 100)
    assert pairs(joined) == [
        ("x", 1, 13, 90, 100, 100),
        ("x", 3, 11, 100, 95, 100),
        ("x", 3, 13, 100, 100, 100),
    ]
    assert late.num_rows == 0


def test_output_order_uses_seq_with_nulls_last() -> None:
    left = side([("k", 1, 10, None), ("k", 2, 10, 7), ("k", 3, 10, 3), ("a", 4, 10, 9)], "a")
    right = side([("k", 11, 12, None), ("k", 12, 12, 1), ("a", 13, 10, 2)], "b")
    _, _, joined, _ = join_epoch(None, None, left, right, NO_WM, NO_WM, SPEC)
    assert [(a, b) for _, a, b, *_ in pairs(joined)] == [
        (4, 13),
        (3, 12),
        (3, 11),
        (2, 12),
        (2, 11),
        (1, 12),
        (1, 11),
    ]


def test_seq_column_is_optional_and_null_keys_never_match() -> None:
    left = side([(None, 1, 10, 1), ("k", 2, 10, 2)], "a").drop_columns(["__seq"])
    right = side([(None, 11, 10, 1), ("k", 12, 10, 2)], "b").drop_columns(["__seq"])
    ls, rs, joined, _ = join_epoch(None, None, left, right, NO_WM, 0, SPEC)
    assert pairs(joined) == [("k", 2, 12, 10, 10, 10)]
    assert ls.column("__seq").null_count == 2 and ls.num_rows == rs.num_rows == 2


def test_empty_inputs_give_typed_empty_tables() -> None:
    ls, rs, joined, late = join_epoch(None, None, side([], "a"), side([], "b"), NO_WM, 0, SPEC)
    assert joined.schema == output_schema(SPEC, side([], "a").schema, side([], "b").schema)
    assert late.schema == late_schema(SPEC, side([], "a").schema, side([], "b").schema)
    assert ls.schema == state_schema(SPEC, side([], "a").schema, "left")
    assert (ls.num_rows, rs.num_rows, joined.num_rows, late.num_rows) == (0, 0, 0, 0)


def test_extreme_bounds_and_times_do_not_overflow() -> None:
    spec = IntervalJoinSpec("k", -(2**63), 2**63 - 1, ("a",), ("b",))
    big = 2**62
    left = side([("k", 1, -big, 1), ("k", 2, big, 2)], "a")
    right = side([("k", 11, big, 1), ("k", 12, -big, 2)], "b")
    ls, rs, joined, _ = join_epoch(None, None, left, right, NO_WM, 2**63 - 2, spec)
    # (-big, big) is 2**63 apart, one more than upper; (big, -big) is exactly lower.
    assert [(a, b) for _, a, b, *_ in pairs(joined)] == [(1, 12), (2, 12), (2, 11)]
    # Kept: l.t >= wm_out - upper = -1 and r.t >= wm_out + lower = -2.
    assert payload(ls, "a") == [2] and payload(rs, "b") == [11]


def test_schemas() -> None:
    spec = IntervalJoinSpec("k", 0, 5, ["v", "w"], ["v"], left_prefix="l_", right_prefix="r_")
    assert spec.left_columns == ("v", "w")
    lsch = pa.schema([("k", pa.string()), ("v", pa.float64()), ("w", pa.int32()), ("z", pa.int8())])
    rsch = pa.schema([("v", pa.bool_()), ("k", pa.string())])
    assert output_schema(spec, lsch, rsch) == pa.schema(
        [("k", pa.string()), ("l_v", pa.float64()), ("l_w", pa.int32()), ("r_v", pa.bool_())]
        + [(n, pa.int64()) for n in ("left_event_time", "right_event_time", "event_time")]
    )
    assert late_schema(spec, lsch, rsch) == pa.schema(
        [
            *[("k", pa.string()), ("l_v", pa.float64()), ("l_w", pa.int32()), ("r_v", pa.bool_())],
            *[("event_time", pa.int64()), ("watermark", pa.int64()), ("reason", pa.string())],
            ("side", pa.string()),
        ]
    )
    assert state_schema(spec, rsch, "right") == pa.schema(
        [("k", pa.string()), ("v", pa.bool_()), ("__et", pa.int64()), ("__seq", pa.int64())]
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": ""}, "invalid key=''; accepted: a non-empty column name"),
        ({"key": "__et"}, "invalid key='__et'"),
        ({"lower_ms": 11}, "invalid lower_ms=11; accepted: an int <= upper_ms (10)"),
        ({"upper_ms": 1.5}, "invalid upper_ms=1.5; accepted: an int64 (milliseconds, may be negative)"),
        ({"upper_ms": 2**63}, "invalid upper_ms=9223372036854775808"),
        ({"allowed_lateness_ms": -1}, "invalid allowed_lateness_ms=-1; accepted: an int >= 0 (milliseconds)"),
        ({"allowed_lateness_ms": True}, "invalid allowed_lateness_ms=True"),
        ({"left_columns": ("a", "k")}, "invalid left_columns=('a', 'k'); accepted: a tuple of unique"),
        ({"left_columns": ("a", "a")}, "invalid left_columns=('a', 'a')"),
        ({"right_columns": ("__seq",)}, "invalid right_columns=('__seq',)"),
        ({"right_columns": "b"}, "invalid right_columns='b'"),
        ({"right_prefix": None}, "invalid right_prefix=None; accepted: a string"),
        (
            {"right_columns": ("a",), "right_prefix": ""},
            "invalid left_prefix/right_prefix=('', ''); accepted: prefixes that make the output "
            "column names ['k', 'a', 'a', 'left_event_time', 'right_event_time', 'event_time'] "
            "unique (clash: ['a'])",
        ),
        ({"left_columns": ("event_time",)}, "output column names"),
        ({"left_columns": ("side",)}, "late column names ['k', 'side', 'right_b', 'event_time', 'watermark'"),
        ({"right_columns": ("b",), "left_prefix": "right_b", "left_columns": ("",)}, "invalid left_columns"),
    ],
)
def test_spec_config_errors(kwargs: dict, message: str) -> None:
    args = {"key": "k", "lower_ms": -5, "upper_ms": 10, "left_columns": ("a",), "right_columns": ("b",)}
    with pytest.raises(ConfigError) as info:
        IntervalJoinSpec(**{**args, **kwargs})
    assert message in str(info.value)


def test_schema_config_errors() -> None:
    lsch, rsch = side([], "a").schema, side([], "b").schema
    with pytest.raises(ConfigError, match=r"invalid left_columns=\['a'\]; accepted: columns of the left"):
        output_schema(SPEC, rsch, rsch)
    with pytest.raises(ConfigError, match=r"invalid key='k'; .* got int64 \(left\) and string \(right\)"):
        output_schema(SPEC, side([], "a", pa.int64()).schema, rsch)
    with pytest.raises(ConfigError, match="invalid side='up'"):
        state_schema(SPEC, lsch, "up")
    with pytest.raises(ConfigError, match="invalid left="):
        join_epoch(None, None, side([], "a").drop_columns(["__et"]), side([], "b"), 0, 0, SPEC)
    with pytest.raises(ValueError, match="right: __et must not contain nulls"):
        join_epoch(None, None, side([], "a"), side([("k", 1, None, 1)], "b"), 0, 0, SPEC)


def oracle_pairs(left: pd.DataFrame, right: pd.DataFrame, lower: int, upper: int) -> set[tuple[int, int]]:
    both = left.dropna(subset=["k"]).merge(right.dropna(subset=["k"]), on="k", suffixes=("_l", "_r"))
    d = both["t_r"] - both["t_l"]
    hit = both[(d >= lower) & (d <= upper)]
    return set(zip(hit["id_l"], hit["id_r"], strict=True))


def simulate(spec: IntervalJoinSpec, seed: int, *, n: int = 400, delay: int = 15, epochs: int = 9) -> None:
    """Random keyed events in both sides, arriving out of order, split into epochs.

    The watermark is bounded out-of-orderness (max event time seen - delay); events whose
    arrival is delayed by more than ``delay`` may be late. Each epoch's output is checked
    for order, and the whole stream against a pandas cross-join of the accepted events.
    """
    rng = np.random.default_rng(seed)
    keys = np.array(["a", "b", "c", "d", None], dtype=object)
    events = pd.DataFrame(
        {
            "side": rng.choice(["left", "right"], n),
            "k": keys[rng.choice(5, n, p=[0.3, 0.3, 0.2, 0.15, 0.05])],
            "t": rng.integers(0, 600, n),
        }
    )
    events = events.iloc[np.argsort(events["t"] + rng.integers(0, 3 * delay, n), kind="stable")]
    events["id"] = np.arange(n)  # arrival order = id = __seq
    cuts = np.sort(rng.choice(np.arange(1, n), epochs - 1, replace=False))
    run, seen, wm = Run(spec), -(2**62), NO_WM
    joined_ids, late_ids, accepted = [], [], []
    bounds = [0, *cuts, n, n]  # the last, empty epoch ends the stream
    for i in range(epochs + 1):
        chunk, last = events.iloc[bounds[i] : bounds[i + 1]], i == epochs
        seen = max([seen, *chunk["t"]])
        wm_out = MAX_WATERMARK if last else max(wm, seen - delay)
        tables = {}
        for name, col in (("left", "a"), ("right", "b")):
            part = chunk[chunk["side"] == name]
            rows = list(zip(part["k"], part["id"], part["t"], part["id"], strict=True))
            tables[name] = side(rows, col)
        joined, late = run.epoch(tables["left"], tables["right"], wm_out)
        expect_late = chunk["t"] + spec.allowed_lateness_ms < wm
        late_ids += late.column("a").fill_null(late.column("right_b")).to_pylist()
        assert sorted(late_ids[len(late_ids) - late.num_rows :]) == sorted(chunk["id"][expect_late])
        accepted.append(chunk[~expect_late])
        frame = joined.to_pandas()
        ordered = frame.sort_values(
            ["k", "left_event_time", "a", "right_event_time", "right_b"], kind="stable"
        )
        assert frame.equals(ordered.reset_index(drop=True))
        joined_ids += list(zip(frame["a"], frame["right_b"], strict=True))
        # State holds accepted events only, each still able to meet a future partner.
        lt, rt = run.ls.column("__et").to_numpy(), run.rs.column("__et").to_numpy()
        # Python ints: the unbounded join's bounds are the int64 limits
        assert all(t + spec.upper_ms + spec.allowed_lateness_ms >= wm_out for t in lt.tolist())
        assert all(t - spec.lower_ms + spec.allowed_lateness_ms >= wm_out for t in rt.tolist())
        wm = wm_out
    assert run.ls.num_rows == run.rs.num_rows == 0
    assert len(joined_ids) == len(set(joined_ids))  # each pair at most once
    ok = pd.concat(accepted)
    expected = oracle_pairs(ok[ok["side"] == "left"], ok[ok["side"] == "right"], spec.lower_ms, spec.upper_ms)
    assert set(joined_ids) == expected  # every pair of accepted events, exactly once
    assert len(late_ids) + len(ok) == n  # every event accounted for


@pytest.mark.parametrize(
    ("lower", "upper", "lateness"),
    [(0, 10, 0), (-10, 0, 0), (-7, -3, 0), (3, 9, 4), (0, 0, 0), (-20, 20, 7), (-30, -30, 2),
     # the regular (unbounded) join of Stream.join(within=None): every equal-key pair
     (-(2**63), 2**63 - 1, 0), (-(2**63), 2**63 - 1, 6)],
)
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_epochs_match_cross_join_oracle(lower: int, upper: int, lateness: int, seed: int) -> None:
    spec = IntervalJoinSpec("k", lower, upper, ("a",), ("b",), allowed_lateness_ms=lateness)
    simulate(spec, seed)


def test_many_keys_in_one_epoch() -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    frames = {}
    for name in ("l", "r"):
        frames[name] = pd.DataFrame(
            {"k": rng.integers(0, 3_000, n).astype(str), "id": np.arange(n), "t": rng.integers(0, 500, n)}
        )
    left = side(list(zip(*(frames["l"][c] for c in ("k", "id", "t", "id")), strict=True)), "a")
    right = side(list(zip(*(frames["r"][c] for c in ("k", "id", "t", "id")), strict=True)), "b")
    _, _, joined, _ = join_epoch(None, None, left, right, NO_WM, NO_WM, SPEC)
    got = list(zip(joined.column("a").to_pylist(), joined.column("right_b").to_pylist(), strict=True))
    assert len(got) == len(set(got))
    assert set(got) == oracle_pairs(frames["l"], frames["r"], SPEC.lower_ms, SPEC.upper_ms)
    keys = joined.column("k").to_pylist()
    assert keys == sorted(keys) and len(set(keys)) > 1_000


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(join_module, raise_on_error=False)
    assert tried > 0 and failures == 0
