"""``Flow.run(dashboard=True)`` serves the dashboard while the run lasts and prints its URL."""

from __future__ import annotations

import re
import threading

import httpx
import pytest
from test_control_plane import SCHEMA, wait_for, write_events

import wire

pytestmark = pytest.mark.spark


def test_run_with_dashboard_prints_the_url_and_serves_the_flow_until_the_run_ends(spark, tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    flow = wire.Flow("dashrun")
    source = wire.sources.files(str(src), format="jsonl", bounded=False, schema=SCHEMA)
    flow.source(source, event_time="t", key="k", max_events_per_epoch=20, name="events").sink(
        wire.sinks.parquet(tmp_path / "out"), name="copy")
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["summary"] = flow.run(str(tmp_path / "ck"), spark=spark, max_epochs=2, dashboard=True)
        except BaseException as e:  # reported by the test below
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    printed: list[str] = []

    def url_printed() -> bool:
        printed.append(capsys.readouterr().err)
        return "dashboard at http://127.0.0.1:" in "".join(printed)

    wait_for(url_printed, "the dashboard's URL on stderr", timeout_s=60)
    match = re.search(r"dashboard at (http://127\.0\.0\.1:\d+)/ \(token: (\S+)\)", "".join(printed))
    assert match, printed
    url, token = match.groups()
    wait_for(lambda: any(f["id"] == "dashrun" for f in httpx.get(f"{url}/v1/flows", timeout=10).json()),
             "the flow to be registered")
    assert "uPlot" in httpx.get(f"{url}/", timeout=10).text
    graph = httpx.get(f"{url}/v1/flows/dashrun/graph", timeout=10).json()
    assert [n["step"] for n in graph["nodes"]][:2] == ["events", "copy"]
    # the flow is registered while its run still starts (Spark, its compilation); until then a
    # status change is answered 409 "is starting" (control/server.py), so it is retried on that
    answers: list[httpx.Response] = []

    def resumed() -> bool:
        answers.append(httpx.patch(f"{url}/v1/flows/dashrun", json={"status": "running"},
                                   headers={"Authorization": f"Bearer {token}"}, timeout=10))
        return not (answers[-1].status_code == 409 and "is starting" in answers[-1].text)

    wait_for(resumed, "the flow's run to start")
    assert answers[-1].status_code == 200, answers[-1].text

    write_events(src / "a.jsonl", range(60))  # three epochs of 20: the third stops the run
    thread.join(120)
    assert not thread.is_alive() and "error" not in result, result
    assert result["summary"].epochs == 2
    with pytest.raises(httpx.TransportError):  # served while the run lasts, not after
        httpx.get(f"{url}/v1/flows", timeout=5)
