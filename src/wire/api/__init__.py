"""The flow-building API: :class:`~wire.api.flow.Flow` and its stream handles.

``flow.py`` holds ``Flow`` (sources, the flow's dead letters, ``run`` / ``start``);
``stream.py`` holds ``Stream`` (one port of one step: the stateless operators, union, the
side ports and sinks), which mixes in ``stateful.py``'s windows and process functions
(and ``WindowedStream``: a stream with a window assignment, waiting for ``aggregate``) and
``joins.py``'s joins of two streams and enrichment from tables (``VersionedTable``).
Building only records immutable plan nodes; nothing runs until ``Flow.run``. The public
names are ``wire.Flow``, ``wire.Stream`` and ``wire.WindowedStream``; windows, watermark
policies and aggregations are in ``wire`` too (their modules live in ``wire.core`` and
``wire.state``).
"""
