"""``wire report CHECKPOINT``: a static HTML report of a run, from its recorded epochs.

The report is the dashboard's page with everything inlined (style sheets, uPlot, the
dashboard's script) and the data embedded as JSON instead of read from a control plane:
the operator graph (``<checkpoint>/graph.json``), the last status, the history built
from the epoch log (:mod:`wire.runtime.epoch_log`, one sample per epoch) and the last
run's newest dead letters and late events (``<checkpoint>/samples.json``). One file, no
server, nothing fetched: it can be mailed or archived next to the run's outputs.

Every count (epochs, input events, late events, dead letters, rows written) covers every
run of the checkpoint, a replayed epoch once (:func:`~wire.runtime.epoch_log.across_runs`);
the page says over how many runs. The state is the checkpoint's, the same in the header
and on every source: ``finished`` when the last completed epoch ended every source's
input, else ``stopped``.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from wire.control.history import HistoryBuffer, sample_from
from wire.control.status import Counters, source_lag
from wire.core.time import NO_WATERMARK
from wire.errors import WireError
from wire.runtime.checkpoint import META_FILE, finished, is_checkpoint
from wire.runtime.epoch_log import EPOCH_LOG, GRAPH_FILE, SAMPLES_FILE, across_runs, read_epoch_log


def _text(name: str) -> str:
    return resources.files("wire.control").joinpath("dashboard", *name.split("/")).read_text()


def _counters(record: dict[str, Any]) -> Counters:
    return Counters(
        epochs=int(record["epochs"]),
        metrics={(s, n): int(v) for s, n, v in record["metrics"]},
        gauges={(s, n): int(v) for s, n, v in record["gauges"]},
        rows_written={k: int(v) for k, v in record["rows_written"].items()},
        emitted={},
        source_steps=tuple(record["source_steps"]),
    )


def report_data(checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """What the report page shows: ``summary``, ``status``, ``history``, ``graph``, ``samples``.

    Raises
    ------
    WireError
        If ``checkpoint`` is not a Wire checkpoint or has no recorded epoch.
    """
    root = Path(checkpoint)
    if not is_checkpoint(root):
        raise WireError(f"{str(root)!r} is not a Wire checkpoint (no {META_FILE})")
    flow_id = json.loads((root / META_FILE).read_text())["flow_id"]
    records = across_runs(read_epoch_log(root, replayed=True))
    if not records:
        raise WireError(f"checkpoint {str(root)!r} has no recorded epoch (no {EPOCH_LOG}, or it is "
                        "empty): no run completed an epoch there, or it ran before epochs were recorded")
    history = HistoryBuffer(max_samples=max(2, len(records)))
    done = "finished" if finished(root) else "stopped"
    for i, record in enumerate(records):
        last = i == len(records) - 1
        history.append(sample_from(_counters(record), now_ms=int(record["t_ms"]),
                                   status=done if last else "running", epoch_ms=record["epoch_ms"]))
    c = _counters(records[-1])
    watermarks = {s: {k: None if v == NO_WATERMARK else v for k, v in m.items()}
                  for s, m in c.watermarks().items()}
    runs = int(records[-1]["runs"])
    status = {
        "id": flow_id, "status": done, "epochs": c.epochs, "input_events": c.input_events,
        "input_rate": None, "watermarks": watermarks, "late": c.per_step("late"),
        "malformed": c.per_step("malformed"), "rows_written": c.rows_written, "breakers": {},
        "error": None,
        "sources": {s: {"paused": False, "state": done, "watermark": watermarks.get(s, {}).get("watermark"),
                        "lag_ms": source_lag(c, s)} for s in c.source_steps},
        "runs": runs,
    }
    graph_file = root / GRAPH_FILE
    graph = json.loads(graph_file.read_text()) if graph_file.exists() else {"nodes": [], "edges": []}
    columns = history.columns()
    samples_file = root / SAMPLES_FILE
    samples = (json.loads(samples_file.read_text()) if samples_file.exists()
               else {"size": 0, "dead_letters": [], "late": []})
    return {
        "summary": {"id": flow_id, "status": done, "epochs": c.epochs, "input_events": c.input_events,
                    "runs": runs},
        "status": status,
        "history": {"id": flow_id, "interval_s": None, "max_samples": len(records), "minutes": None,
                    **columns},
        "graph": graph,
        "samples": {"id": flow_id, **samples},
    }


def render_report(checkpoint: str | os.PathLike[str]) -> str:
    """The report of ``checkpoint`` as one self-contained HTML document."""
    data = json.dumps(report_data(checkpoint)).replace("</", "<\\/")
    page = _text("index.html")
    for href in ("vendor/uPlot.min.css", "dashboard.css"):
        tag = f'<link rel="stylesheet" href="/dashboard/{href}">'
        page = page.replace(tag, f"<style>\n{_text(href)}\n</style>")
    embedded = f'<script id="wire-data" type="application/json">{data}</script>\n'
    for src in ("vendor/uPlot.iife.min.js", "dashboard.js"):
        tag = f'<script src="/dashboard/{src}"></script>'
        inline = _text(src).replace("</script", "<\\/script")
        prefix = embedded if src == "dashboard.js" else ""
        page = page.replace(tag, f"{prefix}<script>\n{inline}\n</script>")
    return page


def write_report(checkpoint: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Write the report (default ``<checkpoint>/report.html``); return its path."""
    path = Path(out) if out is not None else Path(checkpoint) / "report.html"
    path.write_text(render_report(checkpoint))
    return path
