"""Build-time checks of column-name arguments shared by the sinks (keys, partition columns)."""

from __future__ import annotations

from collections.abc import Sequence

from wire.errors import ConfigError


def column_names(
    value: object, *, parameter: str, accepted: str, allow_none: bool = False
) -> tuple[str, ...]:
    """``value`` as a tuple of column names: one name, or a sequence of distinct names.

    ``None`` gives ``()`` when ``allow_none``; a name is a non-empty ``str`` without NUL.

    >>> column_names("k", parameter="key", accepted="a column name")
    ('k',)
    >>> column_names(["a", "b"], parameter="key", accepted="column names")
    ('a', 'b')

    Raises
    ------
    ConfigError
        Naming ``parameter`` and ``accepted``: not a name or a sequence of names, an empty
        sequence (unless ``allow_none`` and ``value`` is None), an empty name or repeated names.
    """
    if value is None and allow_none:
        return ()
    names_in = (value,) if isinstance(value, str) else value
    if not isinstance(names_in, Sequence) or isinstance(names_in, bytes | bytearray):
        raise ConfigError(parameter, value, accepted)
    names = tuple(names_in)
    if (not names and not allow_none) or len(set(names)) != len(names) or not all(
            isinstance(n, str) and n and "\x00" not in n for n in names):
        raise ConfigError(parameter, value, accepted)
    return names
