"""A lost Spark worker is rescheduled (SPEC §6): the flights flow on a 2-worker standalone
cluster, one worker SIGKILLed mid-run, gives exactly the outputs of a local run.

The drivers run in subprocesses: a second SparkContext cannot live next to the shared
local session of the test process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from wire.examples.flights import prepare_flights
from wire.testing.cluster import StandaloneCluster, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = textwrap.dedent(
    """
    import json, sys, time
    import wire
    from wire.examples.flights_job import flights_flow

    master, glob, out = sys.argv[1:4]
    conf = json.loads(sys.argv[4])
    t0 = time.perf_counter()
    spark = wire.spark(master, conf, app_name="wire-cluster-test", log_file=f"{out}/spark.log")
    started = time.perf_counter() - t0
    # a short delay so that the late port gets events too (12 of these 60,000)
    flow = flights_flow(glob, out, max_delay="5m", allowed_lateness="30m", max_events_per_epoch=5_000)
    summary = flow.run(checkpoint=f"{out}/_checkpoint", spark=spark, max_restarts=0)
    executors, failed = [], []
    if spark.sparkContext.uiWebUrl:  # the driver's REST API: what the executor loss cost
        import urllib.request
        def get(path):
            with urllib.request.urlopen(f"{spark.sparkContext.uiWebUrl}/api/v1/applications/"
                                        f"{spark.sparkContext.applicationId}/{path}") as r:
                return json.loads(r.read())
        executors = [{k: e.get(k) for k in ("id", "isActive", "completedTasks", "failedTasks",
                                             "removeReason")} for e in get("allexecutors")]
        for st in get("stages"):
            if st["numFailedTasks"]:
                for t in get(f"stages/{st['stageId']}/{st['attemptId']}/taskList?status=FAILED"):
                    failed.append([st["stageId"], st["attemptId"], t["executorId"],
                                   (t.get("errorMessage") or "").splitlines()[0][:160]])
    print(json.dumps({"startup_s": started, "run_s": summary.elapsed_s, "epochs": summary.epochs,
                      "events": summary.input_events, "restarts": summary.restarts,
                      "driver_rows": summary.driver_rows, "rows_written": dict(summary.rows_written),
                      "executors": executors, "failed_tasks": failed}))
    spark.stop()
    """
)

CLUSTER_CONF = {
    "spark.ui.enabled": "true",  # its REST API shows which executor runs tasks
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
    "spark.driver.memory": "1g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}


def finish(proc: subprocess.Popen[str], out: Path, timeout: float) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    log = (out / "spark.log").read_text(errors="replace") if (out / "spark.log").exists() else ""
    assert proc.returncode == 0, f"job failed ({proc.returncode}):\n{stderr[-4000:]}\n{log[-4000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


def get_json(url: str) -> object:
    """GET ``url`` as JSON; None when the (busy) driver does not answer in time."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())
    except OSError:
        return None


def running_tasks(ui: str, executor: str) -> int:
    """Tasks running on ``executor``, from the driver's REST API (0 if it does not answer)."""
    apps = get_json(f"{ui}/api/v1/applications")
    executors = apps and get_json(f"{ui}/api/v1/applications/{apps[0]['id']}/executors")
    return next((e["activeTasks"] for e in executors or () if e["id"] == executor), 0)


def commits(out: Path) -> int:
    d = out / "_checkpoint" / "spark" / "commits"
    return sum(1 for f in d.iterdir() if f.name.isdigit()) if d.is_dir() else 0


def rows(out: Path, name: str) -> list[tuple]:
    files = sorted((out / name).glob("*/*.parquet"))
    if not files:
        return []
    return sorted(duckdb.sql(f"SELECT * FROM read_parquet({[str(f) for f in files]!r})").fetchall(),
                  key=repr)


