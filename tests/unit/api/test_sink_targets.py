"""Two sinks of one flow on one path or table are refused when the flow is built (issue 26 item 7)."""

from __future__ import annotations

import os

import pytest

import wire
from wire.errors import PlanError


def two_sinks(first, second) -> None:
    flow = wire.Flow("f")
    events = flow.source(wire.sources.files("in/*.csv", format="csv"), event_time="t", key="k")
    events.sink(first, name="raw")
    events.filter("x > 0").sink(second, name="positive")


@pytest.mark.parametrize(
    ("first", "second", "where"),
    [
        (wire.sinks.parquet("out"), wire.sinks.parquet("./out/"), "both write to the path"),
        (wire.sinks.parquet("out"), wire.sinks.jsonl("out"), "both write to the path"),
        (wire.sinks.delta("out/t"), wire.sinks.parquet("out/t/late"), "which is inside it"),
        (wire.sinks.parquet("out/t/late"), wire.sinks.delta("out/t"), "which contains it"),
        (wire.sinks.guarded(wire.sinks.parquet("out")), wire.sinks.parquet("out"), "both write to the path"),
        (wire.sinks.postgres("host=db dbname=w", table="t"),
         wire.sinks.postgres("postgresql://u:secret@db:5432/w", table="t", mode="upsert", key="k"),
         "both write to the table 'postgres db:5432/w public.t'"),
        (wire.sinks.sqlite("o.db", table="t", key="k"), wire.sinks.sqlite("./o.db", table="t", key="k"),
         "both write to the table"),
    ],
)
def test_a_second_sink_on_the_same_path_or_table_is_refused_naming_both(first, second, where):
    with pytest.raises(PlanError) as info:
        two_sinks(first, second)
    msg = str(info.value)
    assert "sinks 'raw' and 'positive'" in msg and where in msg, msg
    assert "Give sink 'positive' another" in msg and ".union()" in msg
    assert "secret" not in msg


def test_the_path_in_the_message_is_absolute():
    with pytest.raises(PlanError) as info:
        two_sinks(wire.sinks.parquet("out"), wire.sinks.parquet("out"))
    assert repr(os.path.abspath("out")) in str(info.value)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (wire.sinks.parquet("out/a"), wire.sinks.parquet("out/ab")),  # a prefix, not a parent
        (wire.sinks.postgres("host=db dbname=w", table="t"),
         wire.sinks.postgres("host=db dbname=w", table="u")),
        (wire.sinks.postgres("host=db dbname=w", table="t"),
         wire.sinks.postgres("host=db dbname=w", table="t", schema="other")),
        (wire.sinks.postgres("host=db dbname=w", table="t"),
         wire.sinks.postgres("host=db2 dbname=w", table="t")),
        (wire.sinks.sqlite("o.db", table="t", key="k"), wire.sinks.sqlite("o.db", table="u", key="k")),
        (wire.sinks.console(), wire.sinks.console()),
    ],
)
def test_sinks_on_distinct_targets_are_fine(first, second):
    two_sinks(first, second)
