"""Split one epoch's envelope rows into per-port Arrow tables (runs on the driver)."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from wire.core.envelope import (
    BLOB,
    ENVELOPE_COLUMNS,
    KIND,
    KIND_DATA,
    KIND_SIDE,
    METRICS_PORT,
    PORT,
    decode_table,
)


def split_ports(table: pa.Table, main_port: str) -> tuple[dict[str, pa.Table], pa.Table | None]:
    """Split an epoch's rows by port.

    Returns ``(ports, metrics)``: ``ports`` maps a port id (``"<step>.<port>"``) to
    its rows (data rows of the chain's terminal step under ``main_port``, side
    tables decoded and concatenated); ``metrics`` is the epoch's metric records
    (schema :data:`wire.core.envelope.METRICS_SCHEMA`) or None. Watermark rows
    are dropped here: they never reach a sink (SPEC §2).
    """
    kind = table.column(KIND)
    data = table.filter(pc.equal(kind, KIND_DATA))
    ports: dict[str, pa.Table] = {
        main_port: data.drop_columns([c for c in ENVELOPE_COLUMNS if c in data.column_names])
    }
    side = table.filter(pc.equal(kind, KIND_SIDE)).select([PORT, BLOB])
    pieces: dict[str, list[pa.Table]] = defaultdict(list)
    for port, blob in zip(
        side.column(PORT).to_pylist(), side.column(BLOB).to_pylist(), strict=True
    ):
        pieces[port].append(decode_table(blob))
    metrics = None
    for port, tables in pieces.items():
        merged = pa.concat_tables(tables, promote_options="permissive")
        if port == METRICS_PORT:
            metrics = merged
        else:
            ports[port] = merged
    return ports, metrics
