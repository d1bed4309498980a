"""A fake Kafka broker and consumer for the Kafka reader's tests (no broker, no Spark).

The fake consumer hands out records the way librdkafka does in ways that matter here:
runs of one partition's records interleaved across partitions (run lengths drawn at
random), a partition-EOF event queued when a partition's records run out (it may reach a
later ``consume`` after the partition grew), offsets with gaps (transaction markers),
records deleted below a low watermark, timestamps, and paused partitions (no records, no
EOF events, what was queued for them dropped). Also: :func:`make_reader`, :func:`read_epoch`
(an epoch read as the executors do), the :func:`topics` strategy and the ``fresh_cache``
fixture (a test module imports it to use it).
"""

from __future__ import annotations

import json
import random
import threading
import time
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import strategies as st

pytest.importorskip("confluent_kafka")
import confluent_kafka
from confluent_kafka import KafkaError

from wire.core import envelope
from wire.core.watermarks import WatermarkPolicy
from wire.sources.kafka_source import consumers, read_ahead
from wire.sources.kafka_source.reader import KafkaStreamReader
from wire.sources.kafka_source.source import KafkaBinding, kafka

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string())])


DELAY = 10


class Msg:
    """A consumed record or an error event, with confluent-kafka's Message accessors."""

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None = None,
                 value: bytes | None = None, ts: int | None = None, error: KafkaError | None = None) -> None:
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value
        self._ts, self._e = ts, error

    def error(self) -> KafkaError | None:
        return self._e

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        return (0, -1) if self._ts is None else (1, self._ts)


class Broker:
    """Topic ``t``: per partition, records ``(offset, key, value, ts)`` (ascending) and an end offset."""

    def __init__(self, parts: dict[int, list[tuple[int, bytes | None, bytes | None, int | None]]],
                 ends: dict[int, int], seed: int = 0) -> None:
        self.parts, self.ends, self.low = parts, ends, dict.fromkeys(parts, 0)
        self.seed = seed
        self.consumers: list[Consumer] = []

    def consumer(self, conf: dict[str, Any] | None = None) -> Consumer:
        c = Consumer(self, random.Random(self.seed + len(self.consumers)))
        self.consumers.append(c)
        return c


class Consumer:
    """One client of :class:`Broker`: ``assign``ed partitions read from their positions, EOF events queued."""

    def __init__(self, broker: Broker, rng: random.Random) -> None:
        self.broker, self.rng = broker, rng
        self.lock = threading.Lock()  # the planner consumes in its read-ahead thread
        self.pos: dict[int, int] = {}
        self.eof: list[Msg] = []
        self.eof_at: dict[int, int] = {}
        self.closed = False
        self.assigns = 0
        self.paused: set[int] = set()  # as librdkafka: no records and no EOF events until resumed

    def assign(self, tps: list[Any]) -> None:
        with self.lock:
            self.assigns += 1
            self.pos = {tp.partition: max(tp.offset, self.broker.low[tp.partition]) for tp in tps}
            self.eof, self.eof_at = [], {}

    def pause(self, tps: list[Any]) -> None:
        with self.lock:  # what was queued for them is dropped, as librdkafka does
            parts = {tp.partition for tp in tps}
            self.paused |= parts
            self.eof = [m for m in self.eof if m.partition() not in parts]
            for p in parts:
                self.eof_at.pop(p, None)

    def resume(self, tps: list[Any]) -> None:
        with self.lock:
            self.paused -= {tp.partition for tp in tps}

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Msg]:
        with self.lock:
            out = self._consume(num_messages)
        if not out:
            time.sleep(0.002)  # as if waiting up to ``timeout`` for records
        return out

    def _consume(self, num_messages: int) -> list[Msg]:
        assert not self.closed
        out: list[Msg] = []
        while len(out) < num_messages:
            if self.eof:
                out.append(self.eof.pop(0))
                continue
            ready = [p for p in self.pos if p not in self.paused and self._next(p)]
            if not ready:  # every partition at its end: an EOF event for each not yet told
                for p in set(self.pos) - self.paused:
                    if self.eof_at.get(p) != self.broker.ends[p] and len(out) < num_messages:
                        self.eof_at[p] = self.broker.ends[p]
                        out.append(Msg("t", p, self.broker.ends[p],
                                       error=KafkaError(KafkaError._PARTITION_EOF)))
                break
            p = self.rng.choice(ready)
            for _ in range(self.rng.randint(1, 7)):
                recs = self._next(p)
                if not recs or len(out) >= num_messages:
                    break
                o, k, v, ts = recs[0]
                out.append(Msg("t", p, o, k, v, ts))
                self.pos[p] = o + 1
                if not self._next(p):  # the end reached: an EOF event queued at the end offset
                    self.eof_at[p] = self.broker.ends[p]
                    self.eof.append(Msg("t", p, self.broker.ends[p],
                                        error=KafkaError(KafkaError._PARTITION_EOF)))
        return out

    def _next(self, p: int) -> list[tuple[int, bytes | None, bytes | None, int | None]]:
        return [r for r in self.broker.parts[p] if r[0] >= self.pos[p] and r[0] >= self.broker.low[p]][:1]

    def get_watermark_offsets(self, tp: Any, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return self.broker.low[tp.partition], self.broker.ends[tp.partition]

    def list_topics(self, timeout: float | None = None) -> Any:
        parts = dict.fromkeys(self.broker.parts)
        return SimpleNamespace(topics={"t": SimpleNamespace(error=None, partitions=parts)})

    def committed(self, tps: list[Any], timeout: float | None = None) -> list[Any]:
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1001) for tp in tps]

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:
        pass

    def close(self) -> None:
        self.closed = True


