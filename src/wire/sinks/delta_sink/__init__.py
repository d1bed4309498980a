"""The Delta Lake sink connector (``wire.sinks.delta``; pip extra ``wire[delta]``).

:mod:`.sink` (the sink: one Delta commit per epoch, an application transaction that a
replay finds), :mod:`.staging` (executors stage Parquet parts, the driver commits them),
:mod:`.schema` (the table's schema, partitions and file statistics). The package imports
nothing itself: ``import wire.sinks.delta_sink.sink`` needs the extra.
"""
