"""Pathway (run with bench/.venvs/pathway; PATHWAY_THREADS=2 from the driver).

pw.io.csv.read(csv/, mode="static"): Pathway reads the files, then computes (a directory in
"streaming" mode is watched for ever, so a bounded run has no end). Windows:
``windowby(ts, window=tumbling / sliding / session, instance=key)`` on the int64 ms column,
reduced by count / avg / max; tumbling and sliding windows with
``exactly_once_behavior(shift=delay)`` (one result per window once the newest event time
passes its end + delay); sessions take no behavior. A session's ``_pw_window_end`` is its
last event, reported here as last + gap. Results: ``pw.io.subscribe`` keeps the final version
of each row (additions minus retractions), written as one CSV at the end.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.args()
import pathway as pw  # noqa: E402

s = S.spec(a.data)
nullable = {s["value"]} if s["window_filter"] else set()
py_type = {"int64": int, "float64": float, "string": str}
schema = pw.schema_from_types(**{c: py_type[t] | None if c in nullable else py_type[t]
                                 for c, t in s["columns"].items()})
events = pw.io.csv.read(str(a.data / "csv"), schema=schema, mode="static")
if a.job == "pass":
    names = s["pass_columns"]
    if s["name"] == "flights":
        kept = events.filter(events.dep_delay.is_not_none())
        kept = kept.filter(pw.unwrap(kept.dep_delay) > 0)
    else:
        kept = events.filter(events.value < 0.5)
    res = kept.select(*[kept[c] for c in names])
else:
    names = ["key", "start", "end", *S.aggregates(a.job)]
    if s["window_filter"]:
        events = events.filter(events[s["value"]].is_not_none())
    behavior = pw.temporal.exactly_once_behavior(shift=s["delay_ms"])
    if a.job == "session":
        window, behavior, extra = pw.temporal.session(max_gap=S.GAP), None, S.GAP
    else:
        size, slide = S.WINDOWS[a.job]
        window = (pw.temporal.tumbling(duration=size, origin=0) if size == slide
                  else pw.temporal.sliding(hop=slide, duration=size, origin=0))
        extra = 0
    grouped = events.windowby(events.ts, window=window, instance=events[S.key_of(s, a.job)],
                              behavior=behavior)
    aggs = {"n": pw.reducers.count()}
    if a.job == "tumbling":
        value = pw.unwrap(pw.this[s["value"]]) if nullable else pw.this[s["value"]]
        aggs |= {"mean": pw.reducers.avg(value), "max": pw.reducers.max(value)}
    res = grouped.reduce(key=pw.this._pw_instance, start=pw.this._pw_window_start,
                         end=pw.this._pw_window_end + extra, **aggs)

final: dict = {}


def on_change(key, row, time, is_addition):
    if is_addition:
        final[key] = [row[c] for c in names]
    elif final.get(key) == [row[c] for c in names]:
        del final[key]


pw.io.subscribe(res, on_change=on_change)
t_ready = time.time()
pw.run(monitoring_level=pw.MonitoringLevel.NONE)
out = a.out / "output.csv"
S.write_csv(out, names, final.values())
S.finish(a.out, t_ready, {"path": str(out), "format": "csv"}, threads=2, mode="static")
