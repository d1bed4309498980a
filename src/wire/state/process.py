"""The keyed process operator (``Stream.process``) as one pure epoch function (no Spark).

:func:`on_epoch` is the whole operator logic of one key group for one epoch, the
watermark hold included; the Spark stage (:mod:`wire.compiler.process_stage`) only
moves its input and output. Unit tests drive it directly
(``tests/unit/state/test_process_kernel.py``).

The user contract (also in ``Stream.process``'s docstring)
    ``on_events(ctx, events) -> pa.Table | None`` is called once per key group per
    epoch that brings on-time events, with all of them: the stream's payload columns
    plus ``event_time`` (int64 ms; it replaces a payload column of that name), sorted
    by (key, event time, arrival) (SPEC §1). ``on_timer(ctx, fired) -> pa.Table |
    None`` is called with due timers (:func:`~wire.state.keyed_state.timer_schema`:
    key, ``domain``, ``tag``, ``time``, ``output_time``), sorted by (time, key, tag).
    Each call returns rows with the declared output columns (an int64
    ``event_time`` among them: the row's event time, ms), or None for none.

Order within an epoch (Flink / Beam: elements that arrived before a watermark are
processed before the timers it fires)
    1. events with ``event_time < wm_in`` (the input watermark in force while they
       arrived) go to the late table; the others go to ``on_events`` (one call);
    2. the input watermark advances to ``new_in``; event-time timers with ``time <=
       new_in`` fire in **rounds**: each round fires, for every key, its timers at
       that key's earliest due time (one ``on_timer`` call per round, never one per
       key), so each key sees its timers in time order, also timers set by
       ``on_timer`` itself; rounds repeat until none is due (at most
       :data:`MAX_ROUNDS`);
    3. processing-time timers with ``time <= now_ms`` fire the same way; at the end of
       input (``new_in`` = :data:`~wire.core.time.MAX_WATERMARK`) every pending timer
       fires, so a bounded run ends with nothing held.

Output watermark (Beam watermark-hold rule, SPEC §2)
    ``out' = max(out, min(new_in, min output_time of the pending timers))``: a pending
    timer holds the output watermark at its ``output_time``, so what it emits later is
    never late downstream. Every row the epoch emits, and every timer's
    ``output_time``, must be ``>= out`` (``ctx.output_watermark``, the output watermark
    in force during the epoch); on-time events satisfy it (``event_time >= wm_in >=
    out``). A violation raises :class:`ProcessFunctionError` naming the step and
    function.

State layout
    Each declared state and the timers are one Arrow table per key group, stored as
    one bucket of :class:`~wire.state.segments.Segments` (bucket 0: timers, bucket
    ``i + 1``: the ``i``-th state name in sorted order). A state table is read only
    when the epoch's functions use it and rewritten only when they change it; the
    timers are read every epoch (the due ones are found among them). Not split by key
    ranges: an epoch that touches a state reads and rewrites that key group's whole
    table of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.core.envelope import ET, MAX_WATERMARK, SEQ
from wire.errors import ProcessFunctionError, TimerError
from wire.state import keyed_state as K
from wire.state import operator_watermarks as OW
from wire.state.keyed_state import (
    ListState,
    MapState,
    StateSpec,
    StoredTable,
    TimeDomain,
    Timers,
    ValueState,
)

if TYPE_CHECKING:
    from wire.state.segments import Segments

EVENT_TIME = "event_time"
"""Column of the events table, of the fired table's rows' output, and of every output row."""
LATE_REASON = "process: event_time < watermark"
MAX_ROUNDS = 1000
"""Timer rounds per domain per epoch before :class:`ProcessFunctionError` (a timer loop)."""
TIMERS_BUCKET = 0


OnEvents = Callable[["ProcessContext", pa.Table], "pa.Table | None"]
"""``on_events(ctx, events) -> output rows or None``."""
OnTimer = Callable[["ProcessContext", pa.Table], "pa.Table | None"]
"""``on_timer(ctx, fired) -> output rows or None``."""


@dataclass(frozen=True)
class ProcessSpec:
    """A process operator, fixed when the flow is compiled.

    ``payload``: the input's payload columns (without ``__et`` / ``__seq``); ``output``:
    the declared output columns (an int64 ``event_time`` among them); ``states``:
    ``(name, spec)`` sorted by name.
    """

    step: str
    key: str
    key_type: pa.DataType
    payload: pa.Schema
    output: pa.Schema
    states: tuple[tuple[str, StateSpec], ...]
    on_events: OnEvents
    on_timer: OnTimer | None = None

    def events_schema(self) -> pa.Schema:
        """What ``on_events`` gets: payload (without ``event_time``) + ``event_time``."""
        return pa.schema([*(f for f in self.payload if f.name != EVENT_TIME),
                          pa.field(EVENT_TIME, pa.int64())])

    def late_schema(self) -> pa.Schema:
        """Late rows: payload, ``event_time``, ``watermark`` (int64 ms), ``reason``.

        A payload column named ``event_time``, ``watermark`` or ``reason`` is renamed
        ``input_<name>``.
        """
        fields = [f.with_name(f"input_{f.name}" if f.name in (EVENT_TIME, "watermark", "reason") else f.name)
                  for f in self.payload]
        return pa.schema([*fields, pa.field(EVENT_TIME, pa.int64()), pa.field("watermark", pa.int64()),
                          pa.field("reason", pa.string())])

    def fn_name(self, fn: object) -> str:
        """A user function's qualified name (for error messages)."""
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


