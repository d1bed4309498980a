"""``wire``: run flows, inspect checkpoints, pause and resume (SPEC §9).

Commands::

    wire run MODULE:ATTR --checkpoint DIR [--fresh] [--master URL] [--max-restarts N] [--no-dashboard]
             [--no-progress]
    wire checkpoints DIR
    wire report DIR [--out FILE]
    wire state DIR [STEP] [--key K] [--epoch N] [--format table|csv|parquet] [--out FILE]
    wire pause DIR [--connector STEP]
    wire resume DIR [--connector STEP]
    wire status [FLOW_ID] --url URL [--token TOKEN]
    wire pause FLOW_ID --url URL --token TOKEN [--connector STEP]
    wire resume FLOW_ID --url URL --token TOKEN [--connector STEP]
    wire sink-mode DIR SINK write|read_only
    wire sink-mode FLOW_ID SINK write|read_only --url URL --token TOKEN

``--url`` / ``--token`` talk to a running :class:`wire.control.ControlPlane` (they also
read ``WIRE_URL`` / ``WIRE_TOKEN``); ``status`` needs the token only for a control plane
bound to a non-loopback address. Without ``--url``, pause / resume write the control
file of the checkpoint directory directly; a path that is not a Wire checkpoint (no
``wire.json``: the flow never started there) exits 1 and nothing is created.

``MODULE:ATTR`` names a :class:`wire.Flow` or a function returning one, e.g.
``wire.examples.flights_job:default_flow``; MODULE is imported as ``python -m`` does, from
the current directory first.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from wire.api.flow import Flow
from wire.cli.state import state as state_command
from wire.control import client as control_client
from wire.core.control_file import control_path, read_control, set_paused, set_sink_mode
from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.errors import WireError, missing_extra
from wire.runtime.checkpoint import META_FILE, finished, is_checkpoint, list_epochs

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Wire: event-time streams on Spark.")
console = Console()
app.command("state")(state_command)  # wire state DIR [STEP]: a checkpoint's keyed state (issue 29)



def load_flow(target: str) -> Flow:
    """Import ``module:attr`` and return the Flow it names (calling it if it is a function).

    The module is found as ``python -m`` finds it: the current directory comes first on
    ``sys.path``, so ``wire run mymod:flow`` imports ``./mymod.py``.

    Raises
    ------
    typer.BadParameter
        If the target cannot be imported or is not a Flow.
    """
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise typer.BadParameter(f"{target!r}: expected MODULE:ATTR, e.g. mypkg.flows:orders")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # as `python -m` does: the current directory first
        sys.path.insert(0, cwd)
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as e:
        if e.name is None or (module_name != e.name and not module_name.startswith(e.name + ".")):
            raise typer.BadParameter(f"{target!r}: {e}") from e  # the module imports something missing
        raise typer.BadParameter(
            f"{target!r}: {e}. MODULE is imported as `python -m` would: from the current directory "
            f"({cwd}), then PYTHONPATH and the installed packages; run `wire run` from the directory "
            f"that holds {module_name.split('.')[0]}(.py), or add that directory to PYTHONPATH"
        ) from e
    except (ImportError, AttributeError) as e:
        raise typer.BadParameter(f"{target!r}: {e}") from e
    flow = obj() if callable(obj) and not isinstance(obj, Flow) else obj
    if not isinstance(flow, Flow):
        raise typer.BadParameter(f"{target!r} is a {type(flow).__name__}, not a wire.Flow")
    return flow


def _fmt_wm(wm: int | None) -> str:
    if wm is None or wm == NO_WATERMARK:
        return "-"
    if wm == MAX_WATERMARK:
        return "end"
    return str(wm)


@app.command()
def run(
    target: Annotated[str, typer.Argument(help="MODULE:ATTR naming a wire.Flow")],
    checkpoint: Annotated[str, typer.Option(help="the flow's checkpoint directory")],
    fresh: Annotated[bool, typer.Option(
        help="start the flow over: a new checkpoint, and each sink's earlier output replaced by the "
             "new run's (see Flow.run's fresh); the old checkpoint is deleted once every sink accepted "
             "the new one",
    )] = False,
    master: Annotated[str, typer.Option(help="Spark master URL")] = "local[*]",
    max_restarts: Annotated[int, typer.Option(help="restarts after a failure")] = 3,
    dashboard: Annotated[bool, typer.Option(
        help="serve the web dashboard on 127.0.0.1 while the flow runs; its URL and token are printed",
    )] = True,
    progress: Annotated[bool, typer.Option(
        help="on a terminal, a progress bar (records admitted of the total, epochs, watermark, ETA); "
             "elsewhere one line per epoch",
    )] = True,
) -> None:
    """Run a flow; an unfinished checkpoint is resumed from its last completed epoch.

    Ctrl-C stops it gracefully (the epoch in flight commits; a second Ctrl-C stops at once),
    prints the summary and exits 130.
    """
    flow = load_flow(target)
    path = Path(checkpoint)
    if fresh and path.exists():
        if not (is_checkpoint(path) or (path.is_dir() and not any(path.iterdir()))):
            # never touch what Wire did not create: a typo must not move a user's data
            console.print(f"[red]error:[/red] --fresh: {escape(checkpoint)} is not a Wire checkpoint "
                          f"(no {META_FILE}); left as it is. Remove it yourself or pick another path.")
            raise typer.Exit(1)
        console.print(f"starting over: {checkpoint} is set aside, and deleted once the new run can start")
    elif path.exists():
        state = "finished" if finished(checkpoint) else "unfinished"
        console.print(f"resuming from the {state} checkpoint {checkpoint}")
    missing = missing_extra("control", "the dashboard") if dashboard else None
    if missing is not None:  # the run goes on without it
        console.print(f"no dashboard: {missing}", markup=False)  # keep "wire[control]" as it is
        dashboard = False
    shown: bool | Console = (console if console.is_terminal else True) if progress else False
    console.print(f"running flow {flow.flow_id} ...")
    try:
        summary = flow.run(checkpoint, master=master, max_restarts=max_restarts, dashboard=dashboard,
                           progress=shown, fresh=fresh)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e
    except KeyboardInterrupt:  # Ctrl-C before the query ran (Spark starting, compiling)
        console.print("interrupted before the flow started; nothing ran")
        raise typer.Exit(130) from None
    console.print(summary.render())
    if summary.interrupted:  # Ctrl-C: stopped gracefully, the summary printed (RunningFlow.await_termination)
        raise typer.Exit(130)


@app.command()
def report(
    checkpoint: Annotated[str, typer.Argument(help="a flow's checkpoint directory")],
    out: Annotated[str | None, typer.Option(help="the HTML file to write")] = None,
) -> None:
    """Write a static HTML report of a run (the dashboard's plots, from its recorded epochs).

    Writes CHECKPOINT/report.html unless --out says where; exits 1 when CHECKPOINT is not
    a Wire checkpoint or recorded no epoch.
    """
    from wire.control.report import write_report  # needs the control extra (pydantic)

    try:
        path = write_report(checkpoint, out)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e
    console.print(f"report of {checkpoint}: {path}")


@app.command()
def checkpoints(path: Annotated[str, typer.Argument(help="a flow's checkpoint directory")]) -> None:
    """List the epochs of a checkpoint: offsets, watermark, committed or not."""
    try:
        epochs = list_epochs(path)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e
    table = Table(title=f"checkpoint {path}")
    for col in ("epoch", "source offsets", "watermark (ms)", "committed"):
        table.add_column(col)
    for ep in epochs:
        offs = []
        for i, o in enumerate(ep.offsets):
            if isinstance(o, dict):
                pos = o.get("admitted", o.get("step"))
                offs.append(f"#{i}: {pos}{' ended' if o.get('ended') else ''}")
            else:
                offs.append(f"#{i}: -")
        marks = ", ".join(_fmt_wm(w) for w in ep.watermarks)
        table.add_row(str(ep.epoch), "; ".join(offs), marks, "yes" if ep.committed else "no")
    console.print(table)
    ctl = read_control(control_path(path))
    if ctl.get("paused"):
        console.print("flow is paused")


Url = Annotated[
    str | None,
    typer.Option(envvar="WIRE_URL", help="a control plane's URL, e.g. http://127.0.0.1:8787"),
]
Token = Annotated[str | None, typer.Option(envvar="WIRE_TOKEN", help="the control plane's bearer token")]


def _change(target: str, paused: bool, connector: str | None, url: str | None, token: str | None) -> None:
    verb = "paused" if paused else "resumed"
    if url is None:
        if not is_checkpoint(target):
            console.print(f"[red]error:[/red] {target!r} is not a Wire checkpoint (no {META_FILE}); "
                          "give the checkpoint directory of a flow that has started, or a flow id with --url")
            raise typer.Exit(1)
        set_paused(control_path(target), paused, connector)
        console.print(f"{verb} {connector or 'flow'} ({target})")
        return
    if not token:
        console.print("[red]error:[/red] --url needs --token (or WIRE_TOKEN)")
        raise typer.Exit(2)
    call = control_client.pause if paused else control_client.resume
    try:
        state = call(url, token, target, connector)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e
    console.print(f"{verb} {connector or 'flow'} of {target!r}; flow status: {state['status']}")


@app.command()
def pause(
    target: Annotated[str, typer.Argument(help="the flow's checkpoint directory, or its id with --url")],
    connector: Annotated[str | None, typer.Option(help="pause only this source step")] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Pause a running flow (or one source): no new epochs, state kept.

    Exits 1 when TARGET is not a Wire checkpoint (without --url) or the control plane
    refuses; 2 when --url is given without a token.
    """
    _change(target, True, connector, url, token)


@app.command()
def resume(
    target: Annotated[str, typer.Argument(help="the flow's checkpoint directory, or its id with --url")],
    connector: Annotated[str | None, typer.Option(help="resume only this source step")] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Resume a paused flow (or one source); exits non-zero as ``pause`` does."""
    _change(target, False, connector, url, token)


@app.command("sink-mode")
def sink_mode(
    target: Annotated[str, typer.Argument(help="the flow's checkpoint directory, or its id with --url")],
    sink: Annotated[str, typer.Argument(help="the self-correcting sink's step id")],
    mode: Annotated[str, typer.Argument(help="write or read_only")],
    url: Url = None,
    token: Token = None,
) -> None:
    """Switch a self-correcting sink to write or read-only mode from its next epoch (SPEC §8).

    A standby replica started with ``read_only=True`` takes over writing this way.
    Exits 1 when TARGET is not a Wire checkpoint (without --url) or the control plane
    refuses; 2 on an unknown mode or --url without a token.
    """
    if mode not in ("write", "read_only"):
        console.print(f"[red]error:[/red] mode {mode!r}: accepted 'write' or 'read_only'")
        raise typer.Exit(2)
    if url is None:
        if not is_checkpoint(target):
            console.print(f"[red]error:[/red] {target!r} is not a Wire checkpoint (no {META_FILE})")
            raise typer.Exit(1)
        set_sink_mode(control_path(target), sink, mode)
        console.print(f"sink {sink}: {mode} ({target})")
        return
    if not token:
        console.print("[red]error:[/red] --url needs --token (or WIRE_TOKEN)")
        raise typer.Exit(2)
    try:
        control_client.set_sink_mode(url, token, target, sink, mode)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e
    console.print(f"sink {sink} of {target!r}: {mode}")


@app.command()
def status(
    url: Annotated[str, typer.Option(envvar="WIRE_URL", help="the control plane's URL")],
    flow_id: Annotated[str | None, typer.Argument(help="one flow's id (default: list every flow)")] = None,
    token: Token = None,
) -> None:
    """Show the flows of a running control plane, or one flow's watermarks, lag and counts.

    The token is needed only when the plane is bound to a non-loopback address.
    """
    try:
        answer = control_client.status(url, flow_id, token=token or None)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e
    if flow_id is None:
        table = Table(title=f"flows at {url}")
        for col in ("flow", "status", "epochs", "input events"):
            table.add_column(col)
        for f in answer:
            table.add_row(f["id"], f["status"], str(f["epochs"]), f"{f['input_events']:,}")
        console.print(table)
        return
    rate = answer["input_rate"]
    console.print(f"flow {answer['id']}: {answer['status']}, {answer['epochs']} epochs, "
                  f"{answer['input_events']:,} events" + ("" if rate is None else f", {rate:,.0f} events/s"))
    if answer["error"]:
        console.print(f"[red]error:[/red] {escape(str(answer['error']))}")
    table = Table(title="watermarks (ms)")
    for col in ("step", "watermark", "value"):
        table.add_column(col)
    for step, marks in answer["watermarks"].items():
        for kind, wm in marks.items():
            table.add_row(step, kind, _fmt_wm(wm))
    console.print(table)
    for step, src in answer["sources"].items():
        lag = "-" if src["lag_ms"] is None else f"{src['lag_ms']} ms"
        console.print(f"source {step}: {'paused' if src['paused'] else 'running'}, "
                      f"watermark {_fmt_wm(src['watermark'])}, lag {lag}")
    for step, n in answer["late"].items():
        console.print(f"late events at {step}: {n:,}")
    for sink, state in answer["breakers"].items():
        console.print(f"breaker {sink}: {state}")


if __name__ == "__main__":
    app()
