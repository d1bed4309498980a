"""The Kafka source connector: each topic-partition has its own watermark (``wire.sources.kafka``).

:mod:`.source` (the connector, :func:`~.source.kafka`, its Spark data source), :mod:`.config`
(its settings and binding), :mod:`.reader` (the stream reader, on the partitioned base),
:mod:`.decode` (the value deserializers: JSON, Avro, string, bytes). Needs the pip extra
``wire[kafka]`` to run; importing this package does not import the client.
"""

from __future__ import annotations

from wire.sources.kafka_source.source import KafkaSource, kafka

__all__ = ["KafkaSource", "kafka"]
