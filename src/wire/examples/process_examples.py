"""Two keyed process functions (``Stream.process``), run by the test suite.

Both are vectorized: one call per key group per epoch handles all its keys' events
with Arrow / numpy, and every state and timer call takes arrays of keys.

Deduplication within a time bound (:class:`Dedupe`)::

    fn = Dedupe(within_ms=10_000)
    out = events.process(fn.on_events, on_timer=fn.on_timer, schema=fn.schema(events_schema),
                         state=fn.state, name="dedupe")

An event is dropped when an event of its key was seen (kept or dropped) less than
``within_ms`` of event time before it: ``event_time - last_seen < within_ms``, where
``last_seen`` is the latest event time of the key processed before it (events are
processed in (event time, arrival) order within an epoch, epochs in order). The kept
events leave unchanged (their columns and event time). State: the key's
``last_seen`` (value state), cleared by an event-time timer at ``last_seen +
within_ms``; after it no event of the key can be a duplicate anyway (an on-time event
has ``event_time >= watermark``).

Alert on three events within a minute (:class:`BurstAlert`)::

    fn = BurstAlert(count=3, within_ms=60_000)
    alerts = events.process(fn.on_events, on_timer=fn.on_timer, schema=fn.schema(key_type),
                            state=fn.state, name="bursts")

An alert row ``(key, event_time, first_event_time)`` is emitted for every event whose
key's previous ``count - 1`` events (in processing order) started less than
``within_ms`` before it: ``event_time - first_event_time < within_ms``. State: the
key's last ``count - 1`` event times (list state), cleared by an event-time timer at
``max(times) + within_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wire.state.keyed_state import StateSpec, list_state, value_state
from wire.state.process import ProcessContext

EXPIRE = "expire"


def _key_starts(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """True where a row's key differs from the previous row's (rows sorted by key)."""
    n = len(keys)
    first = np.ones(n, bool)
    if n > 1:
        same = pc.fill_null(pc.equal(keys[1:], keys[:-1]), False)
        first[1:] = ~np.asarray(same.to_numpy(zero_copy_only=False), bool)
    return first


def _max_per_key(keys: pa.Array | pa.ChunkedArray, times: np.ndarray) -> pa.Table:
    """``(key, time)``: each key's largest time."""
    t = pa.table({"key": keys, "time": pa.array(times, pa.int64())})
    return t.group_by("key").aggregate([("time", "max")]).rename_columns(["key", "time"])


@dataclass(frozen=True)
class Dedupe:
    """Drop an event whose key was seen less than ``within_ms`` of event time before."""

    within_ms: int
    state: dict[str, StateSpec] = field(default_factory=lambda: {"last_seen": value_state(pa.int64())})

    @staticmethod
    def schema(events: pa.Schema) -> pa.Schema:
        """Output columns: the input events' columns, with ``event_time`` (int64 ms)."""
        return pa.schema([*(f for f in events if f.name != "event_time"), pa.field("event_time", pa.int64())])

    def on_events(self, ctx: ProcessContext, events: pa.Table) -> pa.Table:
        """Keep the events no earlier event of their key shadows; reset the keys' expiry timers."""
        keys = events.column(ctx.key)
        t = events.column("event_time").to_numpy()
        seen = ctx.value_state("last_seen")
        stored = seen.get(keys)
        has_stored = np.asarray(pc.is_valid(stored).to_numpy(zero_copy_only=False), bool)
        s = np.asarray(pc.fill_null(stored, 0).to_numpy(zero_copy_only=False), np.int64)
        first = _key_starts(keys)
        prev_t = np.concatenate([[0], t[:-1]]).astype(np.int64)
        # latest event time seen before row i: the stored value and, within the epoch, the
        # previous row of the same key (rows are sorted by key, then event time)
        has_prev = has_stored | ~first
        prev = np.where(first, s, np.where(has_stored, np.maximum(s, prev_t), prev_t))
        dup = has_prev & (t - prev < self.within_ms)
        latest = _max_per_key(keys, t)
        old = seen.get(latest.column("key"))
        newest = pc.max_element_wise(latest.column("time"), old, skip_nulls=True)
        seen.update(latest.column("key"), newest)
        ctx.timers.set_event_time(latest.column("key"), pc.add(newest, self.within_ms), tag=EXPIRE)
        return events.filter(pa.array(~dup))

    def on_timer(self, ctx: ProcessContext, fired: pa.Table) -> None:
        """Forget the keys whose last event is ``within_ms`` behind the watermark."""
        ctx.value_state("last_seen").clear(fired.column(ctx.key))


@dataclass(frozen=True)
class BurstAlert:
    """Alert when a key sends ``count`` events within ``within_ms`` of event time."""

    count: int = 3
    within_ms: int = 60_000
    state: dict[str, StateSpec] = field(default_factory=lambda: {"recent": list_state(pa.int64())})

    @staticmethod
    def schema(key: str, key_type: pa.DataType) -> pa.Schema:
        """Output columns: the key, ``event_time`` and ``first_event_time`` (int64 ms)."""
        return pa.schema([pa.field(key, key_type), pa.field("event_time", pa.int64()),
                          pa.field("first_event_time", pa.int64())])

    def on_events(self, ctx: ProcessContext, events: pa.Table) -> pa.Table:
        """Emit an alert per event that completes a burst; keep each key's last ``count - 1`` times."""
        keys = events.column(ctx.key).combine_chunks()
        recent = ctx.list_state("recent")
        distinct = pc.unique(keys)
        prior = recent.get(distinct)  # each key's stored times, oldest first
        prior_keys = distinct.take(pc.list_parent_indices(prior))
        # the stored times, then the epoch's events, per key in processing order
        seq = pa.table({
            "k": pa.concat_arrays([prior_keys, keys]),
            "t": pa.concat_arrays([pc.list_flatten(prior), events.column("event_time").combine_chunks()]),
            "new": pa.array(np.r_[np.zeros(len(prior_keys), bool), np.ones(len(keys), bool)]),
            "i": pa.array(np.arange(len(prior_keys) + len(keys))),
        }).sort_by([("k", "ascending"), ("i", "ascending")])
        k, t = seq.column("k"), seq.column("t").to_numpy()
        starts = np.flatnonzero(_key_starts(k))
        rank = np.arange(len(t)) - np.repeat(starts, np.diff(np.r_[starts, len(t)]))
        back = self.count - 1
        lag = np.arange(len(t)) - back
        ok = seq.column("new").to_numpy(zero_copy_only=False) & (rank >= back)
        first_t = np.where(ok, t[np.maximum(lag, 0)], 0)
        alert = ok & (t - first_t < self.within_ms)
        # keep each key's last count - 1 times
        size = np.repeat(np.diff(np.r_[starts, len(t)]), np.diff(np.r_[starts, len(t)]))
        tail = rank >= size - back
        recent.clear(distinct)
        recent.append(k.filter(pa.array(tail)), pa.array(t[tail]))
        latest = _max_per_key(k.filter(pa.array(tail)), t[tail])
        ctx.timers.set_event_time(latest.column("key"), pc.add(latest.column("time"), self.within_ms),
                                  tag=EXPIRE)
        mask = pa.array(alert)
        return pa.table({ctx.key: k.filter(mask), "event_time": pa.array(t[alert], pa.int64()),
                         "first_event_time": pa.array(first_t[alert], pa.int64())})

    def on_timer(self, ctx: ProcessContext, fired: pa.Table) -> None:
        """Forget the keys whose last burst candidate is out of reach."""
        ctx.list_state("recent").clear(fired.column(ctx.key))
