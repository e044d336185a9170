"""What the two directions of :mod:`.trajectory` share: the turns a trajectory is read into
(:class:`ReplayedTurn`, :class:`TrajectoryTurns`), the sources a reader takes
(:data:`TrajectorySource`) and :func:`load_trajectory`, which validates one into a
:class:`Trajectory`; plus the names both directions write and read (:data:`EXTRA_KEY`,
:data:`ATIF_SYSTEM`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .atif import Trajectory
from .errors import ConfigurationError
from .messages import Message
from .summary import TurnSummary

__all__ = [
    "ATIF_SYSTEM",
    "EXTRA_KEY",
    "ReplayedTurn",
    "TrajectorySource",
    "TrajectoryTurns",
    "load_trajectory",
]

#: What the readers of a trajectory take: the model, a decoded document, JSON text or bytes, or
#: the path of a JSON file (an ``os.PathLike``; a ``str`` is JSON text).
TrajectorySource = Trajectory | Mapping[str, Any] | str | bytes | os.PathLike[str]

#: The key under a step's (or a trajectory's) ``extra`` that holds what the RFC has no field for.
EXTRA_KEY = "agentrun"
#: The subtype of a ``system`` message that stands for a system step of a foreign trajectory.
ATIF_SYSTEM = "atif_system"


@dataclass(frozen=True)
class ReplayedTurn:
    """One turn of a replayed transcript or an imported trajectory."""

    #: The turn's number (1, 2, ...).
    number: int
    #: Its messages, each tagged with ``number``.
    messages: tuple[Message, ...]
    #: What :meth:`TurnSummary.from_messages` makes of them.
    summary: TurnSummary
    #: The prompt, when it is known (a recorded transcript does not hold it).
    prompt: str | None = None


_set_turn_dict = ReplayedTurn.__dict__["__dict__"].__set__


def replayed_turn(number: int, messages: tuple[Message, ...], summary: TurnSummary) -> ReplayedTurn:
    """``ReplayedTurn(number, messages, summary)`` without the frozen dataclass's ``__init__``
    (which sets each field through ``object.__setattr__``): replay makes one per turn. Every
    field of :class:`ReplayedTurn` is here, in order."""
    turn = object.__new__(ReplayedTurn)
    _set_turn_dict(
        turn, {"number": number, "messages": messages, "summary": summary, "prompt": None}
    )
    return turn


@dataclass
class TrajectoryTurns:
    """What :func:`from_atif` reads back: the turns and the document's agent and session."""

    turns: list[ReplayedTurn]
    agent_name: str
    agent_version: str
    model: str | None = None
    session_id: str | None = None


def load_trajectory(source: TrajectorySource) -> Trajectory:
    """A validated :class:`Trajectory` from a model, a decoded document, JSON text, or the path
    of a JSON file. Raises :class:`ConfigurationError` when it is not an ATIF document."""
    if isinstance(source, Trajectory):
        return source
    try:
        if isinstance(source, os.PathLike):
            source = Path(source).read_bytes()
        if isinstance(source, (str, bytes)):
            return Trajectory.model_validate_json(source)
        return Trajectory.model_validate(source)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the trajectory: {exc.strerror or exc}", option="trajectory"
        ) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigurationError(
            f"not an ATIF trajectory: {where + ': ' if where else ''}{message}",
            option="trajectory",
        ) from None
