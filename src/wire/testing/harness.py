"""The TestStream harness: a scripted source, the flow under test, memory sinks (:mod:`wire.testing`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from wire.api.flow import Flow, Stream
from wire.core.envelope import encode_table
from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.delivery.sink import Sink
from wire.errors import ConfigError
from wire.plan.nodes import LATE, PortRef
from wire.runtime.runner import RunSummary
from wire.testing.test_stream import TestStreamSource

__all__ = ["MemorySink", "TestStream", "TestStreamResult"]


@dataclass(frozen=True, eq=False)
class MemorySink(Sink):
    """Collects every epoch's rows in memory (driver process); at-least-once.

    A driver sink: the epoch's rows are brought to the driver.

    ``tables`` holds ``(epoch, table)`` in the order the epochs were written.
    """

    guarantee = "at_least_once"
    tables: list[tuple[int, pa.Table]] = field(default_factory=list)

    def write_epoch(self, epoch: int, table: pa.Table) -> None:
        """Keep the epoch's rows."""
        self.tables.append((epoch, table))

    def rows(self) -> list[dict[str, Any]]:
        """All rows in emission order, as dicts."""
        out: list[dict[str, Any]] = []
        for _, t in self.tables:
            out.extend(t.to_pylist())
        return out


@dataclass
class TestStreamResult(Mapping[str, list[dict[str, Any]]]):
    """Rows per port (``"main"``, ``"late"``, ``"dead_letter"``) plus the run summary."""

    __test__ = False

    ports: dict[str, list[dict[str, Any]]]
    summary: RunSummary

    def __getitem__(self, port: str) -> list[dict[str, Any]]:
        return self.ports[port]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ports)

    def __len__(self) -> int:
        return len(self.ports)


class TestStream:
    """A scripted input: events and watermark advances, one epoch per step.

    Parameters
    ----------
    schema:
        The events' payload schema (``pa.Schema`` or a list of ``(name, type)``).
    event_time:
        The int64 event-time column (milliseconds).
    key:
        The key column, or None.
    """

    __test__ = False

    def __init__(self, *, schema: pa.Schema | Iterable[tuple[str, pa.DataType]], event_time: str,
                 key: str | None = None) -> None:
        self.schema = schema if isinstance(schema, pa.Schema) else pa.schema(list(schema))
        if event_time not in self.schema.names:
            raise ConfigError("event_time", event_time, f"a column of the schema: {self.schema.names}")
        if key is not None and key not in self.schema.names:
            raise ConfigError("key", key, f"a column of the schema: {self.schema.names}")
        self.event_time = event_time
        self.key = key
        self._steps: list[tuple[bytes | None, int]] = []
        self._watermark = NO_WATERMARK

    def add_events(self, events: Iterable[Mapping[str, Any]]) -> TestStream:
        """Add one epoch that delivers ``events`` (dicts by column name), in this order."""
        table = pa.Table.from_pylist(list(events), schema=self.schema)
        self._steps.append((encode_table(table), self._watermark))
        return self

    def advance_watermark(self, watermark: int) -> TestStream:
        """Add one epoch with no events that moves the watermark to ``watermark`` (ms).

        Raises
        ------
        ConfigError
            If ``watermark`` is lower than the current watermark (watermarks are monotonic).
        """
        if watermark < self._watermark:
            raise ConfigError("watermark", watermark, f">= the current watermark {self._watermark}")
        self._watermark = int(watermark)
        self._steps.append((None, self._watermark))
        return self

    def advance_watermark_to_infinity(self) -> TestStream:
        """Add one epoch that ends the stream's event time: every window closes."""
        return self.advance_watermark(MAX_WATERMARK)

    def run(
        self,
        build: Callable[[Stream], Stream],
        *,
        spark: SparkSession | None = None,
        key_groups: int = 4,
        checkpoint: str | None = None,
    ) -> TestStreamResult:
        """Build a flow on this stream with ``build`` and run it to the end of the script.

        Returns
        -------
        TestStreamResult
            ``"main"``: the built stream's rows; ``"late"``: rows of every window's, join's and
            process step's late port; ``"dead_letter"``: dead letters. Each row has an ``epoch``.
        """
        flow = Flow("test-stream")
        source = flow.source(
            TestStreamSource(self.schema, tuple(self._steps)), event_time=self.event_time,
            key=self.key, name="input",
        )
        result = build(source)
        sinks = {"main": MemorySink(), "late": MemorySink(), "dead_letter": MemorySink()}
        result.sink(sinks["main"], name="main")
        windows = [n.step for n in flow.plan().nodes if LATE in n.side_ports()]
        for step in windows:
            Stream(flow, PortRef(step, LATE)).sink(sinks["late"], name=f"late_{step}")
        flow.dead_letters().sink(sinks["dead_letter"], name="dead_letter")
        with tempfile.TemporaryDirectory(prefix="wire-teststream-") as tmp:
            summary = flow.run(checkpoint or tmp, spark=spark, key_groups=key_groups)
        return TestStreamResult({k: s.rows() for k, s in sinks.items()}, summary)
