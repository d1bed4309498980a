"""Families of Arrow types that sinks map to one kind of external column."""

from __future__ import annotations

import pyarrow as pa


def is_binary(t: pa.DataType) -> bool:
    """Any binary type: binary, large, fixed-size or view."""
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def is_list(t: pa.DataType) -> bool:
    """Any list type: list, large, fixed-size or view."""
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def is_nested(t: pa.DataType) -> bool:
    """A list, struct or map type."""
    return is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t)