class ProcessContext:
    """What a process function sees: the key group's state and timers, and the time.

    Attributes (int64 ms): ``input_watermark`` (in force while the epoch's events
    arrived, then, in ``on_timer``, the new one), ``output_watermark`` (the floor of
    every output row's ``event_time`` and timer ``output_time``), ``processing_time``
    (the wall clock of the epoch). ``key``: the key column's name. ``timers``: see
    :class:`wire.state.keyed_state.Timers`.
    """

    def __init__(self, spec: ProcessSpec, tables: dict[str, StoredTable], timers: Timers,
                 input_watermark: int, output_watermark: int, processing_time: int) -> None:
        self._spec = dict(spec.states)
        self._tables = tables
        self.key = spec.key
        self.timers = timers
        self.input_watermark = input_watermark
        self.output_watermark = output_watermark
        self.processing_time = processing_time

    def _stored(self, name: str, kind: str) -> StoredTable:
        spec = self._spec.get(name)
        if spec is None or spec.kind != kind:
            declared = {n: s.kind for n, s in self._spec.items()}
            raise ProcessFunctionError(f"no {kind} state named {name!r}; declared: {declared}")
        return self._tables[name]

    def value_state(self, name: str) -> ValueState:
        """The declared value state ``name``."""
        return ValueState(self._stored(name, "value"), self.key)

    def list_state(self, name: str) -> ListState:
        """The declared list state ``name``."""
        return ListState(self._stored(name, "list"), self.key)

    def map_state(self, name: str) -> MapState:
        """The declared map state ``name``."""
        return MapState(self._stored(name, "map"), self.key)


@dataclass(frozen=True)
class EpochResult:
    """What one epoch of one key group produced."""

    outputs: pa.Table
    """Rows in ``spec.output``; ``event_time`` is each row's event time."""
    late: pa.Table
    """Late events in :meth:`ProcessSpec.late_schema`."""
    output_watermark: int
    stats: dict[str, int]


def _bucket(spec: ProcessSpec, name: str) -> int:
    return 1 + [n for n, _ in spec.states].index(name)


def _read(segments: Segments, bucket: int) -> pa.Table | None:
    chunks = list(segments.read(bucket))
    return pa.concat_tables(chunks) if chunks else None


def _loader(segments: Segments, bucket: int) -> Callable[[], pa.Table | None]:
    return lambda: _read(segments, bucket)


def _events_for_fn(events: pa.Table, spec: ProcessSpec) -> pa.Table:
    cols = [c for c in spec.events_schema().names if c != EVENT_TIME]
    t = events.select(cols).append_column(EVENT_TIME, events.column(ET).cast(pa.int64()))
    return t.cast(spec.events_schema())


def _late(events: pa.Table, watermark: int, spec: ProcessSpec) -> pa.Table:
    n = events.num_rows
    arrays = [events.column(f.name) for f in spec.payload]
    arrays += [events.column(ET).cast(pa.int64()), pa.array(np.full(n, watermark, np.int64)),
               pa.array([LATE_REASON] * n, pa.string())]
    return pa.Table.from_arrays(arrays, schema=spec.late_schema())


