"""CPU time per epoch of the temporal join's kernel and state I/O, one key group, no Spark.

A synthetic case where the table lags: 10k table keys, 50k stream events per epoch over
10 s of event time, 2k table updates per epoch, the table watermark 100 s (10 epochs)
behind the stream's, so about 500k events wait; 20 epochs. Each epoch is timed with
``time.process_time`` around what the Spark processor does for the key group: decode
the state, run ``on_epoch``, encode the state it returns (the whole-table layout: the
``versions`` and ``pending`` tables; the chunked layout: the tables it keeps, and the
chunks it reads and writes through :class:`~wire.state.packed_chunks.PackedChunks` over
an Arrow-IPC store, as on a MapState). It also prints the state bytes read and written
per epoch: what the state store (RocksDB, its changelog) receives, which this CPU time
does not include.

It runs whichever ``wire`` is first on ``PYTHONPATH`` (the layout is detected), so the
same script measures before and after::

    PYTHONPATH=/work/main/src .venv/bin/python bench/temporal_join_state.py
    PYTHONPATH=src .venv/bin/python bench/temporal_join_state.py
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from wire.core.envelope import decode_table, encode_table
from wire.state import temporal_join as TJ

KEYS, EVENTS, UPDATES, EPOCHS = 10_000, 50_000, 2_000, 20
EPOCH_MS, LAG_MS = 10_000, 100_000
STREAM = pa.schema([("k", pa.string()), ("amount", pa.int64())])
TABLE = pa.schema([("k", pa.string()), ("rate", pa.float64())])
SPEC = TJ.TemporalJoinSpec("k", "k", ("amount",), ("rate",), how="left")


@dataclass
class IpcStore:
    """A chunk store keeping Arrow IPC bytes, like the ``segments`` MapState."""

    blobs: dict[tuple[int, int], bytes] = field(default_factory=dict)
    read_bytes: int = 0
    written_bytes: int = 0

    def get(self, bucket: int, chunk: int) -> pa.Table:
        blob = self.blobs[(bucket, chunk)]
        self.read_bytes += len(blob)
        return decode_table(blob)

    def put(self, bucket: int, chunk: int, table: pa.Table) -> None:
        blob = self.blobs[(bucket, chunk)] = encode_table(table)
        self.written_bytes += len(blob)

    def delete(self, bucket: int, chunk: int) -> None:
        self.blobs.pop((bucket, chunk), None)


def _keys(rng: np.random.Generator, n: int) -> pa.Array:
    return pa.array(np.char.add("k", rng.integers(0, KEYS, n).astype(str)))


def main() -> None:
    chunked = hasattr(TJ, "pending_events")
    kernel: Any = TJ.on_epoch  # either layout's signature
    rng = np.random.default_rng(0)
    tables: dict[str, bytes] = {}
    store = IpcStore()
    swm = twm = out = -(2**63)
    seq = 0
    print(f"layout: {'chunked' if chunked else 'whole tables'}; {sys.argv[0]}")
    print("epoch  cpu_ms  pending  versions  state_read_MB  state_written_MB")
    total = steady = 0.0
    for e in range(EPOCHS):
        lo = e * EPOCH_MS
        events = pa.table({"k": _keys(rng, EVENTS), "amount": pa.array(rng.integers(0, 100, EVENTS)),
                           "__et": pa.array(rng.integers(lo, lo + EPOCH_MS, EVENTS))})
        n = KEYS if e == 0 else UPDATES
        upd = pa.table({"k": pa.array([f"k{i}" for i in range(KEYS)]) if e == 0 else _keys(rng, n),
                        "rate": pa.array(rng.random(n)),
                        "__et": pa.array(rng.integers(lo, lo + EPOCH_MS, n)),
                        "__seq": pa.array(np.arange(seq, seq + n))})
        seq += n
        new_s, new_t = lo + EPOCH_MS, lo + EPOCH_MS - LAG_MS
        store.read_bytes = store.written_bytes = 0
        t0 = time.process_time()
        read = sum(len(b) for b in tables.values())
        state = {name: decode_table(blob) for name, blob in tables.items()}
        common: dict[str, Any] = dict(stream_wm=swm, new_stream_wm=new_s, table_wm=twm, new_table_wm=new_t,
                                      wm_out=out, spec=SPEC, stream_payload=STREAM, table_payload=TABLE)
        if chunked:
            from wire.state.packed_chunks import PackedChunks

            packed = PackedChunks(store)
            r = kernel(packed, state.get("__segments"), state.get("versions"), state.get("holds"),
                       [events], [upd], **common)
            packed.flush()
            kept = {"versions": r.versions, "holds": r.holds, "__segments": r.index}
        else:
            r = kernel(state.get("versions"), state.get("pending"), [events], [upd], **common)
            kept = {"versions": r.versions, "pending": r.pending}
        tables = {name: encode_table(t) for name, t in kept.items()}
        cpu = time.process_time() - t0
        written = sum(len(b) for b in tables.values()) + store.written_bytes
        total += cpu
        steady += cpu if e >= EPOCHS - 10 else 0.0
        swm, twm, out = new_s, new_t, r.wm_out
        print(f"{e:5d}  {cpu * 1000:6.0f}  {r.stats['gauge:pending']:7d}  {r.stats['gauge:versions']:8d}"
              f"  {(read + store.read_bytes) / 1e6:13.1f}  {written / 1e6:16.1f}")
    print(f"total {total:.2f} s CPU, mean {total / EPOCHS * 1000:.0f} ms per epoch; "
          f"last 10 epochs {steady * 100:.0f} ms per epoch")


if __name__ == "__main__":
    main()
