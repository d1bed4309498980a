"""Side ports that no sink reads are kept, not dropped (SPEC §3: nothing is lost silently).

A flow's side ports are the late port of every window aggregation and interval join,
the dead-letter port of every source, and the overflow port of every
``throttle(..., mode="overflow")``. When the user neither sinks a side port nor drops
it on purpose (``Stream.drop()``: :func:`wire.plan.graph.unsunk_ports` finds them),
:func:`keep_unsunk_ports` adds a Parquet sink for it under the checkpoint:

==========================================  ==========================================
port                                        kept in
==========================================  ==========================================
``<step>.late`` (window, join)              ``<checkpoint>/kept/<step>.late/``
``<step>.dead_letter`` (source)             ``<checkpoint>/kept/<step>.dead_letter/``
``<step>.overflow`` (throttle, overflow)    ``<checkpoint>/kept/<step>.overflow/``
==========================================  ==========================================

The kept sinks are ordinary exactly-once Parquet sinks (:func:`wire.sinks.parquet`,
layout ``epoch-<E>/part-*.parquet``, an ``epoch`` column on every row), written by the
executors like any other. Their rows are counted in ``RunSummary.rows_written`` under
the kept sink's step id, and ``RunSummary.kept`` maps each kept port to its directory.
Deleting the checkpoint (``wire run --fresh``) deletes what was kept.

A kept late port holds the late events with the columns the window or join reads
(its key, event time and aggregation inputs), plus ``event_time``, ``watermark`` and
``reason``: keeping it must not make every flow ship all source columns (column
pruning, :mod:`wire.compiler.pruning`). Sink ``.late()`` to keep every column.

A dead-letter port counts as sunk when a sink or drop reads it, or reads the flow's
whole dead-letter output (``flow.dead_letters()``).
"""

from __future__ import annotations

import os
from pathlib import Path

from wire.errors import PlanError
from wire.plan.graph import unsunk_ports
from wire.plan.nodes import Plan, PortRef, SinkNode
from wire.sinks.file_sinks import parquet

KEPT_DIR = "kept"
"""The directory under a checkpoint that holds the kept side ports."""


def kept_step(ref: PortRef) -> str:
    """The step id of the sink that keeps port ``ref``: ``kept-<step>-<port>``."""
    return f"kept-{ref.step}-{ref.port}"


def keep_unsunk_ports(
    plan: Plan, checkpoint: str | os.PathLike[str]
) -> tuple[Plan, dict[str, str]]:
    """Return ``plan`` with a Parquet sink added for every unsunk side port.

    Returns ``(plan, kept)``: ``kept`` maps each kept port id (``"<step>.<port>"``) to
    its directory, ``<checkpoint>/kept/<port id>``. The added sink nodes have step ids
    :func:`kept_step` ``(port)``.

    Raises
    ------
    PlanError
        If the flow already has a step named like a kept sink.
    """
    steps = {n.step for n in plan.nodes}
    added: list[SinkNode] = []
    kept: dict[str, str] = {}
    for ref in unsunk_ports(plan):
        path = str(Path(checkpoint) / KEPT_DIR / ref.port_id())
        step = kept_step(ref)
        if step in steps:
            raise PlanError(f"step id {step!r} is reserved for the kept {ref.port_id()!r} port; "
                            "rename the step")
        added.append(SinkNode(step, ref, parquet(path), kept=True))
        kept[ref.port_id()] = path
    return Plan(plan.flow_id, (*plan.nodes, *added)), kept
