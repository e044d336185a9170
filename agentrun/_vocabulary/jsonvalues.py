"""Typed accessors for decoded JSON, shared by every translator.

Agents' events are untrusted: each accessor returns the value when it has the wanted type and
``None`` (or an empty list) otherwise, so a translator never raises on a surprising shape.
"""

from __future__ import annotations

from typing import Any

__all__ = ["as_dict", "as_float", "as_int", "as_list", "as_object", "as_str"]


# The narrowed values are returned as they are (``typing.cast`` would be a call per value on
# every event's path).


def as_dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None  # pyright: ignore[reportUnknownVariableType]


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []  # pyright: ignore[reportUnknownVariableType]


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: object) -> int | None:
    """An integer; a float with an integral value counts (JSON has one number type)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def as_object(value: object) -> dict[str, Any] | None:
    """An object as it is; any other value (not ``None``) wrapped as ``{"value": value}``."""
    if value is None:
        return None
    return as_dict(value) or {"value": value}
