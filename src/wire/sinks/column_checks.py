"""Build-time checks of arguments shared by the sinks: column names (keys, partition columns), paths."""

from __future__ import annotations

import os
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


def path_text(value: object, *, accepted: str, refused: tuple[str, ...] = ()) -> str:
    """``value`` (a ``str`` or ``os.PathLike``) as the text of the sink's ``path`` parameter.

    >>> path_text("out/x", accepted="a directory path")
    'out/x'

    Raises
    ------
    ConfigError
        Naming ``path`` and ``accepted``: not a ``str`` or ``os.PathLike`` of text, blank,
        or one of ``refused`` (e.g. SQLite's ``":memory:"``).
    """
    if not isinstance(value, str | os.PathLike):
        raise ConfigError("path", value, accepted)
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip() or text in refused:
        raise ConfigError("path", value, accepted)
    return text
