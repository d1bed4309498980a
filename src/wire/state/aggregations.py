"""Aggregators over Arrow columns: count, sum, min, max, mean.

An aggregator is SPEC §4's ``create / add / merge / result`` shape expressed over
Arrow columns instead of single events, so that whole batches are folded at once:

* **add** is a *partial* aggregation: :meth:`Aggregator.partial_aggs` lists the
  hash aggregations (for :meth:`pyarrow.Table.group_by`) that fold a batch of
  events into one row of *partial columns* per group;
* **merge** is :meth:`Aggregator.merge_aggs`: how partial rows of the same group
  combine (count → sum, sum → sum, min → min, max → max);
* **result** is :meth:`Aggregator.result`: the final value from merged partials;
* **create** is implicit: a group without partial rows has no state at all.

Partial columns are named ``f"{name}__<part>"`` where ``name`` is the output
column of the aggregation (e.g. ``"mean_dep_delay__sum"``,
``"mean_dep_delay__count"``), so several aggregations over the same input column
never collide.

Type rules (checked by :meth:`Aggregator.partial_fields` and
:meth:`Aggregator.result_field` against the input schema):

==============  ===================================  ===============================
aggregator      input column                         result
==============  ===================================  ===============================
``count()``     none: counts events (rows)           int64, never null
``count(c)``    any type: counts non-null values     int64, never null
``sum(c)``      integer / floating / decimal         int64 for integers, else float64;
                                                     null if every value is null
``min(c)``      numeric, temporal or string          type of ``c``; nulls ignored
``max(c)``      numeric, temporal or string          type of ``c``; nulls ignored
``mean(c)``     integer / floating / decimal         float64; null if every value is
                                                     null (partials: float64 sum and
                                                     int64 non-null count)
==============  ===================================  ===============================

Integer sums wrap on int64 overflow (Arrow's ``hash_sum``).

Examples
--------
>>> import pyarrow as pa
>>> from wire.state import aggregations as agg
>>> t = pa.table({"k": ["a", "a", "b"], "x": [1.0, None, 4.0]})
>>> m = agg.mean("x")
>>> p = agg.group_aggregate(t, ["k"], m.partial_aggs("m")).sort_by("k")
>>> m.result("m", p).to_pylist()
[1.0, 4.0]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError

AggSpec = tuple[str | None, str, pc.FunctionOptions | None, str]
"""One hash aggregation: (source column or None for "every row", hash function name
without the ``hash_`` prefix, function options or None, output partial column name)."""

_COUNT_ALL = pc.CountOptions(mode="all")
_COUNT_VALID = pc.CountOptions(mode="only_valid")
_SUM_NULL_IF_EMPTY = pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)
_SUM_ZERO_IF_EMPTY = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)


def _check_column(column: object, *, optional: bool = False) -> None:
    if optional and column is None:
        return
    if not isinstance(column, str) or not column:
        accepted = "a non-empty column name (str)" + (" or None" if optional else "")
        raise ConfigError("column", column, accepted)


def _input_type(column: str | None, input_schema: pa.Schema) -> pa.DataType:
    if column not in input_schema.names:
        raise ConfigError("column", column, f"one of the input columns {input_schema.names}")
    return input_schema.field(column).type


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _numeric(column: str | None, input_schema: pa.Schema) -> pa.DataType:
    t = _input_type(column, input_schema)
    if not _is_numeric(t):
        raise ConfigError(
            "column", f"{column} ({t})", "an integer, floating-point or decimal column"
        )
    return t


def _column(partials: pa.Table, name: str) -> pa.Array:
    return partials.column(name).combine_chunks()


@dataclass(frozen=True)
class Aggregator(ABC):
    """An aggregation of one input column (or of the rows) into one output column.

    Instances are immutable values; build them with :func:`count`, :func:`sum`,
    :func:`min`, :func:`max` and :func:`mean`. ``name`` in every method is the
    output column name chosen by the user; it prefixes the partial columns.
    """

    column: str | None

    def __post_init__(self) -> None:
        _check_column(self.column)

    @abstractmethod
    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:
        """Return the partial (state) columns ``f"{name}__<part>"`` of this aggregation.

        Parameters
        ----------
        name : str
            Output column name of the aggregation.
        input_schema : pyarrow.Schema
            Schema of the events being aggregated.

        Returns
        -------
        list of pyarrow.Field

        Raises
        ------
        ConfigError
            If the column is missing from ``input_schema`` or has a type the
            aggregation does not accept.
        """

    @abstractmethod
    def partial_aggs(self, name: str) -> list[AggSpec]:
        """Return the hash aggregations folding events into the partial columns (add).

        Each entry is ``(source column, function, options, partial column)``;
        ``function`` is a hash aggregate name as accepted by
        :meth:`pyarrow.TableGroupBy.aggregate`. A source of ``None`` means "every
        row" (only ``count()`` uses it); :func:`group_aggregate` runs these lists.
        """

    @abstractmethod
    def merge_aggs(self, name: str) -> list[AggSpec]:
        """Return the hash aggregations combining partial rows of one group (merge).

        Same shape as :meth:`partial_aggs`; sources are the partial columns.
        """

    @abstractmethod
    def result(self, name: str, partials: pa.Table) -> pa.Array:
        """Return the final values, one per row of ``partials`` (result).

        ``partials`` holds (at least) this aggregation's partial columns; the array
        has the type of :meth:`result_field`.
        """

    @abstractmethod
    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:
        """Return the output field ``name`` with the result type.

        Raises
        ------
        ConfigError
            As :meth:`partial_fields`.
        """


@dataclass(frozen=True)
class _OnePartial(Aggregator):
    """An aggregation with one partial column ``f"{name}__{_part}"`` that is its result."""

    _part: ClassVar[str] = ""
    _options: ClassVar[pc.FunctionOptions | None] = None

    @abstractmethod
    def _type(self, input_schema: pa.Schema) -> pa.DataType: ...

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:
        return [pa.field(f"{name}__{self._part}", self._type(input_schema))]

    def partial_aggs(self, name: str) -> list[AggSpec]:
        return [(self.column, self._part, self._options, f"{name}__{self._part}")]

    def merge_aggs(self, name: str) -> list[AggSpec]:
        part = f"{name}__{self._part}"
        return [(part, self._part, self._options, part)]

    def result(self, name: str, partials: pa.Table) -> pa.Array:
        return _column(partials, f"{name}__{self._part}")

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:
        return pa.field(name, self._type(input_schema))


@dataclass(frozen=True)
class Count(Aggregator):
    """Number of events (``column=None``) or of non-null values of ``column``; int64."""

    column: str | None = None

    def __post_init__(self) -> None:
        _check_column(self.column, optional=True)

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        if self.column is not None:
            _input_type(self.column, input_schema)
        return [pa.field(f"{name}__count", pa.int64())]

    def partial_aggs(self, name: str) -> list[AggSpec]:  # noqa: D102
        options = _COUNT_ALL if self.column is None else _COUNT_VALID
        return [(self.column, "count", options, f"{name}__count")]

    def merge_aggs(self, name: str) -> list[AggSpec]:  # noqa: D102
        return [(f"{name}__count", "sum", _SUM_ZERO_IF_EMPTY, f"{name}__count")]

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        return _column(partials, f"{name}__count").cast(pa.int64())

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        self.partial_fields(name, input_schema)
        return pa.field(name, pa.int64())


@dataclass(frozen=True)
class Sum(_OnePartial):
    """Sum of the non-null values of ``column`` (int64 or float64); null when there are none."""

    _part = "sum"
    _options = _SUM_NULL_IF_EMPTY

    def _type(self, input_schema: pa.Schema) -> pa.DataType:
        integer = pa.types.is_integer(_numeric(self.column, input_schema))
        return pa.int64() if integer else pa.float64()


@dataclass(frozen=True)
class Min(_OnePartial):
    """Smallest non-null value of ``column``, of the column's type; null when none."""

    _part = "min"

    def _type(self, input_schema: pa.Schema) -> pa.DataType:
        return _orderable(self.column, input_schema)


