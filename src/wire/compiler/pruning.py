"""Column pruning into sources: which payload columns of each source a compiled flow reads.

Spark cannot push a projection into a Python data source, so without help every source
ships all its payload columns from Python into the JVM, however few the flow reads. The
compiler (:func:`wire.compiler.plan_compiler.compile_plan`) therefore compiles a flow
once with complete sources, asks this module which source columns the flow reads, and
compiles it again with each source told its columns.

The columns are found in Spark's own plan, not by parsing Wire's expressions: Spark's
optimizer runs over the analyzed plan of the flow's final DataFrame, then
:func:`required_attributes` walks the optimized logical plan from its root to its leaves
and computes, per node, the attributes (by expression id) its parent needs:

* the root: every output attribute (the terminal ``out`` port and the envelope, which
  the sinks read);
* ``Project``: the references of the project-list entries whose output is needed;
* ``Filter``: what its parent needs plus the references of its condition;
* ``Union``: by position, the children's attributes whose union output is needed;
* any other node (``MapInArrow`` pre-stages of keyed operators, ``throttle``'s
  overflow stage, state processors, joins, Python UDF evaluation, ...): every output
  attribute of each child. This is the conservative default: an operator Wire does
  not know consumes all its input.

A leaf's needed attributes are the columns read from it. Everything opaque to Spark
(late events, overflow and dead-letter side outputs, user aggregators) reads its rows
through such an opaque node, so their columns are kept. Any failure of the analysis
(an unexpected plan shape, a Py4J error) yields "read everything".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

JavaObject = Any
"""A Py4J handle on a JVM object (a Catalyst plan node, expression or Scala collection)."""


@dataclass(frozen=True)
class SourceAttributes:
    """The output attributes of one source relation: Catalyst expression id → column name."""

    step: str
    names: dict[int, str]


def source_attributes(step: str, df: DataFrame) -> SourceAttributes | None:
    """The attributes of ``df``, a DataFrame freshly loaded from a source (its relation's output).

    None when they cannot be read (e.g. no JVM plan behind ``df``): the source is then
    never pruned.
    """
    try:
        output = _seq(df._jdf.queryExecution().analyzed().output())
        return SourceAttributes(step, {int(a.exprId().id()): str(a.name()) for a in output})
    except Exception:  # any failure means "no pruning"
        return None


def read_columns(
    spark: SparkSession, df: DataFrame, sources: list[SourceAttributes]
) -> dict[str, set[str] | None]:
    """Per source step, the names of its columns that ``df`` reads (None: unknown, keep all).

    ``df`` is a streaming DataFrame whose plan contains the sources' relations (nothing
    runs). A source whose relation does not appear in the optimized plan, or any error
    of the analysis, gives None for that source (every source, for an error).
    """
    try:
        analyzed = df._jdf.queryExecution().analyzed()
        optimized = spark._jsparkSession.sessionState().optimizer().execute(analyzed)
        needed, seen = required_attributes(optimized)
    except Exception:  # any failure means "no pruning", never a wrong result
        return {s.step: None for s in sources}
    result: dict[str, set[str] | None] = {}
    for s in sources:
        ids = set(s.names)
        if not ids or not ids <= seen:
            result[s.step] = None
        else:
            result[s.step] = {s.names[i] for i in ids & needed}
    return result


def required_attributes(plan: JavaObject) -> tuple[set[int], set[int]]:
    """Walk an optimized logical plan: the leaf attributes it needs, and every leaf attribute.

    Returns ``(needed, seen)``: expression ids of leaf output attributes that some node
    above reads (or the root outputs), and of all leaf output attributes.
    """
    needed: set[int] = set()
    seen: set[int] = set()
    stack: list[tuple[JavaObject, set[int]]] = [(plan, _ids(plan.output()))]
    while stack:
        node, want = stack.pop()
        children = _seq(node.children())
        if not children:
            out = _ids(node.output())
            seen |= out
            needed |= out & want
            continue
        kind = str(node.nodeName())
        if kind == "Project":
            refs: set[int] = set()
            for named in _seq(node.projectList()):
                if int(named.exprId().id()) in want:
                    refs |= _ids(named.references().toSeq())
            stack.append((children[0], refs))
        elif kind == "Filter":
            stack.append((children[0], want | _ids(node.condition().references().toSeq())))
        elif kind == "Union":
            out_ids = _id_list(node.output())
            positions = [i for i, x in enumerate(out_ids) if x in want]
            for child in children:
                child_ids = _id_list(child.output())
                if len(child_ids) != len(out_ids):
                    stack.append((child, set(child_ids)))
                else:
                    stack.append((child, {child_ids[i] for i in positions}))
        else:
            stack.extend((child, _ids(child.output())) for child in children)
    return needed, seen


def _seq(jseq: JavaObject) -> list[JavaObject]:
    """The elements of a Scala ``Seq``."""
    return [jseq.apply(i) for i in range(jseq.size())]


def _id_list(attributes: JavaObject) -> list[int]:
    return [int(a.exprId().id()) for a in _seq(attributes)]


def _ids(attributes: JavaObject) -> set[int]:
    return set(_id_list(attributes))
