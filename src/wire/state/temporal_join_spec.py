"""The temporal join's configuration and the schemas of its inputs, state and outputs (pure, no Spark).

:class:`TemporalJoinSpec` is what a ``Stream.temporal_join`` step carries; the schema
functions give the columns of the stream and table inputs, of the key group's state
(versions, holds) and of the joined and late outputs. The epoch kernel that uses them is
:mod:`wire.state.temporal_join`, whose docstring gives the semantics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import pyarrow as pa

from wire.core.envelope import ENVELOPE_COLUMNS, ET, SEQ
from wire.errors import ConfigError

How = Literal["inner", "left"]
"""``how=`` of the temporal join: drop unmatched events, or emit them with null table columns."""
HOWS: tuple[How, ...] = get_args(How)

STREAM_LATE_REASON = "temporal join: event_time < stream watermark"
"""The ``reason`` of a late stream event."""
TABLE_LATE_REASON = "temporal join: version time < table watermark"
"""The ``reason`` of a late table row (an update or delete behind the table's watermark)."""

VERSION_TIME = "version_time"
"""Output column: int64 version time (ms) of the table version met; null when none."""
DELETED = "__deleted"
"""Version column: bool, True for a delete marker."""
_LATE_COLUMNS = ("event_time", "watermark", "reason", "side")
BUCKET_MS = 60_000
"""Event-time width (ms) of a bucket of pending stream events."""
BUCKET = "bucket"
"""Holds column: the int64 bucket id of the pending events it summarizes."""
ROWS = "rows"
"""Holds column: the number of pending events of the key in the bucket."""


def _check_name(parameter: str, value: object) -> str:
    if not isinstance(value, str) or not value or value in ENVELOPE_COLUMNS:
        raise ConfigError(parameter, value, f"a non-empty column name, none of {list(ENVELOPE_COLUMNS)}")
    return value


@dataclass(frozen=True)
class TemporalJoinSpec:
    """Configuration of an event-time temporal join (an immutable value).

    Parameters
    ----------
    key : str
        The stream's key column (``on=``).
    table_key : str
        The table's key column (``as_table(key=...)``); same type as ``key``.
    stream_columns : tuple of str
        The stream's payload columns other than ``key``.
    table_columns : tuple of str
        The table's payload columns other than ``table_key`` and ``delete``.
    delete : str or None
        The table's bool delete-marker column (None: no deletes).
    how : {"inner", "left"}
        What an event without a version gets: dropped, or null table columns.

    Raises
    ------
    ConfigError
        If ``how`` is not one of :data:`HOWS`, a name is invalid, or the output or late
        column names clash.
    """

    key: str
    table_key: str
    stream_columns: tuple[str, ...]
    table_columns: tuple[str, ...]
    delete: str | None = None
    how: How = "inner"

    def __post_init__(self) -> None:
        _check_name("on", self.key)
        _check_name("key", self.table_key)
        if self.delete is not None:
            _check_name("delete", self.delete)
        if self.how not in HOWS:
            raise ConfigError("how", self.how, " or ".join(map(repr, HOWS)))
        object.__setattr__(self, "stream_columns", tuple(self.stream_columns))
        object.__setattr__(self, "table_columns", tuple(self.table_columns))
        out = [self.key, *self.stream_columns, *self.table_columns, VERSION_TIME]
        self._unique(out, "output")
        self._unique([*out[:-1], *([self.delete] if self.delete else []), *_LATE_COLUMNS], "late")

    @staticmethod
    def _unique(names: list[str], what: str) -> None:
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ConfigError(
                "table", dups, f"a table whose columns do not clash with the stream's or with "
                f"Wire's {what} columns (rename them with select; {what} columns: {names})")

    @property
    def late_table_columns(self) -> tuple[str, ...]:
        """The table columns of a late row: the payload and the delete column."""
        return (*self.table_columns, *([self.delete] if self.delete else []))


def stream_schema(spec: TemporalJoinSpec, payload: pa.Schema) -> pa.Schema:
    """Pending stream events: the stream's key and columns (from ``payload``), ``__et``, ``__seq``."""
    return pa.schema([*_fields(payload, (spec.key, *spec.stream_columns), "stream"),
                      pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])


def table_input_schema(spec: TemporalJoinSpec, payload: pa.Schema) -> pa.Schema:
    """Table rows as the kernel takes them: key, columns, delete column, ``__et``, ``__seq``."""
    return pa.schema([*_fields(payload, (spec.table_key, *spec.late_table_columns), "table"),
                      pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64())])


