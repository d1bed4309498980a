"""A throw-away Kafka-protocol broker for tests: ``noida-db`` (PyPI) on 127.0.0.1, on a free port.

Used by Wire's own Kafka tests and usable by users' tests the same way::

    ok, reason = KafkaBroker.available()
    if not ok:
        pytest.skip(reason)
    with KafkaBroker() as broker:
        broker.create_topic("orders", partitions=4)
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

The broker is ``noida-db start --only kafka --kafka-port N --data-dir D`` (the dev extra
pins noida-db 0.2.3; it prints a harmless glibc warning at start). It is a
:class:`~wire.testing.server.ThrowawayServer`: stopped through its process group id
(SIGTERM, then SIGKILL), never by name; :meth:`restart` stops
it and starts it again on the same port and data dir.

Restart, measured on 2026-11-23 (noida-db 0.2.3, confluent-kafka 2.16.1, one run each,
after the fix to :meth:`kill` below): after a SIGTERM restart (:meth:`restart`) with the
same data dir, the topics (with their partition counts), all records (100 of 100, same
offsets) and the group's committed offsets were there; a restart took about 0.15 s.
After a SIGKILL (:meth:`sigkill`) records acknowledged 2, 6 and 12 s before were there,
but records acknowledged 0.5 s before, or just before, were lost (100 of 150, 100 of 160):
noida-db writes its data (``kafka.json``) to disk only now and then, so a SIGKILL loses
the last moments' acknowledged records. Transactions open at a restart were not measured.
(An earlier version of this docstring claimed the data survived without having checked;
and its kill() left the native server running, so a "restart" kept the old process.)

What noida-db 0.2.3 supports, measured with confluent-kafka 2.16.1: topics with several
partitions, adding partitions (``create_partitions``), keyed produce, record timestamps
(CreateTime), ``get_watermark_offsets``, consumer-group offset commits and
``committed`` (with ``assign``, no group membership needed), idempotent producers,
transactions (``init_transactions`` fences an older producer with the same
transactional id, aborts its open transaction), and ``read_committed`` hiding aborted
and open transactions; data kept across a restart with the same data dir (above). Limits:
one broker (no replication, no leader failover); not measured: consumer-group
rebalancing with ``subscribe``, compaction, retention, ``send_offsets_to_transaction``.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from wire.errors import WireError
from wire.testing.server import HOST, ThrowawayServer, accepts, free_port, log_tail, terminate, wait_until

if TYPE_CHECKING:  # confluent-kafka (pip extra ``kafka``) is imported where it is used
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaBroker"]

_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


class KafkaBroker(ThrowawayServer):
    """A throw-away noida-db Kafka broker; a context manager (``start`` / ``stop``)."""

    prefix = "wire-kafka-"

    def __init__(self, *, base_dir: str | None = None) -> None:
        super().__init__(base_dir=base_dir)
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def binary() -> str | None:
        """The ``noida-db`` command next to this Python, or on ``PATH``."""
        here = Path(sys.executable).parent / "noida-db"
        if here.is_file():
            return str(here)
        return shutil.which("noida-db")

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether a broker can be started here: ``(True, "")`` or ``(False, reason)``."""
        if cls.binary() is None:
            return False, "noida-db not found (pip install noida-db; the dev extra pins it)"
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            return False, "confluent-kafka is not installed (pip install 'wire[kafka]')"
        return True, ""

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``."""
        if self.port is None:
            raise WireError("KafkaBroker: bootstrap asked before start()")
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return None if self._process is None else self._process.pid

    def start(self) -> Self:
        """Start the broker (a new temp data dir and free port the first time); return when it answers."""
        if self.root is not None:  # after kill(): the same port and data dir
            if self._process is None:
                self._launch()
            return self
        return super().start()

    def kill(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL, to its process group); keep the port and data dir.

        ``noida-db`` on PATH is a Python wrapper that runs the native server as its child:
        signalling the wrapper alone left the server running (and answering on the port).
        The broker is started in a session of its own and the whole group is signalled,
        then the port is waited free.
        """
        self._stop_process(signal.SIGTERM)

    def sigkill(self) -> None:
        """Kill the broker at once (SIGKILL to its process group); keep the port and data dir."""
        self._stop_process(signal.SIGKILL)

    def restart(self) -> None:
        """Stop the broker and start it again on the same port with the same data."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Stop the broker and delete its data dir; safe to call twice."""
        super().stop()
        self.port = None

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        """Create ``topic`` with ``partitions`` partitions (replication factor 1)."""
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic  # what confluent_kafka.admin re-exports

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
        for f in admin.create_topics([new]).values():
            f.result(timeout=30)
        self._wait_partitions(admin, topic, partitions)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions."""
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewPartitions  # what confluent_kafka.admin re-exports

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_partitions([NewPartitions(topic, total)]).values():
            f.result(timeout=30)
        self._wait_partitions(admin, topic, total)

    def produce(self, topic: str, records: Iterable[tuple[int | None, Any, Any, int | None]]) -> None:
        """Produce ``(partition, key, value, timestamp_ms)`` records and flush; dict values go as JSON.

        ``partition`` None: the producer's partitioner (by key); ``timestamp_ms`` None: now.
        """
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "linger.ms": 5})
        for part, key, value, ts in records:
            if isinstance(value, dict):
                value = json.dumps(value).encode()
            kwargs: dict[str, Any] = {} if part is None else {"partition": part}
            if ts is not None:
                kwargs["timestamp"] = ts
            producer.produce(topic, value=value, key=key, **kwargs)
            producer.poll(0)
        if producer.flush(30):
            raise WireError(f"KafkaBroker: records to {topic!r} not delivered within 30 s")

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """The group's committed offset per partition of ``topic`` (-1001: none)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
            return {tp.partition: tp.offset for tp in tps}
        finally:
            consumer.close()

    def _launch(self) -> None:
        binary = self.binary()
        if binary is None:
            raise WireError(f"KafkaBroker: cannot start: {self.available()[1]}")
        assert self.root is not None
        if self.port is None:
            self.port = free_port()
        log = open(self.root / "broker.log", "ab")  # noqa: SIM115 - handed to the process
        self._process = subprocess.Popen(
            [binary, "start", "--only", "kafka", "--kafka-port", str(self.port), "--host", HOST,
             "--data-dir", str(self.root / "data")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        wait_until(self._answers, timeout_s=_READY_TIMEOUT_S, what=f"KafkaBroker on {self.bootstrap}",
                   interval_s=0.1, alive=self._died)

    def _shutdown(self) -> None:
        self._stop_process(signal.SIGTERM)

    def _stop_process(self, first: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        terminate(process, timeout_s=_STOP_TIMEOUT_S, group=True, first=first)
        port = self.port
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while port is not None and accepts(port, 0.2) and time.monotonic() < deadline:
            time.sleep(0.05)
        if port is not None and accepts(port, 0.2):  # the native server outlived its wrapper
            terminate(process, timeout_s=_STOP_TIMEOUT_S, group=True, first=signal.SIGKILL)

    def _answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if self.port is None or not accepts(self.port):
            return False
        try:
            AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=2)
        except Exception:
            return False
        return True

    def _died(self) -> str | None:
        if self._process is None or self._process.poll() is None:
            return None
        log = None if self.root is None else self.root / "broker.log"
        return f"noida-db exited with {self._process.returncode}:\n{log_tail(log)}"

    def _wait_partitions(self, admin: AdminClient, topic: str, n: int) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            meta = admin.list_topics(topic=topic, timeout=5)
            tm = meta.topics.get(topic)
            if tm is not None and tm.error is None and len(tm.partitions) >= n:
                return
            time.sleep(0.05)
        raise WireError(f"KafkaBroker: topic {topic!r} does not show {n} partitions")
