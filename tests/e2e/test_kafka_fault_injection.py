"""Exactly-once from Kafka to Kafka (transactions) and Delta under SIGKILL at random moments.

The driver (``faults/kafka_driver.py``) reads a 4-partition topic and writes per-key 1 s
windows to a Kafka topic (one transaction per epoch) and to a Delta table. It is killed
(SIGKILL to its process group) at random moments and restarted on the same checkpoint until
it finishes. Then a ``read_committed`` consumer of the output topic and the Delta table each
hold exactly the rows of the batch oracle (pandas over the produced events): no loss, no
duplicate. After every kill, the consumer group's committed offsets are checked against
Spark's offset and commit logs: never ahead of the last committed epoch (contraflow,
SPEC §7). ``make test`` runs 2 kills; the slow variant 12.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("confluent_kafka")
from deltalake import DeltaTable  # noqa: E402

DRIVER = Path(__file__).parent / "faults" / "kafka_driver.py"
KEYS = "abcdefgh"
COLUMNS = ["k", "window_start", "n", "total"]


def events(n: int) -> list[dict]:
    """Event ``i`` at ``5 i`` ms, key ``KEYS[i % 8]``, in partition ``i % 4``: each partition in
    event-time order, so nothing is late against the minimum of the partition watermarks."""
    return [{"t": i * 5, "k": KEYS[i % 8], "v": i} for i in range(n)]


def oracle(evs: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(evs)
    df["window_start"] = df["t"] // 1000 * 1000
    g = df.groupby(["k", "window_start"]).agg(n=("v", "size"), total=("v", "sum")).reset_index()
    return normal(g)


def normal(df: pd.DataFrame) -> pd.DataFrame:
    """The compared columns, ``window_start`` as int ms whether it came as a timestamp
    (Delta), text (JSON) or int (the oracle)."""
    df = df[COLUMNS].copy()
    ws = df["window_start"]
    if not pd.api.types.is_integer_dtype(ws):
        ws = pd.to_datetime(ws, utc=True)
        df["window_start"] = (ws - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    df = df.astype({"n": "int64", "total": "int64", "window_start": "int64"})
    return df.sort_values(COLUMNS).reset_index(drop=True)


def committed_epoch_offsets(ck: Path) -> dict[int, int]:
    """Per input partition, ``next`` of the last committed epoch, read from Spark's logs."""
    spark = ck / "spark"
    commits = sorted(int(p.name) for p in (spark / "commits").glob("[0-9]*")) if spark.exists() else []
    if not commits:
        return {}
    lines = (spark / "offsets" / str(commits[-1])).read_text().splitlines()
    offset = json.loads(lines[2])  # "v1", the batch metadata, then the one source's offset
    return {int(name.rsplit(":", 1)[1]): p["next"] for name, p in offset["partitions"].items()}


def read_committed(bootstrap: str, topic: str) -> pd.DataFrame:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        rows, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            rows.append(json.loads(msg.value()))
        else:
            raise AssertionError("the output topic was not read to its end within 60 s")
    finally:
        c.close()
    return pd.DataFrame(rows)


def committed(spark: Path) -> int:
    """How many epochs Spark's commit log holds."""
    return len(list((spark / "commits").glob("[0-9]*"))) if spark.exists() else 0


def run_with_kills(args: list[str], out: Path, kills: int, seed: int, check) -> dict:
    rng = random.Random(seed)
    stats = {"kills": 0, "mid_epoch": 0, "group_checks": 0}
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    while True:
        proc = subprocess.Popen([sys.executable, str(DRIVER), *args, str(out)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        if stats["kills"] < kills:
            # killed after 1-3 more epochs committed, then 0-1 s on (often mid-epoch): each run is
            # killed with epochs left to do, however fast the flow runs
            spark = out / "_checkpoint" / "spark"
            goal, deadline = committed(spark) + rng.randint(1, 3), time.monotonic() + 180
            while committed(spark) < goal and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))
            if proc.poll() is None:
                planned = len(list((spark / "offsets").glob("[0-9]*"))) if spark.exists() else 0
                done = len(list((spark / "commits").glob("[0-9]*"))) if spark.exists() else 0
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                stats["kills"] += 1
                stats["mid_epoch"] += int(planned > done)
                check()
                stats["group_checks"] += 1
                continue
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output[-3000:]
        assert "DONE" in output
        check()
        return stats


def _fault_run(broker, tmp_path: Path, n: int, kills: int, seed: int) -> dict:
    tag = f"k{seed}"
    in_topic, out_topic, group = f"in_{tag}", f"out_{tag}", f"g_{tag}"
    broker.create_topic(in_topic, partitions=4)
    broker.create_topic(out_topic, partitions=1)
    evs = events(n)
    broker.produce(in_topic, [(e["v"] % 4, e["k"].encode(), e, None) for e in evs])
    want = oracle(evs)
    out = tmp_path / "out"

    def group_not_ahead() -> None:
        group = broker.committed(group_name, in_topic, 4)
        epoch = committed_epoch_offsets(out / "_checkpoint")
        for p, o in group.items():
            if o >= 0:  # -1001: nothing committed yet
                assert o <= epoch.get(p, 0), (p, o, epoch)

    group_name = group
    args = [broker.bootstrap, in_topic, out_topic, group, str(len(want))]
    stats = run_with_kills(args, out, kills, seed, group_not_ahead)
    delta = DeltaTable(str(out / "delta")).to_pyarrow_table().to_pandas()
    pd.testing.assert_frame_equal(normal(delta), want)
    pd.testing.assert_frame_equal(normal(read_committed(broker.bootstrap, out_topic)), want)
    stats["windows"] = len(want)
    print(f"kafka fault injection: {stats}")
    return stats


def test_kafka_kill_dash_nine_bounded(kafka_broker, tmp_path):
    stats = _fault_run(kafka_broker, tmp_path, n=2_000, kills=2, seed=11)
    assert stats["kills"] == 2


@pytest.mark.slow
def test_kafka_kill_dash_nine_many(kafka_broker, tmp_path):
    stats = _fault_run(kafka_broker, tmp_path, n=30_000, kills=12, seed=2026)
    assert stats["kills"] == 12
