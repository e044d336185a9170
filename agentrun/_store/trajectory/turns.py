"""The turns a replayed transcript or an imported trajectory is read into: :class:`ReplayedTurn`
and :class:`TrajectoryTurns`. Apart from :mod:`.load` so that replay, which returns
these turns, does not load the ATIF models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._vocabulary.messages import Message
from ..._vocabulary.summary import TurnSummary

__all__ = ["ReplayedTurn", "TrajectoryTurns", "replayed_turn"]


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
    #: The prompt's content parts (text, images, audio; ATIF's JSON form) when an imported
    #: trajectory gave it as parts; ``prompt`` is their text.
    prompt_content: tuple[dict[str, Any], ...] | None = None


_set_turn_dict = ReplayedTurn.__dict__["__dict__"].__set__


def replayed_turn(number: int, messages: tuple[Message, ...], summary: TurnSummary) -> ReplayedTurn:
    """``ReplayedTurn(number, messages, summary)`` without the frozen dataclass's ``__init__``
    (which sets each field through ``object.__setattr__``): replay makes one per turn. Every
    field of :class:`ReplayedTurn` is here, in order."""
    turn = object.__new__(ReplayedTurn)
    _set_turn_dict(
        turn,
        {
            "number": number,
            "messages": messages,
            "summary": summary,
            "prompt": None,
            "prompt_content": None,
        },
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
