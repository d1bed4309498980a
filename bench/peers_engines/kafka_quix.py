"""Quix Streams reading Kafka: keyed tumbling count (run with bench/.venvs/quix).

Application (consumer group, from the earliest offset, no changelog topics), event time from
the ``ts`` field (timestamp_extractor), ``tumbling_window(window, grace_ms=delay).count()
.final()``: Quix keys its state by the Kafka message key and closes a key's windows when
that key's newest event time passes window end + grace, so the producer wrote one end marker
per key. The app stops once it has processed the last end marker (``app.stop()`` lets the
current message, whose window closes, finish).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.kafka_args()
# noida-db 0.2.3 ignores fetch.max.bytes and max.partition.fetch.bytes and answers a fetch with
# everything after the fetch offset (124 MB for a partition of 500,000 events), above librdkafka's
# default response limit (100 MB): without this the consumer fails every fetch and reads nothing.
RECEIVE_LIMIT = {"receive.message.max.bytes": 2_147_483_647}
from quixstreams import Application  # noqa: E402

app = Application(broker_address=a.bootstrap, consumer_group=f"quix-{a.topic}", auto_offset_reset="earliest",
                  state_dir=str(a.out / "state"), use_changelog_topics=False, loglevel="WARNING",
                  consumer_extra_config=RECEIVE_LIMIT)
topic = app.topic(a.topic, value_deserializer="json", key_deserializer="str",
                  timestamp_extractor=lambda value, headers, ts, ts_type: value["ts"])
markers = [0]


def count_markers(value):
    if value["ts"] >= a.end_ts:
        markers[0] += 1
        if markers[0] == a.keys:
            app.stop()


results = []
sdf = app.dataframe(topic).update(count_markers)
sdf = sdf.tumbling_window(a.window_ms, grace_ms=a.delay_ms).count().final()
sdf.update(lambda w, key, ts, headers: results.append([key, w["start"], w["end"], w["value"]]), metadata=True)
t_ready = time.time()
app.run()
out = a.out / "output.csv"
S.write_csv(out, ["key", "start", "end", "n"], results)
S.finish(a.out, t_ready, {"path": str(out), "format": "csv"}, markers=markers[0])
