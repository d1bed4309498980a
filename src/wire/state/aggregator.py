"""The :class:`Aggregator` interface: SPEC §4's create / add / merge / result over Arrow tables.

An aggregator folds whole tables at once, never one event at a time (except
:class:`~wire.state.user.UserAggregator`, whose functions are user Python):

* **add** is :meth:`Aggregator.partial`: events → one row of *partial columns* per
  group (the accumulator, as Arrow columns);
* **merge** is :meth:`Aggregator.merge`: partial rows of a group → one partial row
  (across batches, epochs, and when session windows merge);
* **result** is :meth:`Aggregator.result`: partial rows → final values;
* **create** is a *null* partial row: every partial column null means "empty
  accumulator" (count 0, no values); only running aggregates (callbacks) see it;
* :meth:`Aggregator.running` gives the result just before and just after each event
  is added, for ``before_update`` / ``after_update`` callbacks.

Partial columns are named ``f"{name}__<part>"`` where ``name`` is the aggregation's
output column, so several aggregations over one input column never collide.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError
from wire.state.kernels import Groups

AggSpec = tuple[str | None, str, pc.FunctionOptions | None, str]
"""One hash aggregation: (source column or None for "every row", hash function name
without the ``hash_`` prefix, function options or None, output partial column name)."""


def check_column(column: object, *, optional: bool = False) -> None:
    """Raise ConfigError unless ``column`` is a non-empty str (or None if ``optional``)."""
    if optional and column is None:
        return
    if not isinstance(column, str) or not column:
        accepted = "a non-empty column name (str)" + (" or None" if optional else "")
        raise ConfigError("column", column, accepted)


def orderable(t: pa.DataType) -> bool:
    """True for the types min / max / max_by / top_k order by: numeric, temporal, string."""
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_temporal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def input_type(column: str | None, input_schema: pa.Schema) -> pa.DataType:
    """Type of ``column`` in ``input_schema``; ConfigError listing the columns if missing."""
    if column not in input_schema.names:
        raise ConfigError("column", column, f"one of the input columns {input_schema.names}")
    return input_schema.field(column).type


@dataclass(frozen=True)
class Aggregator(ABC):
    """An aggregation of one input column (or of the rows) into one output column.

    Instances are immutable values; build them with the factories of
    :mod:`wire.state.aggregations`. ``name`` in every method is the output column
    name chosen by the user; it prefixes the partial columns.

    Table conventions: ``events`` tables hold the payload columns plus ``__et`` and
    ``__seq`` (int64, no nulls), their rows contiguous per group and, inside a
    group, in processing order (event time, arrival). ``partials`` tables hold the
    partial columns, rows contiguous per group, in any order inside a group except
    that earlier rows (state) win ties on (event time, arrival).
    """

    column: str | None
    parts: ClassVar[tuple[str, ...]] = ()
    """Suffixes of the partial columns, in :meth:`partial_fields` order."""

    def __post_init__(self) -> None:
        check_column(self.column)

    def partial_names(self, name: str) -> list[str]:
        """Names of the partial columns ``f"{name}__<part>"``, in :meth:`partial_fields` order."""
        return [f"{name}__{part}" for part in self.parts]

    @abstractmethod
    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:
        """Return the partial (state) columns ``f"{name}__<part>"`` of this aggregation.

        Raises
        ------
        ConfigError
            If the column is missing from ``input_schema`` or has a type the
            aggregation does not accept.
        """

    @abstractmethod
    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:
        """Return the output field ``name`` with the result type.

        Raises
        ------
        ConfigError
            As :meth:`partial_fields`.
        """

    @abstractmethod
    def partial(self, name: str, events: pa.Table, groups: Groups) -> list[pa.Array]:
        """Fold ``events`` into one partial row per group (add).

        Returns the partial columns (in :meth:`partial_fields` order and types),
        ``groups.n`` values each.
        """

    @abstractmethod
    def merge(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        """Combine the partial rows of each group into one (merge); same shape as :meth:`partial`."""

    @abstractmethod
    def result(self, name: str, partials: pa.Table) -> pa.Array:
        """Return the final value of each partial row (result); null partials mean "empty"."""

    def hash_partial(self, name: str) -> list[AggSpec] | None:
        """The Arrow hash aggregations whose values are :meth:`partial`'s columns, in order.

        None (the default) when :meth:`partial` is not such a fold of its group's rows in
        any order (it needs the rows in processing order, or runs Python).
        """
        return None

    def hash_merge(self, name: str) -> list[AggSpec] | None:
        """The Arrow hash aggregations that merge partial rows into one (:meth:`merge`), in order.

        Their sources and outputs are :meth:`partial`'s columns. None (the default) when
        :meth:`merge` is not such a fold.
        """
        return None

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        """Running merge: row ``i`` = merge of its group's rows up to and including ``i``.

        Null partial rows are empty accumulators. Built-in aggregators implement it
        with segmented cumulative operations; the default raises.
        """
        raise NotImplementedError(f"{type(self).__name__} has no cumulative merge")

    def running(
        self, name: str, initial: pa.Table, events: pa.Table, groups: Groups
    ) -> tuple[pa.Array, pa.Array]:
        """Results just before and just after each event is added to its window.

        Parameters
        ----------
        name : str
            Output column name.
        initial : pyarrow.Table
            One partial row per group (``groups.n`` rows): the window's state before
            this epoch's events, or a null row for a new window.
        events : pyarrow.Table
            Events contiguous per group, in processing order inside each group.
        groups : Groups
            The event groups (one per window).

        Returns
        -------
        before, after : pyarrow.Array
            One value per event row.
        """
        n_events, n = events.num_rows, groups.n
        names = [f.name for f in initial.schema]
        singles = self.partial(name, events, Groups.singletons(n_events))
        # interleave: each group's initial row, then its events
        pos_event = np.arange(n_events, dtype=np.int64) + groups.ids + 1
        perm = np.empty(n + n_events, dtype=np.int64)
        perm[groups.starts + np.arange(n, dtype=np.int64)] = np.arange(n, dtype=np.int64)
        perm[pos_event] = n + np.arange(n_events, dtype=np.int64)
        cols = [
            pa.concat_arrays([initial.column(c).combine_chunks(), s.cast(initial.schema.field(c).type)]).take(
                pa.array(perm)
            )
            for c, s in zip(names, singles, strict=True)
        ]
        ext_offsets = groups.offsets + np.arange(n + 1, dtype=np.int64)
        ext = Groups(np.repeat(np.arange(n, dtype=np.int64), groups.counts + 1), ext_offsets)
        cum = self.cumulative(name, pa.table(cols, names=names), ext)
        res = self.result(name, pa.table(cum, names=names))
        return res.take(pa.array(pos_event - 1)), res.take(pa.array(pos_event))


def hash_aggregate(
    table: pa.Table, groups: Groups, aggs: list[AggSpec], types: list[pa.DataType]
) -> list[pa.Array]:
    """Run Arrow hash aggregations per group; one array per ``aggs`` entry, ``groups.n`` values."""
    return aggregate_by({"__g": groups.ids}, table, aggs, types)[1]


def aggregate_by(
    keys: dict[str, pa.Array | pa.ChunkedArray | np.ndarray],
    table: pa.Table,
    aggs: list[AggSpec],
    types: list[pa.DataType],
) -> tuple[pa.Table, list[pa.Array]]:
    """Arrow hash aggregations of ``table``'s rows grouped by the ``keys`` columns (one value per row).

    Returns the distinct keys (a table of the ``keys`` columns, sorted ascending by them
    in their order, nulls last) and, per ``aggs`` entry, its values in that order, cast to
    its type in ``types``. Key names must not start with ``__in``.
    """
    columns: dict[str, pa.Array | pa.ChunkedArray | np.ndarray] = dict(keys)
    hash_aggs = []
    for i, (source, function, options, _) in enumerate(aggs):
        alias = f"__in{i}"
        if source is None:
            columns[alias] = np.zeros(table.num_rows, dtype=np.int8)
        else:
            columns[alias] = table.column(source).combine_chunks()
        hash_aggs.append((alias, function, options))
    grouped = pa.table(columns).group_by(list(keys), use_threads=False).aggregate(hash_aggs)
    grouped = grouped.sort_by([(k, "ascending") for k in keys])
    values = [
        grouped.column(f"{alias}_{fn}").combine_chunks().cast(t)
        for (alias, fn, _), t in zip(hash_aggs, types, strict=True)
    ]
    return grouped.select(list(keys)), values
