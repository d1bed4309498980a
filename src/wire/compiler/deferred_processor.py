"""A stateful processor that Spark's driver can set up without importing Wire's kernels.

Before a flow's first epoch, Spark runs each ``transformWithStateInPandas`` processor's
``init`` in a Python process of its own on the driver
(``pyspark.sql.streaming.transform_with_state_driver_worker``), only to learn the state
variables it declares. Unpickling one of Wire's processors there imported its module and
with it pandas, numpy and Wire's kernels: about 0.7 s of the first epoch's query planning,
on the critical path of start-up (``docs/architecture.md``).

:class:`DeferredProcessor` is what Spark gets instead. This module imports only PySpark's
light streaming and type modules. It carries the real processor pickled, and the state
variables it declares as data (:class:`StateDeclaration`). Its ``init`` declares them;
the real processor is unpickled at the first call that handles rows (on the executors,
whose worker daemon has Wire's stages loaded already) and gets the declared states through
its ``bind``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark import cloudpickle
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StructType


@dataclass(frozen=True)
class StateDeclaration:
    """One state variable of a processor: ``value`` (ValueState) or ``map`` (MapState).

    ``value_schema`` is the value's schema; ``key_schema`` the map key's (``map`` only).
    """

    kind: str
    name: str
    value_schema: StructType
    key_schema: StructType | None = None


def declare(handle: StatefulProcessorHandle, states: Sequence[StateDeclaration]) -> dict[str, Any]:
    """Declare ``states`` with ``handle``; return each state variable by name.

    Raises
    ------
    ValueError
        On a declaration whose ``kind`` is neither ``value`` nor ``map``.
    """
    declared: dict[str, Any] = {}
    for s in states:
        if s.kind == "value":
            declared[s.name] = handle.getValueState(s.name, s.value_schema)
        elif s.kind == "map" and s.key_schema is not None:
            declared[s.name] = handle.getMapState(s.name, s.key_schema, s.value_schema)
        else:
            raise ValueError(f"state {s.name!r}: kind {s.kind!r} "
                             "(accepted: 'value', 'map' with a key schema)")
    return declared


class Bindable(Protocol):
    """What :class:`DeferredProcessor` needs of the processor it carries."""

    @property
    def STATES(self) -> Sequence[StateDeclaration]:
        """The state variables it declares."""

    def bind(self, states: dict[str, Any]) -> None:
        """Take the declared state variables, by name."""

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        """One key group's rows of one epoch (Spark's ``StatefulProcessor`` method)."""

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        """One key group's initial state (Spark's ``StatefulProcessor`` method)."""

    def close(self) -> None:
        """Release what the processor holds."""


class DeferredProcessor(StatefulProcessor):
    """Spark's processor for one of Wire's keyed operators: declares its states, defers the rest.

    Parameters
    ----------
    processor:
        The real processor (a :class:`wire.compiler.keyed.KeyedProcessor`), pickled here;
        its ``STATES`` are what :meth:`init` declares.
    """

    def __init__(self, processor: Bindable) -> None:
        self._pickled: bytes = cloudpickle.dumps(processor)  # type: ignore[no-untyped-call]
        self._states = tuple(processor.STATES)
        self._declared: dict[str, Any] = {}
        self._real: Bindable | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the unpickled processor (each Python worker makes its own)."""
        return {"_pickled": self._pickled, "_states": self._states, "_declared": {}, "_real": None}

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables (Spark calls it once per task, and once on the driver)."""
        self._declared = declare(handle, self._states)
        if self._real is not None:
            self._real.bind(self._declared)

    def real(self) -> Bindable:
        """The carried processor, unpickled and bound to the declared states at the first call."""
        if self._real is None:
            real: Bindable = cloudpickle.loads(self._pickled)
            real.bind(self._declared)
            self._real = real
        return self._real

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        """The carried processor's ``handleInputRows``."""
        return self.real().handleInputRows(key, rows, timerValues)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        """The carried processor's ``handleInitialState`` (a rescaled restart's first epoch)."""
        self.real().handleInitialState(key, initialState, timerValues)

    def close(self) -> None:
        """Close the carried processor if it was unpickled (the driver's set-up never does)."""
        if self._real is not None:
            self._real.close()
