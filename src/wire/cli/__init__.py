"""The ``wire`` command line."""
