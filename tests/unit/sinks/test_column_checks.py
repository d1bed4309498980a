"""column_names: the one check of the sinks' key and partition-column arguments."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wire
from wire.errors import ConfigError
from wire.sinks.column_checks import column_names

NAME = st.text(min_size=1, max_size=5).filter(lambda n: "\x00" not in n)


@given(names=st.lists(NAME, min_size=1, max_size=4, unique=True))
def test_distinct_names_pass_in_order(names):
    assert column_names(names, parameter="key", accepted="x") == tuple(names)
    assert column_names(tuple(names), parameter="key", accepted="x") == tuple(names)
    assert column_names(names[0], parameter="key", accepted="x") == (names[0],)


@pytest.mark.parametrize("bad", [[], (), ["a", "a"], [""], ["a\x00"], [1], 3, b"k", None])
def test_bad_names_name_the_parameter_and_what_is_accepted(bad):
    with pytest.raises(ConfigError, match=r"partition_by.*columns please"):
        column_names(bad, parameter="partition_by", accepted="columns please")


def test_none_and_empty_pass_only_where_allowed():
    assert column_names(None, parameter="p", accepted="x", allow_none=True) == ()
    assert column_names([], parameter="p", accepted="x", allow_none=True) == ()


@pytest.mark.parametrize("build", [
    lambda: wire.sinks.sqlite("/tmp/x.db", table="t", key=["a", "a"]),
    lambda: wire.sinks.postgres("postgresql://u@h/db", table="t", mode="upsert", key=[]),
    lambda: wire.sinks.self_correcting("postgresql://u@h/db", table="t", key=""),
    lambda: wire.sinks.delta("/tmp/d", partition_by=["p", "p"]),
])
def test_every_sink_refuses_bad_columns_when_built(build):
    with pytest.raises(ConfigError, match="distinct column names"):
        build()
