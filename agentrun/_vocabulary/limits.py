"""A turn's limits as one value: :class:`TurnLimits`.

The clocks a turn runs under — ``timeout``, ``idle_timeout``, ``tool_timeout``, ``stall_after``
and ``wind_down`` — checked once, when the value is made, with the :class:`ConfigurationError`
naming the argument that ``run_turn`` has always raised for them. ``run_turn``,
``Session.turn`` and the rest take it as ``limits=`` beside the same names as keyword
arguments (:func:`merged_limits`). Imports only the vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ConfigurationError
from .summary import WindDown

__all__ = ["NO_LIMITS", "TurnLimits", "check_seconds", "merged_limits", "wind_down_spec"]


def check_seconds(name: str, value: object) -> None:
    """``value`` is ``None`` or a positive, finite number of seconds (never a bool); else a
    :class:`ConfigurationError` naming ``name``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(
            f"{name} must be a number of seconds, got {type(value).__name__}", option=name
        )
    if not (value > 0 and math.isfinite(value)):
        raise ConfigurationError(
            f"{name} must be a positive number of seconds, got {value!r}", option=name
        )


def wind_down_spec(wind_down: object, timeout: object) -> WindDown | None:
    """``wind_down`` (seconds or a :class:`WindDown`) checked against the turn's ``timeout``: it
    needs one, and must be more than 0 and less than it. ``timeout`` is checked already."""
    if wind_down is None:
        return None
    if isinstance(wind_down, WindDown):
        spec = wind_down
    elif isinstance(wind_down, bool) or not isinstance(wind_down, (int, float)):
        raise ConfigurationError(
            f"wind_down must be a number of seconds or a WindDown, got {type(wind_down).__name__}",
            option="wind_down",
        )
    else:
        if not (wind_down > 0 and math.isfinite(wind_down)):
            raise ConfigurationError(
                f"wind_down must be a positive number of seconds, got {wind_down!r}",
                option="wind_down",
            )
        spec = WindDown(seconds=wind_down)
    if timeout is None:
        raise ConfigurationError(
            "wind_down needs a timeout: it acts that many seconds before the deadline",
            option="wind_down",
        )
    assert isinstance(timeout, (int, float))
    if spec.seconds >= timeout:
        raise ConfigurationError(
            f"wind_down ({spec.seconds:g} s) must be less than the timeout ({timeout:g} s)",
            option="wind_down",
        )
    return spec


@dataclass(frozen=True, slots=True, init=False)
class TurnLimits:
    """The limits of a turn, checked once: pass it as ``limits=`` to :func:`run_turn`,
    :meth:`Session.turn` or ``Fleet`` tasks instead of the same names as keyword arguments.

    * ``timeout``: seconds for the whole turn;
    * ``idle_timeout``: seconds the agent may be quiet;
    * ``tool_timeout``: seconds it may be quiet while one of its tool calls is open (instead of
      ``idle_timeout``);
    * ``stall_after``: seconds of quiet before a ``stall`` message reports it (default: halfway
      to the idle limit in force);
    * ``wind_down``: seconds (or a :class:`WindDown` with its own text) before the ``timeout``
      at which the agent is told to wrap up; needs ``timeout`` and must be less than it. Kept
      as a :class:`WindDown`.

    Each is ``None`` (no such limit) or a positive, finite number; anything else raises
    :class:`ConfigurationError` naming it. ``dataclasses.replace(limits, timeout=60)`` makes a
    changed copy, checked the same way."""

    timeout: float | None
    idle_timeout: float | None
    tool_timeout: float | None
    stall_after: float | None
    wind_down: WindDown | None

    def __init__(
        self,
        *,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        tool_timeout: float | None = None,
        stall_after: float | None = None,
        wind_down: float | WindDown | None = None,
    ) -> None:
        check_seconds("timeout", timeout)
        check_seconds("idle_timeout", idle_timeout)
        check_seconds("tool_timeout", tool_timeout)
        check_seconds("stall_after", stall_after)
        spec = wind_down_spec(wind_down, timeout)
        # Frozen: the fields are set once, here, past the dataclass's guard.
        object.__setattr__(self, "timeout", timeout)
        object.__setattr__(self, "idle_timeout", idle_timeout)
        object.__setattr__(self, "tool_timeout", tool_timeout)
        object.__setattr__(self, "stall_after", stall_after)
        object.__setattr__(self, "wind_down", spec)


#: A turn without limits (every field ``None``).
NO_LIMITS = TurnLimits()


def merged_limits(
    limits: TurnLimits | None,
    *,
    timeout: float | None = None,
    idle_timeout: float | None = None,
    tool_timeout: float | None = None,
    stall_after: float | None = None,
    wind_down: float | WindDown | None = None,
) -> TurnLimits:
    """The limits of a call that takes both spellings: ``limits=`` and the keyword arguments
    of the fields it leaves ``None``. A field given both ways is a :class:`ConfigurationError`
    (neither silently wins); ``limits`` that is no :class:`TurnLimits` is one too."""
    keywords = (timeout, idle_timeout, tool_timeout, stall_after, wind_down)
    if limits is None:
        if timeout is idle_timeout is tool_timeout is stall_after is wind_down is None:
            return NO_LIMITS
        return TurnLimits(
            timeout=timeout,
            idle_timeout=idle_timeout,
            tool_timeout=tool_timeout,
            stall_after=stall_after,
            wind_down=wind_down,
        )
    if not isinstance(limits, TurnLimits):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(
            f"limits must be a TurnLimits, got {type(limits).__name__}", option="limits"
        )
    if all(value is None for value in keywords):
        return limits
    names = ("timeout", "idle_timeout", "tool_timeout", "stall_after", "wind_down")
    given = (limits.timeout, limits.idle_timeout, limits.tool_timeout, limits.stall_after)
    for name, mine, theirs in zip(names, keywords, (*given, limits.wind_down), strict=True):
        if mine is not None and theirs is not None:
            raise ConfigurationError(
                f"{name} is given twice: as {name}= and in limits=; give it one way",
                option=name,
            )
    return TurnLimits(
        timeout=limits.timeout if timeout is None else timeout,
        idle_timeout=limits.idle_timeout if idle_timeout is None else idle_timeout,
        tool_timeout=limits.tool_timeout if tool_timeout is None else tool_timeout,
        stall_after=limits.stall_after if stall_after is None else stall_after,
        wind_down=limits.wind_down if wind_down is None else wind_down,
    )
