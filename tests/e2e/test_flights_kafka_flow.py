"""The flights job from Kafka (``flights_job --kafka``): its window output equals the file run's.

Both runs read the same first 12,000 flights. The watermark delay (2 days) is above every
lag in the data and the allowed lateness 0, so neither run has a late event and every window
is emitted once, as final: the window output cannot depend on how the runs interleave the
origins (the Kafka run reads 4 partitions keyed by origin; its watermark is the minimum over
them). With the job's defaults (60 min, 180 min) the late sets can differ: the Kafka run's
watermark is the slowest origin's, the file run's the newest flight's.
"""

from __future__ import annotations

import duckdb
import pytest

from wire.examples.flights import prepare_flights
from wire.examples.flights_job import flights_flow, run_from_kafka

pytestmark = pytest.mark.spark
pytest.importorskip("confluent_kafka")


def window_rows(out) -> list[tuple]:
    return duckdb.sql(
        f"""SELECT origin, epoch_ms(window_start), epoch_ms(window_end), departures,
                   round(mean_dep_delay, 9), max_dep_delay, emit
            FROM read_parquet('{out}/windows/*/*.parquet') ORDER BY ALL"""
    ).fetchall()


def test_kafka_run_equals_file_run(spark, kafka_broker, tmp_path):
    data = prepare_flights(tmp_path / "input", rows_per_file=4_000, limit=12_000)
    settings = {"max_delay": "2d", "allowed_lateness": 0, "max_events_per_epoch": 4_000}
    files_out, kafka_out = tmp_path / "files", tmp_path / "kafka"
    flow = flights_flow(str(tmp_path / "input" / "*.parquet"), files_out, **settings)
    flow.run(checkpoint=str(files_out / "_checkpoint"), spark=spark)
    summary = run_from_kafka(data.files, kafka_out, bootstrap=kafka_broker.bootstrap, topic="flights",
                             spark=spark, timeout_s=300, **settings)
    expected = window_rows(files_out)
    assert len(expected) > 100 and {r[-1] for r in expected} == {"final"}
    assert window_rows(kafka_out) == expected
    assert summary.total("late") == 0
    counts = kafka_broker.committed("wire-flights", "flights", 4)
    assert sum(counts.values()) <= data.events + 4