@dataclass(frozen=True)
class Max(_OnePartial):
    """Largest non-null value of ``column``, of the column's type; null when none."""

    _part = "max"

    def _type(self, input_schema: pa.Schema) -> pa.DataType:
        return _orderable(self.column, input_schema)


def _orderable(column: str | None, input_schema: pa.Schema) -> pa.DataType:
    t = _input_type(column, input_schema)
    if not (
        _is_numeric(t)
        or pa.types.is_temporal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    ):
        raise ConfigError("column", f"{column} ({t})", "a numeric, temporal or string column")
    return t


@dataclass(frozen=True)
class Mean(Aggregator):
    """Arithmetic mean (float64) of the non-null values of ``column``; null when none."""

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        _numeric(self.column, input_schema)
        return [pa.field(f"{name}__sum", pa.float64()), pa.field(f"{name}__count", pa.int64())]

    def partial_aggs(self, name: str) -> list[AggSpec]:  # noqa: D102
        return [
            (self.column, "sum", _SUM_NULL_IF_EMPTY, f"{name}__sum"),
            (self.column, "count", _COUNT_VALID, f"{name}__count"),
        ]

    def merge_aggs(self, name: str) -> list[AggSpec]:  # noqa: D102
        return [
            (f"{name}__sum", "sum", _SUM_NULL_IF_EMPTY, f"{name}__sum"),
            (f"{name}__count", "sum", _SUM_ZERO_IF_EMPTY, f"{name}__count"),
        ]

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        total = _column(partials, f"{name}__sum").cast(pa.float64())
        n = _column(partials, f"{name}__count").cast(pa.float64())
        has_values = pc.fill_null(pc.greater(n, 0.0), False)
        return pc.if_else(has_values, pc.divide(total, n), pa.scalar(None, pa.float64()))

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        self.partial_fields(name, input_schema)
        return pa.field(name, pa.float64())


