"""The REST control plane's request and response bodies (they make its OpenAPI schema).

Watermarks are int64 milliseconds of event time; ``None`` means "no watermark yet"
(no event seen) and ``9223372036854775807`` (``2**63 - 1``) means "end of input".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FlowState = Literal["starting", "running", "paused", "failing", "stopped"]
"""``starting``: no epoch completed yet; ``running``; ``paused`` (control file);
``failing``: the query failed or its last epoch raised; ``stopped``: the query ended."""

Watermark = int | None


class StatusChange(BaseModel):
    """Body of ``PATCH /v1/flows/{id}`` and ``PATCH /v1/flows/{id}/connectors/{cid}``."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["paused", "running"] = Field(
        description="`paused`: admit no more input (the query and its state stay); `running`: resume."
    )


class PartitionStatus(BaseModel):
    """One partition of a source (its latest epoch's gauges)."""

    watermark: Watermark = Field(default=None, description="the partition's watermark (ms)")
    offset_lag: int | None = Field(
        default=None,
        description="records behind the partition's end when the epoch was planned (Kafka: "
        "end offset minus next offset); null when the source does not report it",
    )


class SelfCorrectingState(BaseModel):
    """One self-correcting sink step's mode and counters (SPEC §8)."""

    mode: Literal["write", "read_only"] = Field(description="the mode its next epoch uses")
    counters: dict[str, int] = Field(description="sc_corrections, sc_drift_rows, sc_cas_conflicts, "
                                     "sc_epochs_behind, sc_parts: totals of this run")
    gauges: dict[str, int] = Field(description="sc_read_only, sc_distance, sc_corrections_last_epoch, "
                                   "sc_table_upper: as of the last epoch")


class SourceStatus(BaseModel):
    """One source step (connector) of a flow."""

    paused: bool = Field(description="paused on its own or with the whole flow")
    watermark: Watermark = Field(description="the source's latest watermark (ms)")
    lag_ms: int | None = Field(
        description="event-time lag: the source's max event time minus its watermark (ms); "
        "null when the source does not report a `max_event_time` gauge"
    )
    partitions: dict[str, PartitionStatus] = Field(
        default_factory=dict,
        description="per partition of the source (e.g. `p0` for files, `<topic>:<partition>` for "
        "Kafka), as reported by its latest epoch",
    )


class SparkProgress(BaseModel):
    """From the Spark query's ``lastProgress``: rows that reached Spark.

    Wire's control rows are included; the events a filter pushed into the source dropped are
    not (the source's own ``events`` count is in the source metrics).
    """

    batch_id: int | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None


class FlowSummary(BaseModel):
    """One line of ``GET /v1/flows``."""

    id: str
    status: FlowState
    epochs: int = Field(description="epochs completed by this run")
    input_events: int = Field(description="well-formed events admitted by the sources in this run")


class DriverTraffic(BaseModel):
    """What of the flow's output reached the Spark driver (SPEC §6: executors write)."""

    rows_last_epoch: int | None = Field(
        description="data rows of the last epoch that reached the driver: 0 when every sink is "
        "written by the executors; null before the first epoch"
    )
    bytes_last_epoch: int | None = Field(
        description="bytes of the last epoch's job result that reached the driver (receipts, "
        "metric records, rows of driver sinks)"
    )
    rows_total: int = Field(description="data rows that reached the driver in this run")
    bytes_total: int = Field(description="bytes that reached the driver in this run")


class FlowStatus(FlowSummary):
    """``GET /v1/flows/{id}``: the flow's state, throughput, watermarks and counters."""

    input_rate: float | None = Field(
        description="events/s over the last few seconds, from the run's event count sampled at "
        "each request; null until two samples at least 0.5 s apart exist"
    )
    watermarks: dict[str, dict[str, Watermark]] = Field(
        description="per step, its latest watermarks, e.g. input_watermark / output_watermark (ms)"
    )
    late: dict[str, int] = Field(description="per step, events dropped to its late port")
    malformed: dict[str, int] = Field(description="per step, records sent to the dead-letter port")
    rows_written: dict[str, int] = Field(description="per sink step, rows written")
    driver: DriverTraffic
    sources: dict[str, SourceStatus]
    breakers: dict[str, str] = Field(description="per sink, its circuit breaker's state")
    self_correcting: dict[str, SelfCorrectingState] = Field(
        default_factory=dict, description="per self-correcting sink step, its mode and counters")
    error: str | None = Field(description="why the flow is failing, if it is")
    spark: SparkProgress | None = None


