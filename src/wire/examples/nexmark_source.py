"""The Nexmark events as a bounded Wire source (:func:`nexmark`, the ``wire_nexmark`` data source).

The events, their model and :data:`SCHEMA` are in :mod:`wire.examples.nexmark_events`; this
module admits id ranges per epoch, computes the watermark and generates each range in the
source's tasks (only the columns the flow reads, the compiler's column pruning), with the
flow's pushed filters and a fused pre-stage applied there (capabilities ``predicate`` and
``pre_stage``).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from wire.core import envelope
from wire.core.arrow_types import spark_schema
from wire.core.control_file import is_paused
from wire.core.envelope import ENVELOPE_ARROW
from wire.core.predicate import keep
from wire.core.time import NO_WATERMARK
from wire.errors import ConfigError
from wire.examples.nexmark_events import SCHEMA, event_times, generate
from wire.sources.base.epoch_sizing import EpochSizer
from wire.sources.base.source import (
    Capability,
    ConfigDataSource,
    Offset,
    ReadRequest,
    check_columns,
    open_stream,
    resume_options,
    schema_from_b64,
    select_columns,
    spark_row_schema,
    spark_struct,
    unpickle_b64,
)

DATA_SOURCE_NAME = "wire_nexmark"


@dataclass(frozen=True)
class NexmarkSource:
    """A bounded source of ``events`` Nexmark events (their model: :mod:`wire.examples.nexmark_events`).

    Offsets are ``{"next", "max_event_time", "watermark", "ended"}``: events
    ``[0, next)`` are admitted; the watermark (``max_event_time - max_delay_ms``,
    never decreasing) is recorded in each offset, so a replay sees the same watermark.
    Each epoch admits at most ``max_events_per_epoch`` events, split into
    ``partitions`` contiguous id ranges (one Spark task each). The epoch that admits
    the last event carries :data:`wire.core.envelope.MAX_WATERMARK` and says ``ended``
    (no epoch of its own for the end of input; an input of no events ends with an
    empty epoch).
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {"columns", "target_epoch_ms", "resume", "replay", "predicate", "pre_stage"})

    events: int
    first_event_rate: int = 10_000
    seed: int = 1
    out_of_order_ms: int = 0
    partitions: int = 1
    pace: int | None = None
    """Events per second of processing time that become available (None: all at once).

    Paced, event ``i`` becomes available ``i / pace`` seconds after the first epoch is
    planned, and an epoch admits only available events (for latency benchmarks)."""
    bounded: bool = True

    def resolve_schema(self) -> pa.Schema:
        """The flat Nexmark schema :data:`SCHEMA`."""
        return SCHEMA

    def total_records(self) -> int:
        """The records this source admits in all: ``events`` (for the console's progress bar)."""
        return self.events

    def generate(
        self, start: int = 0, stop: int | None = None, columns: tuple[str, ...] | None = None
    ) -> pa.Table:
        """Return this source's events ``start..stop-1`` (default: all); ``columns`` as :func:`generate`."""
        return generate(start, self.events if stop is None else stop, seed=self.seed,
                        first_event_rate=self.first_event_rate, out_of_order_ms=self.out_of_order_ms,
                        columns=columns)

    def to_json(self, **binding: Any) -> str:
        """Serialize for the data source's options."""
        return json.dumps(
            {
                "events": self.events,
                "first_event_rate": self.first_event_rate,
                "seed": self.seed,
                "out_of_order_ms": self.out_of_order_ms,
                "partitions": self.partitions,
                "pace": self.pace,
                **binding,
            }
        )

    def read_stream(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        """The envelope DataFrame of the generated events (``resume``: :func:`wire.sources.base.resumable`).

        ``request.columns`` (None: all): the payload columns to produce, in :data:`SCHEMA`
        order; only those are generated (plus the event-time column, for ``__et``).
        ``request.target_epoch_ms`` (None: off): epoch sizing (:mod:`wire.sources.base.epoch_sizing`).
        Of the watermark policy only ``max_delay_ms`` is used: generated event times are not
        compared with processing time (no ``max_future``), and the generator never idles.

        Raises
        ------
        ConfigError
            When ``columns`` names a column that :data:`SCHEMA` does not have.
        """
        r = request
        config = self.to_json(
            step=r.step, event_time=r.event_time, key_groups=r.key_groups,
            max_delay_ms=r.watermark.max_delay_ms, max_events_per_epoch=r.max_events_per_epoch,
            control_file=None if r.control_file is None else str(r.control_file),
            columns=check_columns(r.step, SCHEMA, r.columns), target_epoch_ms=r.target_epoch_ms,
            predicate=r.predicate, pre_stage=r.pre_stage, pre_stage_schema=r.pre_stage_schema,
        )
        return open_stream(spark, NexmarkDataSource, config=config, **resume_options(r.resume))


def nexmark(
    *, events: int, first_event_rate: int = 10_000, seed: int = 1, out_of_order_ms: int = 0,
    partitions: int = 1, pace: int | None = None,
) -> NexmarkSource:
    """Return a bounded Nexmark source of ``events`` events (see :mod:`wire.examples.nexmark_source`).

    ``pace`` (events per second of processing time, None: unpaced) makes event ``i``
    available ``i / pace`` s after the first epoch is planned; the start time (ms since
    the Unix epoch) is recorded in the offsets as ``started_at_ms``, so a replay admits
    the same ranges.

    Raises
    ------
    ConfigError
        On a negative count, non-positive rate, pace or partitions, negative disorder.
    """
    if pace is not None and (isinstance(pace, bool) or not isinstance(pace, int) or pace < 1):
        raise ConfigError("pace", pace, "None or an int >= 1 (events per second)")
    for name, value, low in (("events", events, 0), ("first_event_rate", first_event_rate, 1),
                             ("out_of_order_ms", out_of_order_ms, 0), ("partitions", partitions, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(name, value, f"an int >= {low}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("seed", seed, "an int")
    return NexmarkSource(events, first_event_rate, seed, out_of_order_ms, partitions, pace)


class _Config:
    def __init__(self, text: str) -> None:
        d = json.loads(text)
        self.source = NexmarkSource(d["events"], d["first_event_rate"], d["seed"],
                                    d["out_of_order_ms"], d["partitions"], d.get("pace"))
        self.step: str = d["step"]
        self.event_time: str = d["event_time"]
        self.key_groups: int = d["key_groups"]
        self.max_delay_ms: int = d["max_delay_ms"]
        self.max_events_per_epoch: int = d["max_events_per_epoch"]
        self.control_file: str | None = d["control_file"]
        self.target_epoch_ms: int | None = d.get("target_epoch_ms")
        columns = d.get("columns")
        self.columns: tuple[str, ...] | None = None if columns is None else tuple(columns)
        self.output_schema = select_columns(SCHEMA, self.columns)
        """The payload columns produced."""
        self.row_schema = spark_row_schema(self.output_schema)
        self.predicate: list[Any] | None = d.get("predicate")
        """Events the tasks drop (``ReadRequest.predicate``): those it is not true on."""
        self.pre_stage: str | None = d.get("pre_stage")
        """The pickled stage the tasks run on their rows (``ReadRequest.pre_stage``, fusion)."""
        self.pre_stage_schema: str | None = d.get("pre_stage_schema")

    def dataframe_schema(self) -> StructType:
        """The source's rows in Spark: payload + envelope, or the pre-stage's rows (as :class:`Binding`)."""
        if self.pre_stage is None:
            return spark_struct(self.output_schema)
        rows = ENVELOPE_ARROW if self.pre_stage_schema is None else schema_from_b64(self.pre_stage_schema)
        return spark_schema(rows)


class _Range(InputPartition):
    def __init__(
        self, lo: int, hi: int, w0: int, w1: int, control: dict[str, int] | None, last: bool
    ) -> None:
        super().__init__(None)
        self.lo, self.hi, self.w0, self.w1, self.control, self.last = lo, hi, w0, w1, control, last


class NexmarkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Admits id ranges per epoch; the watermark is computed here and kept in the offset."""

    def __init__(self, config: _Config) -> None:
        self.c = config
        self._sizer = EpochSizer(config.max_events_per_epoch, config.target_epoch_ms)

    def initialOffset(self) -> Offset:
        """Nothing read yet."""
        return {"next": 0, "max_event_time": None, "watermark": NO_WATERMARK, "ended": False}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(max_events_per_epoch)``."""
        return ReadMaxRows(self.c.max_events_per_epoch)

    def prepareForTriggerAvailableNow(self) -> None:
        """The input is fixed: nothing to record."""

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        """Admit the next events (at most the limit), or end once all are admitted."""
        now = time.monotonic() * 1000
        sized = self._sizer.budget(now)  # first: the time since the last call is an epoch's
        if start["ended"] or is_paused(self.c.control_file, self.c.step):
            return start
        n = int(start["next"])
        total = self.c.source.events
        if n >= total:
            return dict(start, ended=True, watermark=envelope.MAX_WATERMARK)
        budget = self.c.max_events_per_epoch
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            budget = total - n
        budget = min(int(budget), sized)
        hi = min(total, n + max(budget, 1))
        s = self.c.source
        started = start.get("started_at_ms")
        if s.pace is not None:
            now_ms = int(time.time() * 1000)
            started = now_ms if started is None else int(started)
            hi = min(hi, (now_ms - started) * s.pace // 1000)
            if hi <= n:
                return dict(start, started_at_ms=started)
        self._sizer.admitted(now, hi - n, budget)
        seen = int(event_times(n, hi, seed=s.seed, first_event_rate=s.first_event_rate,
                               out_of_order_ms=s.out_of_order_ms).max())
        prev = start["max_event_time"]
        max_et = seen if prev is None else max(int(prev), seen)
        ended = hi == total  # the last events: their epoch carries the final watermark
        watermark = (envelope.MAX_WATERMARK if ended
                     else max(int(start["watermark"]), max_et - self.c.max_delay_ms))
        return {"next": hi, "max_event_time": max_et, "watermark": watermark, "ended": ended,
                "started_at_ms": started}

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        """Split ``(start, end]`` into at most ``partitions`` contiguous id ranges."""
        if start == end:
            return []
        w0, w1 = int(start["watermark"]), int(end["watermark"])
        lo, hi = int(start["next"]), int(end["next"])
        if end["ended"] and lo == hi:
            return [_Range(lo, lo, w0, w1, None, True)]
        if lo == hi:  # a paced source's first offset only starts its clock
            return []
        k = max(1, min(self.c.source.partitions, hi - lo))
        bounds = [lo + (hi - lo) * j // k for j in range(k + 1)]
        control = {"records": hi - lo, "events": hi - lo, "malformed": 0,
                   "gauge:watermark": w1, "gauge:max_event_time": int(end["max_event_time"])}
        return [_Range(a, b, w0, w1, control if j == 0 else None, j == 0)
                for j, (a, b) in enumerate(itertools.pairwise(bounds))]

    def commit(self, end: Offset) -> None:
        """Nothing to acknowledge: the input is generated."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's events as envelope data rows; the first task adds the control rows.

        With a predicate, only the events it is true on (the ``events`` metric counts them
        all); with a pre-stage (fusion), the stage's rows of all these.
        """
        assert isinstance(partition, _Range)
        rows = self._rows(partition)
        return rows if self.c.pre_stage is None else unpickle_b64(self.c.pre_stage)(rows)

    def _rows(self, p: _Range) -> Iterator[pa.RecordBatch]:
        c, schema = self.c, self.c.row_schema
        if p.hi > p.lo:
            wanted = None if c.columns is None else tuple({*c.columns, c.event_time})
            events = c.source.generate(p.lo, p.hi, wanted)
            seq = pa.array(np.arange(p.lo, p.hi, dtype=np.int64))
            if c.predicate is not None:  # the flow's filters, pushed down (wire.compiler.pushdown)
                kept = keep(events, c.predicate)
                events, seq = events.filter(kept), seq.filter(kept)
            n = events.num_rows
            cols: dict[str, pa.Array] = {
                f.name: events.column(f.name).combine_chunks().cast(schema.field(f.name).type)
                for f in c.output_schema
            }
            cols[envelope.KIND] = pa.array(np.zeros(n, np.int32))
            cols[envelope.ET] = events.column(c.event_time).combine_chunks().cast(pa.int64())
            cols[envelope.WM] = pa.array(np.full(n, p.w0, np.int64))
            cols[envelope.SEQ] = seq
            batch = envelope.envelope_batch(schema, cols, n)
            step = 65_536
            for off in range(0, n, step):
                yield batch.slice(off, step)
        if p.control:
            yield envelope.side_batch(schema, envelope.METRICS_PORT,
                                      envelope.metrics_table(c.step, p.control))
        if p.last:
            yield envelope.watermark_batch(schema, p.w1, range(c.key_groups))


class NexmarkDataSource(ConfigDataSource):
    """Spark Python data source ``wire_nexmark``; option ``config``: the generator and the step's settings."""

    format_name = DATA_SOURCE_NAME
    option = "config"
    config_class = _Config
    reader_class = NexmarkStreamReader
