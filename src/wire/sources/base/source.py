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

A source with the ``"predicate"`` capability drops, in its tasks, the data rows that
``request.predicate`` (:mod:`wire.core.predicate`) is not true on, after computing their
event times and routing malformed records, so that they never cross into the JVM; the
compiler sets it only when every step reading the source is a filter, to what of those
filters translates (:mod:`wire.compiler.pushdown`). The filters still run in Spark.

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
and from then on ``latestOffset`` returns it unchanged. That epoch is the one that admits
the last records when the source knows it does (the files and Nexmark), else one more,
empty epoch. Once the last completed epoch's
offsets say so for every source, the run ends. A bounded source that never says so
keeps its flow running until it is stopped.
"""

from __future__ import annotations

import base64
import functools
import json
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Literal, Protocol, Self, TypeAlias, runtime_checkable

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from wire.core.arrow_types import spark_schema
from wire.core.envelope import ENVELOPE_ARROW
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError
from wire.sources.base.read_info import create_here, give_creation, plan_reads_here
from wire.sources.base.rows import (
    Decoded,
    check_admission,
    check_columns,
    check_event_time_column,
    future_mask,
    schema_from_b64,
    schema_to_b64,
    select_columns,
    spark_row_schema,
    spark_struct,
)
from wire.sources.base.watermark_settings import (
    LEGACY_WATERMARK,
    convert_legacy_watermark,
    warn_legacy_watermark,
    with_connector_settings,
)

__all__ = [
    "ALL_CAPABILITIES", "DEFAULT_MAX_EVENTS_PER_EPOCH", "LEGACY_WATERMARK", "RESUME_OPTION", "Binding",
    "BindingDataSource", "BindingSource", "Capability", "ConfigDataSource", "Decoded", "Offset",
    "ReadRequest", "SchemaDataclassDict", "Source", "WarmUp", "can", "check_admission", "check_columns",
    "check_event_time_column", "convert_legacy_watermark", "default_max_events_per_epoch", "future_mask",
    "open_stream", "pickle_b64", "resumable", "resume_options", "schema_from_b64", "schema_to_b64",
    "select_columns", "spark_row_schema", "spark_struct", "warn_legacy_watermark", "with_connector_settings",
]
"""The source base's names; a read's rows (:mod:`wire.sources.base.rows`) and a connector's
deprecated watermark settings (:mod:`wire.sources.base.watermark_settings`) live in their own
modules and are importable from here too."""

Capability = Literal["columns", "predicate", "target_epoch_ms", "resume", "replay", "pre_stage"]
"""An optional setting of a :class:`ReadRequest` that a source may honour (module docstring)."""

Offset: TypeAlias = dict[str, Any]
"""A stream reader's offset: a JSON object (Spark keeps it as JSON in its offset log)."""


@dataclass(frozen=True)
class ReadRequest:
    """What the compiler tells a source's ``read_stream`` about one source step.

    The optional settings (``columns``, ``predicate``, ``target_epoch_ms``, ``resume``) are set only for a
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
    predicate: list[Any] | None = None
    """Events the source may drop before they leave its tasks: those this predicate is not true
    on (:mod:`wire.core.predicate`, pushed down from the flow's filters by
    :mod:`wire.compiler.pushdown`); None: none. The watermark, the ``events`` metric and the
    dead letters still count every event. Capability ``"predicate"``."""
    pre_stage: str | None = None
    """A keyed operator's pre-stage the source runs in its own tasks (fusion,
    :mod:`wire.compiler.fusion`): base64 of a pickled callable turning one task's rows
    (payload + envelope batches, as :meth:`Binding.row_schema`) into envelope-only rows
    (:data:`wire.core.envelope.ENVELOPE_ARROW`), which are then the source's rows in Spark.
    Set only with an exact ``predicate`` (or none): the source applies it to every read and
    the flow's filters do not run in Spark. None: the source's rows are its events.
    Capability ``"pre_stage"``."""
    pre_stage_schema: str | None = None
    """The Arrow schema of the :attr:`pre_stage`'s rows (base64 IPC, :func:`schema_to_b64`);
    None: the envelope only (:data:`wire.core.envelope.ENVELOPE_ARROW`). A pre-stage that
    writes the flow's sinks in the source's tasks (sink fusion, :mod:`wire.compiler.sink_fusion`)
    yields its write receipts instead."""
    scans: int = 1
    """How many scans of the source the flow's Spark plan holds: a source that can replay its
    epochs and is read by several branches is scanned once per branch (:mod:`wire.compiler.branches`).
    A reader that splits a planned range over tasks (:meth:`~wire.sources.base.partitioned.
    PartitionedReader.split_range`) gives each scan ``cores // scans`` tasks at most, so that the
    epoch's first stage has about one task per core. Every connector may ignore it."""

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


DEFAULT_MAX_EVENTS_PER_EPOCH = 100_000
"""A source's admission per epoch (SPEC §5) when neither the flow nor the connector says
otherwise (``Flow.source(max_events_per_epoch=None)``, a connector without a
``default_max_events_per_epoch`` attribute)."""


