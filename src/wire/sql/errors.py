"""The error of a SQL query that Wire cannot compile: :class:`SqlError`, with its position."""

from __future__ import annotations

from wire.errors import ConfigError


class SqlError(ConfigError):
    """A SQL query that does not parse, or uses what Wire's SQL does not support.

    Raised by :func:`wire.sql` when the flow is built (never when it runs). A
    ``ConfigError`` (parameter ``query``), so ``except wire.ConfigError`` catches it.

    Attributes
    ----------
    line, column:
        1-based position in the query of the construct at fault (``None`` if unknown).
    problem:
        What was wrong.
    accepted:
        What is supported instead.
    """

    def __init__(
        self,
        problem: str,
        *,
        accepted: str,
        line: int | None = None,
        column: int | None = None,
        snippet: str = "",
    ) -> None:
        self.parameter = "query"
        self.value = snippet
        self.accepted = accepted
        self.step = None
        self.problem = problem
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        Exception.__init__(self, f"SQL {where}{problem}; supported: {accepted}")
