"""The Java runtime Spark starts: where its ``java`` is, and what ``java -version`` says (run once)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess


def java_binary() -> str | None:
    """The ``java`` Spark starts: the one in ``$JAVA_HOME/bin``, else the one on ``PATH`` (None: none)."""
    java = shutil.which("java", path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin"))
    return java or shutil.which("java")


@functools.lru_cache(maxsize=8)
def version_output(java: str) -> str:
    """What ``java -version`` prints (its standard error), run once per binary; "" if it takes over 30 s.

    Raises
    ------
    OSError
        When ``java`` cannot be started.
    """
    try:
        return subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except subprocess.TimeoutExpired:
        return ""
