"""What a source connector provides to the compiler (SPEC §2, §5, §7).

A source connector (:class:`Source`) is a frozen dataclass (it sits in the immutable
plan) with:

* ``bounded``: whether its input ends (then the flow stops by itself: see "Pause and
  the end of a bounded source" below);
* ``resolve_schema() -> pa.Schema``: its payload columns;
* ``read_stream(spark, request) -> DataFrame``: a streaming DataFrame of rows in the
  envelope format (:mod:`wire.core.envelope`), normally from a PySpark Python streaming
  data source. ``request`` (:class:`ReadRequest`) is everything the compiler tells a
  source step: step id, event-time column, key groups, watermark delay, admission,
  control file, and the optional settings below.
* ``capabilities`` (optional, default none): which optional settings of the request it
  honours (:data:`Capability`); the compiler sets only those.

A bounded source that knows how many records it will admit may have
``total_records() -> int | None`` (None: unknown); the console's progress bar shows the
records admitted of that total and an ETA (:mod:`wire.runtime.progress`). Optional:
without it the bar shows the count alone. The file source knows it for Parquet (from
the footers), the Nexmark generator and the scripted test stream always.

A source with the ``"target_epoch_ms"`` capability sizes its epochs from a target
duration: it admits at most :class:`~wire.sources.base.epoch_sizing.EpochSizer`'s budget per
epoch. The compiler sets ``target_epoch_ms`` only when the flow sets
``target_epoch_duration``, and refuses that setting (a ``ConfigError`` when the flow is
compiled, before it runs) for a source without the capability.

A source with the ``"columns"`` capability can produce fewer columns: given
``request.columns`` (payload column names; None = all) it produces those payload columns
only, in schema order (always followed by the envelope), while still validating,
computing event times and routing malformed records exactly as with every column. The
compiler sets ``columns`` only for such sources, and only to the columns the flow reads
(:mod:`wire.compiler.pruning`), always with the event-time and key columns.

A source with the ``"replay"`` capability can read an epoch's planned records again,
cheaply and identically, within the same epoch (files, the Nexmark generator, the scripted
test stream): a flow that branches on it scans it once per branch, each scan
reading the same records. A source without it (Kafka, HTTP ingest, Redis Streams) is scanned
once, behind a shuffle every branch shares (:func:`wire.compiler.branches.read_once`).

A source with the ``"resume"`` capability can start on a new Spark checkpoint where an
old one stopped (:func:`resumable`, after a rescale); the compiler refuses a rescale of
a flow with a source without it.

The data source computes the watermark while planning an epoch and records it in
the epoch's end offset, so that a replay sees the same watermark; it ends each epoch
with one watermark row per key group. ``commit(end)`` of the Spark stream reader
runs after the epoch committed: that is where a source acknowledges its input to
the external system (contraflow, SPEC §7).

Pause and the end of a bounded source: while the control file pauses the flow or the
source's step, a breaker is open or a graceful stop is in progress
(:func:`wire.core.control_file.is_paused`), ``latestOffset`` returns its ``start``
offset: no epoch, nothing admitted, state and offsets as they are. A pause never ends a
run, bounded or not: the query keeps running (the runner never uses Spark's
``availableNow`` trigger, which would end the query at the first trigger that plans no
epoch, :mod:`wire.runtime.runner`). A bounded source says instead that its input is
exhausted: its last offset, the one of the epoch that carries its final watermark, is a
JSON object with ``"ended": true`` (the files, Nexmark and ``TestStream`` sources, and
every :class:`~wire.sources.base.partitioned.PartitionedReader` whose source is bounded),
and from then on ``latestOffset`` returns it unchanged. Once the last completed epoch's
offsets say so for every source, the run ends. A bounded source that never says so
keeps its flow running until it is stopped.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, Protocol, Self, TypeAlias, runtime_checkable

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from wire.core import envelope
from wire.core.time import Duration, to_millis
from wire.core.watermarks import WatermarkPolicy, future_limit, future_reason
from wire.errors import ConfigError
from wire.sources.base.conversions import array_from_values, event_times_ms

Capability = Literal["columns", "target_epoch_ms", "resume", "replay"]
"""An optional setting of a :class:`ReadRequest` that a source may honour (module docstring)."""

Offset: TypeAlias = dict[str, Any]
"""A stream reader's offset: a JSON object (Spark keeps it as JSON in its offset log)."""


