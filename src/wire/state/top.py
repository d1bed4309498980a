"""Full-row aggregators: ``max_by`` / ``min_by`` (one row) and ``top_k`` (a ranked list of rows).

They return the *events* that rank highest by an order column, not just the value:
each event becomes a struct of its payload columns (all of them, or the listed
``columns``).

Ranking (deterministic, independent of how events are split into batches, epochs or
merged sessions): by the order column (largest first for ``max_by`` and
``top_k(largest=True)``, smallest first otherwise), then by (event time, arrival),
earliest first (SPEC §1). Events whose order value is null or NaN are not ranked.

* ``max_by`` / ``min_by`` keep the first event of that ranking: among events tied on
  the order value, the earliest by (event time, arrival).
* ``top_k(ties="first")`` keeps the first ``k`` events of the ranking;
  ``top_k(ties="all")`` also keeps every event tied with the ``k``-th on the order
  value, so the list may be longer than ``k``. ``top_k(c, 1, ties="all")`` is "every
  row of the maximum".

Partials (one row per window and batch; merged across batches, epochs and sessions):
``__rows`` list<struct of the columns>, ``__order`` list<order type>, ``__et`` and
``__seq`` list<int64>: the batch's own top entries (at most ``k`` with
``ties="first"``; ``k`` plus the ties of the ``k``-th with ``ties="all"``), which is
enough: an event in the top of a union is in the top of its own part.

Examples
--------
>>> import pyarrow as pa
>>> from wire.state.kernels import Groups
>>> t = pa.table({"bidder": [7, 8, 9], "price": [5, 9, 9], "__et": [1, 2, 3], "__seq": [0, 1, 2]})
>>> best = max_by("price")
>>> partials = pa.table(best.partial("b", t, Groups.from_new([True, False, False])),
...                     names=best.partial_names("b"))
>>> best.result("b", partials).to_pylist()  # bidders 8 and 9 tie on 9: the earlier wins
[{'bidder': 8, 'price': 9}]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.errors import ConfigError
from wire.state.aggregator import Aggregator, orderable
from wire.state.kernels import ARRIVAL, EVENT_TIME, Groups, changes

TIES = ("first", "all")
_INT64 = pa.int64()


def _col(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _offsets32(counts: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32), pa.int32())


@dataclass(frozen=True)
class TopK(Aggregator):
    """The ``k`` events ranking highest by ``column`` (build it with :func:`top_k`).

    Attributes
    ----------
    column : str
        The order column (numeric, temporal or string).
    k : int
        How many events to keep, >= 1.
    columns : tuple of str or None
        Payload columns of each kept event; None: every payload column (names not
        starting with ``__``, the key included). A list given is stored as a tuple.
    ties : {"first", "all"}
        ``"all"`` also keeps events tied with the ``k``-th on the order value.
    largest : bool
        True ranks the largest order values first, False the smallest.
    """

    column: str
    k: int = 1
    columns: tuple[str, ...] | list[str] | None = None
    ties: str = "first"
    largest: bool = True
    parts: ClassVar[tuple[str, ...]] = ("rows", "order", "et", "seq")

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise ConfigError("order_column", self.column, "a non-empty column name (str)")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ConfigError("k", self.k, "an int >= 1")
        if self.ties not in TIES:
            raise ConfigError("ties", self.ties, "'first' or 'all'")
        if not isinstance(self.largest, bool):
            raise ConfigError("largest", self.largest, "True or False")
        given = self.columns
        if given is not None:
            names_ok = isinstance(given, list | tuple) and all(isinstance(c, str) and c for c in given)
            if not names_ok or not given or len(set(given)) != len(given):
                accepted = "None (every column) or a non-empty list of distinct column names (str)"
                raise ConfigError("columns", given, accepted)
            object.__setattr__(self, "columns", tuple(given))

    # ------------------------------------------------------------------ schema

    def _struct(self, input_schema: pa.Schema) -> pa.StructType:
        if self.column not in input_schema.names:
            raise ConfigError("order_column", self.column, f"one of the input columns {input_schema.names}")
        order_type = input_schema.field(self.column).type
        if not orderable(order_type):
            raise ConfigError(
                "order_column", f"{self.column} ({order_type})", "a numeric, temporal or string column"
            )
        payload = [n for n in input_schema.names if not n.startswith("__")]
        if self.columns is None:
            names = payload
        else:
            missing = [c for c in self.columns if c not in payload]
            if missing:
                raise ConfigError("columns", missing, f"names of input columns {payload}")
            names = list(self.columns)
        return pa.struct([pa.field(n, input_schema.field(n).type) for n in names])

    def partial_fields(self, name: str, input_schema: pa.Schema) -> list[pa.Field]:  # noqa: D102
        struct = self._struct(input_schema)
        return [
            pa.field(f"{name}__rows", pa.list_(struct)),
            pa.field(f"{name}__order", pa.list_(input_schema.field(self.column).type)),
            pa.field(f"{name}__et", pa.list_(_INT64)),
            pa.field(f"{name}__seq", pa.list_(_INT64)),
        ]

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        return pa.field(name, pa.list_(self._struct(input_schema)))

    # ------------------------------------------------------------------ kernels

    def _keep(
        self, g: np.ndarray, n_groups: int, order: pa.Array, et: pa.Array, seq: pa.Array, tiebreak: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indices of the kept entries (grouped, ranked) and the number kept per group.

        Entries are ranked inside their group ``g`` by (order value, event time,
        arrival, ``tiebreak``); null and NaN order values are dropped.
        """
        valid = pc.is_valid(order)
        if pa.types.is_floating(order.type):
            valid = pc.and_(valid, pc.invert(pc.fill_null(pc.is_nan(order), True)))
        valid_np = valid.to_numpy(zero_copy_only=False).astype(bool)
        idx = np.flatnonzero(valid_np)
        table = pa.table(
            {"g": g[idx], "v": order.take(pa.array(idx)), "et": et.take(pa.array(idx)),
             "seq": seq.take(pa.array(idx)), "row": tiebreak[idx]}
        )
        direction = "descending" if self.largest else "ascending"
        sort_keys = [("g", "ascending"), ("v", direction), ("et", "ascending"), ("seq", "ascending"),
                     ("row", "ascending")]
        ranked = pc.sort_indices(table, sort_keys=sort_keys).to_numpy()
        table = table.take(pa.array(ranked))
        gs = table.column("g").to_numpy()
        groups = Groups.from_new(changes(table, ["g"]))
        rank_base = groups.offsets[groups.ids]
        if self.ties == "first":
            rank = np.arange(len(gs), dtype=np.int64) - rank_base
        else:  # the rank of the first entry with the same value: ties share it
            runs = Groups.from_new(changes(table, ["g", "v"]))
            rank = runs.offsets[runs.ids] - rank_base
        kept = rank < self.k
        return idx[ranked[kept]], np.bincount(gs[kept], minlength=n_groups)

    def _lists(self, flat: list[pa.Array], take: np.ndarray, counts: np.ndarray) -> list[pa.Array]:
        offsets = _offsets32(counts)
        indices = pa.array(take, _INT64)
        return [pa.ListArray.from_arrays(offsets, f.take(indices)) for f in flat]

    def partial(self, name: str, events: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        struct = self._struct(events.schema)
        rows = pa.StructArray.from_arrays(
            [_col(events, f.name) for f in struct], fields=list(struct)
        )
        flat = [rows, _col(events, self.column), _col(events, EVENT_TIME).cast(_INT64),
                _col(events, ARRIVAL).cast(_INT64)]
        tiebreak = np.arange(events.num_rows, dtype=np.int64)
        take, counts = self._keep(groups.ids, groups.n, flat[1], flat[2], flat[3], tiebreak)
        return self._lists(flat, take, counts)

    def merge(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:  # noqa: D102
        lists = [_col(partials, n) for n in self.partial_names(name)]
        parent = pc.list_parent_indices(lists[0]).to_numpy().astype(np.int64)
        flat = [pc.list_flatten(x) for x in lists]
        take, counts = self._keep(groups.ids[parent], groups.n, flat[1], flat[2], flat[3], parent)
        return self._lists(flat, take, counts)

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        rows = _col(partials, f"{name}__rows")
        return pc.fill_null(rows, pa.scalar([], rows.type)) if rows.null_count else rows

    def cumulative(self, name: str, partials: pa.Table, groups: Groups) -> list[pa.Array]:
        """Row ``r`` merges its group's rows ``<= r``: quadratic in the rows per group (callbacks only)."""
        n = partials.num_rows
        starts = groups.starts[groups.ids]
        per_row = np.arange(n, dtype=np.int64) - starts + 1
        rr = np.repeat(np.arange(n, dtype=np.int64), per_row)
        first = np.cumsum(per_row) - per_row
        source = starts[rr] + np.arange(len(rr), dtype=np.int64) - np.repeat(first, per_row)
        expanded = partials.select(self.partial_names(name)).take(pa.array(source, _INT64))
        expanded_groups = Groups(rr, np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64))
        return self.merge(name, expanded, expanded_groups)


@dataclass(frozen=True)
class ByRow(TopK):
    """The one event ranking highest by ``column``: a struct (build it with :func:`max_by`)."""

    def result(self, name: str, partials: pa.Table) -> pa.Array:  # noqa: D102
        rows = _col(partials, f"{name}__rows")
        lengths = pc.fill_null(pc.list_value_length(rows), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        starts = np.cumsum(lengths) - lengths
        idx = pa.array(starts, _INT64, mask=lengths == 0)
        return rows.flatten().take(idx)

    def result_field(self, name: str, input_schema: pa.Schema) -> pa.Field:  # noqa: D102
        return pa.field(name, self._struct(input_schema))


def max_by(order_column: str, *, columns: list[str] | tuple[str, ...] | None = None) -> Aggregator:
    """The event with the largest ``order_column`` in the window, as a struct of its columns.

    Output: ``struct<column: type, ...>`` of ``columns`` (default: every payload
    column of the window's input, the key included), the types of the input
    columns (times keep their unit); null when no event of the window has a
    non-null, non-NaN ``order_column``. Ties on ``order_column`` go to the earliest
    event by (event time, arrival); for every tied event use
    ``top_k(order_column, 1, ties="all")``. State per window: that one event (its
    columns, order value, event time and arrival), purged with the window.

    Parameters
    ----------
    order_column : str
        Numeric, temporal or string column to maximize.
    columns : list of str, optional
        Payload columns to return (in this order); None for all.

    Raises
    ------
    ConfigError
        ``order_column`` / ``columns`` not a name / a non-empty list of distinct names;
        when the flow is compiled: a column missing from the input, or an order
        column that is not numeric, temporal or string.

    Examples
    --------
    >>> import wire
    >>> agg = wire.max_by("price", columns=["auction_id", "bidder", "price"])
    >>> agg.result_field("bid", pa.schema([("auction_id", pa.int64()), ("bidder", pa.int64()),
    ...                                     ("price", pa.int64())])).type
    StructType(struct<auction_id: int64, bidder: int64, price: int64>)
    """
    return ByRow(order_column, 1, columns, "first", True)


def min_by(order_column: str, *, columns: list[str] | tuple[str, ...] | None = None) -> Aggregator:
    """The event with the smallest ``order_column``, as a struct; otherwise as :func:`max_by`.

    Raises
    ------
    ConfigError
        As :func:`max_by`.
    """
    return ByRow(order_column, 1, columns, "first", False)


def top_k(
    order_column: str,
    k: int,
    *,
    columns: list[str] | tuple[str, ...] | None = None,
    ties: str = "first",
    largest: bool = True,
) -> Aggregator:
    """The ``k`` events with the largest (or smallest) ``order_column``, as a list of structs.

    Output: ``list<struct<column: type, ...>>`` of ``columns`` (default: every
    payload column, the key included), ranked by ``order_column`` (largest first,
    or smallest first with ``largest=False``), then by (event time, arrival),
    earliest first; events with a null or NaN ``order_column`` are left out; an
    empty list when none is left. ``ties="first"``: at most ``k`` events (ties at
    the ``k``-th place go to the earliest); ``ties="all"``: also every event tied
    with the ``k``-th on ``order_column``, so possibly more than ``k``. State per
    window: those events (columns, order value, event time, arrival), purged with
    the window.

    Parameters
    ----------
    order_column : str
        Numeric, temporal or string column to rank by.
    k : int
        Number of events, >= 1.
    columns : list of str, optional
        Payload columns to return (in this order); None for all.
    ties : {"first", "all"}
        What to do with events tied with the ``k``-th.
    largest : bool
        True (default) keeps the largest values, False the smallest.

    Raises
    ------
    ConfigError
        ``k`` not an int >= 1, ``ties`` not ``"first"`` / ``"all"``, bad ``columns``;
        when the flow is compiled: as :func:`max_by`.

    Examples
    --------
    >>> import wire
    >>> hot = wire.top_k("bids", 1, columns=["auction_id", "bids"], ties="all")
    >>> hot.result_field("hot", pa.schema([("auction_id", pa.int64()), ("bids", pa.int64())])).type
    ListType(list<item: struct<auction_id: int64, bids: int64>>)
    """
    return TopK(order_column, k, columns, ties, largest)