def default_max_events_per_epoch(source: object) -> int:
    """The admission per epoch ``source`` gets when the flow gives none (events).

    The connector's ``default_max_events_per_epoch`` attribute, else
    :data:`DEFAULT_MAX_EVENTS_PER_EPOCH`. Kafka's is larger (:class:`~wire.sources.kafka_source.KafkaSource`).
    ``Flow.source`` checks it as it checks a value the flow gives.
    """
    value: int = getattr(source, "default_max_events_per_epoch", DEFAULT_MAX_EVENTS_PER_EPOCH)
    return value


ALL_CAPABILITIES: frozenset[Capability] = frozenset(
    {"columns", "predicate", "target_epoch_ms", "resume", "pre_stage"})
"""What a :class:`BindingSource` honours by default (not ``"replay"``: a connector claims it)."""


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
    predicate: list[Any] | None = None
    """Pushed-down filter (:attr:`ReadRequest.predicate`): data rows it is not true on are dropped."""
    pre_stage: str | None = None
    """A keyed operator's pre-stage run in the source's tasks (:attr:`ReadRequest.pre_stage`)."""
    pre_stage_schema: str | None = None
    """The Arrow schema of the pre-stage's rows (:attr:`ReadRequest.pre_stage_schema`)."""
    scans: int = 1
    """The scans of the source in the flow's plan (:attr:`ReadRequest.scans`)."""
    local: bool = False
    """The Spark master is local: the planner and the executors share one machine, so a
    planner may hand what it decoded to the executors (:mod:`wire.sources.base.handoff`)
    instead of their reading and decoding it again (set by :meth:`BindingSource.read_stream`)."""

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
        """The Arrow schema of the source's decoded rows (payload + envelope) as Spark types them."""
        return spark_row_schema(self.output_schema)

    def dataframe_schema(self) -> StructType:
        """The Spark schema of the source's DataFrame.

        Payload + envelope columns; with a :attr:`pre_stage`, the envelope only, or its
        :attr:`pre_stage_schema`.
        """
        if self.pre_stage is not None:
            if self.pre_stage_schema is not None:
                return spark_schema(schema_from_b64(self.pre_stage_schema))
            return spark_schema(ENVELOPE_ARROW)
        return spark_struct(self.output_schema)

    def pre_stage_function(self) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None:
        """The unpickled :attr:`pre_stage` (once per process), or None."""
        return None if self.pre_stage is None else unpickle_b64(self.pre_stage)

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


def pickle_b64(obj: object) -> str:
    """``obj`` pickled (cloudpickle: lambdas and local classes travel by value), as base64 text."""
    pickled: bytes = cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
    return base64.b64encode(pickled).decode("ascii")


@functools.lru_cache(maxsize=16)
def unpickle_b64(text: str) -> Any:
    """The object pickled as base64 ``text`` (a :attr:`ReadRequest.pre_stage`), unpickled once per process."""
    return pickle.loads(base64.b64decode(text))


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
        return open_stream(spark, self.data_source(), binding=self.bind(spark, request).to_json())

    def bind(self, spark: SparkSession, request: ReadRequest) -> Binding:
        """The binding :meth:`read_stream` gives the data source (the same for the same request)."""
        return replace(self.data_source().binding_class.of(self, request), local=is_local(spark))

    def warm_up(self, spark: SparkSession, request: ReadRequest) -> WarmUp | None:
        """Work the driver may do for the source's first epoch while the query starts (None: none).

        The runner calls its ``run`` in a thread of the driver, after the flow's last
        compilation and before the query's first epoch, for a query that starts fresh, and its
        ``close`` when the run ends. ``run`` must be harmless to skip, to run late, and to run
        while the query reads. Default: none.
        """
        return None


class WarmUp(Protocol):
    """A source's warm-up (:meth:`BindingSource.warm_up`)."""

    def run(self) -> None:
        """Do the work (a thread of the driver; never raises)."""

    def close(self) -> None:
        """Remove what :meth:`run` left (the run ended)."""


def is_local(spark: SparkSession) -> bool:
    """Whether ``spark``'s master is local (its executors run on the driver's machine)."""
    return str(spark.conf.get("spark.master", "")).startswith("local")


def open_stream(spark: SparkSession, data_source: type[DataSource], **options: str) -> DataFrame:
    """Register ``data_source`` with ``spark`` and load it as a stream with ``options``.

    The data source is created (:func:`~.read_info.create_here`) and its read function
    pickled (:func:`~.read_info.plan_reads_here`) in this process, so that Spark starts no
    Python process for either: neither while it analyses the stream nor in the first epoch.
    """
    spark.dataSource.register(data_source)
    created = create_here(data_source, options)
    reader = spark.readStream.format(data_source.name())
    if created is not None:
        reader = reader.schema(created.schema)
    for name, value in options.items():
        reader = reader.option(name, value)
    stream = reader.load()
    if created is not None:
        give_creation(spark, stream, created)
    plan_reads_here(spark, stream, data_source, options, None if created is None else created.source)
    return stream


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
        """Return the row schema: the produced payload columns, then the envelope columns.

        A :class:`Binding` with a pre-stage gives envelope columns only (:meth:`Binding.dataframe_schema`),
        as does any configuration with a ``dataframe_schema`` method.
        """
        config = self.config()
        if isinstance(config, Binding) or hasattr(config, "dataframe_schema"):
            schema: StructType = config.dataframe_schema()
            return schema
        return spark_struct(config.output_schema)

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
