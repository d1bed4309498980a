"""The bottom layer: envelope, time constants and durations, the source watermark policy.

Every other package of Wire may import it; it imports nothing of Wire but
:mod:`wire.errors` (the exception tree, which imports nothing of Wire).
"""
