"""A keyed operator's input and output watermarks: Beam's rule (SPEC §2), pure, no Spark.

A keyed operator (window, join, process) keeps, per key group, the watermark of every
input channel it has heard from, its input watermark ``in`` and its output watermark
``out`` (all int64 ms, :data:`~wire.core.time.NO_WATERMARK` before any). Each epoch it
folds the epoch's watermark rows into the channels (:func:`fold_marks`), then::

    in'  = max(in,  min(pending, upstream))     upstream = min over the expected channels
    out' = max(out, min(in', holds))

* A channel is a stream that carries watermarks to the operator: a source's step, or
  ``<step>/<key group>`` for each key group of a keyed operator upstream. The operator
  expects a fixed set of channels; one it has not heard from yet counts as
  :data:`~wire.core.time.NO_WATERMARK`, so the operator waits for all of its inputs. A
  watermark row that names no channel belongs to the first expected one.
* ``pending`` is the earliest event time the operator has received and not yet
  processed: Wire processes every event of an epoch in that epoch, so nothing is
  pending after it and ``in' = max(in, upstream)`` (:func:`input_watermark`).
* ``holds`` are what the operator may still emit: a window the start of its earliest
  unfired window and of any window an on-time event could still open, a join
  ``in' - allowed_lateness``, a process step its timers' output times
  (:func:`output_watermark`).

Both never decrease, whatever the order in which the watermark rows arrive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from wire.core.time import NO_WATERMARK

Mark = tuple[str | None, int]
"""A watermark row as the operator reads it: ``(channel or None, watermark ms)``."""


def fold_marks(
    channels: Mapping[str, int], marks: Iterable[Mark], expected: tuple[str, ...]
) -> dict[str, int]:
    """``channels`` with ``marks`` folded in: per channel, the highest watermark heard.

    A mark without a channel belongs to ``expected[0]``; a mark lower than its channel's
    watermark changes nothing (a channel's watermark never decreases).
    """
    out = dict(channels)
    for channel, wm in marks:
        name = channel or expected[0]
        out[name] = max(int(wm), out.get(name, NO_WATERMARK))
    return out


def input_watermark(wm_in: int, channels: Mapping[str, int], expected: tuple[str, ...]) -> int:
    """``max(wm_in, min over expected channels)``: the operator's new input watermark (ms).

    A channel not in ``channels`` counts as :data:`~wire.core.time.NO_WATERMARK`.
    """
    return max(wm_in, min(channels.get(c, NO_WATERMARK) for c in expected))


def output_watermark(wm_out: int, new_in: int, *holds: int | None) -> int:
    """``max(wm_out, min(new_in, *holds))``: the operator's new output watermark (ms).

    A hold of None holds nothing (no unfired window, no timer). Never below ``wm_out``;
    never past a hold unless ``wm_out`` already was.
    """
    return max(wm_out, min([new_in, *(h for h in holds if h is not None)]))