def _check_output(returned: object, spec: ProcessSpec, fn: object, floor: int) -> pa.Table | None:
    if returned is None:
        return None
    if isinstance(returned, pa.Table):
        out = returned
    else:
        import pandas as pd  # only when a function returns something other than Arrow

        if not isinstance(returned, pd.DataFrame):
            raise ProcessFunctionError(
                f"step {spec.step!r}: {spec.fn_name(fn)} returned {type(returned).__name__}; "
                "accepted: a pyarrow.Table (or pandas DataFrame) with the declared output columns, or None")
        out = pa.Table.from_pandas(returned, preserve_index=False)
    missing = [n for n in spec.output.names if n not in out.column_names]
    if missing:
        raise ProcessFunctionError(
            f"step {spec.step!r}: {spec.fn_name(fn)} returned columns {out.column_names}, missing "
            f"{missing}; accepted: the declared output schema {spec.output.names}")
    try:
        out = out.select(spec.output.names).cast(spec.output)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise ProcessFunctionError(
            f"step {spec.step!r}: {spec.fn_name(fn)} returned columns that do not cast to the "
            f"declared output schema {spec.output}: {e}") from None
    et = out.column(EVENT_TIME)
    if et.null_count:
        raise ProcessFunctionError(f"step {spec.step!r}: {spec.fn_name(fn)} returned rows with a null "
                                   "event_time; accepted: int64 ms on every row")
    if out.num_rows and pc.min(et).as_py() < floor:
        raise ProcessFunctionError(
            f"step {spec.step!r}: {spec.fn_name(fn)} returned a row with event_time "
            f"{pc.min(et).as_py()} ms, below the operator's output watermark {floor} ms (it would "
            "be late downstream); accepted: event_time >= ctx.output_watermark")
    return out


def _call(fn: OnEvents | OnTimer, ctx: ProcessContext, table: pa.Table, spec: ProcessSpec,
          floor: int) -> pa.Table | None:
    try:
        out = fn(ctx, table)
    except TimerError as e:
        raise ProcessFunctionError(f"step {spec.step!r}: {spec.fn_name(fn)}: {e}") from None
    return _check_output(out, spec, fn, floor)


def _due_round(timers: pa.Table, domain: TimeDomain, until: int, key: str) -> pa.Table | None:
    """Per key, its due timers of ``domain`` at that key's earliest due time; None: none due."""
    if not timers.num_rows:
        return None
    dom = pc.equal(timers.column(K.DOMAIN), domain)
    due = timers.filter(pc.and_(dom, pc.less_equal(timers.column(K.TIME), until)))
    if not due.num_rows:
        return None
    c, _ = K.codes([due.column(key).combine_chunks()], [due.column(key).combine_chunks()[:0]])
    times = due.column(K.TIME).to_numpy()
    order = np.lexsort((times, c))
    first = np.ones(len(order), bool)
    first[1:] = c[order][1:] != c[order][:-1]
    earliest = np.empty(c.max() + 1, np.int64)
    earliest[c[order][first]] = times[order][first]
    chosen = due.filter(pa.array(times == earliest[c]))
    ordering = np.lexsort((_rank(chosen.column(K.TAG)), _rank(chosen.column(key)),
                           chosen.column(K.TIME).to_numpy()))
    return chosen.take(pa.array(ordering))


