"""The public API's docstring examples run (STYLE §7): doctest over the public modules.

Each docstring with examples is one test; those that run a flow (``TestStream.run``,
``flow.run``) share the test session's SparkSession (Wire's runner uses the active one).
"""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

from wire.api.stateful import WindowedStream
from wire.api.stream import Stream

PUBLIC_MODULES = ("wire", "wire.api", "wire.api.flow", "wire.api.stream", "wire.api.stateful",
                  "wire.api.joins", "wire.errors", "wire.delivery.sink")
FLAGS = doctest.ELLIPSIS


def _examples() -> list[object]:
    finder = doctest.DocTestFinder()
    params = []
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            if not test.examples or not test.name.startswith(name):
                continue
            runs = any(".run(" in ex.source for ex in test.examples)
            params.append(pytest.param(test, id=test.name, marks=[pytest.mark.spark] if runs else []))
    return params


EXAMPLES = _examples()


@pytest.mark.parametrize("test", EXAMPLES)
def test_docstring_example_runs(test, request):
    if any(m.name == "spark" for m in request.node.iter_markers()):
        request.getfixturevalue("spark")  # the shared session: Wire's runner takes the active one
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {test.name} failed"


PUBLIC_METHODS = [
    (cls, name) for cls in (Stream, WindowedStream)
    for name, member in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")
]


@pytest.mark.parametrize(("cls", "name"), PUBLIC_METHODS,
                         ids=[f"{c.__name__}.{n}" for c, n in PUBLIC_METHODS])
def test_every_public_stream_method_has_the_template(cls, name):
    """STYLE §7: summary, columns, Raises and an example the test suite runs (above)."""
    doc = inspect.getdoc(getattr(cls, name)) or ""
    assert ">>> " in doc, f"{cls.__name__}.{name} has no example"
    assert "Raises\n------" in doc, f"{cls.__name__}.{name} has no Raises section"
    assert "olumn" in doc, f"{cls.__name__}.{name} says nothing of its columns"


def test_the_examples_are_found():
    names = {p.values[0].name for p in EXAMPLES}
    assert {"wire", "wire.api.stream.Stream.map", "wire.api.stream.Stream.dead_letters",
            "wire.api.stateful.WindowedStream.aggregate", "wire.api.stateful.Stateful.window",
            "wire.api.joins.Joins.temporal_join", "wire.api.joins.Joins.lookup_join"} <= names
