"""The PostgreSQL sink connector (``wire.sinks.postgres``; pip extra ``wire[postgres]``).

:mod:`.sink` (the append and upsert sinks and :func:`~.sink.postgres`), :mod:`.driver`
(the driver's run: connection, epoch markers), :mod:`.executors` (executors stage rows
with ``COPY``), :mod:`.target` (the target table, its checks and connection),
:mod:`.column_types` (Arrow types to PostgreSQL types, CSV for ``COPY``). The package
imports nothing itself: its modules need the extra.
"""
