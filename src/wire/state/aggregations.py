"""Aggregators over Arrow columns (SPEC §4): count, sum, min, max, mean, first, last, collect, user.

Every aggregator follows :class:`~wire.state.aggregator.Aggregator`'s table-level
``partial`` (add) / ``merge`` / ``result`` / ``running`` shape. Built-ins are
vectorized (Arrow hash aggregation, numpy segmented scans); only
:func:`aggregate` (user functions) runs Python per (key, window) group and per event.

Type rules (checked by ``partial_fields`` / ``result_field`` against the input schema):

==================  ===================================  ===================================
aggregator          input column                         result
==================  ===================================  ===================================
``count()``         none: counts events (rows)           int64, never null
``count(c)``        any type: counts non-null values     int64, never null
``sum(c)``          integer / floating / decimal         int64 for integers, else float64;
                                                         null if every value is null
``min(c)``          numeric, temporal or string          type of ``c``; nulls ignored
``max(c)``          numeric, temporal or string          type of ``c``; nulls ignored
``mean(c)``         integer / floating / decimal         float64; null if every value is null
``first(c)``        any type                             type of ``c``: the value of the first
                                                         event by (event time, arrival), even
                                                         if null
``last(c)``         any type                             type of ``c``: value of the last event
``collect(c)``      any type                             ``list<type of c>``: every value (nulls
                                                         included) in (event time, arrival)
                                                         order
``aggregate(...)``  ``column`` or the whole event (dict) ``result_type``
``max_by(c)``       ``c`` numeric, temporal or string    ``struct<columns>``: the event with the
                                                         largest ``c``, earliest on ties
``min_by(c)``       as ``max_by``                        as ``max_by``, smallest ``c``
``top_k(c, k)``     as ``max_by``                        ``list<struct<columns>>``, ranked
==================  ===================================  ===================================

``max_by`` / ``min_by`` / ``top_k`` (:mod:`wire.state.top`) return whole events:
``columns=`` (default every payload column); ``top_k(ties="all")`` keeps the ties
of the ``k``-th.

Integer sums wrap on int64 overflow (Arrow's ``hash_sum``, numpy's ``cumsum``).

Examples
--------
>>> import numpy as np
>>> import pyarrow as pa
>>> from wire.state import aggregations as agg
>>> from wire.state.kernels import Groups
>>> t = pa.table({"x": [1.0, None, 4.0], "__et": [1, 2, 3], "__seq": [0, 1, 2]})
>>> groups = Groups.from_new(np.array([True, False, True]))  # rows 0-1, then row 2
>>> m = agg.mean("x")
>>> p = pa.table(m.partial("m", t, groups), names=["m__sum", "m__count"])
>>> m.result("m", p).to_pylist()
[1.0, 4.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError
from wire.state.aggregator import (
    Aggregator,
    AggSpec,
    check_column,
    hash_aggregate,
    input_type,
    orderable,
)
from wire.state.kernels import Groups, running_arg, seg_cumsum
from wire.state.ordered import Collect, First, Last, collect, first, last
from wire.state.top import ByRow, TopK, max_by, min_by, top_k
from wire.state.user import UserAggregator, aggregate

__all__ = [
    "Aggregator",
    "ByRow",
    "Collect",
    "Count",
    "First",
    "Last",
    "Max",
    "Mean",
    "Min",
    "Sum",
    "TopK",
    "UserAggregator",
    "aggregate",
    "collect",
    "count",
    "first",
    "last",
    "max",
    "max_by",
    "mean",
    "min",
    "min_by",
    "sum",
    "top_k",
]

_COUNT_ALL = pc.CountOptions(mode="all")
_COUNT_VALID = pc.CountOptions(mode="only_valid")
_SUM_NULL_IF_EMPTY = pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)
_SUM_ZERO_IF_EMPTY = pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)


def _is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _numeric(column: str | None, input_schema: pa.Schema) -> pa.DataType:
    t = input_type(column, input_schema)
    if not _is_numeric(t):
        raise ConfigError("column", f"{column} ({t})", "an integer, floating-point or decimal column")
    return t


def _orderable(column: str | None, input_schema: pa.Schema) -> pa.DataType:
    t = input_type(column, input_schema)
    if not orderable(t):
        raise ConfigError("column", f"{column} ({t})", "a numeric, temporal or string column")
    return t


def _col(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _cum_sum(values: pa.Array, groups: Groups) -> tuple[np.ndarray, np.ndarray]:
    """Segmented running (sum of non-null values, number of non-null values)."""
    valid = pc.is_valid(values).to_numpy(zero_copy_only=False).astype(np.int64)
    zero = pa.scalar(0, values.type)
    filled = pc.fill_null(values, zero).to_numpy(zero_copy_only=False)
    return seg_cumsum(filled, groups), seg_cumsum(valid, groups)


class _Hashed(Aggregator):
    """An aggregator whose add and merge are Arrow hash aggregations."""

    def _partial_aggs(self, name: str) -> list[AggSpec]:
        raise NotImplementedError

    def _merge_aggs(self, name: str) -> list[AggSpec]:
        raise NotImplementedError

    def partial(self, name: str, events: pa.Table, groups: Groups) -> list[pa.Array]:
        types = [f.type for f in self.partial_fields(name, events.schema)]
        return hash_aggregate(events, groups, self._partial_aggs(name), types)

    def hash_partial(self, name: str) -> list[AggSpec]:
        return self._partial_aggs(name)

    def hash_merge(self, name: str) -> list[AggSpec]:
        return self._merge_aggs(name)

    def merge(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        aggs = self._merge_aggs(name)
        types = [partials.schema.field(out).type for _, _, _, out in aggs]
        return hash_aggregate(partials, groups, aggs, types)


class _OnePartial(_Hashed):
    """One partial column ``f"{name}__{_part}"`` that is also the result."""

    _part: ClassVar[str] = ""
    _options: ClassVar[pc.FunctionOptions | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.parts = (cls._part,)

    def _type(self, input_schema: pa.Schema) -> pa.DataType:
        raise NotImplementedError

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:
        return [pa.field(f"{name}__{self._part}", self._type(input_schema))]

    def _partial_aggs(self, name: str) -> list[AggSpec]:
        return [(self.column, self._part, self._options, f"{name}__{self._part}")]

    def _merge_aggs(self, name: str) -> list[AggSpec]:
        part = f"{name}__{self._part}"
        return [(part, self._part, self._options, part)]

    def result(self, name: str, partials: pa.Table) -> pa.Array:
        return _col(partials, f"{name}__{self._part}")

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:
        return pa.field(name, self._type(input_schema))


@dataclass(frozen=True)
class Count(_Hashed):
    """Number of events (``column=None``) or of non-null values of ``column``; int64."""

    column: str | None = None
    parts = ("count",)

    def __post_init__(self) -> None:
        check_column(self.column, optional=True)

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        if self.column is not None:
            input_type(self.column, input_schema)
        return [pa.field(f"{name}__count", pa.int64())]

    def _partial_aggs(self, name: str) -> list[AggSpec]:
        options = _COUNT_ALL if self.column is None else _COUNT_VALID
        return [(self.column, "count", options, f"{name}__count")]

    def _merge_aggs(self, name: str) -> list[AggSpec]:
        return [(f"{name}__count", "sum", _SUM_ZERO_IF_EMPTY, f"{name}__count")]

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        return pc.fill_null(_col(partials, f"{name}__count").cast(pa.int64()), 0)

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        self.partial_fields(name, input_schema)
        return pa.field(name, pa.int64())

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        total, _ = _cum_sum(_col(partials, f"{name}__count"), groups)
        return [pa.array(total, pa.int64())]


@dataclass(frozen=True)
class Sum(_OnePartial):
    """Sum of the non-null values of ``column`` (int64 or float64); null when there are none."""

    _part = "sum"
    _options = _SUM_NULL_IF_EMPTY

    def _type(self, input_schema: pa.Schema) -> pa.DataType:
        integer = pa.types.is_integer(_numeric(self.column, input_schema))
        return pa.int64() if integer else pa.float64()

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        values = _col(partials, f"{name}__sum")
        total, n = _cum_sum(values, groups)
        return [pa.array(total, values.type, mask=n == 0)]


class _Extreme(_OnePartial):
    """Min or max: running values by a segmented running argmax over the values."""

    _order: ClassVar[str] = "ascending"

    def _type(self, input_schema: pa.Schema) -> pa.DataType:
        return _orderable(self.column, input_schema)

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        values = _col(partials, f"{name}__{self._part}")
        idx = running_arg(groups, [(values, self._order)])
        return [values.take(pa.array(idx))]


@dataclass(frozen=True)
class Min(_Extreme):
    """Smallest non-null value of ``column``, of the column's type; null when none."""

    _part = "min"
    _order = "descending"


