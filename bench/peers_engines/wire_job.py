"""Wire: the job as a Wire flow (run with Wire's venv; PYTHONPATH may point at another checkout).

Bounded file source over csv/*.csv (one file per epoch: max_events_per_epoch = rows per file),
BoundedOutOfOrderness(delay), filter, window(...).aggregate(...), Parquet sinks for the
results, the late port and the dead letters. The bounded source's final watermark closes
every window.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.args()
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import wire  # noqa: E402

s = S.spec(a.data)


def rows(sink_dir: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in sink_dir.glob("epoch-*/*.parquet"))


spark = wire.spark("local[2]")
t_ready = time.time()

flow = wire.Flow(f"peers-{a.job}")
key = S.key_of(s, a.job)
schema = pa.schema([(c, pa.type_for_alias(t)) for c, t in s["columns"].items()])
events = flow.source(wire.sources.files(str(a.data / "csv" / "*.csv"), format="csv", schema=schema),
                     event_time="ts", key=key, watermark=wire.BoundedOutOfOrderness(s["delay_ms"]),
                     max_events_per_epoch=max(s["rows_per_file"]), name="events")
out = a.out / "output"
if a.job == "pass":
    events.filter(s["pass_filter"]).select(*s["pass_columns"]).sink(wire.sinks.parquet(str(out)))
else:
    kept = events.filter(s["window_filter"]) if s["window_filter"] else events
    if a.job == "session":
        kind = wire.Session(S.GAP)
    elif a.job == "tumbling":
        kind = wire.Tumbling(S.WINDOWS["tumbling"][0])
    else:
        kind = wire.Sliding(*S.WINDOWS["sliding"])
    aggs = {"n": wire.count()}
    if a.job == "tumbling":
        aggs |= {"mean": wire.mean(s["value"]), "max": wire.max(s["value"])}
    res = kept.window(kind).aggregate(name="win", **aggs)
    res.sink(wire.sinks.parquet(str(out)))
    res.late().sink(wire.sinks.parquet(str(a.out / "late")))
flow.dead_letters().sink(wire.sinks.parquet(str(a.out / "dead")))
summary = flow.run(checkpoint=str(a.out / "checkpoint"), spark=spark, progress=False)
S.finish(a.out, t_ready, {"path": f"{out}/epoch-*/*.parquet", "format": "parquet",
                          "rename": {} if a.job == "pass" else
                          {key: "key", "window_start": "start", "window_end": "end"}},
         wire=wire.__file__, epochs=summary.epochs, input_events=summary.input_events,
         late=rows(a.out / "late"), dead_letters=rows(a.out / "dead"))
spark.stop()
