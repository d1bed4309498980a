"""Delivery protocols: how sinks publish an epoch exactly once."""
