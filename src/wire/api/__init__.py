"""The public flow-building API: flows, streams, windows, watermark policies, durations."""
