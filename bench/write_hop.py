"""The cost of writing from a Python stage: Spark's Parquet writer vs mapInArrow + pyarrow.

Wire's executor sinks write each epoch's rows from a ``mapInArrow`` stage (JVM rows ->
Arrow -> a Python worker -> pyarrow's Parquet writer); plain PySpark writes with Spark's
own writer. This measures both on the same cached DataFrame (``--rows`` rows, 7 columns,
2 partitions, ``local[2]``), ``--repeats`` times each; the first round includes Python
worker start-up.

Usage: .venv/bin/python bench/write_hop.py [--rows N] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import functions as F

import wire

OUT = "out/bench_write_hop"


def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write the task's rows to one Parquet file; yield its row count."""
    import uuid

    import pyarrow.parquet as pq

    table = pa.Table.from_batches(list(batches))
    pq.write_table(table, f"{OUT}/python/part-{uuid.uuid4()}.parquet")
    yield pa.RecordBatch.from_pylist([{"n": table.num_rows}])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    spark = wire.spark("local[2]")
    df = spark.range(args.rows, numPartitions=2).select(
        F.col("id").alias("auction"), (F.col("id") * 7 % 1000).alias("bidder"),
        (F.rand(1) * 1000).cast("long").alias("price"), F.lit("channel-x").alias("channel"),
        F.concat(F.lit("http://x/"), F.col("id").cast("string")).alias("url"),
        (F.col("id") * 100).alias("date_time"), F.lit("extra").alias("extra")).cache()
    df.count()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.rows:,} rows")
    for i in range(args.repeats):
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(f"{OUT}/python")
        t = time.perf_counter()
        df.write.parquet(f"{OUT}/spark")
        spark_s = time.perf_counter() - t
        t = time.perf_counter()
        n = sum(r["n"] for r in df.mapInArrow(write_partition, "n long").collect())
        python_s = time.perf_counter() - t
        assert n == args.rows
        print(f"round {i + 1}: Spark writer {spark_s:.2f} s, mapInArrow + pyarrow {python_s:.2f} s")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
