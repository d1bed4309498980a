"""PySpark's call-site capture, off while Wire builds DataFrames.

PySpark 4 records, for every ``Column`` and ``DataFrame`` method called, the Python call
site of the caller (``spark.python.sql.dataFrameDebugging.enabled``, on by default), so that
an analysis error can point at the user's line: each call walks the Python stack and makes
four to five more py4j round trips to the JVM (the active session, the
``spark.sql.stackTracesInDataFrameContext`` setting, ``PySparkCurrentOrigin.set`` and
``clear``). While Wire compiles a flow the call site is always Wire's compiler, never a
user's line (Wire checks a flow's expressions itself and names the step in its
``ConfigError``), so the capture buys nothing there and costs: compiling Nexmark q3 took
4,843 py4j round trips with it and 2,758 without, 0.51 s against 0.33 s (median of 8 warm
compilations each in one session; the first one 1.42 s against 0.48, ``docs/architecture.md``).

:func:`without_call_sites` turns the capture off for the calls made inside it, in every
thread, and restores the session's setting when the last one ends; anything built outside
it (a user's own DataFrames) keeps PySpark's behaviour. PySpark caches the setting in a
module variable (``pyspark.errors.utils._enable_debugging_cache``); a PySpark without it
is left alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["without_call_sites"]

_CACHE = "_enable_debugging_cache"
_lock = threading.Lock()
_active = 0
_saved: Any = None


def _utils() -> Any:
    """PySpark's ``pyspark.errors.utils`` when it caches the setting; None otherwise."""
    try:
        from pyspark.errors import utils
    except ImportError:  # pragma: no cover - PySpark is a dependency
        return None
    return utils if hasattr(utils, _CACHE) else None


@contextlib.contextmanager
def without_call_sites() -> Iterator[None]:
    """Within: PySpark captures no call sites (see the module docstring). Nestable, thread-safe."""
    global _active, _saved
    utils = _utils()
    if utils is None:
        yield
        return
    with _lock:
        if _active == 0:
            _saved = getattr(utils, _CACHE)
            setattr(utils, _CACHE, False)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                setattr(utils, _CACHE, _saved)
