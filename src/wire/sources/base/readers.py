"""What a stream reader holds: its admission and its per-process client (SPEC §5).

:class:`SizedAdmission` turns Spark's read limit, the source's ``max_events_per_epoch``,
the epoch sizer and the control file (pause, stop) into an epoch's admission;
:class:`LiveReader` holds the watermark policy, the epoch sizer, the rows' schema, the
processing-time clock and one client per process. The source base
(:mod:`wire.sources.base.partitioned`) is built on both.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from wire.core.control_file import is_paused
from wire.core.time import wall_clock_ms
from wire.core.watermarks import WatermarkPolicy
from wire.sources.base.epoch_sizing import EpochSizer
from wire.sources.base.source import Binding, Offset


@dataclass(frozen=True)
class Admission:
    """What a reader may admit in the epoch it plans (:meth:`SizedAdmission.admission`)."""

    now: int
    """Processing time of the planning (ms since the Unix epoch)."""
    budget: int | None
    """At most this many records (None: everything available, ``availableNow``)."""
    started: int
    """When the run started (ms): recorded in the offsets, else this process's first planning."""
    resumed: int
    """When this process's planner first planned (ms): the idle clock starts no earlier
    (:func:`wire.core.watermarks.is_idle`)."""


class AdmissionBinding(Protocol):
    """What :class:`SizedAdmission` reads from a reader's binding."""

    @property
    def step(self) -> str: ...  # noqa: D102

    @property
    def control_file(self) -> str | None: ...  # noqa: D102

    @property
    def max_events_per_epoch(self) -> int: ...  # noqa: D102


class Closeable(Protocol):
    """A client a :class:`LiveReader` opens per process: something with ``close()``."""

    def close(self) -> None: ...  # noqa: D102


ClientT = TypeVar("ClientT", bound=Closeable)


class LiveReader(Generic[ClientT]):
    """What every stream reader of a live system shares (Kafka, Redis Streams, HTTP ingest).

    :meth:`_init_live` takes from the binding the step's watermark policy
    (:class:`~wire.core.watermarks.WatermarkPolicy`, ms), the epoch sizer and the rows'
    Arrow schema, and sets the processing-time clock (ms; injectable for tests).

    The reader's client (a Kafka consumer, a Redis connection, a write-ahead log) is one
    per process: :meth:`_open_client` opens it on first use of :attr:`client`, and
    :meth:`close` closes it. Spark pickles readers into its planner and executor
    processes; a pickled reader carries no client, and the attributes named in
    ``_transient`` (per-process caches) start from, and are reset to, copies of the
    values given there.
    """

    _transient: ClassVar[dict[str, Any]] = {}

    _binding: Any
    _client: ClientT | None

    def _init_live(self, binding: Binding, clock: Callable[[], int] | None) -> None:
        self._binding = binding
        self._clock = clock or wall_clock_ms
        self._sizer = EpochSizer(binding.max_events_per_epoch, binding.target_epoch_ms)
        self._row_schema = binding.row_schema()
        self._client = None
        self._started: int | None = None
        self.__dict__.update(copy.deepcopy(self._transient))

    @property
    def _policy(self) -> WatermarkPolicy:
        """The step's watermark policy: the binding's (one value, given at ``flow.source``)."""
        policy: WatermarkPolicy = self._binding.watermark
        return policy

    def _open_client(self) -> ClientT:
        """Open this process's client (called once, on first use)."""
        raise NotImplementedError

    @property
    def client(self) -> ClientT:
        """The client of this process (opened on first use)."""
        if self._client is None:
            self._client = self._open_client()
        return self._client

    def close(self) -> None:
        """Close this process's client, if it opened one."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, **copy.deepcopy(self._transient))
        return state


class SizedAdmission:
    """Admission of a stream reader whose budget is Spark's read limit and its epoch sizer.

    The reader sets ``_binding`` (an :class:`AdmissionBinding`: ``step``, ``control_file``,
    ``max_events_per_epoch``), ``_clock`` (ms), ``_sizer``
    (:class:`~wire.sources.base.epoch_sizing.EpochSizer`) and ``_started = None``; its offsets
    carry ``started`` (ms or None) and may carry ``ended``.
    """

    _binding: AdmissionBinding
    _clock: Callable[[], int]
    _sizer: EpochSizer
    _started: int | None

    def getDefaultReadLimit(self) -> ReadLimit:
        """Return ``ReadMaxRows(max_events_per_epoch)``: the admission limit per epoch."""
        return ReadMaxRows(self._binding.max_events_per_epoch)

    def admission(self, start: Offset, limit: ReadLimit) -> Admission | None:
        """The admission of the epoch planned from ``start``; None while paused or once ended.

        The epoch sizer is asked first, paused or not: the time since the last call is an
        epoch's. The budget is ``limit``'s (None for ``ReadAllAvailable``; the source's
        ``max_events_per_epoch`` for a limit it does not know), at most the sizer's.
        """
        now = self._clock()
        sized = self._sizer.budget(now)
        if start.get("ended") or is_paused(self._binding.control_file, self._binding.step):
            return None
        budget: int | None = None
        if not isinstance(limit, ReadAllAvailable):
            rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self._binding.max_events_per_epoch
            budget = min(rows, sized)
        if self._started is None:
            self._started = now
        return Admission(now, budget, self._started if start["started"] is None else start["started"],
                         self._started)
