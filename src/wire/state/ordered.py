"""Order-dependent aggregators: first, last, collect (SPEC §1: event time, then arrival).

Their partials keep each value's event time (``__et``) and arrival (``__seq``) so
that merging partials of different batches, epochs or sessions gives the same
result as one pass over the events in (event time, arrival) order. Ties on both
(possible only when arrival sequences are missing) go to the earlier partial row:
state before the epoch's partials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.time import INT64_MAX, INT64_MIN
from wire.state.aggregator import Aggregator, input_type
from wire.state.kernels import ARRIVAL, EVENT_TIME, Groups, running_arg

_INT64 = pa.int64()


def _col(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _offsets32(offsets: np.ndarray) -> pa.Array:
    return pa.array(offsets.astype(np.int32), pa.int32())


@dataclass(frozen=True)
class _Pick(Aggregator):
    """First or last event's value; partials ``__value``, ``__et``, ``__seq``."""

    _last: ClassVar[bool] = False
    parts = ("value", "et", "seq")

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:
        t = input_type(self.column, input_schema)
        return [
            pa.field(f"{name}__value", t),
            pa.field(f"{name}__et", _INT64),
            pa.field(f"{name}__seq", _INT64),
        ]

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:
        return pa.field(name, input_type(self.column, input_schema))

    def partial(self, name: str, events: pa.Table, groups: Groups) -> list[pa.Array]:
        idx = pa.array(groups.ends if self._last else groups.starts)
        return [
            _col(events, self.column).take(idx),  # type: ignore[arg-type]
            _col(events, EVENT_TIME).cast(_INT64).take(idx),
            _col(events, ARRIVAL).cast(_INT64).take(idx),
        ]

    def _keys(self, name: str, partials: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        fill = INT64_MIN if self._last else INT64_MAX
        et = pc.fill_null(_col(partials, f"{name}__et"), fill).to_numpy()
        seq = pc.fill_null(_col(partials, f"{name}__seq"), fill).to_numpy()
        return et, seq

    def _take(self, name: str, partials: pa.Table, idx: np.ndarray) -> list[pa.Array]:
        i = pa.array(idx, _INT64)
        return [_col(partials, f"{name}__{part}").take(i) for part in ("value", "et", "seq")]

    def merge(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        et, seq = self._keys(name, partials)
        rows = np.arange(partials.num_rows, dtype=np.int64)
        if self._last:  # greatest (et, seq, row): a tie goes to the later row
            order = np.lexsort((rows, seq, et, groups.ids))
            return self._take(name, partials, order[groups.ends])
        order = np.lexsort((rows, seq, et, groups.ids))  # smallest (et, seq, row)
        return self._take(name, partials, order[groups.starts])

    def result(self, name: str, partials: pa.Table) -> pa.Array:
        return _col(partials, f"{name}__value")

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        et = _col(partials, f"{name}__et")
        seq = _col(partials, f"{name}__seq")
        if self._last:
            idx = running_arg(groups, [(et, "ascending"), (seq, "ascending")])
        else:
            rows = np.arange(partials.num_rows, dtype=np.int64)
            idx = running_arg(groups, [(et, "descending"), (seq, "descending"), (rows, "descending")])
        return self._take(name, partials, idx)


@dataclass(frozen=True)
class First(_Pick):
    """Value of ``column`` in the first event by (event time, arrival); may be null."""


@dataclass(frozen=True)
class Last(_Pick):
    """Value of ``column`` in the last event by (event time, arrival); may be null."""

    _last = True


@dataclass(frozen=True)
class Collect(Aggregator):
    """Every value of ``column`` (nulls included), as a list in (event time, arrival) order.

    Partials: ``__values`` list<type>, ``__et`` and ``__seq`` list<int64> (one entry
    per value), so merges interleave values of different partials correctly.
    """

    parts = ("values", "et", "seq")

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        t = input_type(self.column, input_schema)
        return [
            pa.field(f"{name}__values", pa.list_(t)),
            pa.field(f"{name}__et", pa.list_(_INT64)),
            pa.field(f"{name}__seq", pa.list_(_INT64)),
        ]

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        return pa.field(name, pa.list_(input_type(self.column, input_schema)))

    def partial(self, name: str, events: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        offsets = _offsets32(groups.offsets)
        return [
            pa.ListArray.from_arrays(offsets, _col(events, self.column)),  # type: ignore[arg-type]
            pa.ListArray.from_arrays(offsets, _col(events, EVENT_TIME).cast(_INT64)),
            pa.ListArray.from_arrays(offsets, _col(events, ARRIVAL).cast(_INT64)),
        ]

    def _flat(
        self, name: str, partials: pa.Table, groups: Groups
    ) -> tuple[list[pa.Array], np.ndarray, np.ndarray]:
        """Flattened (values, et, seq), their parent rows, and an order by (group, et, seq, row)."""
        lists = [_col(partials, f"{name}__{part}") for part in ("values", "et", "seq")]
        parent = pc.list_parent_indices(lists[0]).to_numpy().astype(np.int64)
        flat = [pc.list_flatten(x) for x in lists]
        et, seq = flat[1].to_numpy(), flat[2].to_numpy()
        order = np.lexsort((parent, seq, et, groups.ids[parent]))
        return flat, parent, order

    def merge(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        flat, parent, order = self._flat(name, partials, groups)
        counts = np.bincount(groups.ids[parent], minlength=groups.n)
        offsets = _offsets32(np.concatenate([[0], np.cumsum(counts)]))
        take = pa.array(order, _INT64)
        return [pa.ListArray.from_arrays(offsets, f.take(take)) for f in flat]

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        values = _col(partials, f"{name}__values")
        if values.null_count:
            values = pc.fill_null(values, pa.scalar([], values.type))
        return values

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        """Row ``r`` lists its group's elements from rows ``<= r``: output size is quadratic."""
        flat, parent, order = self._flat(name, partials, groups)
        n_rows = partials.num_rows
        g_counts = np.bincount(groups.ids[parent], minlength=groups.n)
        g_offsets = np.concatenate([[0], np.cumsum(g_counts)]).astype(np.int64)
        per_row = g_counts[groups.ids]
        rr = np.repeat(np.arange(n_rows, dtype=np.int64), per_row)
        row_start = np.concatenate([[0], np.cumsum(per_row)[:-1]]).astype(np.int64)
        within = np.arange(len(rr), dtype=np.int64) - np.repeat(row_start, per_row)
        elem = g_offsets[groups.ids[rr]] + within  # position in `order`
        keep = parent[order[elem]] <= rr
        take = pa.array(order[elem[keep]], _INT64)
        counts = np.bincount(rr[keep], minlength=n_rows)
        offsets = _offsets32(np.concatenate([[0], np.cumsum(counts)]))
        return [pa.ListArray.from_arrays(offsets, f.take(take)) for f in flat]


def first(column: str) -> Aggregator:
    """Value of ``column`` in the first event by (event time, arrival); null if that value is null.

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return First(column)


def last(column: str) -> Aggregator:
    """Value of ``column`` in the last event by (event time, arrival); null if that value is null.

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return Last(column)


def collect(column: str) -> Aggregator:
    """All values of ``column`` (nulls included) as ``list<type>``, in (event time, arrival) order.

    Raises
    ------
    ConfigError
        If ``column`` is not a non-empty str.
    """
    return Collect(column)
