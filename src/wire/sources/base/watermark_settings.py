"""A connector's own watermark settings (``idle_timeout``, ``watermark_interval``), deprecated.

The watermark policy is given at ``flow.source`` (:class:`~wire.core.watermarks.WatermarkPolicy`);
a connector that still takes these two settings warns (:func:`warn_legacy_watermark`),
converts them to ms once (:func:`convert_legacy_watermark`), and the compiler merges
them into the step's policy (:func:`with_connector_settings`). Importable from
:mod:`wire.sources.base.source` too.
"""

from __future__ import annotations

import warnings

from wire.core.time import Duration, to_millis
from wire.core.watermarks import WatermarkPolicy
from wire.errors import ConfigError

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
