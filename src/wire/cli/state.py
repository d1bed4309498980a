"""``wire state``: list a checkpoint's stateful steps, or print / export one step's state (issue 29).

::

    wire state CHECKPOINT                      # one line per keyed step
    wire state CHECKPOINT STEP [--key K] [--epoch N] [--format table|csv|parquet] [--out FILE]

The rows are :func:`wire.read_state`'s (shapes in :mod:`wire.runtime.state_reader`). The
read starts a local Spark session (its log goes to a temporary file) and changes nothing
in the checkpoint.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.errors import WireError

FORMATS: tuple[str, ...] = ("table", "csv", "parquet")


def _wm(value: int | None) -> str:
    if value is None or value == NO_WATERMARK:
        return "-"
    return "end" if value == MAX_WATERMARK else str(value)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str)
    return str(value)


def _flat(table: pa.Table) -> list[list[str]]:
    """The rows as text: nested values (structs, lists, maps) as JSON."""
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [[_cell(c[r]) for c in columns] for r in range(table.num_rows)]


def _session() -> Any:
    from wire.runtime.session import spark_session

    log = Path(tempfile.mkdtemp(prefix="wire-state-")) / "spark.log"
    return spark_session("local[2]", app_name="wire:state", log_file=log)


def _flow(target: str | None) -> Any:
    if target is None:
        return None
    from wire.cli.main import load_flow

    return load_flow(target)


def list_steps(console: Console, checkpoint: str, epoch: int | None, flow: str | None) -> None:
    """Print one line per keyed step: keys, open windows, bytes, oldest event time, watermarks."""
    from wire.runtime.state_layout import locate
    from wire.runtime.state_reader import summarize

    at = locate(checkpoint, epoch)
    rows = list(summarize(checkpoint, epoch, flow=_flow(flow), spark=_session()))
    table = Table(title=f"state of {checkpoint} at epoch {at.epoch}")
    for col in ("step", "kind", "key groups", "keys", "open windows", "entries", "bytes",
                "oldest event time (ms)", "input wm (ms)", "output wm (ms)"):
        table.add_column(col)
    for s in rows:
        table.add_row(s.step, s.kind, str(s.key_groups), str(s.keys),
                      "-" if s.open_windows is None else str(s.open_windows), str(s.entries),
                      f"{s.bytes:,}", "-" if s.oldest_event_time is None else str(s.oldest_event_time),
                      _wm(s.input_watermark), _wm(s.output_watermark))
    console.print(table)
    if not rows:
        console.print("no keyed (stateful) step")


def show_step(console: Console, checkpoint: str, step: str, *, key: str | None, epoch: int | None,
              fmt: str, out: str | None, limit: int, flow: str | None) -> None:
    """Print (``table``, ``csv``) or write (``csv``, ``parquet`` with ``out``) one step's state."""
    from wire.runtime.state_reader import read_state

    if fmt not in FORMATS:
        raise typer.BadParameter(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise typer.BadParameter("--format parquet writes a file: give --out FILE")
    table = read_state(checkpoint, step, epoch, key=key, flow=_flow(flow), spark=_session())
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if fmt == "parquet":
        pq.write_table(table, out)
        epoch = meta.get("wire.epoch")
        console.print(f"{table.num_rows:,} rows of step {step} (epoch {epoch}) written to {out}")
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(table.column_names)
        writer.writerows(_flat(table))
        if out is None:
            sys.stdout.write(buffer.getvalue())
        else:
            Path(out).write_text(buffer.getvalue(), encoding="utf-8")
            console.print(f"{table.num_rows:,} rows of step {step} written to {out}")
        return
    wm_in = int(meta["wire.input_watermark"]) if meta.get("wire.input_watermark") else None
    wm_out = int(meta["wire.output_watermark"]) if meta.get("wire.output_watermark") else None
    title = (f"step {step} ({meta.get('wire.kind')}) at epoch {meta.get('wire.epoch')}: input watermark "
             f"{_wm(wm_in)} ms, output watermark {_wm(wm_out)} ms")
    shown = table if limit <= 0 else table.slice(0, limit)
    console.print(title, markup=False)
    grid = Table()
    for name in table.column_names:
        grid.add_column(name)
    for row in _flat(shown):
        grid.add_row(*(escape(v) for v in row))
    console.print(grid)
    if shown.num_rows < table.num_rows:
        more = table.num_rows - shown.num_rows
        console.print(f"{more:,} more rows (--limit 0 shows all, --format csv exports)")


def state(
    checkpoint: Annotated[str, typer.Argument(help="a flow's checkpoint directory")],
    step: Annotated[str | None, typer.Argument(
        help="a keyed step (window, join, process); none: list them")] = None,
    key: Annotated[str | None, typer.Option(help="only this key's state (cast to the key's type)")] = None,
    epoch: Annotated[int | None, typer.Option(help="a committed epoch (default: the last one)")] = None,
    format: Annotated[str, typer.Option("--format", help="table, csv or parquet")] = "table",
    out: Annotated[str | None, typer.Option(help="write to this file (csv, parquet)")] = None,
    limit: Annotated[int, typer.Option(help="rows a table shows (0: all)")] = 200,
    flow: Annotated[str | None, typer.Option(
        help="MODULE:ATTR of the flow: for user aggregators, or a checkpoint of an older Wire")] = None,
) -> None:
    """List a checkpoint's stateful steps, or print / export one step's state.

    Without STEP: one line per keyed step with its key groups, keys, open windows, entries,
    bytes, oldest event time and watermarks. With STEP: its rows (windows, open sessions,
    buffered join events, process states and timers) as a table, CSV or Parquet. Reads
    only; exits 1 with the reason when the checkpoint, step, key or epoch cannot be read.
    """
    console = Console()
    try:
        if step is None:
            list_steps(console, checkpoint, epoch, flow)
        else:
            show_step(console, checkpoint, step, key=key, epoch=epoch, fmt=format, out=out, limit=limit,
                      flow=flow)
    except WireError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e


__all__: Sequence[str] = ("state",)
