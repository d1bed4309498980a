"""The docstring examples of wire.tables run (STYLE §7)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("wire.tables", "wire.tables.base", "wire.tables.lookup", "wire.tables.postgres_table",
           "wire.tables.snapshot_tables")


def _examples() -> list[object]:
    finder = doctest.DocTestFinder()
    return [pytest.param(t, id=t.name) for name in MODULES
            for t in finder.find(importlib.import_module(name), name)
            if t.examples and t.name.startswith(name)]


@pytest.mark.parametrize("test", _examples())
def test_docstring_example_runs(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_examples_are_found():
    assert {t.values[0].name.rsplit(".", 1)[1] for t in _examples()} >= {"postgres", "parquet"}
