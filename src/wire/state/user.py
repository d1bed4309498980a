"""User aggregators: ``create / add / merge / result`` Python functions (SPEC §4).

The accumulator is opaque to Wire: it is pickled into one binary partial column
``f"{name}__acc"``. ``merge`` is really used: batches are pre-aggregated before the
shuffle and merged into the state, and merging session windows merges their
accumulators.

Cost: unlike the built-in aggregators this runs Python per (key, window) group
(``create``, ``merge``, ``result``, pickling) and per event (``add``). It is the
only part of :mod:`wire.state` that is not vectorized.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from wire.errors import ConfigError
from wire.state.aggregator import Aggregator, check_column, input_type
from wire.state.kernels import Groups


def _loads(blob: bytes | None, create: Callable[[], Any]) -> Any:
    return create() if blob is None else pickle.loads(blob)


@dataclass(frozen=True)
class UserAggregator(Aggregator):
    """An aggregation defined by four user functions (build it with :func:`aggregate`).

    Attributes
    ----------
    column : str or None
        Input column whose values are passed to ``add``; None passes the whole event
        as a dict of its payload columns.
    create_fn, add_fn, merge_fn, result_fn : callable
        ``create() -> acc``, ``add(acc, value) -> acc``, ``merge(acc, acc) -> acc``,
        ``result(acc) -> value``. They may mutate and return their first argument.
    result_type : pyarrow.DataType
        Type of the result column.
    """

    column: str | None
    create_fn: Callable[[], Any]
    add_fn: Callable[[Any, Any], Any]
    merge_fn: Callable[[Any, Any], Any]
    result_fn: Callable[[Any], Any]
    result_type: pa.DataType
    parts = ("acc",)

    def __post_init__(self) -> None:
        check_column(self.column, optional=True)
        for parameter, fn in (
            ("create", self.create_fn),
            ("add", self.add_fn),
            ("merge", self.merge_fn),
            ("result", self.result_fn),
        ):
            if not callable(fn):
                raise ConfigError(parameter, fn, "a callable")
        if not isinstance(self.result_type, pa.DataType):
            raise ConfigError("result_type", self.result_type, "a pyarrow.DataType, e.g. pa.int64()")

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        if self.column is not None:
            input_type(self.column, input_schema)
        return [pa.field(f"{name}__acc", pa.binary())]

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        self.partial_fields(name, input_schema)
        return pa.field(name, self.result_type)

    def _values(self, events: pa.Table) -> list[Any]:
        values: list[Any]
        if self.column is not None:
            values = events.column(self.column).to_pylist()
            return values
        payload = [c for c in events.column_names if not c.startswith("__")]  # no __et, __ws...
        values = events.select(payload).to_pylist()
        return values

    def partial(self, name: str, events: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        values = self._values(events)
        out = []
        for lo, hi in zip(groups.starts.tolist(), groups.offsets[1:].tolist(), strict=True):
            acc = self.create_fn()
            for v in values[lo:hi]:
                acc = self.add_fn(acc, v)
            out.append(pickle.dumps(acc))
        return [pa.array(out, pa.binary())]

    def merge(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        blobs = partials.column(f"{name}__acc").to_pylist()
        out = []
        for lo, hi in zip(groups.starts.tolist(), groups.offsets[1:].tolist(), strict=True):
            acc = _loads(blobs[lo], self.create_fn)
            for blob in blobs[lo + 1 : hi]:
                acc = self.merge_fn(acc, _loads(blob, self.create_fn))
            out.append(pickle.dumps(acc))
        return [pa.array(out, pa.binary())]

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        blobs = partials.column(f"{name}__acc").to_pylist()
        return pa.array([self.result_fn(_loads(b, self.create_fn)) for b in blobs], self.result_type)

    def running(  # noqa: D102
        self, name: str, initial: pa.Table, events: pa.Table, groups: Groups
    ) -> tuple[pa.Array, pa.Array]:
        blobs = initial.column(f"{name}__acc").to_pylist()
        values = self._values(events)
        before, after = [], []
        for g, (lo, hi) in enumerate(zip(groups.starts.tolist(), groups.offsets[1:].tolist(), strict=True)):
            acc = _loads(blobs[g], self.create_fn)
            for v in values[lo:hi]:
                before.append(self.result_fn(acc))
                acc = self.add_fn(acc, v)
                after.append(self.result_fn(acc))
        return pa.array(before, self.result_type), pa.array(after, self.result_type)


def aggregate(
    *,
    create: Callable[[], Any],
    add: Callable[[Any, Any], Any],
    merge: Callable[[Any, Any], Any],
    result: Callable[[Any], Any],
    column: str | None = None,
    result_type: pa.DataType,
) -> Aggregator:
    """A user aggregator from ``create / add / merge / result`` functions (SPEC §4).

    Parameters
    ----------
    create : callable
        ``create() -> acc``: a new, empty accumulator (must be picklable).
    add : callable
        ``add(acc, value) -> acc``: add one event's value (events of a window arrive
        in (event time, arrival) order within an epoch).
    merge : callable
        ``merge(acc1, acc2) -> acc``: combine two accumulators (partial
        pre-aggregation, state, session merging).
    result : callable
        ``result(acc) -> value`` of ``result_type``.
    column : str, optional
        Input column; None passes each event as a dict of its payload columns.
    result_type : pyarrow.DataType
        Type of the result column.

    Raises
    ------
    ConfigError
        If a function is not callable, ``column`` is not a non-empty str or None,
        or ``result_type`` is not an Arrow type.

    Examples
    --------
    >>> import pyarrow as pa
    >>> distinct = aggregate(create=set, add=lambda s, v: s | {v}, merge=lambda a, b: a | b,
    ...                      result=len, column="x", result_type=pa.int64())
    >>> distinct.result_field("d", pa.schema([("x", pa.string())]))
    pyarrow.Field<d: int64>
    """
    return UserAggregator(column, create, add, merge, result, result_type)
