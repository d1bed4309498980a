"""Per-partition source status (REST ``sources.<step>.partitions``): hand-derived from gauges."""

from __future__ import annotations

from wire.control.models import PartitionStatus
from wire.control.status import counters_of, partitions_of
from wire.core.time import NO_WATERMARK
from wire.runtime.runner import RunSummary


def test_kafka_and_file_partitions_from_their_gauges():
    s = RunSummary("f", source_steps=("clicks", "files"))
    s.gauges.update({
        ("clicks", "watermark"): 900,
        ("clicks", "watermark:clicks:0"): 900,
        ("clicks", "watermark:clicks:1"): 1500,
        ("clicks", "offset_lag:clicks:0"): 12,
        ("clicks", "offset_lag:clicks:1"): 0,
        ("clicks", "max_event_time"): 1600,
        ("files", "watermark:p0"): NO_WATERMARK,
        ("w", "input_watermark"): 800,
    })
    c = counters_of(s)
    assert partitions_of(c, "clicks") == {
        "clicks:0": PartitionStatus(watermark=900, offset_lag=12),
        "clicks:1": PartitionStatus(watermark=1500, offset_lag=0),
    }
    assert partitions_of(c, "files") == {"p0": PartitionStatus(watermark=None, offset_lag=None)}
    assert partitions_of(c, "w") == {}
