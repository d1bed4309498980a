"""Recent dead letters and late events: a bounded sample per run, for the dashboard.

Taken inside the epoch's one Spark job, with no Spark action of its own: each task of
the epoch job (:class:`wire.runtime.dataplane.PartitionWriter`) previews the last
``SAMPLE_SIZE`` rows of every dead-letter port (``<step>.dead_letter``) and late port
(``<step>.late``) in its partition (:func:`preview_rows`) and returns the previews
with its receipts. After the epoch's sinks committed, the driver stamps them with the
epoch and its processing time and keeps the newest ``SAMPLE_SIZE`` of each kind in a
:class:`SampleBuffer` (``RunSummary.samples``), a ring buffer: memory stays bounded by
``2 * SAMPLE_SIZE`` previews of at most ``PREVIEW_CHARS`` characters each, whatever the
run's length. Only the previews travel to the driver, never a whole port.

A preview (:class:`RecentEvent`) of a **dead letter** has the rejecting step, its
location (e.g. ``"in/a.jsonl:3"``, 1-based line), the reason and the raw record; one of
a **late event** has the window's or join's step, the event's event time, the watermark
it was late against, the reason, and the event's other columns as a JSON object. Times
are ms since the Unix epoch; ``record`` is cut to ``PREVIEW_CHARS`` characters (ending
in ``…`` when cut).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import pyarrow as pa

from wire.plan.nodes import DEAD_LETTER, LATE

SAMPLE_SIZE = 50
"""Previews kept per kind (dead letters, late events) and per run; also the most one
task returns per port and epoch."""
PREVIEW_CHARS = 300
"""A preview's ``record`` is cut to this many characters."""

SampleKind = Literal["dead_letter", "late"]
_LATE_FIELDS = ("event_time", "watermark", "reason")


@dataclass(frozen=True)
class RecentEvent:
    """One sampled dead letter or late event (module docstring)."""

    kind: SampleKind
    step: str
    """Dead letter: the step that rejected it (a source); late: the window or join step."""
    reason: str | None
    record: str
    """Dead letter: the raw record; late: the event's other columns as JSON; cut to
    ``PREVIEW_CHARS`` characters."""
    location: str | None
    """Dead letters: where the record came from, e.g. ``"in/a.jsonl:3"``; late: None."""
    event_time: int | None
    """The event's event time (ms); None for a dead letter (none could be read)."""
    watermark: int | None
    """Late events: the watermark the event was late against (ms); dead letters: None."""
    epoch: int
    """The epoch (Spark batch id) that produced it."""
    processing_time: int
    """When its epoch committed on the driver, ms since the Unix epoch."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the control plane's ``GET /v1/flows/{id}/samples`` items)."""
        return asdict(self)


def cut(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the last one ``…`` when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def preview_rows(port_id: str, rows: pa.Table, *, limit: int = SAMPLE_SIZE) -> list[dict[str, Any]]:
    """Previews of the last ``limit`` rows of port ``port_id`` (executor side; JSON-ready).

    ``rows`` has the port's columns: :data:`wire.core.envelope.DEAD_LETTER_SCHEMA` for a
    dead-letter port, the late schema (payload, ``event_time``, ``watermark``,
    ``reason``) for a late port. Returns ``[]`` for any other port. Each preview is a
    :class:`RecentEvent`'s fields without ``epoch`` and ``processing_time`` (the driver
    adds them).
    """
    step, _, port = port_id.rpartition(".")
    if port not in (DEAD_LETTER, LATE) or limit <= 0:
        return []
    tail = rows.slice(max(0, rows.num_rows - limit))
    out: list[dict[str, Any]] = []
    for row in tail.to_pylist():
        if port == DEAD_LETTER:
            out.append({"kind": DEAD_LETTER, "step": str(row.get("step") or step),
                        "reason": row.get("reason"), "record": cut(str(row.get("record") or "")),
                        "location": row.get("location"), "event_time": None, "watermark": None})
        else:
            payload = {k: v for k, v in row.items() if k not in _LATE_FIELDS}
            out.append({"kind": LATE, "step": step, "reason": row.get("reason"),
                        "record": cut(json.dumps(payload, default=str, ensure_ascii=False)),
                        "location": None, "event_time": _int(row.get("event_time")),
                        "watermark": _int(row.get("watermark"))})
    return out


class SampleBuffer:
    """The newest ``size`` dead letters and the newest ``size`` late events of a run.

    Thread-safe: the epoch thread adds while the control plane reads.

    Raises
    ------
    ValueError
        If ``size`` is not an int >= 1.
    """

    def __init__(self, size: int = SAMPLE_SIZE) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        self.size = size
        self._kept: dict[str, deque[RecentEvent]] = {
            DEAD_LETTER: deque(maxlen=size), LATE: deque(maxlen=size)}
        self._lock = threading.Lock()
        self.version = 0
        """Incremented by every :meth:`add` that kept something (to skip rewriting a copy)."""

    def add(self, previews: Iterable[Mapping[str, Any]], *, epoch: int, now_ms: int) -> None:
        """Keep ``previews`` (from :func:`preview_rows`, oldest first) of epoch ``epoch``."""
        events = [RecentEvent(epoch=epoch, processing_time=now_ms, **dict(p)) for p in previews]
        if not events:
            return
        with self._lock:
            for e in events:
                self._kept[e.kind].append(e)
            self.version += 1

    def extend(self, other: SampleBuffer) -> None:
        """Append ``other``'s events (a later run's) after this buffer's, oldest first."""
        with other._lock:
            later = {k: list(v) for k, v in other._kept.items()}
        with self._lock:
            for kind, events in later.items():
                self._kept[kind].extend(events)
            self.version += 1

    def newest(self, kind: SampleKind) -> list[RecentEvent]:
        """The kept events of ``kind`` (``"dead_letter"`` or ``"late"``), newest first."""
        with self._lock:
            return list(reversed(self._kept[kind]))

    def to_dict(self) -> dict[str, Any]:
        """``{"size": n, "dead_letters": [...], "late": [...]}``, each list newest first."""
        return {"size": self.size,
                "dead_letters": [e.to_dict() for e in self.newest(DEAD_LETTER)],
                "late": [e.to_dict() for e in self.newest(LATE)]}
