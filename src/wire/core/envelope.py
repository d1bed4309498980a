"""The envelope: control columns that travel with every row inside a compiled flow.

A compiled flow is one chain of Spark DataFrames. Besides the user's payload columns
each row carries these envelope columns (SPEC §2: watermarks travel with the data):

==========  =======  ==========================================================
column      type     meaning
==========  =======  ==========================================================
``__kind``  int32    0 = data event, 1 = watermark record, 2 = side-output record
``__et``    int64    data rows: the event time, ms since the Unix epoch (UTC)
``__wm``    int64    data rows: the watermark in force when the row arrived (the
                     epoch's start watermark, ms); watermark rows: the new
                     watermark at the end of the epoch (ms)
``__kg``    int32    watermark rows: the key group the record is addressed to;
                     data rows: their key group once a keyed operator assigned it
``__port``  string   side rows: the port id, e.g. ``"flights.dead_letter"``
``__blob``  binary   side rows: one Arrow table in IPC stream format
``__seq``   int64    data rows: arrival sequence number, increasing in arrival
                     order within a source (ties in event time are broken by it,
                     SPEC §1); null where unknown
==========  =======  ==========================================================

Watermark and side rows have null payload columns. Watermark rows never reach a
sink; side rows are unpacked into their port's table on the driver. Side outputs
are carried as Arrow IPC blobs so that ports with different schemas (late events,
dead letters, metrics) share the one Spark query of a flow (SPEC §6).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from wire.core.time import MAX_WATERMARK as MAX_WATERMARK  # re-exported: envelope.MAX_WATERMARK
from wire.core.time import NO_WATERMARK as NO_WATERMARK

KIND = "__kind"
ET = "__et"
WM = "__wm"
KG = "__kg"
PORT = "__port"
BLOB = "__blob"
SEQ = "__seq"

KIND_DATA = 0
KIND_WATERMARK = 1
KIND_SIDE = 2

ENVELOPE_COLUMNS: tuple[str, ...] = (KIND, ET, WM, KG, PORT, BLOB, SEQ)

ENVELOPE_ARROW = pa.schema(
    [
        pa.field(KIND, pa.int32(), nullable=False),
        pa.field(ET, pa.int64()),
        pa.field(WM, pa.int64()),
        pa.field(KG, pa.int32()),
        pa.field(PORT, pa.string()),
        pa.field(BLOB, pa.binary()),
        pa.field(SEQ, pa.int64()),
    ]
)

METRICS_PORT = "__metrics"
METRICS_SCHEMA = pa.schema(
    [pa.field("step", pa.string()), pa.field("name", pa.string()), pa.field("value", pa.int64())]
)
"""Schema of metric side records: per step, a named counter increment for the epoch."""

DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("step", pa.string()),
        pa.field("location", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("record", pa.string()),
    ]
)
"""Schema of dead-letter records: the step that rejected the record, where it came from
(e.g. ``"data/f1.csv:17"``, 1-based line), why, and the raw record as text."""

def with_envelope(payload: pa.Schema) -> pa.Schema:
    """Return ``payload`` followed by the envelope columns (the row format of a compiled flow)."""
    clash = [n for n in payload.names if n in ENVELOPE_COLUMNS]
    if clash:
        raise ValueError(f"payload columns {clash} clash with Wire's envelope columns")
    return pa.schema(list(payload) + list(ENVELOPE_ARROW))


def encode_table(table: pa.Table) -> bytes:
    """Serialize a table as Arrow IPC stream bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def decode_table(blob: bytes) -> pa.Table:
    """Inverse of :func:`encode_table`."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def envelope_batch(schema: pa.Schema, columns: dict[str, pa.Array], n: int) -> pa.RecordBatch:
    """A batch of ``n`` rows in ``schema``: the given columns, nulls for the others."""
    arrays = [
        columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def side_batch(
    schema: pa.Schema, port: str, table: pa.Table, *, key_group: int | None = None
) -> pa.RecordBatch:
    """One side-output row addressed to ``port`` carrying ``table``, in the flow's ``schema``.

    ``schema`` is the full row schema (payload + envelope) of the stage emitting it.
    Before a keyed stage side rows need a ``key_group`` (any valid group, e.g. 0) so
    that they pass through it.
    """
    return envelope_batch(
        schema,
        {
            KIND: pa.array([KIND_SIDE], pa.int32()),
            KG: pa.array([key_group], pa.int32()),
            PORT: pa.array([port], pa.string()),
            BLOB: pa.array([encode_table(table)], pa.binary()),
        },
        1,
    )


def data_batch(
    schema: pa.Schema, payload: pa.Table, columns: Sequence[str], event_times: np.ndarray,
    watermark: int, seqs: np.ndarray,
) -> pa.RecordBatch:
    """A source's data rows in its row ``schema``.

    ``columns`` of ``payload`` cast to their types in ``schema``, then ``__et`` (the event
    times, ms), ``__wm`` (``watermark``: the epoch's start watermark, ms) and ``__seq``
    (arrival sequence numbers); one row per row of ``payload``.
    """
    n = payload.num_rows
    cols = {name: payload.column(name).combine_chunks().cast(schema.field(name).type) for name in columns}
    cols[KIND] = pa.array(np.zeros(n, np.int32))
    cols[ET] = pa.array(event_times, pa.int64())
    cols[WM] = pa.array(np.full(n, watermark, np.int64))
    cols[SEQ] = pa.array(seqs, pa.int64())
    return envelope_batch(schema, cols, n)


def dead_letter_batch(schema: pa.Schema, step: str, dead: Sequence[tuple[str, str, str]]) -> pa.RecordBatch:
    """One side row of port ``"<step>.dead_letter"``, in the source's row ``schema``.

    It carries one :data:`DEAD_LETTER_SCHEMA` row per ``(location, reason, record)`` of ``dead``.
    """
    table = pa.table(
        {
            "step": [step] * len(dead),
            "location": [d[0] for d in dead],
            "reason": [d[1] for d in dead],
            "record": [d[2] for d in dead],
        },
        schema=DEAD_LETTER_SCHEMA,
    )
    return side_batch(schema, f"{step}.dead_letter", table)


def watermark_batch(schema: pa.Schema, watermark: int, key_groups: Iterable[int]) -> pa.RecordBatch:
    """Watermark rows, one per key group, all carrying ``watermark`` (ms)."""
    groups = list(key_groups)
    n = len(groups)
    return envelope_batch(
        schema,
        {
            KIND: pa.array([KIND_WATERMARK] * n, pa.int32()),
            WM: pa.array([watermark] * n, pa.int64()),
            KG: pa.array(groups, pa.int32()),
        },
        n,
    )


def metrics_table(step: str, counters: dict[str, int]) -> pa.Table:
    """A metrics side table: one row per counter of ``step``."""
    names = sorted(counters)
    return pa.table(
        {
            "step": pa.array([step] * len(names), pa.string()),
            "name": pa.array(names, pa.string()),
            "value": pa.array([int(counters[k]) for k in names], pa.int64()),
        },
        schema=METRICS_SCHEMA,
    )
