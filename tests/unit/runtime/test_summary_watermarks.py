"""``RunSummary.watermarks()``: the keys its docs name; none shown as -2**63 (issue 26 item 11)."""

from __future__ import annotations

import pyarrow as pa

from wire.core.envelope import MAX_WATERMARK, metrics_table
from wire.core.time import NO_WATERMARK
from wire.runtime.runner import RunSummary
from wire.sources.file_source.listing import SINGLE_PARTITION
from wire.sources.http_source.config import WAL_PARTITION
from wire.sources.kafka_source.decode import partition_name


def summary_of(*tables: pa.Table) -> RunSummary:
    s = RunSummary("f", source_steps=("orders", "files", "ingest"))
    s.add_metrics(pa.concat_tables(tables))
    return s


def test_kafka_partitions_are_topic_colon_partition_and_one_without_data_is_left_out():
    kafka = metrics_table("orders", {
        "gauge:watermark": 5_000,
        f"gauge:watermark:{partition_name('orders', 0)}": 5_000,
        f"gauge:watermark:{partition_name('orders', 1)}": NO_WATERMARK,  # no record yet
        "events": 3,
    })
    files = metrics_table("files", {"gauge:watermark": 7, f"gauge:watermark:{SINGLE_PARTITION}": 7})
    ingest = metrics_table("ingest", {f"gauge:watermark:{WAL_PARTITION}": NO_WATERMARK,
                                      "gauge:watermark": NO_WATERMARK})
    window = metrics_table("hourly", {"gauge:input_watermark": 5_000, "gauge:output_watermark": NO_WATERMARK})
    marks = summary_of(kafka, files, ingest, window).watermarks()
    assert marks == {
        "orders": {"watermark": 5_000, "watermark:orders:0": 5_000},
        "files": {"watermark": 7, "watermark:all": 7},
        "hourly": {"input_watermark": 5_000},
    }
    assert NO_WATERMARK not in {v for m in marks.values() for v in m.values()}


def test_a_partition_gets_its_watermark_once_it_has_data_and_the_end_stays():
    first = metrics_table("orders", {"gauge:watermark:orders:1": NO_WATERMARK})
    later = metrics_table("orders", {"gauge:watermark:orders:1": MAX_WATERMARK})
    s = summary_of(first)
    assert s.watermarks() == {}
    s.add_metrics(later)
    assert s.watermarks() == {"orders": {"watermark:orders:1": MAX_WATERMARK}}
