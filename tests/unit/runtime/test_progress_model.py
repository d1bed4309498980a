"""The console's progress model (wire.runtime.progress): pure, no Spark."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import wire
from wire.core.time import MAX_WATERMARK, NO_WATERMARK
from wire.errors import ConfigError
from wire.runtime.progress import (
    EpochReport,
    ProgressBar,
    ProgressLines,
    format_eta,
    format_watermark,
    progress_of,
    resolve_progress,
    total_records,
)
from wire.runtime.runner import RunSummary


def test_no_epoch_yet():
    p = progress_of([], 1000)
    assert (p.completed, p.total, p.epochs, p.watermark, p.eta_s) == (0, 1000, 0, None, None)


def test_eta_from_the_rate_over_the_last_epochs():
    reports = [EpochReport(1.0, 100, 1, 500), EpochReport(2.0, 300, 2, 900), EpochReport(4.0, 400, 3, 950)]
    p = progress_of(reports, 1000)
    assert (p.completed, p.total, p.epochs, p.watermark) == (400, 1000, 3, 950)
    assert p.eta_s == pytest.approx(600 / (300 / 3.0))  # since the first epoch: 100 records/s
    assert progress_of(reports, 1000, window=1).eta_s == pytest.approx(600 / (100 / 2.0))  # last epoch
    assert progress_of(reports[:1], 1000).eta_s == pytest.approx(900 / 100)  # one epoch: since t = 0


def test_eta_unknown_without_total_or_rate_and_zero_when_done():
    assert progress_of([EpochReport(1.0, 100, 1, None)], None).eta_s is None
    assert progress_of([EpochReport(1.0, 0, 1, None)], 50).eta_s is None  # nothing admitted yet
    done = progress_of([EpochReport(1.0, 40, 1, 7), EpochReport(2.0, 50, 2, MAX_WATERMARK)], 50)
    assert (done.completed, done.eta_s) == (50, 0.0)


def test_watermark_and_eta_text():
    assert format_watermark(1_357_016_400_000) == "2013-01-01T05:00:00.000Z"
    assert format_watermark(150) == "1970-01-01T00:00:00.150Z"
    assert format_watermark(None) == format_watermark(NO_WATERMARK) == "-"
    assert format_watermark(MAX_WATERMARK) == "end of input"
    assert format_eta(3725.4) == "ETA 1:02:05" and format_eta(None) == "ETA -"


def _summary(records: int, epochs: int, watermark: int) -> RunSummary:
    s = RunSummary("f", source_steps=("a", "b"))
    s.metrics[("a", "records")] = records - 1
    s.metrics[("b", "records")] = 1
    s.metrics[("a", "events")] = 999  # not what is counted: records are
    s.gauges[("a", "watermark")] = watermark
    s.gauges[("b", "watermark")] = watermark + 5
    s.epochs = epochs
    return s


def test_bar_counts_records_over_restarts_and_draws_the_final_state():
    out = io.StringIO()
    ticks = iter([0.0, 1.0, 2.0, 3.0])
    console = Console(file=out, force_terminal=True, width=160)
    bar = ProgressBar("f", 30, console, clock=lambda: next(ticks))
    bar.start()
    bar.epoch(_summary(10, 1, 1000), 0, 0, 0)
    bar.new_attempt()  # a restart: its summary counts from zero again
    bar.epoch(_summary(20, 2, 3000), 5, 0, 0)
    assert [(r.admitted, r.epochs, r.watermark) for r in bar.reports] == [(10, 1, 1000), (30, 3, 3000)]
    bar.stop()
    text = out.getvalue()
    assert "30 of 30 records" in text and "3 epochs" in text and "1970-01-01T00:00:03.000Z" in text


def test_resolve_progress_values(tmp_path, monkeypatch, capsys):
    flow = wire.Flow("p")
    flow.source(wire.sources.files(str(tmp_path / "*.csv"), format="csv"), event_time="t").sink(
        wire.sinks.parquet(str(tmp_path / "o")))
    plan = flow.plan()
    assert resolve_progress(False, plan, resumed=False) is None
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert resolve_progress("auto", plan, resumed=False) is None
    assert isinstance(resolve_progress(True, plan, resumed=False), ProgressLines)
    console = Console(file=io.StringIO())
    bar = resolve_progress(console, plan, resumed=False)
    assert isinstance(bar, ProgressBar) and bar.total is None  # CSV: unknown total
    for bad in ("yes", 1, None, "AUTO"):
        with pytest.raises(ConfigError, match="progress"):
            resolve_progress(bad, plan, resumed=False)
    ProgressLines().epoch(None, 4, 7, 2)
    assert capsys.readouterr().out == "epoch 4: 7 results, 2 late records\n"


def test_parquet_totals_come_from_the_footers_and_unknown_otherwise(tmp_path):
    for name, n in (("a", 3), ("b", 4)):
        pq.write_table(pa.table({"t": list(range(n))}), tmp_path / f"{name}.parquet")
    flow = wire.Flow("t")
    flow.source(wire.sources.files(str(tmp_path / "*.parquet"), format="parquet"), event_time="t",
                name="one").sink(wire.sinks.parquet(str(tmp_path / "o")))
    flow.source(wire.sources.files(str(tmp_path / "a.parquet"), format="parquet"), event_time="t",
                name="two").sink(wire.sinks.parquet(str(tmp_path / "o2")))
    assert total_records(flow.plan()) == 3 + 4 + 3
    bar = resolve_progress(Console(file=io.StringIO()), flow.plan(), resumed=True)
    assert isinstance(bar, ProgressBar) and bar.total is None  # resumed: what is left is unknown
    unbounded = wire.Flow("u")
    unbounded.source(wire.sources.files(str(tmp_path / "*.parquet"), format="parquet", bounded=False),
                     event_time="t").sink(wire.sinks.parquet(str(tmp_path / "o")))
    assert total_records(unbounded.plan()) is None
    from wire.examples.nexmark_source import nexmark

    assert nexmark(events=123).total_records() == 123
