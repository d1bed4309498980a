"""Stateless operators compiled to Spark Column expressions over envelope rows.

User expressions apply to data rows only; watermark and side rows pass through
untouched (their payload columns stay null), so a filter can never drop a
watermark and a map can never fail on one.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from wire.core.envelope import ENVELOPE_COLUMNS, KIND, KIND_DATA
from wire.errors import ConfigError


def to_column(expr: Any, *, parameter: str, step: str) -> Column:
    """A Spark Column from a Column or a Spark SQL expression string."""
    if isinstance(expr, Column):
        return expr
    if isinstance(expr, str) and expr.strip():
        return F.expr(expr)
    raise ConfigError(parameter, expr, "a Spark Column or a Spark SQL expression string", step=step)


def is_data() -> Column:
    """True on data rows."""
    return F.col(KIND) == F.lit(KIND_DATA)


def payload_columns(df: DataFrame) -> list[str]:
    """The payload (non-envelope) column names of an envelope DataFrame."""
    return [c for c in df.columns if c not in ENVELOPE_COLUMNS]


def apply_filter(df: DataFrame, predicate: Any, step: str) -> DataFrame:
    """Keep data rows where ``predicate`` is true (null → false) and every control row."""
    pred = to_column(predicate, parameter="predicate", step=step)
    return df.filter(~is_data() | F.coalesce(pred, F.lit(False)))


def apply_map(df: DataFrame, columns: tuple[tuple[str, Any], ...], step: str) -> DataFrame:
    """Add or replace payload columns, computed on data rows only."""
    new = {}
    for name, expr in columns:
        if name in ENVELOPE_COLUMNS:
            raise ConfigError("column name", name, "a name not starting with '__'", step=step)
        new[name] = F.when(is_data(), to_column(expr, parameter=name, step=step))
    return df.withColumns(new)


def apply_select(df: DataFrame, columns: tuple[Any, ...], step: str) -> DataFrame:
    """Keep exactly ``columns`` (plus the envelope), computed on data rows only."""
    exprs: list[Column] = []
    for c in columns:
        if isinstance(c, tuple) and len(c) == 2:
            name, expr = c
            col = to_column(expr, parameter=str(name), step=step).alias(str(name))
        elif isinstance(c, str) and c in df.columns:
            name, col = c, F.col(f"`{c}`")
        else:
            col = to_column(c, parameter="columns", step=step)
            name = df.select(col).columns[0]
        if name in ENVELOPE_COLUMNS:
            raise ConfigError("column name", name, "a name not starting with '__'", step=step)
        exprs.append(F.when(is_data(), col).alias(name))
    return df.select(*exprs, *[F.col(c) for c in ENVELOPE_COLUMNS])


def apply_explode(df: DataFrame, column: str, step: str) -> DataFrame:
    """One data row per element of the array column ``column``; control rows pass once.

    A data row whose array is empty or null gives no row. Control rows (null payload)
    get a one-element array of null, so ``explode`` keeps each of them exactly once.
    """
    field = next((f for f in df.schema.fields if f.name == column and column in payload_columns(df)), None)
    if field is None or not isinstance(field.dataType, ArrayType):
        columns = [f"{f.name} ({f.dataType.simpleString()})" for f in df.schema.fields
                   if f.name in payload_columns(df)]
        raise ConfigError("column", column, f"a list (array) column of the stream: {columns}", step=step)
    once = F.array(F.lit(None).cast(field.dataType.elementType))
    items = F.when(is_data(), F.col(f"`{column}`")).otherwise(once)
    return df.select(*[F.explode(items).alias(c) if c == column else F.col(f"`{c}`") for c in df.columns])