READERS: list[KafkaStreamReader] = []


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    # the planner waits for records its read-ahead thread has not handed over yet for up to _GAP_S
    # without one arriving (then it plans with what it has): long here, so that a busy machine
    # cannot make a planning admit less than the fake broker holds
    monkeypatch.setattr(read_ahead, "GAP_S", 5.0)
    consumers.CONSUMERS.kept.clear()
    yield
    consumers.CONSUMERS.kept.clear()
    while READERS:
        READERS.pop().close()  # stops the planner's read-ahead thread


def make_reader(broker: Broker, monkeypatch, *, event_time: str = "t", per_epoch: int = 1_000,
                columns: tuple[str, ...] | None = None, bounded: bool = False,
                local: bool = False, watermark: WatermarkPolicy | None = None) -> KafkaStreamReader:
    src = kafka("127.0.0.1:1", "t", group="g", schema=SCHEMA, bounded=bounded)
    binding = KafkaBinding("src", src, src.resolve_schema(), event_time,
                           watermark=watermark or WatermarkPolicy(DELAY),
                           max_events_per_epoch=per_epoch, key_groups=1, columns=columns, local=local)
    r = KafkaStreamReader(binding, clock=lambda: 1_000_000)
    r._client = broker.consumer()
    monkeypatch.setattr(confluent_kafka, "Consumer", broker.consumer)
    READERS.append(r)
    return r


def read_epoch(r: KafkaStreamReader, start, end) -> tuple[list[tuple], list[tuple[str, str]]]:
    """An epoch read like the executors do: data rows (partition, offset, t, k) and dead letters."""
    rows, dead = [], []
    for task in r.partitions(start, end):
        for batch in r.read(task):
            for row in pa.Table.from_batches([batch]).to_pylist():
                if row["__kind"] == envelope.KIND_DATA:
                    rows.append((row.get("kafka_partition"), row.get("kafka_offset"), row["t"], row.get("k")))
                elif row["__kind"] == envelope.KIND_SIDE and row["__port"] != envelope.METRICS_PORT:
                    letters = envelope.decode_table(row["__blob"]).to_pylist()
                    dead += [(d["location"], d["reason"]) for d in letters]
    return rows, dead


POISON = [b"{broken", None, b'{"t": "soon", "k": "a"}', b"[1]", b'{"t": 5, "k": 3}']


@st.composite
def topics(draw) -> tuple[Broker, dict[tuple[int, int], tuple[int, str] | None]]:
    """1-3 partitions of 0-25 records (some malformed, some keys not UTF-8), offsets with gaps."""
    parts, ends, truth = {}, {}, {}
    for p in range(draw(st.integers(1, 3))):
        recs, o = [], 0
        for _ in range(draw(st.integers(0, 25))):
            o += draw(st.sampled_from([1, 1, 1, 2]))  # 2: a transaction marker before it
            kind = draw(st.integers(0, 9))
            t = draw(st.integers(0, 500))
            key = b"\xff" if kind == 9 else f"k{p}".encode()
            if kind < 8 or kind == 9:
                value = json.dumps({"t": t, "k": f"k{t % 3}"}).encode()
            else:
                value = draw(st.sampled_from(POISON))
            recs.append((o, key, value, 1_000 + o))
            truth[(p, o)] = (t, f"k{t % 3}") if kind < 8 else None
        parts[p] = recs
        ends[p] = o + draw(st.sampled_from([1, 1, 2]))  # a trailing marker sometimes
    return Broker(parts, ends, seed=draw(st.integers(0, 1000))), truth
