"""Parsing a query with sqlglot (Spark SQL's dialect), and positions for error messages.

Flink's window table-valued functions take ``TABLE t`` arguments
(``TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))``), which sqlglot's
Spark dialect does not parse. :func:`parse` blanks the keyword ``TABLE`` where it
opens a function argument (after ``(`` or ``,``) with as many spaces, so every other
character keeps its line and column, then parses the text.
"""

from __future__ import annotations

import re
from typing import ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import TokenType

from wire.errors import SqlError

DIALECT = "spark"
"""sqlglot's dialect of the expressions Wire hands to Spark: Spark SQL's, as the Python API's."""


class _Reader(Spark):
    """Spark's dialect reading ``SESSION(...)`` as a function (Flink's session window TVF)."""

    class Tokenizer(Spark.Tokenizer):
        KEYWORDS: ClassVar = {k: v for k, v in Spark.Tokenizer.KEYWORDS.items() if k != "SESSION"}


def _blank_table_arguments(query: str) -> str:
    try:
        tokens = _Reader().tokenize(query)
    except TokenError as e:
        raise SqlError(f"cannot tokenize the query ({e})", accepted="a SELECT query") from None
    chars = list(query)
    for prev, tok, nxt in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if (
            tok.token_type == TokenType.TABLE
            and prev.token_type in (TokenType.L_PAREN, TokenType.COMMA)
            and (nxt.token_type in (TokenType.VAR, TokenType.L_PAREN) or nxt.text.isidentifier())
        ):
            for i in range(tok.start, tok.end + 1):
                chars[i] = " "
    return "".join(chars)


def parse(query: str) -> exp.Expr:
    """Parse one query; raise :class:`SqlError` with the position of a syntax error."""
    if not isinstance(query, str) or not query.strip():
        raise SqlError("the query is empty or not a string", accepted="a SELECT query as a string")
    text = _blank_table_arguments(query)
    try:
        trees = sqlglot.parse(text, read=_Reader)
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        line, col = first.get("line"), first.get("col")
        start = _offset(query, line, col)
        if start is not None:
            line, col = position(query, start)
        raise SqlError(
            f"syntax error: {first.get('description', str(e))}",
            accepted="Spark SQL expressions in SELECT ... FROM ... [WHERE ...] [GROUP BY ...]"
            " [UNION ALL ...] (docs/sql.md)",
            line=line,
            column=col,
            snippet=first.get("highlight", ""),
        ) from None
    found: list[exp.Expr] = [t for t in trees if t is not None]
    if len(found) != 1:
        raise SqlError(f"{len(found)} statements", accepted="exactly one query (no ';'-separated list)")
    return found[0]


def _offset(query: str, line: int | None, col: int | None) -> int | None:
    """Sqlglot's error position (line, column of the token's end) as a character offset."""
    if not line or not col:
        return None
    lines = query.split("\n")
    if line > len(lines):
        return None
    base = sum(len(s) + 1 for s in lines[: line - 1])
    end = base + col - 1
    # back to the start of the token that ends there
    start = end
    while start > base and (query[start - 1].isalnum() or query[start - 1] == "_"):
        start -= 1
    return start


def position(query: str, offset: int) -> tuple[int, int]:
    """The 1-based (line, column) of the character at ``offset``."""
    line = query.count("\n", 0, offset) + 1
    col = offset - (query.rfind("\n", 0, offset) + 1) + 1
    return line, col


def start_of(node: exp.Expr) -> int | None:
    """The character offset where ``node`` starts in the query (its first token), if known."""
    starts = [n.meta["start"] for n in node.walk() if isinstance(n.meta, dict) and "start" in n.meta]
    return min(starts) if starts else None


def fail(
    query: str, node: exp.Expr | None, problem: str, accepted: str, *, keyword: str | None = None
) -> SqlError:
    """A :class:`SqlError` at ``node``'s position in ``query`` (to raise).

    ``keyword`` (e.g. ``"DISTINCT"``, ``"ORDER BY"``): point at that keyword instead, its
    first occurrence after the ``SELECT`` that contains ``node`` (sqlglot keeps the
    positions of names and literals, not of keywords).
    """
    start = start_of(node) if node is not None else None
    if keyword is not None:
        start = keyword_offset(query, keyword, node)
    snippet = node.sql(DIALECT) if node is not None else ""
    if start is None:
        return SqlError(problem, accepted=accepted, snippet=snippet)
    line, col = position(query, start)
    return SqlError(problem, accepted=accepted, line=line, column=col, snippet=snippet)


def keyword_offset(query: str, keyword: str, node: exp.Expr | None) -> int | None:
    """The offset of ``keyword`` in the SELECT around ``node`` (None if not found)."""
    select = node if isinstance(node, exp.Select) else (node.find_ancestor(exp.Select) if node else None)
    inner = start_of(select) if select is not None else start_of(node) if node is not None else None
    anchor = 0
    if inner is not None:
        starts = [m.start() for m in re.finditer(r"\bSELECT\b", query[: inner + 1], re.IGNORECASE)]
        anchor = starts[-1] if starts else 0
    pattern = r"\b" + r"\s+".join(re.escape(w) for w in keyword.split()) + r"\b"
    found = re.compile(pattern, re.IGNORECASE).search(query, anchor)
    if found is None:
        found = re.compile(pattern, re.IGNORECASE).search(query)
    return found.start() if found else None