class ErrorBody(BaseModel):
    """An error answer (401, 404, 409)."""

    detail: str


class GraphNode(BaseModel):
    """One step of a flow's plan."""

    step: str = Field(description="the step id (`*`: the pseudo-step 'every step' of the dead letters)")
    kind: str = Field(description="source, filter, map, select, throttle, key_by, window, join, union, "
                      "sink, drop (or all for `*`)")
    detail: str = Field(description="a one-line description: connector, window, key, ...")


class GraphEdge(BaseModel):
    """``target`` reads port ``port`` of ``source``."""

    source: str
    target: str
    port: str = Field(description="out, late, dead_letter or overflow")


class FlowGraph(BaseModel):
    """``GET /v1/flows/{id}/graph``: the flow's operator graph, from its plan."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]


class FlowHistory(BaseModel):
    """``GET /v1/flows/{id}/history``: samples of the last minutes, one array per series.

    Every array is aligned on ``t``. Times and watermarks are ms since the Unix epoch
    (a watermark is null before any event, ``2**63 - 1`` at the end of input); a value
    is null where the series did not exist yet (e.g. a step's first watermark).
    """

    id: str
    interval_s: float = Field(description="seconds between two samples")
    max_samples: int = Field(description="samples kept per flow; older ones are dropped")
    minutes: float = Field(description="the window asked for")
    t: list[int] = Field(description="processing time of each sample, ms since the Unix epoch")
    status: list[str]
    epochs: list[int] = Field(description="epochs completed by this run")
    input_events: list[int] = Field(description="well-formed events admitted so far")
    rows_out: list[int] = Field(description="rows written by all sinks so far")
    events_in_per_s: list[float | None] = Field(description="input events/s since the previous sample")
    rows_out_per_s: list[float | None] = Field(description="rows written/s since the previous sample")
    epoch_ms: list[float | None] = Field(
        description="mean wall time of the epochs completed since the previous sample (ms)")
    watermarks: dict[str, dict[str, list[Watermark]]] = Field(
        description="per step, per gauge (watermark, watermark:p<i> per partition, input_watermark, "
        "output_watermark), its values (ms)")
    lag_ms: dict[str, list[int | None]] = Field(description="per source, max event time - watermark (ms)")
    late: dict[str, list[int | None]] = Field(description="per step, events sent to its late port so far")
    malformed: dict[str, list[int | None]] = Field(description="per step, dead letters so far")
    breakers: dict[str, list[str | None]] = Field(description="per sink, its breaker's state")
    paused: dict[str, list[bool | None]] = Field(description="per source, paused or not")


class RecentEventBody(BaseModel):
    """One sampled dead letter or late event (:class:`wire.runtime.samples.RecentEvent`)."""

    kind: Literal["dead_letter", "late"]
    step: str = Field(description="dead letter: the step that rejected it (a source); late: the window "
                      "or join step")
    reason: str | None = Field(description="why it was rejected or late")
    record: str = Field(description="dead letter: the raw record; late: the event's other columns as "
                        "JSON; cut to 300 characters (ending in '…' when cut)")
    location: str | None = Field(description="dead letters: where it came from, e.g. `in/a.jsonl:3` "
                                 "(1-based line); late: null")
    event_time: int | None = Field(description="the event's event time (ms since the Unix epoch); null "
                                   "for a dead letter")
    watermark: int | None = Field(description="late events: the watermark it was late against (ms); "
                                  "dead letters: null")
    epoch: int = Field(description="the epoch (Spark batch id) that produced it")
    processing_time: int = Field(description="when its epoch committed, ms since the Unix epoch")


class FlowSamples(BaseModel):
    """``GET /v1/flows/{id}/samples``: the flow's newest dead letters and late events."""

    id: str
    size: int = Field(description="the most kept of each kind (the newest; older ones are dropped)")
    dead_letters: list[RecentEventBody] = Field(description="newest first")
    late: list[RecentEventBody] = Field(description="newest first")


class TokenCheck(BaseModel):
    """``GET /v1/token``: the bearer token sent is this control plane's."""

    valid: bool = Field(description="always true: a wrong or missing token answers 401")
