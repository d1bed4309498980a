"""A flow run that starts its own SparkSession keeps the console quiet (issue 16).

In a fresh Python process (a new JVM: the session's stderr is chosen when the JVM
starts), a windowed flow runs with ``flow.run(checkpoint)`` and no ``spark``. Spark's
warnings and the stateful workers' "Streaming TransformWithStateInPandas Python worker"
lines must land in ``<checkpoint>/spark.log``, not on the console, and the summary must
say where the log is.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    import wire

    src, ck, out = sys.argv[1:4]
    schema = pa.schema([("ts", pa.int64()), ("k", pa.string())])
    flow = wire.Flow("quiet")
    events = flow.source(wire.sources.files(src, format="csv", schema=schema), event_time="ts",
                         key="k", max_events_per_epoch=4)
    events.window(wire.Tumbling("1s")).aggregate(n=wire.count(), name="counts").sink(
        wire.sinks.jsonl(out))
    summary = flow.run(checkpoint=ck, master="local[1]")
    print(summary.render())
    print("SPARK_LOG=" + str(summary.spark_log))
    """
)


def test_spark_chatter_goes_to_the_checkpoint_log_not_the_console(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "e.csv").write_text("ts,k\n" + "".join(f"{i * 300},k{i % 2}\n" for i in range(12)))
    ck = tmp_path / "ck"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(src), str(ck), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    log = ck / "spark.log"
    assert f"SPARK_LOG={log}" in done.stdout
    assert f"Spark's log: {log}" in done.stdout
    assert "TransformWithStateInPandas Python worker" not in console
    assert " WARN " not in console
    assert "TransformWithStateInPandas Python worker" in log.read_text()  # it went to the file