@dataclass(frozen=True)
class Max(_Extreme):
    """Largest non-null value of ``column``, of the column's type; null when none."""

    _part = "max"
    _order = "ascending"


@dataclass(frozen=True)
class Mean(_Hashed):
    """Arithmetic mean (float64) of the non-null values of ``column``; null when none.

    Partials: float64 sum and int64 count of the non-null values.
    """

    parts = ("sum", "count")

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        _numeric(self.column, input_schema)
        return [pa.field(f"{name}__sum", pa.float64()), pa.field(f"{name}__count", pa.int64())]

    def _partial_aggs(self, name: str) -> list[AggSpec]:
        return [
            (self.column, "sum", _SUM_NULL_IF_EMPTY, f"{name}__sum"),
            (self.column, "count", _COUNT_VALID, f"{name}__count"),
        ]

    def _merge_aggs(self, name: str) -> list[AggSpec]:
        return [
            (f"{name}__sum", "sum", _SUM_NULL_IF_EMPTY, f"{name}__sum"),
            (f"{name}__count", "sum", _SUM_ZERO_IF_EMPTY, f"{name}__count"),
        ]

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        total = _col(partials, f"{name}__sum").cast(pa.float64())
        n = pc.fill_null(_col(partials, f"{name}__count"), 0).cast(pa.float64())
        has_values = pc.fill_null(pc.greater(n, 0.0), False)
        return pc.if_else(has_values, pc.divide(total, n), pa.scalar(None, pa.float64()))

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        self.partial_fields(name, input_schema)
        return pa.field(name, pa.float64())

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        total, _ = _cum_sum(_col(partials, f"{name}__sum"), groups)
        n, _ = _cum_sum(_col(partials, f"{name}__count"), groups)
        return [pa.array(total, pa.float64(), mask=n == 0), pa.array(n, pa.int64())]


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
