"""The source base: what every source connector is built on (SPEC §2, §5, §7).

===========================  ====================================================================
module                       holds
===========================  ====================================================================
:mod:`.source`               the :class:`Source` protocol, :class:`ReadRequest`, the binding a
                             step's Spark data source carries (re-exports the two below)
:mod:`.rows`                 the envelope rows of a read: column checks, Spark row schema,
                             decoded records and their dead letters
:mod:`.watermark_settings`   a connector's deprecated ``idle_timeout`` / ``watermark_interval``
:mod:`.partitioned`          :class:`~.partitioned.PartitionedReader`: admission, watermarks,
                             offsets, tasks and acknowledgement for partitioned connectors
:mod:`.readers`              a stream reader's admission and its per-process client
:mod:`.offsets`              the offset layout of a partitioned reader
:mod:`.epoch_sizing`         epoch sizing from a target duration
:mod:`.conversions`          values to Arrow columns, event times to ms
===========================  ====================================================================

A connector (``wire.sources.file_source``, ``kafka_source``, ``redis_source``,
``http_source``) lists its partitions, reads one from a position within a budget and
acknowledges; the base does the rest.
"""

from __future__ import annotations

from wire.sources.base.source import Capability, Offset, ReadRequest, Source, can, resumable

__all__ = ["Capability", "Offset", "ReadRequest", "Source", "can", "resumable"]
