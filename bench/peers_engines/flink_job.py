"""Apache Flink (PyFlink Table API / Flink SQL; run with bench/.venvs/flink).

Local mini-cluster, streaming mode, parallelism 2, UTC. Source: the filesystem connector over
flink/all.csv, every row in one headerless file (Flink's CSV format cannot skip a header, and
its file source hands several files to its readers in no particular order, so that events of
later files pass the watermark first and the rest are dropped as late). Event time
``rt = TO_TIMESTAMP_LTZ(ts, 3)`` with ``WATERMARK FOR rt AS rt - delay``; windows by the
TUMBLE / HOP / SESSION table-valued functions; sink: the filesystem connector (CSV), which
commits its files at checkpoints (every 10 s, to local files; one more at the end of input).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.args()
from pyflink.table import EnvironmentSettings, TableEnvironment  # noqa: E402

s = S.spec(a.data)
env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
for k, v in {"parallelism.default": "2", "table.local-time-zone": "UTC",
             "execution.checkpointing.interval": "10 s", "restart-strategy.type": "none",
             "execution.checkpointing.storage": "filesystem",
             "execution.checkpointing.dir": f"file://{a.out / 'checkpoints'}",
             "pipeline.name": f"peers-{a.job}"}.items():
    env.get_config().set(k, v)
t_ready = time.time()


def interval(ms: int) -> str:
    unit, size = next((u, n) for u, n in (("HOUR", S.HOUR), ("MINUTE", S.MINUTE), ("SECOND", 1000))
                      if ms % n == 0)
    return f"INTERVAL '{ms // size}' {unit}"


sql_type = {"int64": "BIGINT", "string": "STRING", "float64": "DOUBLE"}
cols = ", ".join(f"`{c}` {sql_type[t]}" for c, t in s["columns"].items())
env.execute_sql(f"""CREATE TABLE events ({cols}, rt AS TO_TIMESTAMP_LTZ(ts, 3),
    WATERMARK FOR rt AS rt - {interval(s['delay_ms'])})
    WITH ('connector' = 'filesystem', 'path' = 'file://{a.data / "flink" / "all.csv"}',
          'format' = 'csv', 'csv.empty-string-as-null' = 'true')""")
out = a.out / "output"
if a.job == "pass":
    names = s["pass_columns"]
    sink_cols = ", ".join(f"`{c}` {sql_type[s['columns'][c]]}" for c in names)
    query = f"SELECT {', '.join(f'`{c}`' for c in names)} FROM events WHERE {s['pass_filter']}"
else:
    names = ["key", "start", "end", *S.aggregates(a.job)]
    key = S.key_of(s, a.job)
    source = f"(SELECT * FROM events WHERE {s['window_filter']})" if s["window_filter"] else "events"
    env.create_temporary_view("kept", env.sql_query(f"SELECT * FROM {source}"))
    if a.job == "session":
        tvf = f"SESSION(TABLE kept PARTITION BY `{key}`, DESCRIPTOR(rt), {interval(S.GAP)})"
    elif a.job == "tumbling":
        tvf = f"TUMBLE(TABLE kept, DESCRIPTOR(rt), {interval(S.WINDOWS['tumbling'][0])})"
    else:
        size, slide = S.WINDOWS["sliding"]
        tvf = f"HOP(TABLE kept, DESCRIPTOR(rt), {interval(slide)}, {interval(size)})"
    aggs = "COUNT(*)"
    sink_cols = "`key` STRING, `start` TIMESTAMP(3), `end` TIMESTAMP(3), `n` BIGINT"
    if a.job == "tumbling":
        aggs += f", AVG(`{s['value']}`), MAX(`{s['value']}`)"
        sink_cols += ", `mean` DOUBLE, `max` DOUBLE"
    query = (f"SELECT `{key}`, window_start, window_end, {aggs} FROM TABLE({tvf}) "
             f"GROUP BY `{key}`, window_start, window_end")
env.execute_sql(f"CREATE TABLE results ({sink_cols}) WITH ('connector' = 'filesystem', "
                f"'path' = 'file://{out}', 'format' = 'csv')")
env.execute_sql(f"INSERT INTO results {query}").wait()
S.finish(a.out, t_ready, {"path": f"{out}/**/*", "format": "csv", "columns": names})