def on_epoch(
    segments: Segments,
    events: pa.Table,
    wm_in: int,
    new_in: int,
    old_out: int,
    now_ms: int,
    spec: ProcessSpec,
) -> EpochResult:
    """One epoch of one key group of a process operator (see the module docstring).

    Parameters
    ----------
    segments : Segments
        The key group's stored state and timers (updated in place).
    events : pyarrow.Table
        The epoch's events of the key group: payload columns + ``__et`` (int64 ms) +
        ``__seq`` (arrival order; null = row order), in any order.
    wm_in, new_in : int
        Input watermark (ms) in force while the events arrived, and after the epoch.
    old_out : int
        The operator's output watermark in force during the epoch (ms).
    now_ms : int
        Wall clock (ms since the Unix epoch) for processing-time timers.
    spec : ProcessSpec
        The operator.

    Returns
    -------
    EpochResult
        Outputs, late events, the new output watermark (Beam hold rule) and counters.

    Raises
    ------
    ProcessFunctionError
        If a function returns something other than the declared rows, a row below
        ``old_out``, misuses timers, or timers keep firing for :data:`MAX_ROUNDS` rounds.
    ValueError
        If ``new_in < wm_in``.
    """
    if new_in < wm_in:
        raise ValueError(f"new_in={new_in} is below wm_in={wm_in}; watermarks never decrease")
    tables = {name: StoredTable(s.schema(spec.key, spec.key_type), _loader(segments, _bucket(spec, name)))
              for name, s in spec.states}
    timer_table = StoredTable(K.timer_schema(spec.key, spec.key_type), _loader(segments, TIMERS_BUCKET))
    timers = Timers(timer_table, spec.key, old_out, enabled=spec.on_timer is not None)
    ctx = ProcessContext(spec, tables, timers, wm_in, old_out, now_ms)
    outputs: list[pa.Table] = []
    stats = {"events": events.num_rows, "late": 0, "outputs": 0, "timers_fired": 0}

    late = spec.late_schema().empty_table()
    if events.num_rows:
        et = events.column(ET).cast(pa.int64())
        is_late = pc.less(et, pa.scalar(wm_in, pa.int64()))
        late = _late(events.filter(is_late), wm_in, spec)
        accepted = events.filter(pc.invert(is_late))
        stats["late"] = late.num_rows
        if accepted.num_rows:
            seq = accepted.column(SEQ) if SEQ in accepted.column_names else None
            arrival = np.arange(accepted.num_rows) if seq is None or seq.null_count else seq.to_numpy()
            key_rank = _rank(accepted.column(spec.key))
            order = np.lexsort((arrival, accepted.column(ET).to_numpy(), key_rank))
            batch = _events_for_fn(accepted.take(pa.array(order)), spec)
            out = _call(spec.on_events, ctx, batch, spec, old_out)
            if out is not None:
                outputs.append(out)

    if spec.on_timer is not None:
        ctx.input_watermark = new_in
        end = new_in >= MAX_WATERMARK
        due: list[tuple[TimeDomain, int]] = [("event_time", new_in),
                                             ("processing_time", MAX_WATERMARK if end else now_ms)]
        for domain, until in due:
            rounds = 0
            while (fired := _due_round(timer_table.table, domain, until, spec.key)) is not None:
                rounds += 1
                if rounds > MAX_ROUNDS:
                    raise ProcessFunctionError(
                        f"step {spec.step!r}: {spec.fn_name(spec.on_timer)} kept setting due {domain} "
                        f"timers for {MAX_ROUNDS} rounds in one epoch (a timer loop?)")
                # a fired timer is removed before on_timer runs, so on_timer may set it again
                timer_table.remove([fired.column(c).combine_chunks() for c in (spec.key, K.DOMAIN, K.TAG)])
                stats["timers_fired"] += fired.num_rows
                out = _call(spec.on_timer, ctx, fired, spec, old_out)
                if out is not None:
                    outputs.append(out)

    pending = timer_table.table
    hold = pc.min(pending.column(K.OUTPUT_TIME)).as_py() if pending.num_rows else None
    new_out = OW.output_watermark(old_out, new_in, hold)
    for name, table in tables.items():
        if table.dirty:
            segments.replace(_bucket(spec, name), table.table if table.table.num_rows else None)
    if timer_table.dirty:
        segments.replace(TIMERS_BUCKET, pending if pending.num_rows else None)
    result = pa.concat_tables(outputs) if outputs else spec.output.empty_table()
    stats["outputs"] = result.num_rows
    stats["pending_timers"] = pending.num_rows
    return EpochResult(result, late, new_out, stats)


def _rank(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Dense rank of each value in ascending order (nulls last); equal values, equal rank."""
    ranks: np.ndarray = pc.rank(values, sort_keys="ascending", tiebreaker="dense").to_numpy()
    return ranks


def declared_states(states: Mapping[str, StateSpec] | None) -> tuple[tuple[str, StateSpec], ...]:
    """The declared states as ``(name, spec)`` sorted by name (the order of their buckets)."""
    return tuple(sorted((states or {}).items()))
