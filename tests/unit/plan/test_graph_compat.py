"""The graph queries and plan fingerprints are what they were before the graph moved (issue 27).

``graph_queries_before_issue27.json`` was recorded by the code before the plan's graph
queries moved to :mod:`wire.plan.graph` (they were in ``plan/nodes.py``,
``compiler/plan_compiler.py``, ``plan/fingerprint.py`` and ``runtime/kept_ports.py``),
over the flows of ``plan_corpus.py`` (every node kind, window kind and topology): per
flow, its fingerprint with the kept ports added (what a checkpoint's ``wire.json``
records, so an equal fingerprint means a checkpoint from before still resumes), the
dashboard graph, the compile order, the query's outputs, source reads, paused
admission, every step's key and inputs, side ports, unsunk ports and sinks.
"""

from __future__ import annotations

import json
from pathlib import Path

import plan_corpus
import pytest

from wire.plan.fingerprint import incompatible_changes, plan_fingerprint
from wire.plan.graph import (
    chain_of,
    graph_of,
    key_of,
    outputs_of,
    paused_admission,
    side_ports,
    sinks,
    source_reads,
    unsunk_ports,
)
from wire.runtime.kept_ports import keep_unsunk_ports

RECORDED = json.loads(Path(__file__).with_name("graph_queries_before_issue27.json").read_text())
FLOWS = plan_corpus.flows()


def queries(flow_name: str) -> dict:
    plan = FLOWS[flow_name].plan()
    order = chain_of(plan)
    kept_plan, kept = keep_unsunk_ports(plan, "/data/ck")
    out = {
        "fingerprint": plan_fingerprint(kept_plan, checkpoint="/data/ck"),
        "graph": graph_of(kept_plan),
        "chain": [n.step for n in order],
        "outputs": outputs_of(plan, order),
        "source_reads": source_reads(plan),
        "paused_admission": paused_admission(plan),
        "key_of": {n.step: key_of(plan, n.step) for n in plan.nodes},
        "upstreams": {n.step: list(n.inputs()) for n in plan.nodes},
        "side_ports": [r.port_id() for r in side_ports(plan)],
        "unsunk_ports": [r.port_id() for r in unsunk_ports(plan)],
        "kept": kept,
        "sinks": [n.step for n in sinks(kept_plan)],
    }
    return json.loads(json.dumps(out))


def test_the_corpus_is_the_recorded_one():
    assert sorted(FLOWS) == sorted(RECORDED)


@pytest.mark.parametrize("flow_name", sorted(RECORDED))
def test_fingerprint_unchanged_so_a_checkpoint_from_before_resumes(flow_name):
    recorded = RECORDED[flow_name]["fingerprint"]
    current = queries(flow_name)["fingerprint"]
    assert incompatible_changes(recorded, current) == []
    assert current == recorded


@pytest.mark.parametrize("flow_name", sorted(RECORDED))
def test_graph_queries_unchanged(flow_name):
    assert queries(flow_name) == RECORDED[flow_name]
