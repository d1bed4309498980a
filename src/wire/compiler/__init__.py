"""Compilation of a plan to one Spark Structured Streaming query."""
