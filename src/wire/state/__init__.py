"""State and windows: pure Arrow functions for window assignment, aggregation, emission."""
