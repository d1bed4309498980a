"""The error of a SQL query Wire cannot compile: :class:`wire.errors.SqlError` (kept here by name)."""

from __future__ import annotations

from wire.errors import SqlError

__all__ = ["SqlError"]
