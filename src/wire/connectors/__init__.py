"""Connectors: sources and sinks."""
