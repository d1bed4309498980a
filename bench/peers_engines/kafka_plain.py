"""A plain confluent-kafka consumer loop: keyed tumbling count in Python (run with Wire's venv).

One consumer assigned every partition from offset 0, ``consume(10000)``, ``json.loads`` of
each value, a dict of counts per (key, window start); it stops after N events + the end
markers. No watermark: it counts everything and writes every window at the end.
"""

import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec as S

a = S.kafka_args()
# noida-db 0.2.3 ignores fetch.max.bytes and max.partition.fetch.bytes and answers a fetch with
# everything after the fetch offset (124 MB for a partition of 500,000 events), above librdkafka's
# default response limit (100 MB): without this the consumer fails every fetch and reads nothing.
RECEIVE_LIMIT = {"receive.message.max.bytes": 2_147_483_647}
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": f"plain-{a.topic}",
                     "enable.auto.commit": False, **RECEIVE_LIMIT})
parts = consumer.list_topics(a.topic, timeout=30).topics[a.topic].partitions
consumer.assign([TopicPartition(a.topic, p, 0) for p in parts])
t_ready = time.time()
counts: Counter = Counter()
seen, total, w = 0, a.events + a.keys, a.window_ms
while seen < total:
    for msg in consumer.consume(10_000, timeout=1.0):
        if msg.error():
            continue
        seen += 1
        e = json.loads(msg.value())
        if e["ts"] < a.end_ts:
            counts[(e["key"], e["ts"] - e["ts"] % w)] += 1
consumer.close()
out = a.out / "output.csv"
S.write_csv(out, ["key", "start", "end", "n"], [[k, s, s + w, n] for (k, s), n in counts.items()])
S.finish(a.out, t_ready, {"path": str(out), "format": "csv"})
