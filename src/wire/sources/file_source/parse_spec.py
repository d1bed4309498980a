"""How to parse the files of one file source (:class:`ParseSpec`), shared by the format parsers."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["DEFAULT_MAX_FIELD_BYTES", "ParseSpec"]

DEFAULT_MAX_FIELD_BYTES = 131_072
"""The default CSV field limit in bytes (128 KiB, the default of Python's csv module)."""


@dataclass(frozen=True)
class ParseSpec:
    """How to parse the files of one source: format, options, payload schema, event time (hashable)."""

    format: str
    payload_schema: pa.Schema
    event_time: str
    delimiter: str = ","
    null_values: tuple[str, ...] = ("", "NA", "null")
    columns: tuple[str, ...] | None = None
    """The payload columns kept in :attr:`ParsedFile.table` (None: all)."""
    max_field_bytes: int = DEFAULT_MAX_FIELD_BYTES
    """CSV: a record with a longer field (in UTF-8 bytes, after unquoting) is malformed."""

    @property
    def output_names(self) -> list[str]:
        """The names of the columns kept, in payload order."""
        names = self.payload_schema.names
        return names if self.columns is None else [n for n in names if n in self.columns]
