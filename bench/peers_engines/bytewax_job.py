"""bytewax (run with bench/.venvs/bytewax; one worker, in-process ``run_main``).

Source: one partition that reads csv/*.csv in name (= arrival) order with the csv module, in
batches of 1,000 rows (bytewax's own file sources make one partition per file and read them
all at once, which interleaves the files' time ranges and makes events late). Windows:
``fold_window`` with an ``EventClock`` (watermark = newest event time - delay) and a
Tumbling / Sliding windower aligned to the Unix epoch, or a SessionWindower; start and end
come from the window id (ids count slides from the epoch), for sessions from the first and
last event folded (end = last + gap). End of input closes every window. Results are collected
in memory and written as one CSV at the end.
"""

import csv
import sys
import time
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.args()
import bytewax.operators as op  # noqa: E402
from bytewax.dataflow import Dataflow  # noqa: E402
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition  # noqa: E402
from bytewax.operators.windowing import (  # noqa: E402
    EventClock,
    SessionWindower,
    SlidingWindower,
    TumblingWindower,
    fold_window,
)
from bytewax.testing import TestingSink, run_main  # noqa: E402

s = S.spec(a.data)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BATCH = 1_000
parse = {"int64": int, "float64": float, "string": str}
types = [(c, parse[t], t != "string") for c, t in s["columns"].items()]


class CsvFiles(StatefulSourcePartition):
    """The rows of the files, in order, as dicts (None for an empty number)."""

    def __init__(self, files: list[Path]) -> None:
        self.rows = self._rows(files)

    def _rows(self, files):
        for f in files:
            with open(f, newline="") as fh:
                reader = csv.reader(fh)
                next(reader)
                for rec in reader:
                    yield {c: (None if num and v == "" else conv(v))
                           for (c, conv, num), v in zip(types, rec, strict=True)}

    def next_batch(self):
        batch = list(islice(self.rows, BATCH))
        if not batch:
            raise StopIteration
        return batch

    def snapshot(self):
        return None


class OrderedFiles(FixedPartitionedSource):
    def list_parts(self):
        return ["all"]

    def build_part(self, step_id, for_part, resume_state):
        return CsvFiles(sorted((a.data / "csv").glob("part-*.csv")))


flow = Dataflow("peers")
rows = op.input("read", flow, OrderedFiles())
results: list = []
if a.job == "pass":
    names = s["pass_columns"]
    kept = op.filter("keep", rows, lambda r: S.keep_pass_row(s, r))
    op.output("out", op.map("project", kept, lambda r: [r[c] for c in names]), TestingSink(results))
else:
    names = ["key", "start", "end", *S.aggregates(a.job)]
    key, value = S.key_of(s, a.job), s["value"]
    kept = op.filter("keep", rows, lambda r: S.keep_window_row(s, r))
    keyed = op.key_on("key", kept, lambda r: r[key])
    clock = EventClock(lambda r: EPOCH + timedelta(milliseconds=r["ts"]),
                       wait_for_system_duration=timedelta(milliseconds=s["delay_ms"]))
    if a.job == "session":
        windower = SessionWindower(gap=timedelta(milliseconds=S.GAP))
        acc = ([0, None, None],
               lambda x, r: [x[0] + 1, r["ts"] if x[1] is None else min(x[1], r["ts"]),
                             r["ts"] if x[2] is None else max(x[2], r["ts"])],
               lambda x, y: [x[0] + y[0], min(x[1], y[1]), max(x[2], y[2])])
    else:
        size, slide = S.WINDOWS[a.job]
        windower = (TumblingWindower(length=timedelta(milliseconds=size), align_to=EPOCH) if size == slide
                    else SlidingWindower(length=timedelta(milliseconds=size),
                                         offset=timedelta(milliseconds=slide), align_to=EPOCH))
        if a.job == "tumbling":  # count, sum, max
            acc = ([0, 0.0, None],
                   lambda x, r: [x[0] + 1, x[1] + r[value],
                                 r[value] if x[2] is None else max(x[2], r[value])],
                   lambda x, y: [x[0] + y[0], x[1] + y[1], max(x[2], y[2])])
        else:
            acc = ([0], lambda x, r: [x[0] + 1], lambda x, y: [x[0] + y[0]])
    first, fold, merge = acc
    win = fold_window("win", keyed, clock, windower, lambda: list(first), fold, merge, ordered=False)
    late = []
    op.inspect("late", win.late, lambda _step, item: late.append(item))

    def result(item):
        k, (wid, x) = item
        if a.job == "session":
            return [k, x[1], x[2] + S.GAP, x[0]]
        out = [k, wid * slide, wid * slide + size, x[0]]
        return [*out, x[1] / x[0], x[2]] if a.job == "tumbling" else out

    op.output("out", op.map("result", win.down, result), TestingSink(results))

t_ready = time.time()
run_main(flow)
out = a.out / "output.csv"
S.write_csv(out, names, results)
S.finish(a.out, t_ready, {"path": str(out), "format": "csv"},
         late=None if a.job == "pass" else len(late), workers=1)