def count(column: str | None = None) -> Aggregator:
    """Count events (``count()``) or the non-null values of ``column``; int64.

    Raises
    ------
    ConfigError
        If ``column`` is neither None nor a non-empty str.
    """
    return Count(column)


def sum(column: str) -> Aggregator:
    """Sum of ``column``: int64 for integer columns, float64 otherwise; null if all null.

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return Sum(column)


def min(column: str) -> Aggregator:
    """Smallest non-null value of ``column`` (numeric, temporal or string).

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return Min(column)


def max(column: str) -> Aggregator:
    """Largest non-null value of ``column`` (numeric, temporal or string).

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return Max(column)


def mean(column: str) -> Aggregator:
    """Mean (float64) of the non-null values of ``column``; null if all null.

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return Mean(column)


def group_aggregate(
    table: pa.Table,
    keys: Sequence[str],
    aggs: Sequence[AggSpec],
    schema: pa.Schema | None = None,
) -> pa.Table:
    """Run hash aggregations grouped by ``keys``; one output row per distinct key tuple.

    Parameters
    ----------
    table : pyarrow.Table
        Input rows.
    keys : sequence of str
        Grouping columns (nulls form their own group).
    aggs : sequence of AggSpec
        As returned by :meth:`Aggregator.partial_aggs` / :meth:`Aggregator.merge_aggs`.
        Output column names must be unique and distinct from ``keys``.
    schema : pyarrow.Schema, optional
        If given, the output is cast to it (it must name exactly the key and
        output columns, in its own order).

    Returns
    -------
    pyarrow.Table
        The key columns followed by the output columns, in no particular row order.
    """
    columns: dict[str, pa.ChunkedArray | pa.Array] = {k: table.column(k) for k in keys}
    hash_aggs: list[tuple[str, str, pc.FunctionOptions | None]] = []
    out_names: list[str] = []
    for i, (source, function, options, out) in enumerate(aggs):
        alias = f"__agg_input_{i}"
        while alias in columns:
            alias = "_" + alias
        if source is None:
            columns[alias] = pa.array(np.zeros(table.num_rows, dtype=np.int8))
        else:
            columns[alias] = table.column(source)
        hash_aggs.append((alias, function, options))
        out_names.append(out)
    grouped = pa.table(columns).group_by(list(keys), use_threads=False).aggregate(hash_aggs)
    result = pa.table(
        {k: grouped.column(k) for k in keys}
        | {
            out: grouped.column(f"{alias}_{fn}")
            for out, (alias, fn, _) in zip(out_names, hash_aggs, strict=True)
        }
    )
    if schema is not None:
        result = result.select(schema.names).cast(schema)
    return result
