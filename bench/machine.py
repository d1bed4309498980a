"""The machine a benchmark ran on, for its report header (shared by bench/nexmark.py and bench/soak.py)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


@functools.cache
def facts() -> dict[str, str]:
    """``cpu`` (model name), ``ram`` (GiB), ``java`` (``java -version``'s first line) and ``rev``.

    ``rev`` is the source tree's short git revision, ``-dirty`` when tracked files changed
    (this benchmark's own results, rewritten as it runs, left out). Read once per process;
    what cannot be read is ``"unknown"``.
    """
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    ram = next((f"{int(line.split()[1]) / 2**20:.1f} GiB"
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), "unknown")
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                              check=False).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "unknown"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=False).stdout.strip() or "unknown"
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  ":!bench/results"], capture_output=True, text=True, check=False).stdout
        rev += "-dirty" if changed.strip() else ""
    except OSError:
        rev = "unknown"
    return {"cpu": cpu, "ram": ram, "java": java, "rev": rev}
