"""split_by_group: every row once, in its group, in input order (pandas oracle)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from wire.compiler.keyed import split_by_group


@pytest.mark.parametrize("groups", [1, 3, 16])
def test_groups_match_pandas_groupby(groups: int) -> None:
    rng = np.random.default_rng(groups)
    n = 1_000
    table = pa.table({"__kg": rng.integers(0, groups, n).astype(np.int32), "v": np.arange(n)})
    got = {kg: part.column("v").to_pylist() for kg, part in split_by_group(table)}
    frame = table.to_pandas()
    expected = {int(kg): part["v"].tolist() for kg, part in frame.groupby("__kg", sort=True)}
    assert got == expected
    assert list(got) == sorted(got)
    assert all("__kg" not in part.column_names for _, part in split_by_group(table))


def test_empty_table_yields_nothing() -> None:
    assert list(split_by_group(pa.table({"__kg": pa.array([], pa.int32()), "v": []}))) == []
