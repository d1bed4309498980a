"""Arrow's memory pool in Wire's processes: jemalloc (else the system allocator), not mimalloc.

pyarrow allocates through mimalloc by default. On the development machine (a Firecracker
virtual machine whose guest hands freed memory back to the host) a process's first
allocations through mimalloc were slow: the file planner's first parse of a 500,000-event
Nexmark Parquet file took 1.9-2.2 s in a new process against 0.24-0.30 s with jemalloc or
the system allocator, and its later parses 0.08-0.78 s against 0.10-0.13 s
(``docs/architecture.md``). Every Python process of a Wire run parses or decodes with
Arrow: the driver (its warm-up parse), the sources' planners, the executors' workers.

The pool is chosen with pyarrow's own switch, the environment variable
``ARROW_DEFAULT_MEMORY_POOL``, read by each process at its first allocation. A value the
user set is kept, and then nothing here changes.
"""

from __future__ import annotations

import os

import pyarrow as pa

__all__ = ["ENV", "backend", "use_in_driver"]

ENV = "ARROW_DEFAULT_MEMORY_POOL"
"""pyarrow's environment variable naming the default memory pool's backend."""


def backend() -> str:
    """The backend Wire's processes use.

    The user's ``$ARROW_DEFAULT_MEMORY_POOL``, else ``"jemalloc"`` when this pyarrow build
    has it, else ``"system"``.
    """
    chosen = os.environ.get(ENV)
    if chosen:
        return chosen
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:  # a build without jemalloc (e.g. some macOS wheels)
        return "system"
    return "jemalloc"


def use_in_driver() -> str:
    """Make :func:`backend` this process's pool and that of the processes it starts; return it.

    Sets :data:`ENV` for the processes this one starts (the JVM, and through it Spark's
    Python processes; the fork server) and the backend as this process's default pool.
    Idempotent. With ``$ARROW_DEFAULT_MEMORY_POOL`` set by the user, nothing changes. Buffers
    allocated before keep the pool they came from.
    """
    if os.environ.get(ENV):
        return os.environ[ENV]
    name = backend()
    os.environ[ENV] = name
    pool = pa.jemalloc_memory_pool() if name == "jemalloc" else pa.system_memory_pool()
    pa.set_memory_pool(pool)
    return name
