"""The run a sink holds on the driver between ``open`` and ``close``: :class:`DriverRunSink`.

A sink is a frozen dataclass, part of the immutable flow plan; what exists only while a
flow runs (a connection, an HTTP client, the epochs' attempt tokens, a timer thread)
is one *run* object that the sink keeps outside its comparable fields. This base owns
that run's lifecycle, so that a sink only says how a run starts and how it ends:

1. :meth:`DriverRunSink.open` (driver, run start, again after a restart) ends a run
   still held, calls the sink's :meth:`~DriverRunSink._start_run`, which connects,
   checks ownership, cleans up what a crashed run left and returns the run, and keeps
   it. When ``_start_run`` raises, the sink holds no run.
2. Each epoch (``prepare_epoch``/``commit_epoch``/``write_epoch``) reads the run with
   :meth:`~DriverRunSink._opened`, which raises :class:`~wire.errors.WireError` before
   ``open``.
3. :meth:`DriverRunSink.close` (driver, run end, also after a failed run) forgets the
   run first, then hands it to the sink's :meth:`~DriverRunSink._end_run` to release
   (close the connection, stop a thread). A second ``close`` does nothing.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from wire.delivery.sink import Sink
from wire.errors import WireError

RunT = TypeVar("RunT")
"""The sink's own run type (what ``_start_run`` returns)."""


@dataclass(frozen=True)
class DriverRunSink(Sink, Generic[RunT]):
    """A sink holding one run object on the driver between :meth:`open` and :meth:`close` (module docstring).

    Mix it in before :class:`~wire.delivery.sink.Sink` or
    :class:`~wire.delivery.sink.ExecutorSink`, e.g.
    ``class DeltaSink(DriverRunSink[_Run], ExecutorSink)``, and implement
    :meth:`_start_run` (and :meth:`_end_run` when the run holds resources).
    """

    _run: RunT | None = field(default=None, init=False, repr=False, compare=False)

    def open(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> None:
        """End a run still held (:meth:`close`), then start and keep a new one (:meth:`_start_run`).

        Called once at run start on the driver, before the first epoch (again at a
        restart, before the replayed epoch).

        Raises
        ------
        WireError, CheckpointError
            Whatever the sink's :meth:`_start_run` raises; the sink then holds no run.
        """
        self.close()
        run = self._start_run(flow_id=flow_id, sink_id=sink_id, checkpoint_id=checkpoint_id)
        object.__setattr__(self, "_run", run)

    def close(self) -> None:
        """Forget the run, then release it (:meth:`_end_run`); nothing when no run is held.

        Called once when the run ends (normally or not), on the driver; every
        committed epoch is already durable in the target.
        """
        run = self._run
        object.__setattr__(self, "_run", None)
        if run is not None:
            self._end_run(run)

    @abstractmethod
    def _start_run(self, *, flow_id: str, sink_id: str, checkpoint_id: str) -> RunT:
        """Start this run on the driver: connect, check the target, clean a crashed run's leftovers.

        Returns the run object kept until :meth:`close`. Raises (nothing kept) when
        the target cannot be opened.
        """

    def _end_run(self, run: RunT) -> None:
        """Release what ``run`` holds (a connection, a client, a thread); the default does nothing."""

    def _opened(self, epoch: int | None = None) -> RunT:
        """The run :meth:`open` started.

        Raises
        ------
        WireError
            Before :meth:`open` (or after :meth:`close`): ``"<sink>: epoch [<epoch>]
            written before open"``.
        """
        run = self._run
        if run is None:
            which = "epoch" if epoch is None else f"epoch {epoch}"
            raise WireError(f"{self.describe()}: {which} written before open")
        return run
