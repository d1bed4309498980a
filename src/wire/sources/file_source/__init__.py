"""The file source connector: CSV, JSON Lines and Parquet files as a stream (``wire.sources.files``).

===================  ==============================================================
module               holds
===================  ==============================================================
:mod:`.source`       the connector :class:`FileSource`, :func:`files`, its Spark data source
:mod:`.config`       its settings (:class:`~.config.FileConfig`) and binding
:mod:`.reader`       the stream reader (partitions, file sets, replays)
:mod:`.listing`      which files and partitions a path matches
:mod:`.file_set`     a partition's files in arrival order, and the changes found
:mod:`.formats`      the format parsers: infer, parse and slice a file
:mod:`.parse_spec`   how to parse one source's files
:mod:`.text_records` CSV and JSON Lines records
:mod:`.locate`       a record's location and text for a dead letter
===================  ==============================================================
"""

from __future__ import annotations

from wire.sources.file_source.source import FileSource, files

__all__ = ["FileSource", "files"]
