"""Sink connectors (public namespace): ``wire.sinks.parquet / jsonl / console``."""

from wire.connectors.sinks import Sink, console, jsonl, parquet

__all__ = ["Sink", "console", "jsonl", "parquet"]
