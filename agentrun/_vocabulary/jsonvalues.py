"""Typed accessors for decoded JSON, shared by every translator.

Agents' events are untrusted: each accessor returns the value when it has the wanted type and
``None`` (or an empty list) otherwise, so a translator never raises on a surprising shape.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_COUNT", "as_dict", "as_float", "as_int", "as_list", "as_object", "as_str"]


# The narrowed values are returned as they are (``typing.cast`` would be a call per value on
# every event's path).


def as_dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None  # pyright: ignore[reportUnknownVariableType]


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []  # pyright: ignore[reportUnknownVariableType]


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


#: The largest count an agent can report: a 64-bit integer's. JSON's integers have no bound, and a
#: larger one is not a count (it would overflow every float it meets: costs, percentages).
MAX_COUNT = 2**63 - 1


_MIN_COUNT = -MAX_COUNT


def as_int(value: object) -> int | None:
    """An integer; a float with an integral value counts (JSON has one number type). Beyond
    :data:`MAX_COUNT` either way: ``None``."""
    if type(value) is int:  # the common case first (a ``bool`` is not this)
        return value if _MIN_COUNT <= value <= MAX_COUNT else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if _MIN_COUNT <= value <= MAX_COUNT else None
    if isinstance(value, float) and value.is_integer():
        return int(value) if _MIN_COUNT <= value <= MAX_COUNT else None
    return None


def as_float(value: object) -> float | None:
    """A JSON number as a float; ``None`` for anything else, and for an integer too large for a
    float (JSON's integers have no bound: ``10**400`` is a valid cost on the wire)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def as_object(value: object) -> dict[str, Any] | None:
    """An object as it is; any other value (not ``None``) wrapped as ``{"value": value}``."""
    if value is None:
        return None
    return as_dict(value) or {"value": value}