def versions_schema(spec: TemporalJoinSpec, payload: pa.Schema) -> pa.Schema:
    """Stored versions: key, the table's columns, ``__et`` (version time), ``__seq``, ``__deleted``.

    The key column is named as the stream's ``on`` column, so that every state table of
    the operator carries the operator's key column (a rescale splits them by it).
    """
    key, *columns = _fields(payload, (spec.table_key, *spec.table_columns), "table")
    return pa.schema([key.with_name(spec.key), *columns, pa.field(ET, pa.int64()), pa.field(SEQ, pa.int64()),
                      pa.field(DELETED, pa.bool_())])


def holds_schema(spec: TemporalJoinSpec, payload: pa.Schema) -> pa.Schema:
    """Holds of pending events: the stream's key, ``bucket``, earliest ``__et``, int64 ``rows``.

    One row per (key, bucket) holding pending events; ``rows``: how many.
    """
    return pa.schema([_fields(payload, (spec.key,), "stream")[0], pa.field(BUCKET, pa.int64()),
                      pa.field(ET, pa.int64()), pa.field(ROWS, pa.int64())])


def _fields(payload: pa.Schema, names: Sequence[str], side: str) -> list[pa.Field]:
    missing = [n for n in names if n not in payload.names]
    if missing:
        parameter = {"stream": "on", "table": "key"}[side]
        raise ConfigError(parameter, missing, f"columns of the {side} input: {payload.names}")
    return [payload.field(n) for n in names]


def output_schema(spec: TemporalJoinSpec, stream: pa.Schema, table: pa.Schema) -> pa.Schema:
    """The joined rows: the stream's key and columns, the table's columns, int64 ``version_time``.

    ``stream`` / ``table`` are the inputs' payload schemas. Table columns are nullable
    (null for an unmatched event with ``how="left"``).

    Raises
    ------
    ConfigError
        If a column is missing, or the key types differ.
    """
    skey = _fields(stream, (spec.key,), "stream")[0]
    tkey = _fields(table, (spec.table_key,), "table")[0]
    if skey.type != tkey.type:
        raise ConfigError("on", spec.key, f"a stream column of the table key's type {tkey.type} "
                          f"(got {skey.type})")
    if spec.delete is not None and not pa.types.is_boolean(_fields(table, (spec.delete,), "table")[0].type):
        raise ConfigError("delete", spec.delete, "a bool column of the table input")
    return pa.schema([*_fields(stream, (spec.key, *spec.stream_columns), "stream"),
                      *(f.with_nullable(True) for f in _fields(table, spec.table_columns, "table")),
                      pa.field(VERSION_TIME, pa.int64())])


def late_schema(spec: TemporalJoinSpec, stream: pa.Schema, table: pa.Schema) -> pa.Schema:
    """The late table, shared by both inputs.

    The stream's key and columns, the table's columns and delete column (the other
    input's columns are null in a late row; a late table row's key is in the key
    column), then int64 ``event_time`` (a table row's version time) and ``watermark``,
    string ``reason`` and ``side`` (``"stream"`` or ``"table"``).
    """
    out = output_schema(spec, stream, table)
    fields = [f.with_nullable(True) for f in out if f.name != VERSION_TIME]
    if spec.delete is not None:
        fields.append(table.field(spec.delete).with_nullable(True))
    return pa.schema([*fields, pa.field("event_time", pa.int64()), pa.field("watermark", pa.int64()),
                      pa.field("reason", pa.string()), pa.field("side", pa.string())])
