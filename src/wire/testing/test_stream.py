"""A scripted source for tests: events and watermark advances, one step per epoch.

In the style of Beam's ``TestStream`` (SPEC §9): the test states exactly which
events arrive in which epoch and where the watermark is, so it can assert what a
flow emits after each step. Used through :class:`wire.testing.TestStream`.

Offsets are ``{"step": n}`` (steps done); each epoch admits exactly one step, and
the offset of the last step also says ``"ended": true`` (a script of no step ends with
one empty epoch), so the run ends once that epoch completed (:mod:`wire.sources.base.source`).
While the flow or the step is paused (the control file, :mod:`wire.core.control_file`)
no step is admitted.
Data rows carry ``__wm`` = the watermark before the step (in force while its
events arrive) and ``__seq`` = the event's position over all steps; the epoch
ends with one watermark row per key group carrying the watermark after the step.
With ``columns`` (set by the compiler's column pruning) only those payload columns
are produced.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from wire.core import envelope
from wire.core.control_file import is_paused
from wire.core.time import NO_WATERMARK
from wire.sources.base.source import (
    Capability,
    ConfigDataSource,
    ReadRequest,
    check_columns,
    open_stream,
    resume_options,
    schema_from_b64,
    schema_to_b64,
    select_columns,
    spark_row_schema,
)

DATA_SOURCE_NAME = "wire_test_stream"


@dataclass(frozen=True)
class TestStreamSource:
    """The scripted steps: ``(events, watermark_after)`` pairs.

    ``events`` is Arrow IPC bytes of a table in ``schema`` (or None for a pure
    watermark advance); ``watermark_after`` is the watermark (int ms) once the step
    is done.
    """

    __test__ = False  # not a pytest test class
    capabilities: ClassVar[frozenset[Capability]] = frozenset({"columns", "resume", "replay"})

    schema: pa.Schema
    steps: tuple[tuple[bytes | None, int], ...]
    bounded: bool = True

    def resolve_schema(self) -> pa.Schema:
        """The payload schema."""
        return self.schema

    def total_records(self) -> int:
        """The events of every scripted step (for the console's progress bar)."""
        return sum(pa.ipc.open_stream(ev).read_all().num_rows for ev, _ in self.steps if ev is not None)

    def to_json(
        self, *, step: str, event_time: str, key_groups: int, columns: tuple[str, ...] | None = None,
        control_file: str | None = None,
    ) -> str:
        """Serialize for the data source's options (``control_file``: pause, None: never paused)."""
        return json.dumps(
            {
                "step": step,
                "control_file": control_file,
                "event_time": event_time,
                "key_groups": key_groups,
                "columns": check_columns(step, self.schema, columns),
                "schema": schema_to_b64(self.schema),
                "steps": [
                    [None if ev is None else base64.b64encode(ev).decode(), wm]
                    for ev, wm in self.steps
                ],
            }
        )

    def read_stream(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        """The envelope DataFrame of this scripted stream (watermarks come from the script).

        ``request.columns`` (None: all): the payload columns produced, in schema order.
        ``request.resume``: :func:`wire.sources.base.resumable`. The script fixes the
        epochs and watermarks: the watermark policy and admission are not used.
        """
        r = request
        script = self.to_json(step=r.step, event_time=r.event_time, key_groups=r.key_groups,
                              columns=r.columns, control_file=r.control_file)
        return open_stream(spark, TestStreamDataSource, script=script, **resume_options(r.resume))


class _Script:
    def __init__(self, text: str) -> None:
        d = json.loads(text)
        self.step: str = d["step"]
        self.event_time: str = d["event_time"]
        self.key_groups: int = d["key_groups"]
        self.control_file: str | None = d.get("control_file")
        columns = d.get("columns")
        columns = None if columns is None else tuple(columns)
        self.output_schema = select_columns(schema_from_b64(d["schema"]), columns)
        """The payload columns produced."""
        self.steps: list[tuple[str | None, int]] = [tuple(s) for s in d["steps"]]
        self.row_schema = spark_row_schema(self.output_schema)

    def events(self, i: int) -> pa.Table | None:
        blob = self.steps[i][0]
        return None if blob is None else envelope.decode_table(base64.b64decode(blob))

    def watermark_before(self, i: int) -> int:
        return NO_WATERMARK if i == 0 else int(self.steps[i - 1][1])


class _Step(InputPartition):
    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class TestStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One step per epoch."""

    __test__ = False

    def __init__(self, script: _Script) -> None:
        self.script = script

    def initialOffset(self) -> dict[str, Any]:
        """Nothing read yet."""
        return {"step": 0}

    def latestOffset(self, start: dict[str, Any], limit: object) -> dict[str, Any]:
        """Admit the next step, if any and not paused; the last one's offset says ``ended``."""
        n, total = int(start["step"]), len(self.script.steps)
        if start.get("ended") or is_paused(self.script.control_file, self.script.step):
            return start
        if n >= total:  # no step left (a script of none): one empty epoch ends the stream
            return {"step": n, "ended": True}
        return {"step": n + 1, "ended": True} if n + 1 == total else {"step": n + 1}

    def prepareForTriggerAvailableNow(self) -> None:
        """The script is fixed: nothing to record."""

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """One partition per admitted step."""
        return [_Step(i) for i in range(int(start["step"]), int(end["step"]))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The step's events, then its watermark rows."""
        assert isinstance(partition, _Step)
        s, i = self.script, partition.index
        schema = s.row_schema
        events = s.events(i)
        if events is not None and events.num_rows:
            n = events.num_rows
            seq0 = sum(e.num_rows for j in range(i) if (e := s.events(j)) is not None)
            cols: dict[str, pa.Array] = {
                f.name: events.column(f.name).combine_chunks().cast(f.type) for f in s.output_schema
            }
            cols[envelope.KIND] = pa.array(np.zeros(n, np.int32))
            cols[envelope.ET] = events.column(s.event_time).combine_chunks().cast(pa.int64())
            cols[envelope.WM] = pa.array(np.full(n, s.watermark_before(i), np.int64))
            cols[envelope.SEQ] = pa.array(np.arange(seq0, seq0 + n, dtype=np.int64))
            yield envelope.envelope_batch(schema, cols, n)
            counts = {"records": n, "events": n, "malformed": 0}
            yield envelope.side_batch(
                schema, envelope.METRICS_PORT, envelope.metrics_table(s.step, counts)
            )
        yield envelope.watermark_batch(schema, int(s.steps[i][1]), range(s.key_groups))


class TestStreamDataSource(ConfigDataSource):
    """Spark Python data source ``wire_test_stream``; option ``script``: the scripted steps."""

    __test__ = False
    format_name = DATA_SOURCE_NAME
    option = "script"
    config_class = _Script
    reader_class = TestStreamReader
