"""Plain PySpark Structured Streaming (run with Wire's venv, which has pyspark 4.3; no Wire).

readStream CSV, one file per micro-batch (maxFilesPerTrigger=1), trigger(availableNow=True),
withWatermark, window() / session_window(), foreachBatch writing Parquet. local[2], 2 shuffle
partitions, RocksDB state store with changelog checkpointing, UI off, UTC.

Spark has no end-of-input watermark, so the window jobs read spark/ (the same files plus
zz-end.csv, one row at end_ts, far in the future, read last: its mtime is the newest). The row
passes the window filter and is dropped after withWatermark by a filter on the event-time
column (Spark pushes a predicate below withWatermark unless it refers to the event-time
column; the row would then never move the watermark).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.args()
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

s = S.spec(a.data)
conf = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
builder = SparkSession.builder.master("local[2]").appName(f"plain-{a.job}")
for k, v in conf.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
t_ready = time.time()

ddl = ", ".join(f"`{c}` {'STRING' if t == 'string' else 'BIGINT' if t == 'int64' else 'DOUBLE'}"
                for c, t in s["columns"].items())
sub = "csv" if a.job == "pass" else "spark"
df = (spark.readStream.schema(ddl).option("header", True).option("maxFilesPerTrigger", 1)
      .csv(str(a.data / sub)))
if a.job == "pass":
    df = df.filter(s["pass_filter"]).select(*s["pass_columns"])
else:
    key = S.key_of(s, a.job)
    df = df.withColumn("t", F.timestamp_millis("ts")).withWatermark("t", f"{s['delay_ms']} milliseconds")
    if s["window_filter"]:
        df = df.filter(s["window_filter"])
    df = df.filter(F.col("t") < F.timestamp_millis(F.lit(s["end_ts"])))  # drops the end marker
    if a.job == "session":
        win = F.session_window("t", f"{S.GAP} milliseconds")
    else:
        size, slide = S.WINDOWS[a.job]
        win = F.window("t", f"{size} milliseconds", f"{slide} milliseconds")
    aggs = [F.count(F.lit(1)).alias("n")]
    if a.job == "tumbling":
        aggs += [F.avg(s["value"]).alias("mean"), F.max(s["value"]).alias("max")]
    g = df.groupBy(win.alias("w"), F.col(key).alias("key")).agg(*aggs)
    df = g.select("key", F.unix_millis("w.start").alias("start"), F.unix_millis("w.end").alias("end"),
                  *[F.col(c) for c in S.aggregates(a.job)])
out = a.out / "output"
query = (df.writeStream.outputMode("append")
         .foreachBatch(lambda batch, _: batch.write.mode("append").parquet(str(out)))
         .option("checkpointLocation", str(a.out / "checkpoint")).trigger(availableNow=True).start())
query.awaitTermination()
S.finish(a.out, t_ready, {"path": f"{out}/*.parquet", "format": "parquet"},
         batches=len(query.recentProgress))
spark.stop()
