"""Decode once, locally: the Kafka planner hands each epoch's decoded records to the executors.

The planner's read-ahead (:class:`~wire.sources.kafka_source.read_ahead.ReadAhead`)
consumes and decodes every record it admits: it needs the event times for the
watermark. With a local master (:mod:`wire.sources.base.handoff`) it keeps the decoded
columns too, and when an epoch admits a partition's range ``[first, next)`` the planner
writes that range as one hand-over file (:func:`encode`). The epoch's task for that range
memory-maps it (:func:`decode`) instead of fetching the range from the broker and
decoding it again.

The file is named by the partition, the range and its record count
(:func:`handoff_name`). A Kafka partition's records in an offset range never change (an
aborted transaction's records are left out by a ``read_committed`` consumer every time),
so the file holds exactly what the executor's own read of the range would give: the same
rows, event times, dead letters (location, reason, value) and record texts. When there is
no file, the executor fetches and decodes as before.

File layout: one row per record of the range, in offset order: ``__wire_offset``
(int64), ``__wire_value`` (binary: the value as consumed), ``__wire_valid`` (bool: it
decoded, with a usable event time), ``__wire_event_time`` (int64 ms, 0 where not valid),
then the source's output columns (null where not valid); the schema's metadata holds the
range and each malformed record's reason.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa

from wire.sources.base.partitioned import Read
from wire.sources.base.source import Decoded
from wire.sources.kafka_source.decode import record_text
from wire.sources.kafka_source.read_ahead import Ahead

__all__ = ["decode", "encode", "handoff_name"]

_OFFSET, _VALUE, _VALID, _EVENT_TIME = "__wire_offset", "__wire_value", "__wire_valid", "__wire_event_time"
_META = b"wire.kafka.range"


def handoff_name(name: str, first: int, next: int, taken: int) -> str:
    """The hand-over file of partition ``name``'s ``taken`` records in ``[first, next)``."""
    return hashlib.sha256(json.dumps([name, first, next, taken]).encode()).hexdigest()[:40] + ".arrow"


def encode(name: str, first: int, next: int, ahead: Ahead) -> pa.Table:
    """The hand-over table of ``ahead`` (kept records: :attr:`Ahead.kept`), the range ``[first, next)``."""
    assert ahead.rows is not None and ahead.values is not None and ahead.reasons is not None
    n = len(ahead)
    rows = ahead.rows
    if rows.num_rows != n:  # malformed records: null rows where they are
        index = np.full(n, -1, np.int64)
        index[ahead.valid] = np.arange(rows.num_rows)
        rows = rows.take(pa.array(index, mask=index < 0))
    reasons = [[o, ahead.reasons[o]] for o in ahead.offsets[~ahead.valid].tolist()]
    meta = {"name": name, "first": first, "next": next, "taken": n, "reasons": reasons}
    table = pa.table({
        _OFFSET: pa.array(ahead.offsets, pa.int64()),
        _VALUE: pa.array(ahead.values, pa.binary()),
        _VALID: pa.array(ahead.valid, pa.bool_()),
        _EVENT_TIME: pa.array(np.where(ahead.valid, ahead.event_times, 0), pa.int64()),
    })
    for i, field in enumerate(rows.schema):
        table = table.append_column(field, rows.column(i))
    return table.replace_schema_metadata({_META: json.dumps(meta).encode()})


def decode(table: pa.Table | None, name: str, first: int, next: int, taken: int) -> Read | None:
    """The :class:`Read` of a hand-over table, as the executor's own read of the range gives it.

    None when there is no table, or it is not this range's (then the executor fetches
    the range itself).
    """
    if table is None:
        return None
    try:
        meta = json.loads((table.schema.metadata or {})[_META])
        if [meta["name"], meta["first"], meta["next"], meta["taken"]] != [name, first, next, taken]:
            return None
        if table.num_rows != taken:
            return None
        valid = table.column(_VALID).to_numpy(zero_copy_only=False).astype(bool)
        event_times = table.column(_EVENT_TIME).to_numpy()
        offsets = table.column(_OFFSET).to_numpy()
        values = table.column(_VALUE)
        rows = table.drop_columns([_OFFSET, _VALUE, _VALID, _EVENT_TIME])
        reasons = {int(o): str(r) for o, r in meta["reasons"]}
    except (KeyError, ValueError, TypeError, pa.ArrowException):
        return None
    if not valid.all():
        rows = rows.filter(pa.array(valid))
    rows = rows.replace_schema_metadata(None)

    def text(i: int) -> str:
        return record_text(values[i].as_py())

    dead = [(f"{name}:{int(offsets[i])}", reasons.get(int(offsets[i]), "malformed"), text(i))
            for i in np.flatnonzero(~valid).tolist()]
    decoded = Decoded(rows, event_times[valid].astype(np.int64, copy=False),
                      np.flatnonzero(valid).astype(np.int64), dead)

    def records(positions: list[int]) -> list[tuple[str, str]]:
        return [(f"{name}:{int(offsets[i])}", text(i)) for i in positions]

    nxt = int(offsets[-1]) + 1 if taken else first
    return Read(decoded, taken, nxt, records)
