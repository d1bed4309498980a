"""Lookup tables (public namespace): external tables a stream is enriched from.

``Stream.lookup_join(table, on=...)`` joins each event with the row of ``table`` whose
key equals the event's ``on`` column, as the table is when the event's epoch runs
(processing time; docs/lookup_join.md).

===========================================  ================================================
constructor                                  what a lookup reads
===========================================  ================================================
``postgres(dsn, table, key=..., columns=)``  one ``WHERE key = ANY(...)`` query per key group
                                             and epoch for the keys not in the worker's cache
``delta(path, key=..., columns=)``           the table's newest version, loaded whole by each
                                             worker; re-read when the version changes
``parquet(path, key=..., columns=)``         a Parquet file or directory, loaded whole;
                                             re-read when a file's size or mtime changes
===========================================  ================================================

Each name imports its connector on first use: ``postgres`` needs the pip extra
``wire[postgres]`` and ``delta`` the extra ``wire[delta]``; without it the call raises
:class:`wire.errors.MissingExtraError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wire.lazy import LazyTable, lazy_names

if TYPE_CHECKING:  # what static type checkers see; at run time the names load lazily
    from wire.tables.base import LookupTable, SnapshotTable
    from wire.tables.postgres_table import PostgresTable, postgres
    from wire.tables.snapshot_tables import DeltaTable, ParquetTable, delta, parquet

_LAZY: LazyTable = {
    **{n: ("wire.tables.base", n) for n in ("LookupTable", "SnapshotTable")},
    **{n: ("wire.tables.postgres_table", n) for n in ("PostgresTable", "postgres")},
    **{n: ("wire.tables.snapshot_tables", n) for n in ("DeltaTable", "ParquetTable", "delta", "parquet")},
}
__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "DeltaTable",
    "LookupTable",
    "ParquetTable",
    "PostgresTable",
    "SnapshotTable",
    "delta",
    "parquet",
    "postgres",
]
