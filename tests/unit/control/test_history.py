"""The control plane's per-flow history: samples, ring-buffer bound, columns and rates (no Spark)."""

from __future__ import annotations

import tracemalloc

import pytest
from test_server import FakeFlow

import wire
from wire.control.history import HistoryBuffer, HistorySampler, Sample, sample_of
from wire.core.control_file import set_paused

END = 2**63 - 1


def sample(t_ms, **kw):
    base = dict(status="running", epochs=0, input_events=0, rows_out=0, epoch_ms=None, watermarks={},
                lag_ms={}, late={}, malformed={}, breakers={}, paused={})
    return Sample(t_ms=t_ms, **{**base, **kw})


def test_sample_reads_the_flow_like_the_status_route(tmp_path):
    flow = FakeFlow(tmp_path)
    first = sample_of(flow, now_ms=1_000)
    assert first.status == "starting" and first.epochs == 0 and first.epoch_ms is None
    assert first.paused == {"src": False, "clicks": False} and first.lag_ms == {"src": None, "clicks": None}
    flow.run_epoch()
    flow.run_epoch()
    flow.summary.epoch_wall_seconds.extend([10.5, 1.5])  # the first waited 10 s, paused, before it ran
    flow.summary.epoch_seconds.extend([0.5, 1.5])  # what the epochs took (issue 26 item 12)
    flow.summary.gauges[("src", "max_event_time")] = 10_400
    set_paused(flow.control_file, True, "clicks")
    s = sample_of(flow, now_ms=2_000, epochs_before=first.epochs)
    assert (s.status, s.epochs, s.input_events, s.rows_out) == ("running", 2, 20, 6)
    assert s.epoch_ms == pytest.approx(1000.0)  # mean of the two epochs completed since, no pause
    assert s.watermarks == {
        "clicks": {"watermark": None},
        "hourly": {"input_watermark": 10_000, "output_watermark": END},
        "src": {"watermark": 10_000, "watermark:p0": 10_000},
    }
    assert s.lag_ms == {"src": 400, "clicks": None}
    assert s.late == {"hourly": 2} and s.malformed == {"src": 2}
    assert s.paused == {"src": False, "clicks": True}
    assert sample_of(flow, now_ms=3_000, epochs_before=2).epoch_ms is None  # no new epoch


def test_columns_align_series_that_appear_late_and_compute_rates():
    h = HistoryBuffer(max_samples=10)
    h.append(sample(1_000, input_events=0, rows_out=0))
    h.append(sample(2_000, input_events=100, rows_out=10, watermarks={"src": {"watermark": 50}},
                    late={"w": 1}, breakers={"out": "closed"}))
    h.append(sample(2_500, input_events=300, rows_out=10, watermarks={"src": {"watermark": 90}},
                    late={"w": 3}, breakers={"out": "open"}))
    h.append(sample(3_500, input_events=10))  # a restart: counters went down
    cols = h.columns()
    assert cols["t"] == [1_000, 2_000, 2_500, 3_500]
    assert cols["events_in_per_s"] == [None, 100.0, 400.0, None]
    assert cols["rows_out_per_s"] == [None, 10.0, 0.0, None]
    assert cols["watermarks"] == {"src": {"watermark": [None, 50, 90, None]}}
    assert cols["late"] == {"w": [None, 1, 3, None]}
    assert cols["breakers"] == {"out": [None, "closed", "open", None]}
    since = h.columns(since_ms=2_000)
    assert since["t"] == [2_000, 2_500, 3_500] and since["events_in_per_s"][0] is None


def test_a_long_run_stays_bounded_in_memory():
    h = HistoryBuffer(max_samples=500)
    marks = {f"step{i}": {"input_watermark": 0, "output_watermark": 0} for i in range(10)}

    def one(i):
        return sample(i, epochs=i, input_events=i * 100, watermarks={k: dict(v) for k, v in marks.items()},
                      late={f"step{j}": i for j in range(10)})

    tracemalloc.start()  # counts the memory allocated since, still held
    try:
        for i in range(1_000):  # fill the buffer twice over
            h.append(one(i))
        full = tracemalloc.get_traced_memory()[0]
        for i in range(1_000, 11_000):  # 20x the bound
            h.append(one(i))
        later = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(h) == 500
    kept = h.samples()
    assert kept[0].t_ms == 10_500 and kept[-1].t_ms == 10_999  # the newest, oldest dropped first
    assert full > 500 * 1_000  # the 500 samples held (a few kB each) are counted...
    assert later - full < 0.05 * full, f"{later - full} bytes more after 10,000 more samples"  # no more


def test_the_sampler_samples_every_registered_flow_and_skips_unreadable_ones(tmp_path):
    flows = {"a": FakeFlow(tmp_path, "a"), "b": FakeFlow(tmp_path, "b")}
    histories = {"a": HistoryBuffer(max_samples=3), "b": HistoryBuffer(max_samples=3)}
    now = iter(range(0, 10_000, 1_000))
    sampler = HistorySampler(lambda: flows, histories.get, interval_s=0.01, clock_ms=lambda: next(now))
    sampler.sample_once()
    flows["b"].summary = None  # unreadable: skipped, the sampler carries on
    flows["a"].run_epoch()
    flows["a"].summary.epoch_seconds.append(0.25)
    sampler.sample_once()
    assert [s.t_ms for s in histories["a"].samples()] == [0, 1_000]
    assert histories["a"].last().epoch_ms == 250.0
    assert [s.t_ms for s in histories["b"].samples()] == [0]
    with pytest.raises(wire.ConfigError, match="history_interval_s"):
        HistorySampler(lambda: flows, histories.get, interval_s=0)
    with pytest.raises(wire.ConfigError, match="history_max_samples"):
        HistoryBuffer(max_samples=1)
