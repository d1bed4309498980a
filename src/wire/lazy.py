"""Public names that import their module on first use (PEP 562), for Wire's namespaces.

``wire``, ``wire.sources``, ``wire.sinks`` and ``wire.control`` each keep a table
``name -> (module, attribute)`` and get their ``__getattr__`` / ``__dir__`` here. So
``import wire`` imports no connector, and asking for one connector imports that one
only: a connector whose pip extra is missing fails when asked for
(:class:`wire.errors.MissingExtraError`), not when its namespace is imported.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

LazyTable = dict[str, tuple[str, str | None]]
"""Public name -> (module, attribute; None for the module itself)."""


def lazy_names(namespace: str, table: LazyTable) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return the ``__getattr__`` and ``__dir__`` of module ``namespace`` for ``table``.

    A name is imported once, then kept in the module's globals (later lookups do not
    come here).
    """
    names = sys.modules[namespace].__dict__

    def module_getattr(name: str) -> Any:
        try:
            module, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}") from None
        value = importlib.import_module(module)
        if attr is not None:
            value = getattr(value, attr)
        names[name] = value
        return value

    def module_dir() -> list[str]:
        return sorted({*names, *table})

    return module_getattr, module_dir