@dataclass(frozen=True)
class ReadRequest:
    """What the compiler tells a source's ``read_stream`` about one source step.

    The optional settings (``columns``, ``target_epoch_ms``, ``resume``) are set only for a
    source that declares the matching :data:`Capability`; the others are None for it.
    """

    step: str
    """The source step's id (names its metrics, dead letters and control-file entry)."""
    schema: pa.Schema
    """Every payload column of the source: its ``resolve_schema()``, resolved once by the compiler."""
    event_time: str
    """The payload column event times are read from."""
    key_groups: int
    """The flow's key groups: each epoch ends with one watermark row per group."""
    watermark: WatermarkPolicy
    """The step's watermark policy (ms), given once at ``flow.source``: max delay, idle
    timeout, tick interval and max future (:class:`~wire.core.watermarks.WatermarkPolicy`).
    Events more than ``max_future_ms`` ahead of the epoch's processing time are dead letters
    and do not move the watermark; sources that cannot tell processing time from event time
    (the Nexmark generator, the scripted test stream) ignore it."""
    max_events_per_epoch: int
    """Admission: at most this many records per epoch."""
    control_file: str | None = None
    """Pause / stop file of the run (:mod:`wire.core.control_file`); None: none."""
    columns: tuple[str, ...] | None = None
    """The payload columns to produce, in schema order (None: all); capability ``"columns"``."""
    target_epoch_ms: int | None = None
    """Epoch sizing from a target duration (ms; :mod:`wire.sources.base.epoch_sizing`); None: off;
    capability ``"target_epoch_ms"``."""
    resume: dict[str, Any] | None = None
    """After a rescale: ``{"start": offset, "end": offset or None}`` (:func:`resumable`); None:
    start as usual; capability ``"resume"``."""

    def settings(self) -> dict[str, Any]:
        """Every field but ``schema``, by name (a connector's binding takes them as they are)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "schema"}


@runtime_checkable
class Source(Protocol):
    """The protocol every source connector implements (see the module docstring)."""

    @property
    def bounded(self) -> bool:
        """Whether the source's input ends (then the flow stops by itself)."""
        ...

    def resolve_schema(self) -> pa.Schema:
        """The payload schema of the source's events."""
        ...

    def read_stream(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        """The envelope DataFrame of the source for one source step."""
        ...


def can(source: object, capability: Capability) -> bool:
    """True when ``source`` honours the optional ``capability`` of a :class:`ReadRequest`.

    A connector lists them in a ``capabilities`` attribute (a frozenset); without it, none.
    """
    return capability in getattr(source, "capabilities", ())


ALL_CAPABILITIES: frozenset[Capability] = frozenset({"columns", "target_epoch_ms", "resume"})
"""What a :class:`BindingSource` honours by default (not ``"replay"``: a connector claims it)."""


def schema_to_b64(schema: pa.Schema) -> str:
    """An Arrow schema as base64 text (for a data source's JSON options)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_b64(text: str) -> pa.Schema:
    """Inverse of :func:`schema_to_b64`."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def check_event_time_column(step: str, schema: pa.Schema, column: str) -> None:
    """Raise ConfigError unless ``column`` is in ``schema`` with a type event time is read from.

    Accepted: integers (ms since the Unix epoch), timestamps, dates, ISO-8601 strings.
    """
    names = schema.names
    if column not in names:
        raise ConfigError("event_time", column, f"a payload column: {names}", step=step)
    typ = schema.field(column).type
    if not (
        pa.types.is_integer(typ)
        or pa.types.is_timestamp(typ)
        or pa.types.is_date(typ)
        or pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
    ):
        accepted = "a column of int64 ms, timestamp, date or ISO-8601 strings"
        raise ConfigError("event_time", f"{column} ({typ})", accepted, step=step)


def check_columns(step: str | None, schema: pa.Schema, columns: Any) -> tuple[str, ...] | None:
    """Return ``columns`` as a tuple of payload column names (None = all); ConfigError if invalid.

    Accepted: None, or a list or tuple of distinct names of ``schema``'s columns.
    """
    if columns is None:
        return None
    names = schema.names
    if (
        not isinstance(columns, list | tuple)
        or not all(isinstance(c, str) and c in names for c in columns)
        or len(set(columns)) != len(columns)
    ):
        raise ConfigError("columns", columns, f"None or distinct payload columns of {names}", step=step)
    return tuple(columns)


def select_columns(schema: pa.Schema, columns: tuple[str, ...] | None) -> pa.Schema:
    """``schema`` restricted to ``columns`` (None: all), in ``schema``'s order."""
    if columns is None:
        return schema
    keep = set(columns)
    return pa.schema([f for f in schema if f.name in keep])


def spark_struct(payload: pa.Schema) -> StructType:
    """Return the Spark schema of a source's rows: the payload (nullable), then the envelope."""
    return from_arrow_schema(envelope.with_envelope(pa.schema([f.with_nullable(True) for f in payload])))


def spark_row_schema(payload: pa.Schema) -> pa.Schema:
    """Return the Arrow schema that a source's ``read()`` batches must have (Spark's own round trip)."""
    return to_arrow_schema(spark_struct(payload), timezone="UTC")


def check_admission(step: str, *, max_events_per_epoch: int, key_groups: int) -> None:
    """Raise ConfigError unless the binding's admission and key groups are valid."""
    for name, value, least in (
        ("max_events_per_epoch", max_events_per_epoch, 1),
        ("key_groups", key_groups, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(name, value, f"an int >= {least}", step=step)


def future_mask(event_times: np.ndarray, at: int | None, max_future_ms: int | None) -> np.ndarray | None:
    """Which ``event_times`` (ms) are more than ``max_future_ms`` ahead of processing time ``at``.

    None when the check is off (either is None) or no event is that far ahead; else a
    boolean mask (True: a dead letter, ``BoundedOutOfOrderness``).
    """
    limit = future_limit(at, max_future_ms)
    if limit is None:
        return None
    ahead = event_times > limit
    return ahead if ahead.any() else None


@dataclass(frozen=True)
class Decoded:
    """Records of one read turned into payload rows: the valid rows, their event times, the rejected.

    ``table`` holds the valid records' columns (all nullable), ``event_times`` their event
    times (ms), ``positions`` their index among the decoded records, and ``dead`` one
    ``(location, reason, record)`` per rejected record.
    """

    table: pa.Table
    event_times: np.ndarray
    positions: np.ndarray
    dead: list[tuple[str, str, str]]

    @staticmethod
    def from_objects(
        objects: Sequence[Mapping[str, object]], kept: Sequence[int], rejected: Mapping[int, str],
        schema: pa.Schema, event_time: str, records: Callable[[list[int]], list[tuple[str, str]]],
    ) -> Decoded:
        """Rows of ``schema`` from records decoded to objects (JSON objects, Redis fields).

        ``objects[j]`` is record ``kept[j]``'s object: its keys are the columns (missing:
        null; others ignored). ``rejected`` holds the reasons of the records that did not
        decode. A value that does not convert to its column's type, or an unusable event
        time, rejects its record too (the first reason found wins). ``records(indexes)`` gives
        those records' ``(location, record text)``, in order. Positions are record indexes; dead
        letters come in record order.
        """
        payload = pa.schema([f.with_nullable(True) for f in schema])
        bad = dict(rejected)
        columns = []
        for f in payload:
            values = [o.get(f.name) for o in objects]
            arr, failed = array_from_values(values, f.type)
            columns.append(arr)
            for j in np.flatnonzero(failed) if failed is not None else ():
                bad.setdefault(kept[int(j)], f"field {f.name}: cannot convert {values[int(j)]!r} to {f.type}")
        table = pa.Table.from_arrays(columns, schema=payload)
        ets = np.zeros(0, np.int64)
        if objects:
            ets, et_errors = event_times_ms(table.column(event_time).combine_chunks())
            for j, reason in et_errors.items():
                bad.setdefault(kept[j], reason)
        keep = np.array([i not in bad for i in kept], dtype=bool)
        rejected_at = sorted(bad)
        dead = [(loc, bad[i], text) for i, (loc, text) in zip(rejected_at, records(rejected_at), strict=True)]
        return Decoded(table.filter(pa.array(keep, pa.bool_())) if objects else table, ets[keep],
                       np.array(kept, np.int64)[keep] if objects else np.zeros(0, np.int64), dead)

    @property
    def max_event_time(self) -> int | None:
        """The largest event time among the valid records (None: there are none)."""
        return int(self.event_times.max()) if len(self.event_times) else None

    def reject_future(self, at: int | None, max_future_ms: int | None,
                      records: Callable[[list[int]], list[tuple[str, str]]]) -> Decoded:
        """Move the records more than ``max_future_ms`` ahead of processing time ``at`` to ``dead``.

        ``records(positions)`` gives the rejected records' ``(location, record text)``, in
        order. Returns ``self`` when the check is off or nothing is rejected.
        """
        ahead = future_mask(self.event_times, at, max_future_ms)
        if ahead is None:
            return self
        assert at is not None and max_future_ms is not None
        dead = list(self.dead)
        found = records(self.positions[ahead].tolist())
        for (location, text), et in zip(found, self.event_times[ahead].tolist(), strict=True):
            dead.append((location, future_reason(et, at, max_future_ms), text))
        keep = ~ahead
        return Decoded(self.table.filter(pa.array(keep)), self.event_times[keep], self.positions[keep], dead)

    def batches(
        self, schema: pa.Schema, step: str, columns: list[str], *, start_watermark: int, first_seq: int,
        gone: tuple[str, str, int] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """One task's envelope rows of these records: a data batch, then the dead letters.

        Data rows carry ``__et``, the epoch's start watermark ``start_watermark`` (ms) as
        ``__wm``, and ``__seq = first_seq + position``. ``gone``: ``(location, reason,
        count)`` of admitted records the task could not read again (one dead letter for
        them all; count 0: none).
        """
        if self.table.num_rows:
            yield envelope.data_batch(schema, self.table, columns, self.event_times, start_watermark,
                                      self.positions + first_seq)
        dead = list(self.dead)
        if gone is not None and gone[2]:
            dead.append((gone[0], gone[1], ""))
        if dead:
            yield envelope.dead_letter_batch(schema, step, dead)


LEGACY_WATERMARK = ("idle_timeout", "watermark_interval")
"""A connector's deprecated watermark settings: the policy's ``idle_timeout`` and ``interval``."""


def warn_legacy_watermark(connector: str, idle_timeout: object, watermark_interval: object) -> None:
    """Warn (DeprecationWarning) when a connector is given ``idle_timeout`` or ``watermark_interval``.

    They belong to the step's watermark policy, ``wire.BoundedOutOfOrderness(max_delay,
    idle_timeout=..., interval=...)`` at ``flow.source``; given to the connector they still
    work: :func:`convert_legacy_watermark` holds them in ms and :func:`with_connector_settings`
    forwards them into that policy when the flow compiles. None: not given (no warning).
    """
    given = [n for n, v in zip(LEGACY_WATERMARK, (idle_timeout, watermark_interval), strict=True)
             if v is not None]
    if given:
        warnings.warn(
            f"{connector}({', '.join(n + '=...' for n in given)}) is deprecated: give it to the step's "
            f"watermark policy, flow.source(..., watermark=wire.BoundedOutOfOrderness(max_delay, "
            f"idle_timeout=..., interval=...))", DeprecationWarning, stacklevel=3)


def convert_legacy_watermark(source: object) -> None:
    """Hold a connector's deprecated ``idle_timeout`` / ``watermark_interval`` in ms (None: not given).

    Raises
    ------
    ConfigError
        If ``idle_timeout`` is not a positive duration or ``watermark_interval`` is negative
        or not a duration.
    """
    idle: Duration | None = getattr(source, "idle_timeout", None)
    if idle is not None:
        idle = to_millis(idle, parameter="idle_timeout", allow_zero=False)
        object.__setattr__(source, "idle_timeout", idle)
    interval: Duration | None = getattr(source, "watermark_interval", None)
    if interval is not None:
        object.__setattr__(source, "watermark_interval", to_millis(interval, parameter="watermark_interval"))


def with_connector_settings(step: str, policy: WatermarkPolicy, source: object) -> WatermarkPolicy:
    """``policy`` completed with ``source``'s deprecated ``idle_timeout`` / ``watermark_interval`` (ms).

    A connector's value applies where the policy has its default (no idle timeout, a
    200 ms interval); where both are set they must agree. The result is a plain
    :class:`~wire.core.watermarks.WatermarkPolicy`, checked.

    Raises
    ------
    ConfigError
        When the policy and the connector set different values, or a value is invalid.
    """
    default = WatermarkPolicy(0)
    merged = {"idle_timeout_ms": policy.idle_timeout_ms, "interval_ms": policy.interval_ms}
    for legacy, name in zip(LEGACY_WATERMARK, merged, strict=True):
        value = getattr(source, legacy, None)
        if value is None or value == merged[name]:
            continue
        if merged[name] != getattr(default, name):
            policy_name = name.removesuffix("_ms")
            raise ConfigError(
                legacy, value, f"the watermark policy's {policy_name} ({merged[name]} ms) or nothing: "
                f"set it once, in flow.source(watermark=wire.BoundedOutOfOrderness(..., {policy_name}=...))",
                step=step)
        merged[name] = value
    interval = merged["interval_ms"]
    assert interval is not None  # the policy's is an int, a connector's is an int when given
    result = WatermarkPolicy(policy.max_delay_ms, merged["idle_timeout_ms"], interval, policy.max_future_ms)
    result.check(step)
    return result


class SchemaDataclassDict:
    """``to_dict`` / ``from_dict`` for a source dataclass with an Arrow ``schema`` field.

    The dict is JSON-serializable (the schema as base64 IPC); it travels in a Spark
    data source's options to the planner and executor processes.
    """

    schema: pa.Schema

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serializable form (see :meth:`from_dict`)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.init}  # type: ignore[arg-type]
        d["schema"] = schema_to_b64(self.schema)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**d, "schema": schema_from_b64(d["schema"])})


@dataclass(frozen=True)
class Binding:
    """What the compiler hands to a source's Spark data source for one source step.

    Serialized into the data source's ``binding`` option with :meth:`to_json` and read
    back in the planner and executor processes with :meth:`from_json`, given the source's
    class (whose ``to_dict`` / ``from_dict`` carry the source through JSON; the data
    source names it, :attr:`BindingDataSource.source_class`). A connector's binding
    subclasses it.

    ``payload_schema``: every payload column of the source; ``columns``: the ones it
    produces (None: all, see the module docstring); ``watermark``: the step's policy (ms;
    :class:`~wire.core.watermarks.WatermarkPolicy`), completed with the connector's
    deprecated ``idle_timeout`` / ``watermark_interval`` if it has them
    (:func:`with_connector_settings`); ``target_epoch_ms``: epoch sizing (None: off);
    ``control_file``: pause / stop (:mod:`wire.core.control_file`).

    Raises
    ------
    ConfigError
        When constructed with an event-time column not in ``payload_schema`` or of a type
        event time cannot be read from, unknown ``columns``, an invalid watermark policy
        (or one that disagrees with the connector's deprecated settings), admission or
        key-group count.
    """

    step: str
    source: Any
    payload_schema: pa.Schema
    event_time: str
    watermark: WatermarkPolicy
    max_events_per_epoch: int
    key_groups: int
    control_file: str | None = None
    columns: tuple[str, ...] | None = None
    target_epoch_ms: int | None = None
    resume: dict[str, Any] | None = None
    """After a rescale: ``{"start": offset, "end": offset or None}`` (:func:`resumable`)."""

    def __post_init__(self) -> None:
        step = self.step
        if not isinstance(step, str) or not step:
            raise ConfigError("step", step, "a non-empty step id")
        check_event_time_column(step, self.payload_schema, self.event_time)
        object.__setattr__(self, "columns", check_columns(step, self.payload_schema, self.columns))
        if not isinstance(self.watermark, WatermarkPolicy):
            raise ConfigError("watermark", self.watermark, "a wire.BoundedOutOfOrderness(max_delay, ...)",
                              step=step)
        object.__setattr__(self, "watermark", with_connector_settings(step, self.watermark, self.source))
        check_admission(step, max_events_per_epoch=self.max_events_per_epoch, key_groups=self.key_groups)

    @classmethod
    def of(cls, source: Any, request: ReadRequest) -> Self:
        """The binding of ``source`` for the compiler's ``request``."""
        return cls(source=source, payload_schema=request.schema, **request.settings())

    @property
    def output_schema(self) -> pa.Schema:
        """The payload columns the source produces: ``payload_schema`` restricted to ``columns``."""
        return select_columns(self.payload_schema, self.columns)

    def row_schema(self) -> pa.Schema:
        """The Arrow schema of the source's rows as Spark hands them back."""
        return spark_row_schema(self.output_schema)

    def to_json(self) -> str:
        """Serialize to a JSON string (the ``binding`` option of the Spark data source)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(source=self.source.to_dict(), payload_schema=schema_to_b64(self.payload_schema),
                 watermark=self.watermark.to_json())
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str, source_class: type) -> Self:
        """Inverse of :meth:`to_json`; ``source_class.from_dict`` rebuilds the source."""
        d = json.loads(text)
        d["source"] = source_class.from_dict(d["source"])  # type: ignore[attr-defined]
        d["payload_schema"] = schema_from_b64(d["payload_schema"])
        d["watermark"] = WatermarkPolicy.from_json(d["watermark"])
        if d.get("columns") is not None:
            d["columns"] = tuple(d["columns"])
        return cls(**d)


class BindingSource:
    """``read_stream`` for a source connector read by a :class:`BindingDataSource`.

    The connector names its data source in :meth:`data_source`; the data source's
    ``binding_class.of(self, request)`` is what its reader gets. It honours every
    optional setting of the request (:data:`ALL_CAPABILITIES`) unless it says otherwise.
    """

    capabilities: ClassVar[frozenset[Capability]] = ALL_CAPABILITIES

    def data_source(self) -> type[BindingDataSource]:
        """The connector's Spark data source class."""
        raise NotImplementedError

    def read_stream(self, spark: SparkSession, request: ReadRequest) -> DataFrame:
        """Return the envelope DataFrame of this source for ``request.step``; called by the compiler.

        ``request.columns`` (None: all): the payload columns produced; records are still
        decoded and checked against the whole schema (the same records become dead letters).

        Raises
        ------
        ConfigError
            When the event-time column is not a column of the source or has an unsupported
            type, or a setting of the request is invalid (:class:`Binding`).
        """
        ds = self.data_source()
        return open_stream(spark, ds, binding=ds.binding_class.of(self, request).to_json())


def open_stream(spark: SparkSession, data_source: type[DataSource], **options: str) -> DataFrame:
    """Register ``data_source`` with ``spark`` and load it as a stream with ``options``."""
    spark.dataSource.register(data_source)
    reader = spark.readStream.format(data_source.name())
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


class _ReaderFactory(Protocol):
    """A stream reader's class, called with a data source's configuration."""

    def __call__(self, config: Any, /) -> DataSourceStreamReader: ...


class ConfigDataSource(DataSource):
    """A Spark Python data source configured by one JSON option, its reader :func:`resumable`.

    A connector subclasses it with ``format_name`` (``spark.readStream.format``), ``option``
    (the option holding the configuration), ``config_class`` (the class parsing that
    option's text; its instances have an ``output_schema``: the payload columns produced)
    and ``reader_class`` (the stream reader, built from the configuration), or overrides
    :meth:`config` / :meth:`stream_reader`; the connector's ``read_stream`` loads it with
    :func:`open_stream`. ``resume`` comes from the option :data:`RESUME_OPTION`
    (:func:`resume_options`) unless :meth:`resume` says otherwise.
    """

    format_name: ClassVar[str]
    option: ClassVar[str]
    config_class: ClassVar[type]
    reader_class: ClassVar[_ReaderFactory]
    """The stream reader's class, built from the configuration (see :meth:`stream_reader`)."""

    @classmethod
    def name(cls) -> str:
        """Return the format name used with ``spark.readStream.format``."""
        return cls.format_name

    def config(self) -> Any:
        """The configuration of this data source, parsed from its option."""
        return self.config_class(self.options[self.option])

    def resume(self, config: Any) -> dict[str, Any] | str | None:
        """Where to resume on a new Spark checkpoint (:func:`resumable`; None: as usual)."""
        return self.options.get(RESUME_OPTION)

    def schema(self) -> StructType:
        """Return the row schema: the produced payload columns, then the envelope columns."""
        return spark_struct(self.config().output_schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Return the stream reader; Spark calls this in the planner and executor processes."""
        config = self.config()
        return resumable(self.stream_reader(config), self.resume(config))

    def stream_reader(self, config: Any) -> DataSourceStreamReader:
        """The connector's stream reader for ``config`` (not Spark's batch ``reader(schema)``)."""
        return self.reader_class(config)


class BindingDataSource(ConfigDataSource):
    """A :class:`ConfigDataSource` whose option ``binding`` is a :class:`Binding`'s JSON.

    A connector subclasses it with ``format_name``, ``binding_class``, ``source_class``
    (the connector's class, rebuilt from the binding's JSON) and ``reader_class`` (or
    :meth:`stream_reader`).
    """

    option = "binding"
    binding_class: ClassVar[type[Binding]]
    source_class: ClassVar[type]

    def config(self) -> Binding:
        """The binding of this data source's options."""
        return self.binding_class.from_json(self.options[self.option], self.source_class)

    def resume(self, config: Binding) -> dict[str, Any] | None:
        """The binding's ``resume``."""
        return config.resume


def resume_options(resume: dict[str, Any] | None) -> dict[str, str]:
    """The option carrying ``resume`` to a :class:`ConfigDataSource` (none when None or empty)."""
    return {RESUME_OPTION: json.dumps(resume)} if resume else {}


RESUME_OPTION = "wire_resume"
"""The data source option that carries ``resume`` for sources without a :class:`Binding`."""


def resumable(reader: DataSourceStreamReader, resume: dict[str, Any] | str | None) -> DataSourceStreamReader:
    """``reader``, resuming where another Spark checkpoint of the same flow stopped.

    A rescaled restart (:mod:`wire.runtime.rescale`) runs the flow on a new Spark
    checkpoint, whose query starts from the source's initial offset. With ``resume =
    {"start": s, "end": e}``, ``initialOffset()`` returns ``s`` (the old query's last
    committed end offset: watermarks, file sets, positions, whatever the source records)
    and, when ``e`` is not None, ``latestOffset(s, limit)`` returns ``e`` (the old
    query's epoch in flight, so its range is replayed exactly); every other call is the
    source's own. That is what an ordinary restart of a checkpoint looks like to a reader:
    Spark calls no ``initialOffset`` then, only ``latestOffset`` from the last committed
    end offset, so every source that survives a restart (each of Wire's) resumes this way.
    ``resume`` None (or empty): ``reader`` unchanged.
    """
    if not resume:
        return reader
    spec = json.loads(resume) if isinstance(resume, str) else resume
    base = type(reader)
    resumed = type(f"Resumed{base.__name__}", (base,), {
        "initialOffset": _resumed_initial, "latestOffset": _resumed_latest,
        "__module__": base.__module__, "_wire_resume": spec,
    })
    reader.__class__ = resumed
    return reader


def _resumed_initial(self: Any) -> Offset:
    """The old query's last committed end offset."""
    spec: dict[str, Any] = self._wire_resume
    start: Offset = spec["start"]
    return start


def _resumed_latest(self: Any, start: Offset, limit: ReadLimit) -> Offset:
    """The old query's epoch in flight when planning from the resume offset, else the source's."""
    spec: dict[str, Any] = self._wire_resume
    end: Offset | None = spec.get("end")
    if end is not None and start == spec["start"]:
        return end
    latest: Offset = super(type(self), self).latestOffset(start, limit)
    return latest
