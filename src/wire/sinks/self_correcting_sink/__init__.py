"""The self-correcting sink (``wire.sinks.self_correcting``, SPEC §8): a table kept equal to the results.

=====================  ================================================================
module                 holds
=====================  ================================================================
:mod:`.sink`           :func:`~.sink.self_correcting`: the sink's settings, checked
:mod:`.driver`         :class:`~.driver.SelfCorrectingSink`: the driver's side of an
                       epoch (batch description, compare-and-set commit, quiet checks)
:mod:`.parts`          the executors' side: stage the input, correct one partition
:mod:`.tables`         the two kinds of table: PostgreSQL and Delta
:mod:`.writer`         the logic, pure: desired collection minus persisted rows, the
                       compare-and-set loop, batch descriptions
:mod:`.desired`        the desired collection per partition, kept as Parquet
:mod:`.frontier`       a batch's frontier, read from Spark's offset log
:mod:`.rows`           rows, keys and partitions (shards) of keys
=====================  ================================================================

The package imports nothing itself: the PostgreSQL and Delta tables need their extras.
"""