@contextlib.contextmanager
def job(master: str, glob: str, out: Path, conf: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """The flights job with its own driver, in a subprocess; killed if the test fails."""
    out.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB, master, glob, str(out), json.dumps(conf)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:  # its driver JVM exits when its stdin (a pipe from it) closes
            proc.kill()
            proc.communicate()


def kill_worker_mid_task(cluster: StandaloneCluster, driver: subprocess.Popen[str], out: Path,
                         ui: str) -> tuple[str, int]:
    """After two epochs, SIGKILL worker 0 while its executor runs a task.

    Freeze the worker when the driver shows a task running on its executor. If the
    task still shows as running once the driver's (lagging, busy) listener caught up,
    it is stuck in the frozen executor: kill the worker there. Otherwise thaw and retry.
    Returns the executor id and the number of epochs committed at the kill.
    """
    deadline = time.monotonic() + 150
    while commits(out) < 2:
        assert driver.poll() is None, f"job ended before the kill:\n{driver.communicate()[1][-4000:]}"
        assert time.monotonic() < deadline, "no epoch completed on the cluster"
        time.sleep(0.1)
    workers = cluster.state()["workers"]
    assert [w["coresused"] for w in workers] == [1, 1], "the app must run on both workers"
    [victim] = cluster.executor_ids(0)
    while True:
        assert time.monotonic() < deadline, f"executor {victim} was never caught running a task"
        if running_tasks(ui, victim) == 0:
            continue
        cluster.freeze_worker(0)
        time.sleep(1.5)
        if running_tasks(ui, victim) > 0:
            time.sleep(1.5)
            if running_tasks(ui, victim) > 0:
                break
        cluster.thaw_worker(0)
    cluster.kill_worker(0)
    return victim, commits(out)


def test_killed_worker_is_rescheduled_and_outputs_match_local(tmp_path):
    data = prepare_flights(tmp_path / "in", limit=60_000, rows_per_file=5_000)
    glob = str(tmp_path / "in" / "*.parquet")
    cluster_out, local_out = tmp_path / "cluster", tmp_path / "local"

    t0 = time.perf_counter()
    with StandaloneCluster(workers=2, cores_per_worker=1, memory_per_worker="2g") as cluster:
        cluster_up = time.perf_counter() - t0
        ui_port = free_port()
        conf = {**CLUSTER_CONF, "spark.ui.port": str(ui_port)}
        with job(cluster.master_url, glob, cluster_out, conf) as driver:
            victim, killed_at = kill_worker_mid_task(cluster, driver, cluster_out,
                                                     f"http://127.0.0.1:{ui_port}")
            cluster.wait_for_workers(1, timeout_s=30)
            result = finish(driver, cluster_out, timeout=180)
        cluster_total = time.perf_counter() - t0
    print(f"\ncluster: up {cluster_up:.1f} s, driver start {result['startup_s']:.1f} s, "
          f"run {result['run_s']:.1f} s ({result['epochs']} epochs, worker killed after "
          f"{killed_at}), total {cluster_total:.1f} s\nexecutors {result['executors']}\n"
          f"failed tasks {result['failed_tasks']}")
    assert result["restarts"] == 0  # no query restart: Spark rescheduled the tasks
    # executors wrote every sink (parquet), the driver only committed: no data row reached it
    assert result["driver_rows"] == [0] * result["epochs"]
    assert result["rows_written"]["windows"] > 3_000
    assert commits(cluster_out) > killed_at
    assert result["events"] == data.events
    assert "Lost executor" in (cluster_out / "spark.log").read_text(errors="replace")
    lost = next(e for e in result["executors"] if e["id"] == victim)
    assert not lost["isActive"] and lost["removeReason"].startswith("worker lost")
    # the task frozen on the victim failed with it (not counted against spark.task.maxFailures)
    assert any(ex == victim and msg.startswith("ExecutorLostFailure")
               for _, _, ex, msg in result["failed_tasks"]), result["failed_tasks"]
    # ... and ran again on the other executor (whose reducers may hit one FetchFailed for
    # the lost map output: the stage is then resubmitted)
    survivor = next(e for e in result["executors"] if e["id"] not in (victim, "driver"))
    assert survivor["isActive"] and survivor["completedTasks"] > 0
    assert all(msg.startswith(("ExecutorLostFailure", "FetchFailed"))
               for *_, msg in result["failed_tasks"]), result["failed_tasks"]

    t1 = time.perf_counter()
    with job("local[2]", glob, local_out, {}) as driver:
        local = finish(driver, local_out, timeout=180)
    local_total = time.perf_counter() - t1
    print(f"local: driver start {local['startup_s']:.1f} s, run {local['run_s']:.1f} s, "
          f"total {local_total:.1f} s")
    assert local["epochs"] == result["epochs"]
    for name in ("windows", "late", "dead_letter"):
        assert rows(cluster_out, name) == rows(local_out, name), name
    assert len(rows(local_out, "windows")) > 3_000
    assert len(rows(local_out, "late")) > 0
