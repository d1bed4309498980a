"""The package layout by role (STYLE §13): module names that cannot shadow public names."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import wire


@pytest.mark.parametrize("namespace", ["wire.sources", "wire.sinks"])
def test_no_submodule_is_named_like_a_public_name_of_its_package(namespace):
    """``import wire.sources.files`` would bind the module over the lazy ``wire.sources.files``."""
    package = importlib.import_module(namespace)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert modules, namespace
    assert modules & set(package.__all__) == set()


@pytest.mark.parametrize("namespace", ["wire.sources", "wire.sinks"])
def test_every_public_name_loads_from_its_module(namespace):
    package = importlib.import_module(namespace)
    for name in package.__all__:
        try:
            value = getattr(package, name)
        except ImportError:  # a connector whose extra is not installed
            continue
        assert getattr(value, "__name__", name) == name, (namespace, name)


def test_the_connectors_drawer_is_gone():
    assert "connectors" not in {m.name for m in pkgutil.iter_modules(wire.__path__)}
